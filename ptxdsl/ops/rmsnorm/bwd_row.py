"""The RMSNorm backward's per-row arithmetic, shared by its register-resident, staged
and streaming kernels (f32 registers in, f32 registers out):

* ``dot = sum(dy * w * x)`` over the row, keeping ``dy * w`` for dx;
* ``c = rstd^2 * dot / N``;
* ``dx = rstd * (dy*w - x*c)`` and ``dw += dy * x * rstd``.
"""
from __future__ import annotations

from ...dsl import ptx, reg
from ...core.types import f32


def dot_chunk(ds: list, xs: list, ws: list, dot, gw: list) -> None:
    """``dot += dy * w * x`` for one chunk, appending each ``dy * w`` to ``gw``."""
    for d, x, w in zip(ds, xs, ws):
        t = reg.scalar(f32)
        ptx.inst.mul.f32(t, d, w)
        ptx.inst.fma.rn.f32(dot, t, x, dot)
        gw.append(t)


def dx_coeff(rstd, total, n: int):
    """``c = rstd^2 * total / n``: x's weight in dx."""
    c = reg.scalar(f32)
    ptx.inst.mul.f32(c, rstd, rstd)
    ptx.inst.mul.f32(c, c, total)
    ptx.inst.mul.f32(c, c, 1.0 / n)
    return c


def dx_chunk(ds: list, xs: list, gw: list, dw: list, c, rstd) -> list:
    """dx of one chunk (``gw`` and ``dw`` are that chunk's ``dy * w`` and dw partial
    registers; dw is accumulated in place)."""
    outs = []
    for d, x, g, acc in zip(ds, xs, gw, dw):
        t = reg.scalar(f32)
        ptx.inst.neg.f32(t, x)
        ptx.inst.fma.rn.f32(t, t, c, g)
        ptx.inst.mul.f32(t, t, rstd)
        outs.append(t)
        xh = reg.scalar(f32)
        ptx.inst.mul.f32(xh, x, rstd)
        ptx.inst.fma.rn.f32(acc, d, xh, acc)
    return outs
