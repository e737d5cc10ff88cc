"""Ready-made kernels written in the DSL, with array-framework glue.

One subpackage per op (``ops/<op>/``: ``api`` the public calls, ``plan`` the kernel
choice, then its kernels); what several ops share is in ``ops/_common/``.

========== ==============================================================
rmsnorm    ``rms_norm``, ``rms_norm_backward``, ``RMSNorm``
matmul     ``matmul``: GEMM with a fused bias and activation
_common    framework glue, built-kernel caches, row I/O, reductions, workspace
========== ==============================================================
"""
from .rmsnorm import KERNELS, RMSNorm, rms_norm, rms_norm_backward
from .matmul import matmul  # noqa: E402  (the function shadows the subpackage name)

__all__ = ["rms_norm", "rms_norm_backward", "RMSNorm", "KERNELS", "matmul"]
