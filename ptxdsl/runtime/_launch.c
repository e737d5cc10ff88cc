/* ptxdsl's launch shim (the "c" launch mode, built and loaded by cshim.py).
 *
 * One C call per fast-path launch: the call's pointer arguments are written into the
 * entry's parameter buffer (8 bytes each from its start: the fast path needs the
 * pointers first, see fastpath.ParamLayout.ptr_prefix) and the driver's launch is
 * called with the GIL released. Through cuda.bindings the same launch cost a Python
 * struct.pack_into, a CUstream lookup and the bindings' argument conversion: about 1 us
 * more on an H100 host (bench/launch_overhead.py).
 *
 * The driver's entry points are not linked: init() receives their addresses (from the
 * libcuda cuda.bindings loaded, or test doubles), so the module builds and loads
 * without CUDA.
 *
 *   init(cuLaunchKernel, cuLaunchCooperativeKernel, cuLaunchKernelEx,
 *        CLUSTER_DIMENSION id, COOPERATIVE id, PROGRAMMATIC_STREAM_SERIALIZATION id)
 *   launch(func, gx, gy, gz, bx, by, bz, smem, stream, params, buf, *ptrs) -> CUresult
 *   launch_coop(<the same>)                                                -> CUresult
 *   launch_ex(func, gx, gy, gz, bx, by, bz, smem, stream, params, buf,
 *             cx, cy, cz, flags, *ptrs)                                    -> CUresult
 *
 * launch_ex's attributes: the cluster dimensions unless cx is 0, the cooperative one if
 * flags has bit 0 (EX_COOPERATIVE), programmatic stream serialization (a programmatic
 * dependent launch) if it has bit 1 (EX_PDL).
 *
 * Every handle and address is a Python int; the result is the CUresult as an int.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef int (*launch_fn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                         unsigned, void *, void **, void **);
typedef int (*coop_fn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                       unsigned, void *, void **);
/* CUlaunchAttribute and CUlaunchConfig as cuda.h lays them out (the driver ABI). */
typedef struct { unsigned x, y, z; } dims_t;
typedef struct {
    int id;
    char pad[4];
    union { char raw[64]; dims_t cluster; int cooperative; int serialization; } value;
} attr_t;
typedef struct {
    unsigned gx, gy, gz, bx, by, bz, smem;
    void *stream;
    attr_t *attrs;
    unsigned count;
} config_t;
typedef int (*ex_fn)(const config_t *, void *, void **, void **);

static launch_fn plain_launch;
static coop_fn coop_launch;
static ex_fn ex_launch;
static int cluster_id = -1, coop_id = -1, pdl_id = -1;

#define EX_COOPERATIVE 1
#define EX_PDL 2

#define FIXED 11 /* func, 7 dims, stream, params, buf */

static int as_addr(PyObject *o, void **out) {
    unsigned long long v = PyLong_AsUnsignedLongLong(o);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) return -1;
    *out = (void *)(uintptr_t)v;
    return 0;
}

/* The fixed arguments, then the pointers from a[first] on written into buf. */
static int unpack(PyObject *const *a, Py_ssize_t n, Py_ssize_t first, void **f, unsigned g[7],
                  void **stream, void **params) {
    void *buf;
    if (n < first) {
        PyErr_Format(PyExc_TypeError, "the launch shim takes at least %zd arguments, got %zd",
                     first, n);
        return -1;
    }
    if (as_addr(a[0], f) || as_addr(a[8], stream) || as_addr(a[9], params) ||
        as_addr(a[10], &buf))
        return -1;
    for (int i = 0; i < 7; i++) {
        unsigned long v = PyLong_AsUnsignedLong(a[1 + i]);
        if (v == (unsigned long)-1 && PyErr_Occurred()) return -1;
        g[i] = (unsigned)v;
    }
    uint64_t *slot = (uint64_t *)buf;
    for (Py_ssize_t i = first; i < n; i++) {
        unsigned long long v = PyLong_AsUnsignedLongLong(a[i]);
        if (v == (unsigned long long)-1 && PyErr_Occurred()) return -1;
        slot[i - first] = (uint64_t)v;
    }
    return 0;
}

static PyObject *not_ready(void) {
    PyErr_SetString(PyExc_RuntimeError, "the launch shim was not given the driver's entry "
                    "points (init)");
    return NULL;
}

/* cuLaunchKernel, or cuLaunchCooperativeKernel (which takes no `extra`) */
static PyObject *plain_or_coop(PyObject *const *a, Py_ssize_t n, int cooperative) {
    void *f, *s, *p;
    unsigned g[7];
    int r;
    if (cooperative ? !coop_launch : !plain_launch) return not_ready();
    if (unpack(a, n, FIXED, &f, g, &s, &p)) return NULL;
    Py_BEGIN_ALLOW_THREADS
    r = cooperative ? coop_launch(f, g[0], g[1], g[2], g[3], g[4], g[5], g[6], s, (void **)p)
                    : plain_launch(f, g[0], g[1], g[2], g[3], g[4], g[5], g[6], s, (void **)p,
                                   NULL);
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(r);
}

static PyObject *launch(PyObject *self, PyObject *const *a, Py_ssize_t n) {
    return plain_or_coop(a, n, 0);
}

static PyObject *launch_coop(PyObject *self, PyObject *const *a, Py_ssize_t n) {
    return plain_or_coop(a, n, 1);
}

static PyObject *launch_ex(PyObject *self, PyObject *const *a, Py_ssize_t n) {
    void *f, *s, *p;
    unsigned g[7], c[3];
    attr_t at[3];
    config_t cf;
    int r;
    unsigned k = 0;
    long flags;
    if (!ex_launch || cluster_id < 0) return not_ready();
    if (unpack(a, n, FIXED + 4, &f, g, &s, &p)) return NULL;
    for (int i = 0; i < 3; i++) {
        unsigned long v = PyLong_AsUnsignedLong(a[FIXED + i]);
        if (v == (unsigned long)-1 && PyErr_Occurred()) return NULL;
        c[i] = (unsigned)v;
    }
    flags = PyLong_AsLong(a[FIXED + 3]);
    if (flags == -1 && PyErr_Occurred()) return NULL;
    if ((flags & EX_PDL) && pdl_id < 0) return not_ready();
    memset(at, 0, sizeof at);
    if (c[0]) {
        at[k].id = cluster_id;
        at[k].value.cluster.x = c[0];
        at[k].value.cluster.y = c[1];
        at[k].value.cluster.z = c[2];
        k++;
    }
    if (flags & EX_COOPERATIVE) {
        at[k].id = coop_id;
        at[k].value.cooperative = 1;
        k++;
    }
    if (flags & EX_PDL) {
        at[k].id = pdl_id;
        at[k].value.serialization = 1;
        k++;
    }
    cf.gx = g[0]; cf.gy = g[1]; cf.gz = g[2];
    cf.bx = g[3]; cf.by = g[4]; cf.bz = g[5];
    cf.smem = g[6];
    cf.stream = s;
    cf.attrs = at;
    cf.count = k;
    Py_BEGIN_ALLOW_THREADS
    r = ex_launch(&cf, f, (void **)p, NULL);
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(r);
}

static PyObject *init(PyObject *self, PyObject *const *a, Py_ssize_t n) {
    void *pl, *co, *ex;
    if (n != 6) {
        PyErr_SetString(PyExc_TypeError, "init takes 6 arguments");
        return NULL;
    }
    if (as_addr(a[0], &pl) || as_addr(a[1], &co) || as_addr(a[2], &ex)) return NULL;
    long cid = PyLong_AsLong(a[3]), kid = PyLong_AsLong(a[4]), did = PyLong_AsLong(a[5]);
    if (PyErr_Occurred()) return NULL;
    plain_launch = (launch_fn)pl;
    coop_launch = (coop_fn)co;
    ex_launch = (ex_fn)ex;
    cluster_id = (int)cid;
    coop_id = (int)kid;
    pdl_id = (int)did;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"init", (PyCFunction)(void (*)(void))init, METH_FASTCALL, "set the driver's entry points"},
    {"launch", (PyCFunction)(void (*)(void))launch, METH_FASTCALL, "cuLaunchKernel"},
    {"launch_coop", (PyCFunction)(void (*)(void))launch_coop, METH_FASTCALL,
     "cuLaunchCooperativeKernel"},
    {"launch_ex", (PyCFunction)(void (*)(void))launch_ex, METH_FASTCALL,
     "cuLaunchKernelEx with cluster dimensions, cooperative, programmatic serialization"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_ptxdsl_launch",
                                    "ptxdsl's launch shim", -1, methods};

PyMODINIT_FUNC PyInit__ptxdsl_launch(void) { return PyModule_Create(&module); }
