"""Torch glue: an autograd Function and an ``nn.Module`` around the RMSNorm kernels
(imported only when torch is in use)."""
from __future__ import annotations

import torch

from .._common.frame import Frame
from .api import _forward, rms_norm_backward


class _RMSNormFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps):
        y, rstd = _forward(Frame(x, "rms_norm"), x, weight, eps, None, True, None)
        ctx.save_for_backward(x, weight, rstd)
        return y, rstd

    @staticmethod
    def backward(ctx, dy, _drstd):
        x, weight, rstd = ctx.saved_tensors
        dx, dw = rms_norm_backward(dy.contiguous(), x, weight, rstd)
        return dx, dw, None


def rms_norm_autograd(x, weight, eps):
    y, rstd = _RMSNormFn.apply(x, weight, eps)
    return y, rstd


class RMSNorm(torch.nn.Module):
    """Drop-in ``torch.nn.RMSNorm``-like module (weight initialised to ones)."""

    def __init__(self, dim: int, eps: float = 1e-6, *, device=None, dtype=None):
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.ones(dim, device=device, dtype=dtype))

    def forward(self, x):
        from .api import rms_norm  # the module imports this one lazily
        return rms_norm(x, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"
