"""matmul as ``torch.library`` custom ops, so that ``torch.compile`` keeps it whole.

``torch.ops.ptxdsl.matmul(a, b, bias, activation, out_dtype) -> out`` (with an autograd
formula: the two matmuls of :mod:`.autograd`, through the op so that they trace) and
``matmul_scaled(..., scale_a, scale_b)`` for float8 operands (no autograd: see
:mod:`.fp8`), each with a fake (meta) implementation giving the output's shape and
dtype. CPU tensors run on the interpreter, CUDA tensors on the GPU. Dynamo traces the
public ``matmul`` as a call of the op (``torch._dynamo.substitute_in_graph``); ``out=``
traces as the op plus ``copy_``. :func:`register` runs once
(:mod:`ptxdsl.ops._common.torch_registry`).
"""
from __future__ import annotations


from ...runtime.adapter import Frame
import torch

from . import api
from .autograd import act_grad

__all__ = ["register"]


def register() -> None:
    """Define ``ptxdsl::matmul`` and ``ptxdsl::matmul_scaled``."""

    @torch.library.custom_op("ptxdsl::matmul", mutates_args=())
    def matmul_op(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None,
                  activation: str | None, out_dtype: torch.dtype | None) -> torch.Tensor:
        return api.forward(Frame(a, "matmul"), a, b, None, out_dtype, bias, activation)

    def fake(a, b, bias, activation, out_dtype, *scales):
        shape = tuple(a.shape[:-1]) + (b.shape[-1],)
        if a.ndim == 3 or b.ndim == 3:
            batch = a.shape[0] if a.ndim == 3 else b.shape[0]
            shape = (batch, a.shape[-2], b.shape[-1])
        dt = out_dtype if out_dtype is not None else (
            torch.bfloat16 if a.element_size() == 1 else a.dtype)
        return a.new_empty(shape, dtype=dt)

    matmul_op.register_fake(fake)

    @torch.library.custom_op("ptxdsl::matmul_scaled", mutates_args=())
    def matmul_scaled_op(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None,
                         activation: str | None, out_dtype: torch.dtype | None,
                         scale_a: torch.Tensor | None,
                         scale_b: torch.Tensor | None) -> torch.Tensor:
        return api.forward(Frame(a, "matmul"), a, b, None, out_dtype, bias, activation,
                           scale_a, scale_b)

    matmul_scaled_op.register_fake(fake)

    def setup(ctx, inputs, output):
        a, b, bias, activation, _out_dtype = inputs
        ctx.save_for_backward(a, b, bias)
        ctx.activation = activation

    def backward(ctx, dy):
        a, b, bias = ctx.saved_tensors
        mm = torch.ops.ptxdsl.matmul
        if ctx.activation is None:
            dz = dy.to(a.dtype)
        else:
            z = mm(a, b, bias, None, torch.float32)
            dz = (dy.float() * act_grad(z, ctx.activation)).to(a.dtype)
        if a.ndim == 2 and b.ndim == 3:
            da = mm(dz.permute(1, 0, 2).reshape(dz.shape[1], -1),
                    b.transpose(-1, -2).reshape(-1, b.shape[-2]), None, None, None)
        else:
            da = mm(dz, b.transpose(-1, -2), None, None, None)
        if a.ndim == 3 and b.ndim == 2:
            db = mm(a.reshape(-1, a.shape[-1]).transpose(0, 1), dz.reshape(-1, dz.shape[-1]),
                    None, None, None)
        else:
            db = mm(a.transpose(-1, -2), dz, None, None, None)
        dbias = None
        if bias is not None:
            dbias = dz.float().reshape(-1, dz.shape[-1]).sum(0).to(bias.dtype)
        return da, db, dbias, None, None

    matmul_op.register_autograd(backward, setup_context=setup)
    _substitute()


def _substitute() -> None:
    """Have dynamo trace the public ``matmul`` as a call of the custom ops."""
    from ...runtime.torch_private import substitute_in_graph as private_substitute
    substitute_in_graph = private_substitute(torch)
    if substitute_in_graph is None:  # torch < 2.5 or PTXDSL_TORCH_PRIVATE=0: torch.compile
        return                       # traces the eager code (graph breaks)

    @substitute_in_graph(api.matmul)
    def matmul(a, b, *, out=None, out_dtype=None, bias=None, activation=None, scale_a=None,
               scale_b=None):
        activation = api.ALIASES.get(activation, activation)
        if a.element_size() == 1 or scale_a is not None or scale_b is not None:
            sa, sb = (torch.full((1,), float(s), dtype=torch.float32, device=a.device)
                      if isinstance(s, (int, float)) else s for s in (scale_a, scale_b))
            y = torch.ops.ptxdsl.matmul_scaled(a, b, bias, activation,
                                               api.torch_dtype(out_dtype), sa, sb)
        else:
            y = torch.ops.ptxdsl.matmul(a, b, bias, activation, api.torch_dtype(out_dtype))
        if out is not None:
            out.copy_(y)
            y = out
        return y
