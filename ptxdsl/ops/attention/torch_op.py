"""Attention as ``torch.library`` custom ops, so that autograd differentiates
``ptxdsl.ops.attention`` and ``torch.compile`` keeps it whole.

``torch.ops.ptxdsl.attention_fwd(q, k, v, causal, scale, left, right, softcap) -> (out,
lse)`` and ``torch.ops.ptxdsl.attention_bwd(dout, q, k, v, out, lse, causal, scale, left,
right, softcap, deterministic) -> (dq, dk, dv)`` each have a fake (meta) implementation
giving the outputs' shapes and dtypes; the forward's autograd formula calls the backward
op. :func:`~.autograd.differentiable` is what :func:`~.api.attention` runs for torch
tensors that require grad; under ``torch.compile`` dynamo traces a stand-in for the public function
that calls the forward op (``torch._dynamo.substitute_in_graph``, through
:mod:`ptxdsl.runtime.torch_private`). CPU tensors run on the interpreter, CUDA tensors on
the GPU. :func:`register` runs once (:mod:`ptxdsl.ops._common.torch_registry`).
"""
from __future__ import annotations

import torch

from .autograd import _scale

__all__ = ["register"]


def register() -> None:
    """Define ``ptxdsl::attention_fwd`` and ``ptxdsl::attention_bwd``."""
    from . import api, bwd_api

    @torch.library.custom_op("ptxdsl::attention_fwd", mutates_args=())
    def attention_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                      scale: float, left: int, right: int,
                      softcap: float) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.no_grad():            # the op is one autograd node: run the kernel only
            out, lse = api.attention(q, k, v, causal=causal, softmax_scale=scale,
                                     window_size=(left, right), softcap=softcap,
                                     return_lse=True)
        return out, lse

    @attention_fwd.register_fake
    def _(q, k, v, causal, scale, left, right, softcap):
        b, sq, h, _ = q.shape
        return q.new_empty(q.shape), q.new_empty((b, h, sq), dtype=torch.float32)

    @torch.library.custom_op("ptxdsl::attention_bwd", mutates_args=())
    def attention_bwd(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor,
                      v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor, causal: bool,
                      scale: float, left: int, right: int, softcap: float,
                      deterministic: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return bwd_api.attention_backward(dout.contiguous(), q, k, v, out, lse,
                                          causal=causal, softmax_scale=scale,
                                          window_size=(left, right), softcap=softcap,
                                          deterministic=deterministic)

    @attention_bwd.register_fake
    def _(dout, q, k, v, out, lse, causal, scale, left, right, softcap, deterministic):
        return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)

    def setup(ctx, inputs, output):
        q, k, v, causal, scale, left, right, softcap = inputs
        ctx.save_for_backward(q, k, v, *output)
        ctx.opts = (causal, scale, left, right, softcap)

    def backward(ctx, dout, _dlse):
        q, k, v, out, lse = ctx.saved_tensors
        if dout is None:
            dout = torch.zeros_like(out)
        dq, dk, dv = torch.ops.ptxdsl.attention_bwd(dout, q, k, v, out, lse, *ctx.opts, False)
        return dq, dk, dv, None, None, None, None, None

    attention_fwd.register_autograd(backward, setup_context=setup)
    _substitute(api)


def _substitute(api) -> None:
    """Have dynamo trace :func:`~.api.attention` as a call of the forward op."""
    from ...runtime.torch_private import substitute_in_graph as private_substitute
    substitute_in_graph = private_substitute(torch)
    if substitute_in_graph is None:  # torch < 2.5 or PTXDSL_TORCH_PRIVATE=0: torch.compile
        return                       # traces the eager code (graph breaks)

    @substitute_in_graph(api.attention)
    def attention(q, k, v, *, causal=False, softmax_scale=None, window_size=(-1, -1),
                  softcap=0.0, return_lse=False, out=None):
        o, lse = torch.ops.ptxdsl.attention_fwd(q, k, v, causal, _scale(q, softmax_scale),
                                                window_size[0], window_size[1], softcap)
        if out is not None:
            out.copy_(o)
            o = out
        return (o, lse) if return_lse else o
