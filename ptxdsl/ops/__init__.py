"""Ready-made kernels written in the DSL, with array-framework glue.

One subpackage per op (``ops/<op>/``: ``api`` the public calls, ``plan`` the kernel
choice, then its kernels, ``torch_op`` its ``torch.library`` custom op); what several
ops share is in ``ops/_common/``. Every op's repeat torch calls go through the
runtime's memo (:mod:`ptxdsl.runtime.memo`).

========== ==============================================================
rmsnorm    ``rms_norm``, ``rms_norm_backward``, ``RMSNorm``, ``rms_norm_quant``
matmul     ``matmul``: GEMM with a fused bias and activation; ``grouped_matmul`` (MoE)
attention  ``attention``, ``attention_varlen``, ``attention_backward``,
           ``attention_varlen_backward``: attention forward and backward on Hopper
_common    built-kernel caches, row I/O, reductions, workspace, the torch ops' registry
========== ==============================================================
"""
import sys as _sys

from ._common.torch_registry import TORCH_OPS as _TORCH_OPS
from .rmsnorm import KERNELS, RMSNorm, rms_norm, rms_norm_backward, rms_norm_quant
from .matmul import grouped_matmul  # noqa: E402
from .matmul import matmul  # noqa: E402  (the function shadows the subpackage name)
from .attention import (attention, attention_backward, attention_varlen,  # noqa: E402
                        attention_varlen_backward)
from .matmul import api as _matmul_api

# The documented ``ptxdsl.ops.matmul.api.describe(M, N, K)`` reaches the module through
# the function that shadows the subpackage's name.
matmul.api = _matmul_api


def _rmsnorm_torch_ops() -> None:
    from .rmsnorm import torch_op  # imports torch
    torch_op.register()


def _matmul_torch_ops() -> None:
    from .matmul import torch_op  # imports torch
    torch_op.register()


def _attention_torch_ops() -> None:
    from .attention import torch_op  # imports torch
    torch_op.register()


_TORCH_OPS.add(_rmsnorm_torch_ops)
_TORCH_OPS.add(_matmul_torch_ops)
_TORCH_OPS.add(_attention_torch_ops)


def register_torch_ops() -> None:
    """Define ``torch.ops.ptxdsl.rms_norm`` / ``rms_norm_backward`` / ``matmul`` /
    ``matmul_scaled`` / ``attention_fwd`` / ``attention_bwd`` (once; imports torch)."""
    _TORCH_OPS.ensure()


if "torch" in _sys.modules:
    # torch.library custom ops (torch.ops.ptxdsl.*), so that torch.compile keeps the ops
    # whole; without torch loaded they are registered at the first torch call.
    register_torch_ops()

__all__ = ["rms_norm", "rms_norm_backward", "rms_norm_quant", "RMSNorm", "KERNELS", "matmul",
           "grouped_matmul", "attention", "attention_varlen", "attention_backward",
           "attention_varlen_backward", "register_torch_ops"]
