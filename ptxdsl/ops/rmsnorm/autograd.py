"""Torch autograd around the RMSNorm kernels (imported only when torch is in use).

The Function is handed the op's two calls without autograd (``forward(x, weight, eps,
offset) -> (y, rstd)`` and ``backward(dy, x, weight, rstd, offset=...) -> (dx, dweight)``,
:mod:`.api`'s), so that this module imports nothing of the op's own.
"""
from __future__ import annotations

import torch


class _RMSNormFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps, offset, calls):
        forward, backward = calls
        y, rstd = forward(x, weight, eps, offset)
        ctx.save_for_backward(x, weight, rstd)
        ctx.offset, ctx.backward = offset, backward
        return y, rstd

    @staticmethod
    def backward(ctx, dy, _drstd):
        x, weight, rstd = ctx.saved_tensors
        dx, dw = ctx.backward(dy.contiguous(), x, weight, rstd, offset=ctx.offset)
        return dx, dw, None, None, None


def rms_norm_autograd(x, weight, eps, offset, forward, backward):
    """``(y, rstd)`` recorded for autograd: ``forward`` runs now, ``backward`` when
    gradients are asked for."""
    y, rstd = _RMSNormFn.apply(x, weight, eps, offset, (forward, backward))
    return y, rstd
