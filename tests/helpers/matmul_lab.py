"""The GEMM lab sets' ptxas sweep that several matmul test files share."""
from __future__ import annotations

from ptxdsl.ops.matmul.config import Plan

# The lab's option fields: a ptxas sweep takes one candidate per option (one ptxas case per
# lab option), the first that has it; the rest differ in tile shape only.
LAB_OPTIONS = ("one_partial", "b_prefetch", "epi_in_ring", "epi_overlap", "stream_k",
               "b_swizzle", "consumers", "pingpong", "uniform_cons")


def assemble_one_per_option(lab, shapes, table=None, options=LAB_OPTIONS):
    """``lab.check`` (ptxas -v: no spills, no warnings) of one candidate per option of
    ``options`` (the set's own; default :data:`LAB_OPTIONS`) among ``shapes``' candidates,
    the first that has it; the options' names it checked."""
    base, done = Plan(), set()
    for shape in shapes:
        for (name, lay), p in lab.candidates(*shape, table=table).items():
            new = {f for f in options if getattr(p, f) != getattr(base, f)} - done
            if name == "current" or not new:
                continue
            kern = lab.build(p, lay)
            r = kern.resources()
            assert r.spill_stores == r.spill_loads == r.local == 0, (shape, name, lay)
            assert not kern.check().warnings, (shape, name, lay)
            done |= new
    return done
