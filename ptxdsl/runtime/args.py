"""Kernel arguments: what an array is (framework, shape, dtype, strides, device,
pointer), whether it fits the kernel's ``Tile`` specs, and the named dims and
strides it implies.

Supported arguments:

* **torch tensors** (read natively: ``data_ptr()``, ``stride()``, ``get_device()``),
* **objects with ``__cuda_array_interface__``** (cupy, numba, jax, ...),
* **objects with ``__dlpack__``** on a CUDA device (read through the DLPack capsule),
* **numpy arrays** (host memory: the launcher copies them to the device and back),
* :class:`ptxdsl.runtime.memory.DeviceArray` (ptxdsl's own device buffers).

Everything here is pure Python and testable without a GPU; every refusal is a
:class:`LaunchError` that names the kernel, the argument and what would be right.
"""
from __future__ import annotations

import ctypes
import sys
from dataclasses import dataclass, field

import numpy as np

from ..errors import LaunchError, user_location
from ..types import PtxType

__all__ = ["ArgView", "Binding", "KernelSignature", "accepts_dtype", "bind", "classify",
           "dtype_name_for_tile", "stream_handle", "vector_alignment", "view_of"]

# ---------------------------------------------------------------------- dtypes
# Canonical dtype names are numpy's ("float32", "bfloat16", "uint16", ...).
_ITEMSIZE = {"bool": 1, "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "float16": 2,
             "bfloat16": 2, "int32": 4, "uint32": 4, "float32": 4, "int64": 8, "uint64": 8,
             "float64": 8, "complex64": 8, "complex128": 16,
             "float8_e4m3fn": 1, "float8_e5m2": 1}

# Tile dtype -> the array dtypes that hold it. ``.b`` types take any dtype of
# their size. numpy has no bfloat16: bf16 tiles take uint16 bit patterns from
# numpy (the interpreter's convention) and bfloat16 from torch/ml_dtypes/jax.
_ACCEPT = {
    "f32": ("float32",), "tf32": ("float32",), "f64": ("float64",), "f16": ("float16",),
    "bf16": ("bfloat16",), "s8": ("int8",), "u8": ("uint8", "bool"), "s16": ("int16",),
    "u16": ("uint16",), "s32": ("int32",), "u32": ("uint32",), "s64": ("int64",),
    "u64": ("uint64",), "f16x2": ("uint32",), "bf16x2": ("uint32",),
}


def accepts_dtype(tile: PtxType, name: str, kind: str) -> bool:
    """Whether an array of dtype ``name`` (from framework ``kind``) fits a Tile of ``tile``."""
    if tile.kind == "b":
        return _ITEMSIZE.get(name, 0) * 8 == tile.bits
    ok = _ACCEPT.get(tile.name, ())
    if name in ok:
        return True
    return tile.name == "bf16" and kind == "numpy" and name == "uint16"


def single_dtype(tile: PtxType) -> bool:
    """Whether torch/cupy arrays of exactly one dtype fit a Tile of ``tile``."""
    return tile.kind != "b" and len(_ACCEPT.get(tile.name, ())) == 1


def dtype_name_for_tile(tile: PtxType) -> str:
    """The dtype ptxdsl allocates for an output of ``tile``."""
    if tile.kind == "b":
        return {8: "uint8", 16: "uint16", 32: "uint32", 64: "uint64"}[tile.bits]
    return _ACCEPT[tile.name][0]


def _hint_for(tile: PtxType, name: str) -> str:
    want = _ACCEPT.get(tile.name)
    if tile.kind == "b":
        return f"any {tile.bits}-bit dtype"
    hint = " or ".join(want or (tile.name,))
    if tile.kind in ("u", "s") and name in ("int8", "uint8", "int16", "uint16", "int32", "uint32",
                                            "int64", "uint64"):
        other = ("s" if tile.kind == "u" else "u") + str(tile.bits)
        if _ITEMSIZE.get(name, 0) * 8 == tile.bits:
            return (f"{hint} (signedness differs: declare the Tile as {other} or "
                    f"b{tile.bits}, or view the array as {hint})")
    return hint


_TORCH_NAMES: dict = {}


def torch_dtype_name(dtype) -> str:
    name = _TORCH_NAMES.get(dtype)
    if name is None:
        name = _TORCH_NAMES[dtype] = str(dtype).replace("torch.", "")
    return name


# DLPack type codes (dlpack.h): kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4, kDLComplex 5,
# kDLBool 6
_DL_CODES = {0: "int", 1: "uint", 2: "float", 4: "bfloat", 5: "complex", 6: "bool"}
_DL_CPU, _DL_CUDA, _DL_CUDA_HOST, _DL_CUDA_MANAGED = 1, 2, 3, 13


# ---------------------------------------------------------------------- views
@dataclass
class ArgView:
    """One argument, read: enough to validate and launch without touching it again."""

    obj: object
    kind: str                      # torch | cupy | cai | dlpack | numpy | device
    shape: tuple
    strides: tuple | None          # in elements; None means C-contiguous
    dtype: str                     # canonical (numpy) dtype name
    device: int                    # CUDA ordinal, -1 for host memory
    ptr: int = 0                   # device address (0 for host arrays until staged)
    stream: int | None = None      # the producer's stream (__cuda_array_interface__ v3)
    keepalive: object = None       # e.g. a DLPack capsule that must outlive the launch
    where: str = ""                # "cpu", "cuda:0", "meta", ... for messages

    @property
    def itemsize(self) -> int:
        return _ITEMSIZE.get(self.dtype, 0)

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        return self.size * self.itemsize


def classify(obj) -> str:
    """``torch``, ``numpy``, ``device``, ``cupy``, ``cai``, ``dlpack``, or ``""`` (unsupported)."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.Tensor):
        return "torch"
    if isinstance(obj, np.ndarray):
        return "numpy"
    from .memory import DeviceArray
    if isinstance(obj, DeviceArray):
        return "device"
    cupy = sys.modules.get("cupy")
    if cupy is not None and isinstance(obj, cupy.ndarray):
        return "cupy"
    if hasattr(obj, "__cuda_array_interface__"):
        return "cai"
    if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
        return "dlpack"
    return ""


def _torch_view(t) -> ArgView:
    torch = sys.modules["torch"]
    if t.layout != torch.strided:
        raise _ArgProblem(f"is a {t.layout} tensor; kernels take dense (strided) tensors: "
                          f"pass .to_dense()")
    dev = t.get_device() if t.is_cuda else -1
    where = str(t.device)
    return ArgView(t, "torch", tuple(t.shape), tuple(t.stride()), torch_dtype_name(t.dtype),
                   dev, t.data_ptr() if dev >= 0 else 0, where=where)


def _cai_view(obj, kind: str, pointer_device) -> ArgView:
    cai = obj.__cuda_array_interface__
    shape = tuple(int(d) for d in cai["shape"])
    try:
        dt = np.dtype(cai["typestr"])
    except TypeError as exc:
        raise _ArgProblem(f"has __cuda_array_interface__ typestr {cai['typestr']!r} that numpy "
                          f"cannot read ({exc})") from None
    if dt.byteorder == ">":
        raise _ArgProblem("is big-endian; GPU kernels read little-endian data")
    ptr = int(cai["data"][0] or 0)
    strides = cai.get("strides")
    if strides is not None:
        if any(s % dt.itemsize for s in strides):
            raise _ArgProblem(f"has byte strides {tuple(strides)} that are not multiples of its "
                              f"itemsize {dt.itemsize}")
        strides = tuple(int(s) // dt.itemsize for s in strides)
    stream = cai.get("stream")
    if kind == "cupy":
        dev = int(obj.device.id)
    else:
        dev = pointer_device(ptr) if ptr else -1
    return ArgView(obj, kind, shape, strides, dt.name, dev, ptr,
                   stream=int(stream) if stream is not None else None,
                   where=f"cuda:{dev}" if dev >= 0 else "host")


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


_capsule_get = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_get.restype = ctypes.c_void_p
_capsule_get.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_valid.restype = ctypes.c_int
_capsule_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]


def dlpack_device(obj) -> tuple[int, int]:
    dev_type, dev_id = obj.__dlpack_device__()
    return int(dev_type), int(dev_id)


def _dlpack_view(obj, stream: int) -> ArgView:
    """Read a CUDA DLPack capsule. The capsule is kept (not consumed), so its
    deleter runs when we drop it; the producer's array stays owned by the caller."""
    dev_type, dev_id = dlpack_device(obj)
    if dev_type not in (_DL_CUDA, _DL_CUDA_MANAGED):
        raise _ArgProblem(f"is a DLPack array on device type {dev_type} (not CUDA)")
    # DLPack stream convention: 1 is the legacy default stream (0 is not allowed).
    try:
        capsule = obj.__dlpack__(stream=stream if stream else 1)
    except TypeError:
        capsule = obj.__dlpack__()
    if not _capsule_valid(capsule, b"dltensor"):
        raise _ArgProblem("gave a DLPack capsule that is not an unconsumed 'dltensor'")
    # DLManagedTensor starts with its DLTensor.
    t = _DLTensor.from_address(_capsule_get(capsule, b"dltensor"))
    code = _DL_CODES.get(t.dtype.code)
    if code is None or t.dtype.lanes != 1:
        raise _ArgProblem(f"has DLPack dtype code {t.dtype.code} bits {t.dtype.bits} lanes "
                          f"{t.dtype.lanes}, which ptxdsl does not read")
    name = "bool" if code == "bool" else f"{code}{t.dtype.bits}"
    ndim = t.ndim
    shape = tuple(int(t.shape[i]) for i in range(ndim))
    strides = tuple(int(t.strides[i]) for i in range(ndim)) if t.strides else None
    ptr = int(t.data or 0) + int(t.byte_offset)
    return ArgView(obj, "dlpack", shape, strides, name, int(t.device.device_id), ptr,
                   keepalive=capsule, where=f"cuda:{t.device.device_id}")


def _numpy_view(a: np.ndarray) -> ArgView:
    isz = a.dtype.itemsize
    strides = tuple(s // isz for s in a.strides) if all(s % isz == 0 for s in a.strides) else None
    return ArgView(a, "numpy", tuple(a.shape), strides, a.dtype.name, -1, 0, where="cpu")


class _ArgProblem(Exception):
    """An argument-level complaint; the caller adds which kernel and argument."""


def view_of(obj, kind: str, *, stream: int = 0, pointer_device=None) -> ArgView:
    """An :class:`ArgView` of ``obj`` (of :func:`classify` kind ``kind``)."""
    if kind == "torch":
        return _torch_view(obj)
    if kind == "numpy":
        if obj.dtype.byteorder == ">":
            raise _ArgProblem("is big-endian; GPU kernels read little-endian data")
        return _numpy_view(obj)
    if kind == "device":
        return ArgView(obj, "device", obj.shape, None, obj.dtype.name, obj.device, obj.ptr,
                       where=f"cuda:{obj.device}")
    if kind in ("cupy", "cai"):
        return _cai_view(obj, kind, pointer_device or (lambda p: -1))
    if kind == "dlpack":
        return _dlpack_view(obj, stream)
    raise _ArgProblem("is not an array")


# ---------------------------------------------------------------------- the kernel side
@dataclass
class KernelSignature:
    """What a kernel's arguments must look like, from its specs and traced program."""

    name: str
    arg_names: tuple[str, ...]        # inputs then outputs
    specs: tuple                      # Tile per argument
    n_in: int
    params: tuple                     # ir.Param, in PTX order
    align: tuple[int, ...]            # bytes each tensor's vector accesses need (1: none)
    align_why: tuple[str, ...]        # the widest vector instruction per tensor
    dim_names: tuple[str, ...]
    stride_names: tuple[str, ...]

    @property
    def n_all(self) -> int:
        return len(self.specs)

    @property
    def n_out(self) -> int:
        return self.n_all - self.n_in

    def describe_call(self) -> str:
        ins = ", ".join(self.arg_names[:self.n_in]) or "nothing"
        outs = ", ".join(self.arg_names[self.n_in:]) or "nothing"
        return f"{self.name}({ins}) -> {outs}"

    @classmethod
    def of(cls, kernel, program) -> "KernelSignature":
        ptrs = [p for p in program.params if p.kind == "ptr"]
        specs = tuple(kernel.in_specs) + tuple(kernel.out_specs)
        if len(ptrs) != len(specs):
            raise LaunchError(f"kernel {kernel.name}: the traced program has {len(ptrs)} pointer "
                              f"parameters for {len(specs)} Tile specs")
        names = tuple(p.tensor or p.name.removesuffix("_ptr") for p in ptrs)
        need = vector_alignment(program)
        align = tuple(need.get(n, (1, ""))[0] for n in names)
        why = tuple(need.get(n, (1, ""))[1] for n in names)
        for p in program.params:
            if p.kind not in ("ptr", "dim", "stride", "tmap"):
                raise LaunchError(f"kernel {kernel.name}: parameter {p.name} is of kind "
                                  f"{p.kind!r}, which this runtime cannot fill")
        return cls(kernel.name, names, specs, len(kernel.in_specs), tuple(program.params),
                   align, why, tuple(kernel.dim_names),
                   tuple(getattr(kernel, "stride_names", ())))


def vector_alignment(program) -> dict[str, tuple[int, str]]:
    """Per tensor argument, the byte alignment its global vector accesses need.

    A forward taint analysis over the IR: a register read from a tensor's
    pointer parameter, and every register computed from it, carries that
    tensor; a memory access (a table entry with ``access``: ld, st, atom, red) of
    ``.v2``/``.v4`` (or a 16-byte type) whose address register carries it needs the tensor's address to be a multiple of the
    access width. Over-approximate by design (a register mixing two pointers
    taints both), which can only ask for more alignment than needed.
    """
    from .. import ir
    instrs = list(program.walk())
    taint: dict = {}
    for ins in instrs:
        if ins.match.spec.access == "read" and ins.match.chosen.get("space") == "param":
            for op in ins.operands:
                if isinstance(op, ir.Addr) and isinstance(op.base, ir.Symbol):
                    pname = op.base.name
                    for p in program.params:
                        if p.name == pname and p.kind == "ptr":
                            for d in ins.dests():
                                taint.setdefault(d, set()).add(p.tensor or pname)
    changed = True
    while changed:  # loops carry taint backwards in program order: iterate to a fixpoint
        changed = False
        for ins in instrs:
            srcs = set()
            for r in ins.sources():
                srcs |= taint.get(r, set())
            if not srcs:
                continue
            for d in ins.dests():
                cur = taint.setdefault(d, set())
                if not srcs <= cur:
                    cur |= srcs
                    changed = True
    need: dict[str, tuple[int, str]] = {}
    for ins in instrs:
        m = ins.match
        if m.spec.access is None:
            continue
        space = m.chosen.get("space")
        if space not in (None, "global"):
            continue
        t = m.type
        width = m.vector * (t.bytes if t is not None else 1)
        if width <= 1:
            continue
        for op in ins.operands:
            if isinstance(op, ir.Addr) and isinstance(op.base, ir.Reg):
                for name in taint.get(op.base, ()):
                    if width > need.get(name, (1, ""))[0]:
                        need[name] = (width, m.text)
    return need


# ---------------------------------------------------------------------- binding
@dataclass
class Binding:
    """Named dims and strides fixed by the arguments, and the device they live on."""

    dims: dict[str, int]
    strides: dict[str, int]
    device: int                                   # -1: only host arrays
    out_shapes: list[tuple] = field(default_factory=list)


def _fail(sig: KernelSignature, i: int | None, text: str) -> LaunchError:
    if i is None:
        return LaunchError(f"{sig.describe_call()}: {text}", user_location())
    role = "input" if i < sig.n_in else "output"
    return LaunchError(f"{sig.describe_call()}: {role} {sig.arg_names[i]} (argument {i + 1}) "
                       f"{text}", user_location())


def _contiguous_expect(shape: tuple) -> list[int]:
    out, acc = [0] * len(shape), 1
    for i in range(len(shape) - 1, -1, -1):
        out[i] = acc
        acc *= shape[i]
    return out


def _check_layout(sig, i, view: ArgView, spec) -> int | None:
    """Contiguity (or inner contiguity with a named stride); returns the row stride."""
    shape = view.shape
    if view.size == 0:
        return _contiguous_expect(shape)[0] if shape else None
    strides = view.strides
    expect = _contiguous_expect(shape)
    named = getattr(spec, "stride", None)
    if strides is None:  # C-contiguous by declaration
        return expect[0] if named else None
    first = 1 if named else 0
    bad = [ax for ax in range(first, len(shape)) if shape[ax] != 1 and strides[ax] != expect[ax]]
    if bad:
        if named:
            raise _fail(sig, i, f"has strides {strides} (elements) for shape {shape}: with "
                        f"Tile(..., stride={named!r}) the inner dims must be contiguous (last "
                        f"stride 1); pass a .contiguous() copy")
        raise _fail(sig, i, f"is not contiguous (strides {strides} in elements for shape "
                    f"{shape}; row-major needs {tuple(expect)}): pass .contiguous() / "
                    f"np.ascontiguousarray(...), or declare Tile(..., stride='name') to accept "
                    f"a row stride")
    if not named:
        return None
    row = strides[0] if shape[0] > 1 else expect[0]
    if row < 0:
        raise _fail(sig, i, f"has a negative row stride {row}")
    return row


def bind(sig: KernelSignature, views: list[ArgView | None], *, host_ok: bool = True) -> Binding:
    """Check every view against its Tile and infer the named dims and strides.

    ``views[i]`` is None for an output ptxdsl will allocate. Raises
    :class:`LaunchError` for the first problem found.
    """
    dims: dict[str, int] = {}
    first_seen: dict[str, str] = {}
    strides: dict[str, int] = {}
    stride_seen: dict[str, str] = {}
    devices: dict[int, str] = {}
    for i, (view, spec) in enumerate(zip(views, sig.specs)):
        if view is None:
            continue
        if view.kind == "torch" and view.device < 0:
            raise _fail(sig, i, f"is a torch tensor on {view.where}; the kernel runs on the GPU: "
                        f"move it with .cuda() (or run on the CPU interpreter with "
                        f"PTXDSL_INTERPRET=1)")
        if view.device < 0 and view.kind not in ("numpy",):
            raise _fail(sig, i, f"is in host memory ({view.kind}); pass a CUDA array")
        if not accepts_dtype(spec.dtype, view.dtype, view.kind):
            raise _fail(sig, i, f"has dtype {view.dtype} but {spec!r} needs "
                        f"{_hint_for(spec.dtype, view.dtype)}")
        if len(view.shape) != len(spec.dims):
            raise _fail(sig, i, f"has {len(view.shape)} dims (shape {view.shape}) but {spec!r} "
                        f"has {len(spec.dims)}")
        for axis, (want, got) in enumerate(zip(spec.dims, view.shape)):
            if isinstance(want, int):
                if got != want:
                    raise _fail(sig, i, f"has shape {view.shape} but {spec!r} fixes axis {axis} "
                                f"to {want} (the kernel was built for it); build the kernel for "
                                f"{got} or name the dim")
                continue
            if got > 0xFFFFFFFF:
                raise _fail(sig, i, f"sets dim {want}={got}, which does not fit the kernel's "
                            f".u32 parameter")
            if want in dims and dims[want] != got:
                raise _fail(sig, i, f"has shape {view.shape}, so {want}={got}, but "
                            f"{first_seen[want]} gave {want}={dims[want]}")
            if want not in dims:
                dims[want] = got
                first_seen[want] = f"{sig.arg_names[i]} (axis {axis})"
        named = getattr(spec, "stride", None)
        if view.kind == "numpy":
            # Host arrays are staged through a contiguous device copy, whatever their layout.
            row = _contiguous_expect(view.shape)[0] if named else None
        else:
            row = _check_layout(sig, i, view, spec)
        if named:
            if row > 0xFFFFFFFF:
                raise _fail(sig, i, f"has row stride {row}, which does not fit a .u32 parameter")
            if named in strides and strides[named] != row:
                raise _fail(sig, i, f"has row stride {row} but {stride_seen[named]} has "
                            f"{strides[named]}, and both use the stride {named!r}")
            strides.setdefault(named, row)
            stride_seen.setdefault(named, sig.arg_names[i])
        if view.device >= 0:
            devices.setdefault(view.device, sig.arg_names[i])
            need = sig.align[i]
            if need > view.itemsize and view.ptr % need:
                raise _fail(sig, i, f"starts at address {view.ptr:#x}, which is not {need}-byte "
                            f"aligned, but the kernel accesses it with {sig.align_why[i]} "
                            f"({need} bytes at a time); pass a tensor whose storage starts "
                            f"aligned (e.g. .clone() of the slice)")
            if named and need > view.itemsize and (row * view.itemsize) % need:
                raise _fail(sig, i, f"has row stride {row} elements ({row * view.itemsize} "
                            f"bytes), not a multiple of the {need} bytes of its "
                            f"{sig.align_why[i]} accesses")
        elif not host_ok:
            raise _fail(sig, i, "is a host array but host arrays are not allowed here")
    if len(devices) > 1:
        where = ", ".join(f"{name} on cuda:{d}" for d, name in devices.items())
        raise _fail(sig, None, f"arguments are on different GPUs ({where}); move them to one "
                    f"device")
    out_shapes = []
    for j in range(sig.n_in, sig.n_all):
        spec = sig.specs[j]
        missing = [d for d in spec.names if d not in dims]
        if missing and views[j] is None:
            raise _fail(sig, j, f"cannot be allocated: its dim(s) {', '.join(missing)} are not "
                        f"fixed by any input; pass the output explicitly")
        out_shapes.append(spec.shape_for(dims) if not missing else views[j].shape)
    for name in sig.dim_names:
        if name not in dims:
            raise _fail(sig, None, f"dim {name!r} is not fixed by any argument")
    return Binding(dims, strides, next(iter(devices), -1), out_shapes)


# ---------------------------------------------------------------------- streams
def stream_handle(stream) -> int:
    """The raw CUstream handle of ``stream``: an int, a ``torch.cuda.Stream``, a cupy
    stream, a cuda.core stream (``__cuda_stream__``), a cuda.bindings ``CUstream``."""
    if stream is None:
        return 0
    if type(stream) is int:
        return stream
    proto = getattr(stream, "__cuda_stream__", None)
    if proto is not None:
        v = proto() if callable(proto) else proto
        return int(v[1])
    for attr in ("cuda_stream", "ptr", "handle"):
        v = getattr(stream, attr, None)
        if isinstance(v, int):
            return v
    try:
        return int(stream)
    except (TypeError, ValueError):
        raise LaunchError(f"stream= takes an int handle, a torch/cupy/cuda.core stream or a "
                          f"CUstream, got {type(stream).__name__}", user_location()) from None
