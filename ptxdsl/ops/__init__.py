"""Ready-made kernels written in the DSL, with array-framework glue.

One subpackage per op (``ops/<op>/``: ``api`` the public calls, ``plan`` the kernel
choice, then its kernels); what several ops share is in ``ops/_common/``.

========== ==============================================================
rmsnorm    ``rms_norm``, ``rms_norm_backward``, ``RMSNorm``, ``rms_norm_quant``
matmul     ``matmul``: GEMM with a fused bias and activation
attention  ``attention``, ``attention_varlen``: the attention forward on Hopper
_common    framework glue, built-kernel caches, row I/O, reductions, workspace
========== ==============================================================
"""
import sys as _sys

from ._common.frame import register_torch_ops
from .rmsnorm import KERNELS, RMSNorm, rms_norm, rms_norm_backward, rms_norm_quant
from .matmul import matmul  # noqa: E402  (the function shadows the subpackage name)
from .attention import attention, attention_varlen  # noqa: E402  (likewise)

if "torch" in _sys.modules:
    # torch.library custom ops (torch.ops.ptxdsl.*), so that torch.compile keeps the ops
    # whole; without torch loaded they are registered at the first torch call.
    register_torch_ops()

__all__ = ["rms_norm", "rms_norm_backward", "rms_norm_quant", "RMSNorm", "KERNELS", "matmul",
           "attention", "attention_varlen", "register_torch_ops"]
