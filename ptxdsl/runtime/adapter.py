"""The one framework adapter: what an array argument is, in any framework, and how to
make another like it.

``classify(obj)`` names the framework (torch, numpy, cupy, ``__cuda_array_interface__``,
DLPack, ptxdsl's own DeviceArray) and ``view_of(obj, kind)`` reads it into an
:class:`ArgView`: pointer, shape, strides (in elements), dtype, device and the
producer's stream. ``stream_handle`` reads a stream object of any framework.
:func:`allocate` is the one "new array in this framework" call: the kernel launcher
allocates the outputs it is not given with it, and :class:`Frame` (the array
framework of a ready op's call: element types, row views, new arrays like an input,
and where the call runs) allocates the ops' outputs with it. The kernel launcher
(``runtime/launcher.py``, ``runtime/args.py``) and the ready ops (``ptxdsl.ops``)
both read arrays through this module.

Everything here is pure Python and testable without a GPU.
"""
from __future__ import annotations

import ctypes
import sys
from dataclasses import dataclass

import numpy as np

from ..core.errors import LaunchError, user_location
from ..core.types import PtxType, bf16, f16, f32, s32
from .memory import DeviceArray

__all__ = ["ArgProblem", "ArgView", "DTYPES", "Frame", "address", "allocate", "classify",
           "dlpack_device", "dtype_of", "element_strides", "kind_of", "stream_handle",
           "torch_dtype_name", "view_of"]

# ---------------------------------------------------------------------- dtypes
# Canonical dtype names are numpy's ("float32", "bfloat16", "uint16", ...).
_ITEMSIZE = {"bool": 1, "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "float16": 2,
             "bfloat16": 2, "int32": 4, "uint32": 4, "float32": 4, "int64": 8, "uint64": 8,
             "float64": 8, "complex64": 8, "complex128": 16,
             "float8_e4m3fn": 1, "float8_e5m2": 1}


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
        raise ArgProblem(f"is a {t.layout} tensor; kernels take dense (strided) tensors: "
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
        raise ArgProblem(f"has __cuda_array_interface__ typestr {cai['typestr']!r} that numpy "
                          f"cannot read ({exc})") from None
    if dt.byteorder == ">":
        raise ArgProblem("is big-endian; GPU kernels read little-endian data")
    ptr = int(cai["data"][0] or 0)
    strides = cai.get("strides")
    if strides is not None:
        if any(s % dt.itemsize for s in strides):
            raise ArgProblem(f"has byte strides {tuple(strides)} that are not multiples of its "
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
        raise ArgProblem(f"is a DLPack array on device type {dev_type} (not CUDA)")
    # DLPack stream convention: 1 is the legacy default stream (0 is not allowed).
    try:
        capsule = obj.__dlpack__(stream=stream if stream else 1)
    except TypeError:
        capsule = obj.__dlpack__()
    if not _capsule_valid(capsule, b"dltensor"):
        raise ArgProblem("gave a DLPack capsule that is not an unconsumed 'dltensor'")
    # DLManagedTensor starts with its DLTensor.
    t = _DLTensor.from_address(_capsule_get(capsule, b"dltensor"))
    code = _DL_CODES.get(t.dtype.code)
    if code is None or t.dtype.lanes != 1:
        raise ArgProblem(f"has DLPack dtype code {t.dtype.code} bits {t.dtype.bits} lanes "
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


class ArgProblem(Exception):
    """An argument-level complaint; the caller adds which kernel and argument."""


def view_of(obj, kind: str, *, stream: int = 0, pointer_device=None) -> ArgView:
    """An :class:`ArgView` of ``obj`` (of :func:`classify` kind ``kind``)."""
    if kind == "torch":
        return _torch_view(obj)
    if kind == "numpy":
        if obj.dtype.byteorder == ">":
            raise ArgProblem("is big-endian; GPU kernels read little-endian data")
        return _numpy_view(obj)
    if kind == "device":
        return ArgView(obj, "device", obj.shape, None, obj.dtype.name, obj.device, obj.ptr,
                       where=f"cuda:{obj.device}")
    if kind in ("cupy", "cai"):
        return _cai_view(obj, kind, pointer_device or (lambda p: -1))
    if kind == "dlpack":
        return _dlpack_view(obj, stream)
    raise ArgProblem("is not an array")


def element_strides(obj) -> tuple[int, ...]:
    """Strides in elements of a torch tensor or a numpy/cupy-like array (byte strides
    divided by the itemsize), without building a whole view."""
    stride = getattr(obj, "stride", None)
    if callable(stride):
        return tuple(stride())
    return tuple(s // obj.itemsize for s in obj.strides)


def address(obj) -> int:
    """The data address of a torch tensor, a numpy array (host) or a
    ``__cuda_array_interface__`` array (device), without building a whole view."""
    if hasattr(obj, "data_ptr"):
        return obj.data_ptr()
    if isinstance(obj, np.ndarray):
        return obj.ctypes.data
    return obj.__cuda_array_interface__["data"][0]


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


# ---------------------------------------------------------------------- new arrays
def _numpy_dtype(name: str) -> np.dtype:
    """numpy's dtype for a canonical name; ml_dtypes' for the ones numpy lacks
    (bfloat16, the float8s)."""
    try:
        return np.dtype(name)
    except TypeError:
        pass
    try:
        import ml_dtypes
    except ImportError:
        raise LaunchError(f"a {name} numpy array needs ml_dtypes (numpy has no {name}): "
                          f"pip install ml_dtypes", user_location()) from None
    return np.dtype(getattr(ml_dtypes, name))


def allocate(kind: str, shape: tuple, dtype: str, device, *, stream: int = 0):
    """A new C-contiguous array of ``shape`` and dtype ``dtype`` (a canonical name such as
    ``"bfloat16"``) in framework ``kind``: a torch tensor on ``device`` (a
    ``torch.device``, or a CUDA ordinal), a cupy array on CUDA device ``device``, a numpy
    array (host memory; bfloat16 and float8 from ml_dtypes), or for any other kind a
    :class:`~ptxdsl.runtime.memory.DeviceArray` on ``device`` whose contents ``stream``
    produces. (The launcher asks for ``uint16`` bit patterns where a bf16 output is not
    torch's: the interpreter's convention.)"""
    if kind == "torch":
        torch = sys.modules["torch"]
        tdt = getattr(torch, dtype, None)
        if tdt is None:
            raise LaunchError(f"this torch has no {dtype} dtype; pass the output explicitly")
        if not isinstance(device, torch.device):
            device = torch.device("cuda", device)
        return torch.empty(shape, dtype=tdt, device=device)
    if kind == "cupy":
        cupy = sys.modules.get("cupy")
        if cupy is None:
            import cupy
        with cupy.cuda.Device(device):
            return cupy.empty(shape, dtype=np.dtype("uint16" if dtype == "bfloat16" else dtype))
    if kind == "numpy":
        return np.empty(shape, _numpy_dtype(dtype))
    return DeviceArray(shape, np.dtype("uint16" if dtype == "bfloat16" else dtype), device,
                       stream=stream)


# ---------------------------------------------------------------------- op calls
DTYPES = {"float32": f32, "float16": f16, "bfloat16": bf16}
_DTYPE_NAMES = {f32: "float32", f16: "float16", bf16: "bfloat16", s32: "int32"}


def kind_of(a, op: str, name: str | None = None) -> str:
    """``"torch"``, ``"numpy"`` or ``"device"`` (any other device array
    :func:`classify` reads); raises for anything else."""
    kind = classify(a)
    if kind in ("torch", "numpy"):
        return kind
    if kind:
        return "device"
    if name:
        raise LaunchError(f"{op}: {name} must be a numpy array, a torch tensor or a device "
                          f"array, got {type(a).__name__}", user_location())
    raise LaunchError(f"{op} takes numpy arrays, torch tensors or device arrays, "
                      f"got {type(a).__name__}", user_location())


def dtype_of(a) -> PtxType | None:
    """The ptxdsl type of ``a``'s elements among f32/f16/bf16, else None."""
    return DTYPES.get(str(a.dtype).replace("torch.", ""))


class Frame:
    """The array framework of one op call (``ptxdsl.ops``): numpy (on the GPU when there
    is one, else the CPU interpreter), torch (CUDA tensors on the GPU, CPU tensors on the
    interpreter) or another device array (zero-copy; new arrays are cupy's). What an op
    needs of its arrays beyond what the kernel launcher reads itself: their element type,
    a 2-D row view, new arrays like an input (:func:`allocate`), where the call runs (the
    device, its arch and multiprocessor count) and how (``kernel(...)`` or
    ``kernel.interpret(...)``)."""

    def __init__(self, x, op: str, name: str | None = None):
        self.op = op
        self.kind = kind_of(x, op, name)
        if getattr(x, "ndim", 1) == 0:
            raise LaunchError(f"{op}: {name or 'x'} must be at least 1-D, got a 0-d "
                              f"{type(x).__name__}", user_location())
        self.torch = sys.modules["torch"] if self.kind == "torch" else None
        # torch tensors in host memory run on the interpreter, like numpy without a GPU
        self.cpu = self.kind == "torch" and x.device.type == "cpu"

    @property
    def cuda_torch(self) -> bool:
        """torch CUDA tensors: the ops' memo (repeat calls) and torch workspaces apply."""
        return self.kind == "torch" and not self.cpu

    def dtype(self, a) -> PtxType:
        t = dtype_of(a)
        if t is None:
            raise LaunchError(f"{self.op} supports float32, float16 and bfloat16 arrays, "
                              f"got {a.dtype}", user_location())
        return t

    def empty(self, shape, like, dtype: PtxType | None = None):
        """A new array of this framework on ``like``'s device (``like``'s dtype unless
        ``dtype`` is given)."""
        if self.kind == "torch":
            name = torch_dtype_name(like.dtype) if dtype is None else _DTYPE_NAMES[dtype]
            return allocate("torch", shape, name, like.device)
        same = dtype is None or (dtype == bf16 and str(like.dtype) == "bfloat16")
        if self.kind == "numpy":
            try:
                name = like.dtype.name if same else _DTYPE_NAMES[dtype]
                return allocate("numpy", shape, name, -1)
            except LaunchError:
                raise LaunchError(f"{self.op}: a bfloat16 numpy output needs ml_dtypes "
                                  f"(numpy has no bfloat16)", user_location()) from None
        # device arrays other than torch: cupy is the common one (no bfloat16 of its own)
        name = np.dtype(like.dtype).name if same or dtype == bf16 else _DTYPE_NAMES[dtype]
        return allocate("cupy", shape, name, self._ordinal(like))

    def zeros_u32(self, n, like):
        if self.kind == "numpy" or self.cpu:
            return np.zeros(n, np.uint32)
        import cupy
        return cupy.zeros(n, dtype=cupy.uint32)

    def rows(self, a, n):
        """A 2-D (M, N) view with unit inner stride; copies only if no such view exists."""
        if a.ndim == 2 and element_strides(a)[1] == 1:
            return a
        v = a.reshape(-1, n)
        if self.kind == "torch":
            return v if v.stride(1) == 1 else v.contiguous()
        return v if element_strides(v)[1] == 1 else v.copy()

    def copy_into(self, dst, src) -> None:
        """Write ``src`` (any shape of ``dst``'s size) through the caller's view ``dst``."""
        if self.kind == "torch":
            with self.torch.no_grad():
                dst.copy_(src.reshape(dst.shape))
            return
        dst[...] = src.reshape(dst.shape)

    def contiguous(self, a):
        if self.kind == "torch":
            return a.contiguous()
        if self.kind == "numpy":
            return np.ascontiguousarray(a)
        import cupy
        return cupy.ascontiguousarray(a)

    def on_gpu(self) -> bool:
        if self.cpu:
            return False
        if self.kind != "numpy":
            return True
        from .driver import gpu_available
        return gpu_available()

    def run(self, k, *args):
        """Launch ``k`` (numpy without a GPU, and torch CPU tensors: on the CPU interpreter)."""
        if not self.on_gpu():
            return k.interpret(*args)
        return k(*args)

    def _ordinal(self, a) -> int:
        if self.kind == "numpy":
            return 0
        if self.kind == "torch":
            return a.device.index if a.device.index is not None else 0
        return getattr(getattr(a, "device", None), "id", 0) or 0

    def device(self, a):
        """The GPU the call runs on (None: the CPU interpreter)."""
        if not self.on_gpu():
            return None
        from .driver import get
        return get().device(self._ordinal(a))

    def arch(self, a) -> str:
        """The target for the device of ``a``: Hopper gets sm_90a, others their sm_XY."""
        info = self.device(a)
        if info is None:
            return "sm_90a"
        return "sm_90a" if info.cc == (9, 0) else info.arch

    def sms(self, a) -> int:
        """Multiprocessors to size persistent grids for (fixed per device, so a
        reduction's summation order, and so its bits, are too); 2 on the interpreter."""
        info = self.device(a)
        return 2 if info is None else info.sm_count
