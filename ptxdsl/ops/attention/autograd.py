"""Torch autograd for :func:`~.api.attention` (imported only when torch tensors require
grad): the call as the ``torch.ops.ptxdsl.attention_fwd`` custom op, whose registered
backward (:mod:`.torch_op`) runs :func:`~.bwd_api.attention_backward`. This module imports
nothing of the op's own, so that :mod:`.api` may import it."""
from __future__ import annotations

import torch

from .._common.torch_registry import TORCH_OPS

__all__ = ["differentiable", "differentiable_varlen"]


def _scale(q, softmax_scale):
    return float(q.shape[-1] ** -0.5 if softmax_scale is None else softmax_scale)


def differentiable(q, k, v, *, causal=False, softmax_scale=None, window_size=(-1, -1),
                   softcap=0.0, return_lse=False, out=None):
    """:func:`~.api.attention` recorded for autograd (the forward op, whose backward is
    ``attention_bwd``); ``out=`` is written as a copy."""
    TORCH_OPS.ensure()
    o, lse = torch.ops.ptxdsl.attention_fwd(q, k, v, causal, _scale(q, softmax_scale),
                                            int(window_size[0]), int(window_size[1]),
                                            float(softcap))
    if out is not None:
        out.copy_(o)
        o = out
    return (o, lse) if return_lse else o


def differentiable_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *,
                          causal=False, softmax_scale=None, window_size=(-1, -1),
                          softcap=0.0, return_lse=False, out=None):
    """:func:`~.varlen.attention_varlen` recorded for autograd (the op
    ``attention_varlen_fwd``, whose backward is ``attention_varlen_bwd``); ``out=`` is
    written as a copy."""
    TORCH_OPS.ensure()
    o, lse = torch.ops.ptxdsl.attention_varlen_fwd(
        q, k, v, cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q), int(max_seqlen_k), causal,
        _scale(q, softmax_scale), int(window_size[0]), int(window_size[1]), float(softcap))
    if out is not None:
        out.copy_(o)
        o = out
    return (o, lse) if return_lse else o
