"""RMSNorm as ``torch.library`` custom ops, so that ``torch.compile`` keeps it whole.

``torch.ops.ptxdsl.rms_norm(x, weight, eps, offset=0.0) -> (y, rstd)`` and
``torch.ops.ptxdsl.rms_norm_backward(dy, x, weight, rstd, offset=0.0) -> (dx, dweight)``
each have a fake (meta) implementation giving the outputs' shapes and dtypes, and
``rms_norm`` an autograd formula (through ``rms_norm_backward``), so a compiled graph
(``torch.compile(fullgraph=True)``) holds them as single nodes and differentiates through
them. CPU tensors run on the interpreter, CUDA tensors on the GPU.

The public functions are not changed for this: dynamo is told to trace a stand-in for
each (``torch._dynamo.substitute_in_graph``, through :mod:`ptxdsl.runtime.torch_private`)
that calls the op, so eager calls keep their memo and pay nothing.
``rms_norm(residual=..., out=...)`` traces as the op plus ``copy_`` into the caller's
tensors. :func:`register` runs once (:mod:`ptxdsl.ops._common.torch_registry`).
"""
from __future__ import annotations


import torch

from . import api

__all__ = ["register"]


def _rows(x) -> int:
    m = 1
    for d in x.shape[:-1]:
        m = m * d
    return m


def register() -> None:
    """Define ``ptxdsl::rms_norm`` and ``ptxdsl::rms_norm_backward``."""

    @torch.library.custom_op("ptxdsl::rms_norm", mutates_args=())
    def rms_norm_op(x: torch.Tensor, weight: torch.Tensor, eps: float,
                    offset: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
        y, rstd = api.forward(x, weight, eps, offset)
        return y, rstd

    @rms_norm_op.register_fake
    def _(x, weight, eps, offset=0.0):
        return (x.new_empty(x.shape), x.new_empty((_rows(x),), dtype=torch.float32))

    @torch.library.custom_op("ptxdsl::rms_norm_backward", mutates_args=())
    def rms_norm_backward_op(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor,
                             rstd: torch.Tensor,
                             offset: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
        dx, dw = api.rms_norm_backward(dy.contiguous(), x, weight, rstd, offset=offset)
        return dx, dw

    @rms_norm_backward_op.register_fake
    def _(dy, x, weight, rstd, offset=0.0):
        return x.new_empty(x.shape), weight.new_empty(weight.shape)

    def setup(ctx, inputs, output):
        x, weight, _eps, offset = inputs
        ctx.save_for_backward(x, weight, output[1])
        ctx.offset = offset

    def backward(ctx, dy, _drstd):
        x, weight, rstd = ctx.saved_tensors
        if dy is None:
            dy = torch.zeros_like(x)
        dx, dw = torch.ops.ptxdsl.rms_norm_backward(dy, x, weight, rstd, ctx.offset)
        return dx, dw, None, None

    rms_norm_op.register_autograd(backward, setup_context=setup)
    _substitute()


def _substitute() -> None:
    """Have dynamo trace the public functions as calls of the custom ops."""
    from ...runtime.torch_private import substitute_in_graph as private_substitute
    substitute_in_graph = private_substitute(torch)
    if substitute_in_graph is None:  # torch < 2.5 or PTXDSL_TORCH_PRIVATE=0: torch.compile
        return                       # traces the eager code (graph breaks)

    @substitute_in_graph(api.rms_norm)
    def rms_norm(x, weight, eps=1e-6, *, offset=0.0, residual=None, return_rstd=False,
                 out=None):
        if residual is not None:
            x = x + residual
            residual.copy_(x)
        y, rstd = torch.ops.ptxdsl.rms_norm(x, weight, eps, offset)
        if out is not None:
            out.copy_(y)
            y = out
        return (y, rstd) if return_rstd else y

    @substitute_in_graph(api.rms_norm_backward)
    def rms_norm_backward(dy, x, weight, rstd, *, offset=0.0):
        return torch.ops.ptxdsl.rms_norm_backward(dy, x, weight, rstd, offset)
