"""Maxima that keep a NaN operand (DSL code): ``max.f32`` returns the other operand when
one is NaN, so a ReLU or a clamp would turn a NaN input into a number."""
from __future__ import annotations

from ...core.trace import current
from ...core.types import f32, pred
from ...dsl import ptx, reg

__all__ = ["max_keep_nan"]


def max_keep_nan(dst, x, bound: float):
    """``dst = max(x, bound)``, NaN when ``x`` is NaN (``bound`` is a number, never NaN):
    ``max.NaN.f32`` on sm_80 and newer, ``setp.le.f32`` + ``selp.f32`` before (a NaN
    compares false, so it is kept). ``dst`` None: a new register. Returns ``dst``."""
    dst = reg.scalar(f32) if dst is None else dst
    if current("max_keep_nan").sm >= 80:
        ptx.inst.max.NaN.f32(dst, x, bound)
        return dst
    p = reg.scalar(pred)
    ptx.inst.setp.le.f32(p, x, bound)
    ptx.inst.selp.f32(dst, bound, x, p)
    return dst
