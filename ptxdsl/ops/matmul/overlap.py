"""A GEMM consumer's tiles (grouped, or dense whole tiles) with each tile's epilogue under
the next tile's first k-blocks (``Plan.epi_overlap``).

Without it a consumer stores tile ``i`` (``cvt``, ``st.global`` or staged for TMA) while the tensor cores
wait for it. With it, once tile ``i``'s wgmmas retired the accumulator is copied into as
many stash registers (``mov``), tile ``i + 1`` issues its first ``lag`` k-blocks of
wgmmas (waiting only for their ring stages to fill), the consumer stores tile ``i`` from
the stash, then runs the rest of tile ``i + 1``'s k-blocks with ``lag`` wgmma groups in
flight, releasing each stage ``lag`` k-blocks late. The ring's ``stages`` must exceed
``lag`` so the producer keeps loading. Accumulator and stash fit in a consumer's
registers for tiles of at most 192 columns (2 x 96 f32 per thread; ptxas -v: no spills). The stash, not a
second accumulator used in turn: ptxas cannot prove that a wgmma-written register read
after a loop's back edge has retired, and waits for every wgmma there (C7517).
"""
from __future__ import annotations

from ...core.types import u32
from ...dsl import ptx, reg


def _back(ring, j):
    """The ring slot ``j`` stages before the current one (a ``.u32`` register; ``j`` a
    register or an int from 1 to ``ring.stages``)."""
    r = reg.scalar(u32)
    if isinstance(j, int):
        ptx.inst.add.u32(r, ring.slot, ring.stages - j)
    else:
        ptx.inst.sub.u32(r, ring.slot, j)
        ptx.inst.add.u32(r, r, ring.stages)
    ptx.inst.selp.u32(r, r - ring.stages, r, r >= ring.stages)
    return r


def overlapped_tiles(lag: int, ring, empty0, nk, cid, total, step, locate, mma_stage,
                     release, idle_stages, store, acc, stash, tail_skip: bool) -> None:
    """This consumer's tiles ``cid, cid + step, ... < total`` (see the module docstring).

    ``locate(t)``: ``(row0, n0, g, end)`` of tile ``t`` for this consumer (its first row,
    column, group, the group's end row); ``mma_stage(first)``: one ring stage's wgmmas into
    ``acc`` (``first``: scale-d 0), committed, the ring advanced; ``release(eb)``: arrive on
    an empty barrier; ``idle_stages(n)``: release ``n`` stages computing nothing;
    ``store(regs, row0, n0, g, end)``: the epilogue of ``regs``; ``stash``: registers as
    many as ``acc``; ``tail_skip``: a consumer whose rows all lie past the group's end
    computes nothing for that tile."""
    if ring.stages <= lag:
        raise ValueError(f"overlapped_tiles: the ring's {ring.stages} stages must exceed "
                         f"the {lag} k-blocks issued before the epilogue")
    pend = reg.scalar(u32, init=0)
    saved = [reg.scalar(u32, init=0) for _ in range(4)]
    for r in stash:         # stored only after a tile copied into them, at run time
        ptx.inst.mov.f32(r, 0.0)

    def flush():
        """Store the stashed tile if one waits."""
        with ptx.if_(pend == 1):
            store(stash, *saved)
            ptx.inst.mov.u32(pend, 0)

    def work(where):
        issued = ptx.min(nk, lag)
        mma_stage(True)
        for _ in ptx.range_(1, issued):
            mma_stage(False)
        flush()
        for _ in ptx.range_(issued, nk):        # only where nk > lag: issued == lag
            mma_stage(False)
            ptx.inst("wgmma.wait_group.sync.aligned", lag)
            release(empty0 + _back(ring, lag + 1) * 8)
        ptx.inst("wgmma.wait_group.sync.aligned", 0)
        slot = _back(ring, issued)               # the stages not yet released
        for _ in ptx.range_(issued):
            release(empty0 + slot * 8)
            ptx.inst.add.u32(slot, slot, 1)
            ptx.inst.selp.u32(slot, 0, slot, slot == ring.stages)
        for s, a in zip(stash, acc):
            ptx.inst.mov.f32(s, a)
        for r, v in zip(saved, where):
            ptx.inst.mov.u32(r, v)
        ptx.inst.mov.u32(pend, 1)

    for t in ptx.range_(cid, total, step):
        where = locate(t)
        if tail_skip:
            with ptx.if_(where[0] < where[3]):
                work(where)
            with ptx.else_():
                flush()
                idle_stages(nk)
        else:
            work(where)
    flush()


__all__ = ["overlapped_tiles"]
