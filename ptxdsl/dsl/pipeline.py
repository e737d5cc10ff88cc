"""``ptx.pipeline``: the stage cursor and phase bit of a ring of shared-memory stages.

A producer and its consumers walk the same ring of ``n`` stages (each guarded by a
full and an empty mbarrier, see :mod:`ptxdsl.dsl.mbarrier`); each keeps its own
:class:`Pipeline`. ``advance()`` returns the stage to use next and the parity to wait
for, and moves the cursor. It records, with ``c`` the cursor and ``ph`` the phase
registers (both ``.u32``, updated in place):

    setp.eq.u32 p, c, n         // did the cursor run off the ring?
    selp.u32    f, 1, 0, p      // then the phase flips ...
    xor.b32     ph, ph, f
    selp.u32    s, 0, c, p      // ... and the stage wraps to 0
    add.s32     c, s, 1         // the cursor points past the stage returned

and returns ``(s, ph)``. pyptx spells it the same (``ptx.pipeline(n, cursor=,
phase=).advance()``).
"""
from __future__ import annotations

from ..core import ir
from ..core.errors import TraceError, user_location
from ..core.trace import current
from ..core.types import pred as pred_t, u32

__all__ = ["Pipeline", "PipelineState", "pipeline"]


class Pipeline:
    """Stage cursor and phase of an ``stages``-deep ring (see the module docstring)."""

    __slots__ = ("stages", "cursor", "phase")

    def __init__(self, stages: int, *, cursor=None, phase=None):
        if isinstance(stages, bool) or not isinstance(stages, int) or stages < 1:
            raise TraceError(f"a pipeline has a positive int number of stages, got {stages!r}",
                             user_location())
        b = current("ptx.pipeline")
        for name, r in (("cursor", cursor), ("phase", phase)):
            if r is not None and (not isinstance(r, ir.Reg) or not r.dtype.is_int
                                  or r.dtype.bits != 32):
                raise TraceError(f"pipeline {name}= is a 32-bit integer register (updated in "
                                 f"place), got {r!r}", user_location())
        self.stages = stages
        if cursor is None:
            cursor = b.new_reg(u32)
            b.inst(["mov", "u32"], (cursor, 0))
        if phase is None:
            phase = b.new_reg(u32)
            b.inst(["mov", "u32"], (phase, 0))
        self.cursor, self.phase = cursor, phase

    @property
    def n_stages(self) -> int:
        """pyptx's name for :attr:`stages`."""
        return self.stages

    def advance(self) -> tuple[ir.Reg, ir.Reg]:
        """The next ``(stage, phase)`` registers (see the module docstring)."""
        b = current("Pipeline.advance")
        wrap = b.new_reg(pred_t)
        b.inst(["setp", "eq", "s32" if self.cursor.dtype.kind == "s" else "u32"],
               (wrap, self.cursor, self.stages))
        flip = b.new_reg(u32)
        b.inst(["selp", "u32"], (flip, 1, 0, wrap))
        b.inst(["xor", "b32"], (self.phase, self.phase, flip))
        stage = b.new_reg(u32)
        b.inst(["selp", "u32"], (stage, 0, self.cursor, wrap))
        b.inst(["add", "s32"], (self.cursor, stage, 1))
        return stage, self.phase


PipelineState = Pipeline  # pyptx's class name


def pipeline(stages: int, *, cursor=None, phase=None) -> Pipeline:
    """A :class:`Pipeline` over ``stages`` stages; ``cursor``/``phase`` registers to carry
    (``mov.u32 r, 0`` for each one not given)."""
    return Pipeline(stages, cursor=cursor, phase=phase)
