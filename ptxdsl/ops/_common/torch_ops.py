"""The ops as ``torch.library`` custom ops, so that ``torch.compile`` keeps them whole.

``torch.ops.ptxdsl.rms_norm(x, weight, eps, offset=0.0) -> (y, rstd)``,
``torch.ops.ptxdsl.rms_norm_backward(dy, x, weight, rstd, offset=0.0) -> (dx, dweight)`` and
``torch.ops.ptxdsl.matmul(a, b, bias, activation, out_dtype) -> out`` (and
``matmul_scaled(..., scale_a, scale_b)`` for float8 operands, without autograd) each have a
fake (meta) implementation giving the outputs' shapes, dtypes and strides, and
``rms_norm`` / ``matmul`` an autograd formula, so a compiled graph
(``torch.compile(fullgraph=True)``) holds them as single nodes and differentiates
through them. CPU tensors run on the interpreter, CUDA tensors on the GPU.

The public functions (``ptxdsl.ops.rms_norm``, ``rms_norm_backward``, ``matmul``) are
not changed for this: dynamo is told to trace a stand-in for each
(``torch._dynamo.substitute_in_graph``, through :mod:`ptxdsl.runtime.torch_private`)
that calls the op, so eager calls keep their measured fast paths and pay nothing. ``rms_norm(residual=..., out=...)`` and
``matmul(out=...)`` trace as the op plus ``copy_`` into the caller's tensors.

:func:`register` runs once: when ``ptxdsl.ops`` is imported with torch loaded, at the
first eager call with a torch tensor, or by ``ptxdsl.ops.register_torch_ops()`` (ops
cannot be defined while dynamo traces).
"""
from __future__ import annotations

import torch

__all__ = ["register"]

_done = False


def _rows(x) -> int:
    m = 1
    for d in x.shape[:-1]:
        m = m * d
    return m


def register() -> None:
    """Define the ``ptxdsl::`` ops (idempotent)."""
    global _done
    if _done:
        return
    _done = True
    from ..rmsnorm.api import _forward, rms_norm_backward
    from .frame import Frame

    @torch.library.custom_op("ptxdsl::rms_norm", mutates_args=())
    def rms_norm_op(x: torch.Tensor, weight: torch.Tensor, eps: float,
                    offset: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
        y, rstd = _forward(Frame(x, "rms_norm"), x, weight, eps, None, True, None,
                           offset=offset)
        return y, rstd

    @rms_norm_op.register_fake
    def _(x, weight, eps, offset=0.0):
        return (x.new_empty(x.shape), x.new_empty((_rows(x),), dtype=torch.float32))

    @torch.library.custom_op("ptxdsl::rms_norm_backward", mutates_args=())
    def rms_norm_backward_op(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor,
                             rstd: torch.Tensor,
                             offset: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
        dx, dw = rms_norm_backward(dy.contiguous(), x, weight, rstd, offset=offset)
        return dx, dw

    @rms_norm_backward_op.register_fake
    def _(dy, x, weight, rstd, offset=0.0):
        return x.new_empty(x.shape), weight.new_empty(weight.shape)

    def rms_setup(ctx, inputs, output):
        x, weight, _eps, offset = inputs
        ctx.save_for_backward(x, weight, output[1])
        ctx.offset = offset

    def rms_backward(ctx, dy, _drstd):
        x, weight, rstd = ctx.saved_tensors
        if dy is None:
            dy = torch.zeros_like(x)
        dx, dw = torch.ops.ptxdsl.rms_norm_backward(dy, x, weight, rstd, ctx.offset)
        return dx, dw, None, None

    rms_norm_op.register_autograd(rms_backward, setup_context=rms_setup)

    from ..matmul.api import forward as matmul_forward

    @torch.library.custom_op("ptxdsl::matmul", mutates_args=())
    def matmul_op(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None,
                  activation: str | None, out_dtype: torch.dtype | None) -> torch.Tensor:
        return matmul_forward(Frame(a, "matmul"), a, b, None, out_dtype, bias, activation)

    def mm_fake(a, b, bias, activation, out_dtype, *scales):
        shape = tuple(a.shape[:-1]) + (b.shape[-1],)
        if a.ndim == 3 or b.ndim == 3:
            batch = a.shape[0] if a.ndim == 3 else b.shape[0]
            shape = (batch, a.shape[-2], b.shape[-1])
        dt = out_dtype if out_dtype is not None else (
            torch.bfloat16 if a.element_size() == 1 else a.dtype)
        return a.new_empty(shape, dtype=dt)

    matmul_op.register_fake(mm_fake)

    # float8 operands with per-tensor scales (no autograd: see ops/matmul/fp8.py)
    @torch.library.custom_op("ptxdsl::matmul_scaled", mutates_args=())
    def matmul_scaled_op(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None,
                         activation: str | None, out_dtype: torch.dtype | None,
                         scale_a: torch.Tensor | None,
                         scale_b: torch.Tensor | None) -> torch.Tensor:
        return matmul_forward(Frame(a, "matmul"), a, b, None, out_dtype, bias, activation,
                              None, scale_a, scale_b)

    matmul_scaled_op.register_fake(mm_fake)

    def mm_setup(ctx, inputs, output):
        a, b, bias, activation, _out_dtype = inputs
        ctx.save_for_backward(a, b, bias)
        ctx.activation = activation

    def mm_backward(ctx, dy):
        # The formulas of ops/matmul/autograd.py, through the op so that they trace.
        from ..matmul.autograd import _act_grad
        a, b, bias = ctx.saved_tensors
        mm = torch.ops.ptxdsl.matmul
        if ctx.activation is None:
            dz = dy.to(a.dtype)
        else:
            z = mm(a, b, bias, None, torch.float32)
            dz = (dy.float() * _act_grad(z, ctx.activation)).to(a.dtype)
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

    matmul_op.register_autograd(mm_backward, setup_context=mm_setup)
    _substitute()


def _substitute() -> None:
    """Have dynamo trace the public functions as calls of the custom ops."""
    from ...runtime.torch_private import substitute_in_graph as private_substitute
    substitute_in_graph = private_substitute(torch)
    if substitute_in_graph is None:  # torch < 2.5 or PTXDSL_TORCH_PRIVATE=0: torch.compile
        return                       # traces the eager code (graph breaks)
    from ..matmul import api as mm_api
    from ..rmsnorm import api as rms_api

    @substitute_in_graph(rms_api.rms_norm)
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

    @substitute_in_graph(rms_api.rms_norm_backward)
    def rms_norm_backward(dy, x, weight, rstd, *, offset=0.0):
        return torch.ops.ptxdsl.rms_norm_backward(dy, x, weight, rstd, offset)

    @substitute_in_graph(mm_api.matmul)
    def matmul(a, b, *, out=None, out_dtype=None, bias=None, activation=None, scale_a=None,
               scale_b=None):
        activation = mm_api._ALIASES.get(activation, activation)
        if a.element_size() == 1 or scale_a is not None or scale_b is not None:
            sa, sb = (torch.full((1,), float(s), dtype=torch.float32, device=a.device)
                      if isinstance(s, (int, float)) else s for s in (scale_a, scale_b))
            y = torch.ops.ptxdsl.matmul_scaled(a, b, bias, activation,
                                               mm_api.torch_dtype(out_dtype), sa, sb)
        else:
            y = torch.ops.ptxdsl.matmul(a, b, bias, activation, mm_api.torch_dtype(out_dtype))
        if out is not None:
            out.copy_(y)
            y = out
        return y
