"""The array framework of an op call: numpy (the GPU, else the CPU interpreter), torch
(CUDA tensors on the GPU, CPU tensors on the CPU interpreter), or another device array
(``__cuda_array_interface__`` / ``__dlpack__``, zero-copy), as the one framework adapter
(:mod:`ptxdsl.runtime.adapter`) reads it.

:class:`Frame` answers what an op needs of its arrays beyond what the kernel
launcher reads itself: their element type, a 2-D row view, new arrays of the same
framework, where the call runs (the device, its arch and multiprocessor count) and
how (``kernel(...)`` or ``kernel.interpret(...)``).
"""
from __future__ import annotations


import numpy as np

from ...core.errors import LaunchError, user_location
from ...runtime.adapter import address, classify, element_strides
from ...core.types import PtxType, bf16, f16, f32

__all__ = ["DTYPES", "Frame", "data_ptr", "grad_enabled", "kind_of", "register_torch_ops",
           "strides"]

DTYPES = {"float32": f32, "float16": f16, "bfloat16": bf16}


def kind_of(a, op: str) -> str:
    """``"torch"``, ``"numpy"`` or ``"device"`` (any other device array the framework
    adapter, :func:`ptxdsl.runtime.adapter.classify`, reads); raises for anything else."""
    kind = classify(a)
    if kind in ("torch", "numpy"):
        return kind
    if kind:
        return "device"
    raise LaunchError(f"{op} takes numpy arrays, torch tensors or device arrays, "
                      f"got {type(a).__name__}", user_location())


# Strides in elements and the data address, as the framework adapter reads them.
strides = element_strides
data_ptr = address


_registered = [False]


def register_torch_ops() -> None:
    """Define ``torch.ops.ptxdsl.rms_norm`` / ``rms_norm_backward`` / ``matmul`` (once)."""
    from . import torch_ops
    torch_ops.register()


def grad_enabled() -> bool:
    import torch
    return torch.is_grad_enabled()


def dtype_of(a) -> PtxType | None:
    """The ptxdsl type of ``a``'s elements among f32/f16/bf16, else None."""
    return DTYPES.get(str(a.dtype).replace("torch.", ""))


class Frame:
    """What one call runs on: numpy (GPU or interpreter), torch or another device array."""

    def __init__(self, x, op: str):
        self.op = op
        self.kind = kind_of(x, op)
        self.torch = None
        # torch tensors in host memory run on the interpreter, like numpy without a GPU
        self.cpu = self.kind == "torch" and x.device.type == "cpu"
        if self.kind == "torch":
            import torch
            self.torch = torch
            if not _registered[0]:
                register_torch_ops()
                _registered[0] = True

    @property
    def cuda_torch(self) -> bool:
        """torch CUDA tensors: the per-signature fast closures and torch workspaces apply."""
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
            t = self.torch
            dt = like.dtype if dtype is None else {f32: t.float32, f16: t.float16,
                                                     bf16: t.bfloat16}[dtype]
            return t.empty(shape, dtype=dt, device=like.device)
        same = dtype is None or (dtype == bf16 and str(like.dtype) == "bfloat16")
        if self.kind == "numpy":
            # numpy has no bfloat16 of its own: ml_dtypes' where the input is not one
            dt = like.dtype if same else _ml_bf16(self.op) if dtype == bf16 else dtype.np_dtype
            return np.empty(shape, dtype=dt)
        import cupy  # device arrays other than torch: cupy is the common one
        return cupy.empty(shape, dtype=like.dtype if same or dtype == bf16 else dtype.np_dtype)

    def zeros_u32(self, n, like):
        if self.kind == "numpy" or self.cpu:
            return np.zeros(n, np.uint32)
        import cupy
        return cupy.zeros(n, dtype=cupy.uint32)

    def rows(self, a, n):
        """A 2-D (M, N) view with unit inner stride; copies only if no such view exists."""
        if a.ndim == 2 and strides(a)[1] == 1:
            return a
        v = a.reshape(-1, n)
        if self.kind == "torch":
            return v if v.stride(1) == 1 else v.contiguous()
        return v if strides(v)[1] == 1 else v.copy()

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
        from ... import gpu_available
        return gpu_available()

    def run(self, k, *args):
        """Launch ``k`` (numpy without a GPU, and torch CPU tensors: on the CPU interpreter)."""
        if not self.on_gpu():
            return k.interpret(*args)
        return k(*args)

    def device(self, a):
        """The GPU the call runs on (None: the CPU interpreter)."""
        if not self.on_gpu():
            return None
        if self.kind == "numpy":
            ordinal = 0
        elif self.kind == "torch":
            ordinal = a.device.index if a.device.index is not None else 0
        else:
            ordinal = getattr(getattr(a, "device", None), "id", 0) or 0
        from ...runtime import driver
        return driver.get().device(ordinal)

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


def _ml_bf16(op: str):
    try:
        import ml_dtypes
    except ImportError:
        raise LaunchError(f"{op}: a bfloat16 numpy output needs ml_dtypes (numpy has no "
                          f"bfloat16)", user_location()) from None
    return ml_dtypes.bfloat16
