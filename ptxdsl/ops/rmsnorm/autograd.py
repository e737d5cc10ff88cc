"""Torch glue: an autograd Function and an ``nn.Module`` around the RMSNorm kernels
(imported only when torch is in use)."""
from __future__ import annotations

import torch

from .api import forward, rms_norm_backward


class _RMSNormFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps, offset):
        y, rstd = forward(x, weight, eps, offset)
        ctx.save_for_backward(x, weight, rstd)
        ctx.offset = offset
        return y, rstd

    @staticmethod
    def backward(ctx, dy, _drstd):
        x, weight, rstd = ctx.saved_tensors
        dx, dw = rms_norm_backward(dy.contiguous(), x, weight, rstd, offset=ctx.offset)
        return dx, dw, None, None


def rms_norm_autograd(x, weight, eps, offset=0.0):
    y, rstd = _RMSNormFn.apply(x, weight, eps, offset)
    return y, rstd


class RMSNorm(torch.nn.Module):
    """Drop-in ``torch.nn.RMSNorm``-like module (weight initialised to ones).

    ``offset``: Gemma's ``y = x * rstd * (offset + weight)`` (Gemma: ``offset=1.0``,
    with the weight then initialised to zeros, as Gemma's own module does)."""

    def __init__(self, dim: int, eps: float = 1e-6, *, offset: float = 0.0, device=None,
                 dtype=None):
        super().__init__()
        self.eps = eps
        self.offset = float(offset)
        init = torch.zeros if self.offset else torch.ones
        self.weight = torch.nn.Parameter(init(dim, device=device, dtype=dtype))

    def forward(self, x):
        from .api import rms_norm  # the module imports this one lazily
        return rms_norm(x, self.weight, self.eps, offset=self.offset)

    def extra_repr(self) -> str:
        extra = f", offset={self.offset}" if self.offset else ""
        return f"{self.weight.shape[0]}, eps={self.eps}{extra}"
