"""Attention as ``torch.library`` custom ops, so that autograd differentiates
``ptxdsl.ops.attention`` and ``torch.compile`` keeps it whole.

``torch.ops.ptxdsl.attention_fwd(q, k, v, causal, scale, left, right, softcap) -> (out,
lse)`` and ``torch.ops.ptxdsl.attention_bwd(dout, q, k, v, out, lse, causal, scale, left,
right, softcap, deterministic, dlse=None) -> (dq, dk, dv)`` each have a fake (meta)
implementation giving the outputs' shapes and dtypes; the forward's autograd formula calls
the backward op (with the LSE's gradient too, for a loss that uses it). Packed sequences have the pair ``attention_varlen_fwd(q, k, v, cu_q, cu_k, max_q, max_k,
causal, scale, left, right, softcap)`` and ``attention_varlen_bwd(dout, q, k, v, out, lse,
cu_q, cu_k, max_q, max_k, ..., deterministic)``. :func:`~.autograd.differentiable` (and
``differentiable_varlen``) is what :func:`~.api.attention` (:func:`~.varlen.attention_varlen`)
runs for torch tensors that require grad; under ``torch.compile`` dynamo traces a stand-in for the public function
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
                      deterministic: bool, dlse: torch.Tensor | None = None
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return bwd_api.attention_backward(dout.contiguous(), q, k, v, out, lse,
                                          causal=causal, softmax_scale=scale,
                                          window_size=(left, right), softcap=softcap,
                                          deterministic=deterministic, dlse=dlse)

    @attention_bwd.register_fake
    def _(dout, q, k, v, out, lse, causal, scale, left, right, softcap, deterministic,
          dlse=None):
        return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)

    def setup(ctx, inputs, output):
        q, k, v, causal, scale, left, right, softcap = inputs
        ctx.save_for_backward(q, k, v, *output)
        ctx.opts = (causal, scale, left, right, softcap)

    def backward(ctx, dout, dlse):
        q, k, v, out, lse = ctx.saved_tensors
        if dout is None:
            dout = torch.zeros_like(out)
        dq, dk, dv = torch.ops.ptxdsl.attention_bwd(dout, q, k, v, out, lse, *ctx.opts, False,
                                                    dlse)
        return dq, dk, dv, None, None, None, None, None

    attention_fwd.register_autograd(backward, setup_context=setup)
    _register_varlen()
    _substitute(api)


def _register_varlen() -> None:
    """Define ``ptxdsl::attention_varlen_fwd`` and ``ptxdsl::attention_varlen_bwd``
    (packed sequences; the offsets and max lengths pass through, not differentiated)."""
    from . import bwd_api, varlen

    @torch.library.custom_op("ptxdsl::attention_varlen_fwd", mutates_args=())
    def attention_varlen_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                             cu_q: torch.Tensor, cu_k: torch.Tensor, max_q: int, max_k: int,
                             causal: bool, scale: float, left: int, right: int,
                             softcap: float) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.no_grad():
            out, lse = varlen.attention_varlen(q, k, v, cu_q, cu_k, max_q, max_k,
                                               causal=causal, softmax_scale=scale,
                                               window_size=(left, right), softcap=softcap,
                                               return_lse=True)
        return out, lse

    @attention_varlen_fwd.register_fake
    def _(q, k, v, cu_q, cu_k, max_q, max_k, causal, scale, left, right, softcap):
        tq, h, _ = q.shape
        return q.new_empty(q.shape), q.new_empty((h, tq), dtype=torch.float32)

    @torch.library.custom_op("ptxdsl::attention_varlen_bwd", mutates_args=())
    def attention_varlen_bwd(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor,
                             v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor,
                             cu_q: torch.Tensor, cu_k: torch.Tensor, max_q: int, max_k: int,
                             causal: bool, scale: float, left: int, right: int,
                             softcap: float, deterministic: bool,
                             dlse: torch.Tensor | None = None
                             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return bwd_api.attention_varlen_backward(
            dout.contiguous(), q, k, v, out, lse, cu_q, cu_k, max_q, max_k, causal=causal,
            softmax_scale=scale, window_size=(left, right), softcap=softcap,
            deterministic=deterministic, dlse=dlse)

    @attention_varlen_bwd.register_fake
    def _(dout, q, k, v, out, lse, cu_q, cu_k, max_q, max_k, causal, scale, left, right,
          softcap, deterministic, dlse=None):
        return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)

    def setup(ctx, inputs, output):
        q, k, v, cu_q, cu_k, max_q, max_k, *opts = inputs
        ctx.save_for_backward(q, k, v, *output, cu_q, cu_k)
        ctx.opts = (max_q, max_k, *opts)

    def backward(ctx, dout, dlse):
        q, k, v, out, lse, cu_q, cu_k = ctx.saved_tensors
        if dout is None:
            dout = torch.zeros_like(out)
        dq, dk, dv = torch.ops.ptxdsl.attention_varlen_bwd(dout, q, k, v, out, lse, cu_q,
                                                           cu_k, *ctx.opts, False, dlse)
        return (dq, dk, dv) + (None,) * 9

    attention_varlen_fwd.register_autograd(backward, setup_context=setup)


def _substitute(api) -> None:
    """Have dynamo trace :func:`~.api.attention` and :func:`~.varlen.attention_varlen` as
    calls of their forward ops."""
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

    from . import varlen

    @substitute_in_graph(varlen.attention_varlen)
    def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *,
                         causal=False, softmax_scale=None, window_size=(-1, -1), softcap=0.0,
                         return_lse=False, out=None):
        o, lse = torch.ops.ptxdsl.attention_varlen_fwd(
            q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal,
            _scale(q, softmax_scale), window_size[0], window_size[1], softcap)
        if out is not None:
            out.copy_(o)
            o = out
        return (o, lse) if return_lse else o
