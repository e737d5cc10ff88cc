"""Torch autograd for :func:`~ptxdsl.ops.matmul`: the backward is two matmuls.

For ``y = act(z)``, ``z = a @ b + bias``: ``dz = dy * act'(z)``, then
``da = dz @ b^T`` and ``db = a^T @ dz`` (both through :func:`.api.forward`, the
transposes read in place as column-major views) and ``dbias = sum(dz)`` over
rows. Without an activation ``dz = dy`` and nothing else is computed. With one,
``z`` is recomputed by a third matmul in the backward rather than kept from the
forward (the fused forward never writes it): training with a fused activation
trades one GEMM for the memory of ``z``. A batched ``b`` shared by every entry
(2-D beside a 3-D ``a``) gets the sum of the entries' gradients.
"""
from __future__ import annotations

import math

import torch

from ...runtime.adapter import Frame

_DT = {torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float32: "float32"}


def _mm(forward, x, y, out_dtype=None, bias=None, activation=None):
    return forward(Frame(x, "matmul"), x, y, None, out_dtype, bias, activation)


def act_grad(z, activation):
    """``act'(z)`` in float32 (the tanh form of gelu, as the forward)."""
    z = z.float()
    if activation == "relu":
        return (z > 0).float()
    if activation == "silu":
        s = torch.sigmoid(z)
        return s * (1 + z * (1 - s))
    c0 = math.sqrt(2.0 / math.pi)
    u = c0 * (z + 0.044715 * z ** 3)
    t = torch.tanh(u)
    return 0.5 * (1 + t) + 0.5 * z * (1 - t * t) * c0 * (1 + 3 * 0.044715 * z * z)


class _MatmulFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b, bias, activation, out_dtype, forward):
        ctx.save_for_backward(a, b, bias)
        ctx.activation, ctx.forward = activation, forward
        return _mm(forward, a, b, out_dtype, bias, activation)

    @staticmethod
    def backward(ctx, dy):
        a, b, bias = ctx.saved_tensors
        act = ctx.activation
        if act is None:
            dz = dy.to(a.dtype)
        else:
            z = _mm(ctx.forward, a, b, torch.float32, bias, None)
            dz = (dy.float() * act_grad(z, act)).to(a.dtype)
        da = db = dbias = None
        if ctx.needs_input_grad[0]:
            if a.ndim == 2 and b.ndim == 3:  # a shared: sum_i dz_i @ b_i^T as one product
                da = _mm(ctx.forward, dz.permute(1, 0, 2).reshape(dz.shape[1], -1),
                         b.transpose(-1, -2).reshape(-1, b.shape[-2]))
            else:
                da = _mm(ctx.forward, dz, b.transpose(-1, -2))
        if ctx.needs_input_grad[1]:
            if a.ndim == 3 and b.ndim == 2:  # b shared: sum_i a_i^T @ dz_i as one product
                db = _mm(ctx.forward, a.reshape(-1, a.shape[-1]).transpose(0, 1),
                         dz.reshape(-1, dz.shape[-1]))
            else:
                db = _mm(ctx.forward, a.transpose(-1, -2), dz)
        if bias is not None and ctx.needs_input_grad[2]:
            dbias = dz.float().reshape(-1, dz.shape[-1]).sum(0).to(bias.dtype)
        return da, db, dbias, None, None, None


def matmul_autograd(a, b, bias, activation, out_dtype, forward):
    """The product recorded for autograd; ``forward`` is the op's call without autograd
    (:func:`.api.forward`), so that this module imports nothing of the op's own."""
    return _MatmulFn.apply(a, b, bias, activation, out_dtype, forward)
