"""Fakes for testing ptxdsl.runtime without a GPU.

``FakeCuda`` imitates the parts of ``cuda.bindings.driver`` the runtime calls,
with the same Python conventions (results are ``(CUresult, *values)`` tuples,
handles are objects with ``__int__``). Device memory is host memory: a "device
pointer" is the address of a ctypes buffer, so a kernel can be emulated by a
Python function (registered with :meth:`FakeCuda.register`) that reads and
writes through the pointers it is launched with, and a fake torch tensor backed
by a numpy array can be passed by its ``data_ptr()``. The real
``ptxdsl.runtime.driver.Driver`` runs on top of it (``Driver(cu=FakeCuda())``),
so its context and error handling are tested too.

``fake_torch_module()`` builds a tiny stand-in for ``torch`` (Tensor with
shape/dtype/stride/get_device/is_contiguous/data_ptr, empty, empty_like,
``_C._cuda_getCurrentRawStream``) to put in ``sys.modules`` with monkeypatch.

``cpu_torch_as_cuda()`` goes the other way: the real (CPU) torch, patched so that
CPU tensors pass for tensors on cuda:0 (torch's C++ tensor guards, allocation and
all), for testing and timing the fast path exactly as it runs with torch.
"""
from __future__ import annotations

import ctypes
import enum
import threading
import types

import numpy as np


class CUresult(enum.IntEnum):
    CUDA_SUCCESS = 0
    CUDA_ERROR_INVALID_VALUE = 1
    CUDA_ERROR_OUT_OF_MEMORY = 2
    CUDA_ERROR_INVALID_CONTEXT = 201
    CUDA_ERROR_INVALID_IMAGE = 200
    CUDA_ERROR_NO_BINARY_FOR_GPU = 209
    CUDA_ERROR_INVALID_PTX = 218
    CUDA_ERROR_UNSUPPORTED_PTX_VERSION = 222
    CUDA_ERROR_INVALID_HANDLE = 400
    CUDA_ERROR_ILLEGAL_ADDRESS = 700
    CUDA_ERROR_LAUNCH_FAILED = 719
    CUDA_ERROR_INVALID_CLUSTER_SIZE = 912


OK = CUresult.CUDA_SUCCESS


class _Handle:
    def __init__(self, value=0):
        self.value = int(value or 0)

    def __int__(self):
        return self.value

    def __repr__(self):
        return f"<{type(self).__name__} {self.value:#x}>"


class CUstream(_Handle):
    pass


class CUfunction(_Handle):
    pass


class CUcontext(_Handle):
    pass


class CUmodule(_Handle):
    pass


class CUdevice(_Handle):
    pass


def _names(*names):
    return types.SimpleNamespace(**{n: n for n in names})


class FakeCuda:
    """The fake ``cuda.bindings.driver`` module (an object with the same attributes)."""

    CUresult = CUresult
    CUstream = CUstream
    CUfunction = CUfunction
    CUdevice_attribute = _names(
        "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR",
        "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR",
        "CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK", "CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X",
        "CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y", "CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z",
        "CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X", "CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y",
        "CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z", "CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK",
        "CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN",
        "CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT", "CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH")
    CUfunction_attribute = _names(
        "CU_FUNC_ATTRIBUTE_NUM_REGS", "CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES",
        "CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK", "CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES",
        "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES",
        "CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED")
    CUjit_option = _names("CU_JIT_ERROR_LOG_BUFFER", "CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES",
                          "CU_JIT_INFO_LOG_BUFFER", "CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES",
                          "CU_JIT_LOG_VERBOSE")
    CUevent_flags = _names("CU_EVENT_DISABLE_TIMING")
    CUlaunchAttributeID = _names("CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION",
                                 "CU_LAUNCH_ATTRIBUTE_COOPERATIVE",
                                 "CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION")
    CUtensorMapDataType = _names(*(f"CU_TENSOR_MAP_DATA_TYPE_{n}" for n in (
        "UINT8", "UINT16", "UINT32", "INT32", "UINT64", "INT64", "FLOAT16", "FLOAT32",
        "FLOAT64", "BFLOAT16", "FLOAT32_FTZ", "TFLOAT32", "TFLOAT32_FTZ")))
    CUtensorMapInterleave = _names(*(f"CU_TENSOR_MAP_INTERLEAVE_{n}" for n in
                                     ("NONE", "16B", "32B")))
    CUtensorMapSwizzle = _names(*(f"CU_TENSOR_MAP_SWIZZLE_{n}" for n in
                                  ("NONE", "32B", "64B", "128B")))
    CUtensorMapL2promotion = _names(*(f"CU_TENSOR_MAP_L2_PROMOTION_{n}" for n in
                                      ("NONE", "L2_64B", "L2_128B", "L2_256B")))
    CUtensorMapFloatOOBfill = _names("CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE",
                                     "CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA")
    cuuint64_t = int
    cuuint32_t = int

    class CUtensorMap:
        """128 bytes of host memory (its own, or ``_ptr``'s), like cuda.bindings'."""

        def __init__(self, _ptr=0):
            self._own = None
            if not _ptr:
                self._own = ctypes.create_string_buffer(128)
                _ptr = ctypes.addressof(self._own)
            self.ptr = int(_ptr)

        def getPtr(self):
            return self.ptr

    class CUlaunchConfig:
        pass

    class CUlaunchAttribute:
        def __init__(self):
            self.value = types.SimpleNamespace(clusterDim=types.SimpleNamespace(x=1, y=1, z=1))

    def __init__(self, devices=((9, 0),), *, driver_version=13000, max_threads=1024,
                 static_smem=0):
        self.devices = [dict(cc=cc, name=f"Fake GPU {i} (sm_{cc[0]}{cc[1]})")
                        for i, cc in enumerate(devices)]
        self.driver_version = driver_version
        self.max_threads = max_threads
        self.static_smem = static_smem
        self._tls = threading.local()
        self._lock = threading.Lock()
        self.memory: dict[int, ctypes.Array] = {}
        self.modules: dict[int, dict] = {}
        self.functions: dict[int, dict] = {}
        self.kernels: dict[str, dict] = {}      # name -> {"params": [PtxType], "impl": fn}
        self.launches: list[dict] = []
        self.loads: list[tuple[str, int]] = []   # ("cubin"|"ptx", device)
        self.jit_error: str | None = None        # make the next PTX load fail with this log
        self.cubin_error: CUresult | None = None  # make cubin loads fail with this
        self.launch_error: CUresult | None = None
        self.sync_error: CUresult | None = None
        self.calls: dict[str, int] = {}
        self.tmap_encodes: list[dict] = []
        self._next = 0x10000

    # -------------------------------------------------------------- helpers for tests
    def register(self, kernel, impl=None):
        """Tell the fake the parameter types of ``kernel`` and, optionally, how to run it."""
        prog = kernel.program()
        self.kernels[prog.name] = {"params": [p.dtype for p in prog.params],
                                   "counts": [getattr(p, "count", 1) for p in prog.params],
                                   "impl": impl}

    # -------------------------------------------------------------- tensor maps
    # A fake CUtensorMap: the global address in bytes 0..7, then the number of the
    # encode call that made it (``tmap_encodes[n]`` holds its arguments).
    def cuTensorMapEncodeTiled(self, dtype, rank, address, dims, strides, box, elem_strides,
                               interleave, swizzle, l2, oob):
        self._count("cuTensorMapEncodeTiled")
        args = dict(dtype=dtype, rank=rank, address=int(address), dims=list(dims),
                    strides=list(strides), box=list(box), elem_strides=list(elem_strides),
                    interleave=interleave, swizzle=swizzle, l2=l2, oob=oob)
        if len(dims) != rank or len(strides) != rank - 1 or any(b > 256 for b in box):
            return (CUresult.CUDA_ERROR_INVALID_VALUE, None)
        self.tmap_encodes.append(args)
        tm = self.CUtensorMap()
        ctypes.c_uint64.from_address(tm.ptr).value = int(address)
        ctypes.c_uint64.from_address(tm.ptr + 8).value = len(self.tmap_encodes) - 1
        return (OK, tm)

    def cuTensorMapReplaceAddress(self, tm, address):
        self._count("cuTensorMapReplaceAddress")
        if int(address) % 16:
            return (CUresult.CUDA_ERROR_INVALID_VALUE,)
        ctypes.c_uint64.from_address(tm.getPtr()).value = int(address)
        return (OK,)

    def decode_tmap(self, blob: bytes) -> dict:
        """What a fake tensor map says: its address and the encode call's arguments."""
        addr, n = np.frombuffer(blob[:16], np.uint64)
        return dict(self.tmap_encodes[int(n)], address=int(addr))

    def live_allocations(self) -> int:
        return len(self.memory)

    def _count(self, name):
        self.calls[name] = self.calls.get(name, 0) + 1

    def _new(self):
        with self._lock:
            self._next += 0x10
            return self._next

    @property
    def _ctx_stack(self) -> list:
        st = getattr(self._tls, "stack", None)
        if st is None:
            st = self._tls.stack = []
        return st

    def _current_device(self):
        st = self._ctx_stack
        return st[-1] if st else -1

    # -------------------------------------------------------------- the API
    def cuInit(self, flags):
        return (OK,)

    def cuDriverGetVersion(self):
        return (OK, self.driver_version)

    def cuGetErrorName(self, code):
        return (OK, CUresult(code).name.encode())

    def cuGetErrorString(self, code):
        return (OK, f"fake {CUresult(code).name.lower()}".encode())

    def cuDeviceGetCount(self):
        return (OK, len(self.devices))

    def cuDeviceGet(self, ordinal):
        if not 0 <= ordinal < len(self.devices):
            return (CUresult.CUDA_ERROR_INVALID_VALUE, None)
        return (OK, CUdevice(ordinal))

    def cuDeviceGetName(self, length, dev):
        return (OK, self.devices[int(dev)]["name"].encode() + b"\0")

    def cuDeviceTotalMem(self, dev):
        return (OK, 80 << 30)

    def cuDeviceGetAttribute(self, attr, dev):
        cc = self.devices[int(dev)]["cc"]
        table = {
            "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR": cc[0],
            "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR": cc[1],
            "CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK": 1024,
            "CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X": 1024,
            "CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y": 1024,
            "CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z": 64,
            "CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X": 2**31 - 1,
            "CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y": 65535,
            "CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z": 65535,
            "CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK": 48 * 1024,
            "CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN": 227 * 1024,
            "CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT": 132,
            "CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH": int(cc[0] >= 9),
        }
        return (OK, table[attr])

    def cuDevicePrimaryCtxRetain(self, dev):
        return (OK, CUcontext(0x1000 + int(dev)))

    def cuCtxGetCurrent(self):
        d = self._current_device()
        return (OK, CUcontext(0 if d < 0 else 0x1000 + d))

    def cuCtxGetDevice(self):
        d = self._current_device()
        return (OK, CUdevice(d)) if d >= 0 else (CUresult.CUDA_ERROR_INVALID_CONTEXT, None)

    def cuCtxSetCurrent(self, ctx):
        self._count("cuCtxSetCurrent")
        st = self._ctx_stack
        d = int(ctx) - 0x1000 if int(ctx) else -1
        if st:
            st[-1] = d
        else:
            st.append(d)
        return (OK,)

    def cuCtxPushCurrent(self, ctx):
        self._count("cuCtxPushCurrent")
        self._ctx_stack.append(int(ctx) - 0x1000)
        return (OK,)

    def cuCtxPopCurrent(self):
        d = self._ctx_stack.pop()
        return (OK, CUcontext(0x1000 + d))

    def cuCtxSynchronize(self):
        return (OK,)

    def _load(self, image, kind):
        dev = self._current_device()
        if dev < 0:
            return (CUresult.CUDA_ERROR_INVALID_CONTEXT, None)
        self.loads.append((kind, dev))
        h = self._new()
        self.modules[h] = {"device": dev, "kind": kind, "image": bytes(image)}
        return (OK, CUmodule(h))

    def cuModuleLoadData(self, image):
        if self.cubin_error is not None:
            return (self.cubin_error, None)
        return self._load(image, "cubin")

    def cuModuleLoadDataEx(self, image, n, opts, vals):
        if self.jit_error is not None:
            log = self.jit_error.encode()
            for o, v in zip(opts, vals):
                if o == "CU_JIT_ERROR_LOG_BUFFER":
                    v[:len(log)] = log
            return (CUresult.CUDA_ERROR_INVALID_PTX, None)
        return self._load(image, "ptx")

    def cuModuleGetFunction(self, module, name):
        mod = self.modules[int(module)]
        h = self._new()
        self.functions[h] = {"name": name.decode(), "device": mod["device"], "attrs": {}}
        return (OK, CUfunction(h))

    def cuFuncGetAttribute(self, attr, func):
        f = self.functions[int(func)]
        defaults = {"CU_FUNC_ATTRIBUTE_NUM_REGS": 32,
                    "CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES": self.static_smem,
                    "CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK": self.max_threads,
                    "CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES": 0,
                    "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES": 48 * 1024 - self.static_smem}
        return (OK, f["attrs"].get(attr, defaults[attr]))

    def cuFuncSetAttribute(self, func, attr, value):
        self._count("cuFuncSetAttribute")
        self.functions[int(func)]["attrs"][attr] = value
        return (OK,)

    def cuMemAlloc(self, n):
        if self._current_device() < 0:
            return (CUresult.CUDA_ERROR_INVALID_CONTEXT, None)
        buf = ctypes.create_string_buffer(int(n))
        addr = ctypes.addressof(buf)
        self.memory[addr] = buf
        return (OK, addr)

    def cuMemFree(self, ptr):
        self.memory.pop(int(ptr))
        return (OK,)

    def cuMemcpyHtoDAsync(self, dst, src, n, stream):
        ctypes.memmove(int(dst), int(src), n)
        return (OK,)

    def cuMemcpyDtoHAsync(self, dst, src, n, stream):
        ctypes.memmove(int(dst), int(src), n)
        return (OK,)

    def cuMemGetInfo(self):
        return (OK, (80 << 30) - sum(len(b) for b in self.memory.values()), 80 << 30)

    def cuStreamSynchronize(self, stream):
        self._count("cuStreamSynchronize")
        if self.sync_error is not None:
            return (self.sync_error,)
        return (OK,)

    def cuEventCreate(self, flags):
        return (OK, _Handle(self._new()))

    def cuEventRecord(self, ev, stream):
        self._count("cuEventRecord")
        return (OK,)

    def cuStreamWaitEvent(self, stream, ev, flags):
        self._count("cuStreamWaitEvent")
        return (OK,)

    def cuEventDestroy(self, ev):
        return (OK,)

    def _decode(self, name, kernel_params, extra):
        spec = self.kernels.get(name)
        if spec is None:
            return None
        counts = spec.get("counts") or [1] * len(spec["params"])
        sizes = [t.bytes * c for t, c in zip(spec["params"], counts)]
        kinds = [("f" if t.kind == "f" else "u", t.bytes) if c == 1 else ("a", t.bytes * c)
                 for t, c in zip(spec["params"], counts)]
        vals = []
        if kernel_params:
            arr = (ctypes.c_void_p * len(sizes)).from_address(int(kernel_params))
            addrs = list(arr)
        else:
            ex = (ctypes.c_void_p * 5).from_address(int(extra))
            assert ex[0] == 1 and ex[2] == 2 and not ex[4], "malformed extra array"
            base = ex[1]
            size = ctypes.c_size_t.from_address(ex[3]).value
            addrs, off = [], 0
            for s in sizes:
                off = -(-off // s) * s
                addrs.append(base + off)
                off += s
            assert size >= off
        for (kind, size), a in zip(kinds, addrs):
            if kind == "a":
                vals.append(ctypes.string_at(a, size))
                continue
            ct = {("u", 8): ctypes.c_uint64, ("u", 4): ctypes.c_uint32, ("f", 4): ctypes.c_float,
                  ("u", 2): ctypes.c_uint16, ("f", 8): ctypes.c_double}[(kind, size)]
            vals.append(ct.from_address(a).value)
        return vals

    def cuLaunchKernel(self, f, gx, gy, gz, bx, by, bz, smem, stream, kernel_params, extra):
        if isinstance(f, ctypes.c_void_p):  # the ctypes launcher's way (tests call it too)
            f = CUfunction(f.value)
        fn = self.functions.get(int(f))
        if fn is None:
            return (CUresult.CUDA_ERROR_INVALID_HANDLE,)
        if self._current_device() != fn["device"]:
            self._count("launch_in_wrong_context")
            return (CUresult.CUDA_ERROR_INVALID_CONTEXT,)
        if self.launch_error is not None:
            return (self.launch_error,)
        if isinstance(kernel_params, ctypes.c_void_p):
            kernel_params = kernel_params.value
        params = self._decode(fn["name"], kernel_params, extra)
        rec = {"name": fn["name"], "device": fn["device"], "grid": (gx, gy, gz),
               "block": (bx, by, bz), "smem": smem, "stream": int(stream) if stream else 0,
               "params": params, "cluster": None}
        self.launches.append(rec)
        impl = self.kernels.get(fn["name"], {}).get("impl")
        if impl is not None and params is not None:
            impl(*params, grid=(gx, gy, gz), block=(bx, by, bz))
        return (OK,)

    def cuLaunchCooperativeKernel(self, f, gx, gy, gz, bx, by, bz, smem, stream, kernel_params):
        r = self.cuLaunchKernel(f, gx, gy, gz, bx, by, bz, smem, stream, kernel_params, 0)
        if r[0] == OK:
            self.launches[-1]["cooperative"] = True
        return r

    def cuOccupancyMaxActiveBlocksPerMultiprocessor(self, f, threads, smem):
        """Hopper's thread limit (2048 per SM) and shared memory (228 KiB per SM, 1 KiB of
        it reserved per CTA); like the driver, no CTA fits when ``smem`` exceeds the
        function's dynamic limit (48 KiB until cuFuncSetAttribute raises it)."""
        self._count("cuOccupancyMaxActiveBlocksPerMultiprocessor")
        limit = self.functions[int(f)]["attrs"].get(
            "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES", 48 * 1024 - self.static_smem)
        if smem > limit:
            return (OK, 0)
        by_smem = 228 * 1024 // (self.static_smem + smem + 1024)
        return (OK, max(1, min(2048 // max(threads, 1), by_smem)))

    def cuOccupancyMaxActiveClusters(self, f, config):
        """Clusters of ``config``'s cluster shape resident at once: the CTAs per SM
        above over 132 SMs in GPCs of 16 and 18 SMs (6 x 16 + 2 x 18), a cluster in one
        GPC; like the driver, more than 8 CTAs need the non-portable attribute."""
        self._count("cuOccupancyMaxActiveClusters")
        c = config.attrs[0].value.clusterDim
        size = c.x * c.y * c.z
        attrs = self.functions[int(f)]["attrs"]
        if size > 8 and not attrs.get("CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED"):
            return (CUresult.CUDA_ERROR_INVALID_CLUSTER_SIZE, 0)
        per_sm = self.cuOccupancyMaxActiveBlocksPerMultiprocessor(
            f, config.blockDimX * config.blockDimY * config.blockDimZ, config.sharedMemBytes)[1]
        return (OK, sum(g * per_sm // size for g in (16,) * 6 + (18,) * 2))

    def cuLaunchKernelEx(self, config, f, kernel_params, extra):
        self._count("cuLaunchKernelEx")
        r = self.cuLaunchKernel(f, config.gridDimX, config.gridDimY, config.gridDimZ,
                                config.blockDimX, config.blockDimY, config.blockDimZ,
                                config.sharedMemBytes, config.hStream, kernel_params, extra)
        if r[0] == OK:
            assert config.numAttrs == len(config.attrs)
            rec = self.launches[-1]
            for a in config.attrs:
                if a.id == "CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION":
                    c = a.value.clusterDim
                    rec["cluster"] = (c.x, c.y, c.z)
                elif a.id == "CU_LAUNCH_ATTRIBUTE_COOPERATIVE":
                    rec["cooperative"] = bool(a.value.cooperative)
                elif a.id == "CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION":
                    rec["pdl"] = bool(a.value.programmaticStreamSerializationAllowed)
                else:  # pragma: no cover - an attribute the runtime should not send
                    raise AssertionError(f"unexpected launch attribute {a.id}")
        return r


def fake_driver(monkeypatch=None, **kw):
    """A real :class:`Driver` on a :class:`FakeCuda`, installed as the process's driver."""
    from ptxdsl.runtime import driver as drv_mod
    cu = FakeCuda(**kw)
    drv = drv_mod.Driver(cu=cu)
    if monkeypatch is not None:
        monkeypatch.setattr(drv_mod, "_driver", drv)
        monkeypatch.setattr(drv_mod, "_driver_error", None)
    return drv, cu


def fake_gpu_for_ops(monkeypatch, tmp_path):
    """What the ops' fast-path tests share: a fresh module cache under ``tmp_path`` (JIT
    compiles), the fake driver, CPU torch posing as CUDA (:func:`cpu_torch_as_cuda`),
    and the ops' ``Frame`` taking CPU tensors for GPU ones (not the interpreter's).
    Returns the :class:`FakeCuda` (register each kernel's emulation on it)."""
    monkeypatch.setenv("PTXDSL_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("PTXDSL_COMPILER", "jit")
    from ptxdsl.runtime import adapter as fr
    from ptxdsl.runtime import cache as rcache
    monkeypatch.setattr(rcache, "MODULES", rcache.ModuleCache())
    _, cu = fake_driver(monkeypatch)
    cpu_torch_as_cuda(monkeypatch)
    real_init = fr.Frame.__init__

    def init(self, x, op, *name):
        real_init(self, x, op, *name)
        self.cpu = False
    monkeypatch.setattr(fr.Frame, "__init__", init)
    return cu


def fake_sm90_dispatch(monkeypatch, hopper_kernel) -> None:
    """matmul's dispatch as on a 132-SM sm_90 device, without a GPU: the ops' ``Frame``
    reports such a device and runs kernels on the host, and ``hopper_kernel`` (the
    test's stand-in, called with the dispatch's arguments) replaces the Hopper kernel's
    builder."""
    from ptxdsl.ops.matmul import api

    class Info:
        cc, sm_count = (9, 0), 132
    monkeypatch.setattr(api.Frame, "device", lambda self, a: Info())
    monkeypatch.setattr(api.Frame, "on_gpu", lambda self: False)
    monkeypatch.setattr(api, "hopper_kernel", hopper_kernel)


def f32_array(addr: int, n: int) -> np.ndarray:
    """A numpy view of ``n`` float32 at a (fake device) address."""
    if n == 0:
        return np.empty(0, np.float32)
    return np.ctypeslib.as_array((ctypes.c_float * n).from_address(addr))


def vadd_impl(pa, pb, pc, n, *, grid, block):
    """What the vector-add kernel does, for the fake GPU."""
    a, b, c = f32_array(pa, n), f32_array(pb, n), f32_array(pc, n)
    c[:] = a + b


# ---------------------------------------------------------------------- fake torch
def fake_torch_module(raw_stream: int = 0):
    """A minimal ``torch`` look-alike whose tensors live in (fake-device) host memory."""
    torch = types.ModuleType("torch")

    class dtype:
        def __init__(self, name):
            self.name = name

        def __repr__(self):
            return f"torch.{self.name}"

    names = ["float32", "float16", "bfloat16", "float64", "int32", "uint32", "int64", "uint8",
             "int8", "int16", "uint16"]
    for n in names:
        setattr(torch, n, dtype(n))

    class device:
        def __init__(self, type_, index=None):
            if isinstance(type_, str) and ":" in type_:
                type_, index = type_.split(":")
            self.type, self.index = type_, (int(index) if index is not None else None)

        def __repr__(self):
            return self.type if self.index is None else f"{self.type}:{self.index}"

        def __eq__(self, other):
            return isinstance(other, device) and (self.type, self.index) == (other.type,
                                                                              other.index)

        def __hash__(self):
            return hash((self.type, self.index))

    torch.device = device
    torch.strided = "torch.strided"
    torch.sparse_coo = "torch.sparse_coo"

    class Size(tuple):
        pass

    class Tensor:
        def __init__(self, array, dev=0, layout="torch.strided", np_dtype_name=None):
            self._a = array
            self._dev = dev
            self.layout = layout
            self.dtype = getattr(torch, np_dtype_name or array.dtype.name)
            self.data_ptr_calls = 0

        @property
        def shape(self):
            return Size(self._a.shape)

        def stride(self):
            return tuple(s // self._a.itemsize for s in self._a.strides)

        def is_contiguous(self):
            if self.layout != torch.strided:
                raise RuntimeError("is_contiguous on a sparse tensor")
            expect, acc = [], 1
            for d in reversed(self._a.shape):
                expect.append(acc)
                acc *= d
            st = self.stride()
            return all(s == e or d == 1 for s, e, d in zip(st, reversed(expect), self._a.shape))

        def get_device(self):
            return self._dev

        @property
        def is_cuda(self):
            return self._dev >= 0

        @property
        def device(self):
            return device("cuda", self._dev) if self._dev >= 0 else device("cpu")

        def data_ptr(self):
            self.data_ptr_calls += 1
            return self._a.ctypes.data if self._a.size else 0

        def numpy(self):
            return self._a

        def __getitem__(self, idx):
            return Tensor(self._a[idx], self._dev)

    torch.Tensor = Tensor
    _np = {"bfloat16": "uint16"}

    def empty(shape, dtype=None, device=None):
        dt = dtype or torch.float32
        a = np.empty(tuple(shape), _np.get(dt.name, dt.name))
        dev = device.index if device is not None and device.type == "cuda" else -1
        return Tensor(a, dev, np_dtype_name=dt.name)

    def empty_like(t):
        return Tensor(np.empty_like(t._a), t._dev, np_dtype_name=t.dtype.name)

    torch.empty = empty
    torch.empty_like = empty_like
    torch.tensor_on = lambda a, dev=0: Tensor(np.ascontiguousarray(a) if a.flags.c_contiguous
                                              else a, dev)
    torch.raw_stream = raw_stream
    torch.current_device_index = 0  # what torch.cuda.current_device() would say
    torch._C = types.SimpleNamespace(_cuda_getCurrentRawStream=lambda d: torch.raw_stream,
                                     _cuda_getDevice=lambda: torch.current_device_index)
    return torch


# ---------------------------------------------------------------------- real torch, CPU tensors
def cpu_torch_as_cuda(monkeypatch=None, *, stream=0):
    """Make the installed (CPU) torch look like CUDA torch to ptxdsl's launcher, and
    return it: CPU tensors read as tensors on cuda:0 (whose memory the fake GPU reads
    and writes), torch's current device is 0, its raw current stream ``stream``,
    and the fast path's output allocator (``_empty_strided_cuda``) allocates on the
    CPU. The stand-ins are C functions of about the cost of the CUDA ones they
    replace, so ``bench/launch_overhead.py --host`` can time the fast path with them.

    With ``monkeypatch`` everything is undone after the test; without, for good (a
    benchmark process that never touches a GPU).
    """
    import torch
    from torch._C._dynamo import guards

    from ptxdsl.runtime import adapter as radapter
    from ptxdsl.runtime import launcher as rlaunch
    from ptxdsl.runtime import torch_private

    real_view = radapter._torch_view

    def view(t):
        v = real_view(t)
        if v.device < 0 and t.device.type == "cpu":
            v.device, v.ptr, v.where = 0, t.data_ptr(), "cuda:0"
        return v

    real_allocate = rlaunch.allocate

    def allocate(framework, shape, dtype, device, stream=0):
        if framework == "torch":
            return torch.empty(shape, dtype=getattr(torch, dtype))
        return real_allocate(framework, shape, dtype, device, stream=stream)

    raw_stream = abs if stream == 0 else (lambda device: stream)
    patches = [(torch._C, "_cuda_getCurrentRawStream", raw_stream),
               (torch._C, "_cuda_getDevice", int),                 # int() == 0
               (torch._C, "_cuda_isCurrentStreamCapturing", bool),  # bool() is False
               (guards, "_empty_strided_cuda", guards._empty_strided_cpu),
               (radapter, "_torch_view", view), (rlaunch, "allocate", allocate),
               (torch_private, "HOOKS", torch_private.HookCache())]  # hooks see the stand-ins
    for obj, name, value in patches:
        if monkeypatch is not None:
            monkeypatch.setattr(obj, name, value, raising=False)
        else:
            setattr(obj, name, value)
    return torch
