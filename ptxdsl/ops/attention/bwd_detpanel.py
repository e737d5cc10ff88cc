"""wg3's deterministic turns a column panel at a time (``BwdConfig.det_panels``).

With :mod:`.bwd_detpipe` a key block's adds to a row block wait until all three adds of
the key block before have *landed*, and its own three pass together once its last has: a
link of the chain of turns is three adds long. The three warpgroups add disjoint column
panels, though, so the order that makes dQ's bits repeatable is per panel: key block
``n + 1``'s add to panel ``w`` after ``n``'s to panel ``w``. Here the row block's u32 word
holds three 10-bit counts (panel ``w`` at bit ``10 w``): warpgroup ``w``'s add waits until
count ``w`` reaches the block's turn, and each count passes (``+1 << 10 w``) as soon as
its own add has landed (bulk groups complete in commit order: ``wait_group 2 - w``), so
the next key block's panel 0 goes while this block's panels 1 and 2 still land. The same
adds in the same order per panel as det_pipe's, so the same bits; at most 1023 key blocks
on a row block (a count must not carry into the next)."""
from __future__ import annotations

from ...core.types import u32
from ...dsl import ptx, reg
from .bwd_det import pass_turn
from .tiles import s32_of as _s32

BITS = 10                      # a panel's count
MAX_KEY_BLOCKS = (1 << BITS) - 1


def _reached(seen, w: int, turn):
    return _s32((seen >> (BITS * w)) & MAX_KEY_BLOCKS) >= turn


def panel_step(nw: int, lane, *, at, turn, add, full: int, empty: int, threads: int,
               labels) -> None:
    """One row block's adds by the writer warp (lane 0 issues): ``at()`` the block's word,
    ``turn()`` the count every panel must reach (the earlier key blocks on the block);
    ``add(w)`` warpgroup ``w``'s reduce-adds, committed as one bulk group, taken at ``full + w`` and
    handed back at ``empty + w`` (named barriers of ``threads``)."""
    seen = reg.scalar(u32)
    with ptx.if_(lane == 0):            # one read ahead of the stages (usually enough)
        ptx.inst.ld.acquire.gpu.global_.u32(seen, ptx.addr(at()))
    for w in range(nw):
        ptx.inst("bar.sync", full + w, threads)
        with ptx.if_(lane == 0):
            top = ptx.new_label(f"pturn{next(labels)}")
            done = ptx.new_label(f"pturned{next(labels)}")
            ptx.place(top)
            ptx.bra(done, pred=_reached(seen, w, turn()))
            ptx.inst.ld.acquire.gpu.global_.u32(seen, ptx.addr(at()))
            ptx.bra(top)
            ptx.place(done)
            ptx.inst("fence.proxy.async.shared::cta")   # (the consumer fenced too)
            add(w)
    with ptx.if_(lane == 0):
        ptx.inst("cp.async.bulk.wait_group.read", 0)
    for w in range(nw):
        ptx.inst("bar.arrive", empty + w, threads)
    with ptx.if_(lane == 0):
        for w in range(nw):             # panel w landed: its count passes
            ptx.inst("cp.async.bulk.wait_group", nw - 1 - w)
            pass_turn(at(), 1 << (BITS * w))


__all__ = ["panel_step", "BITS", "MAX_KEY_BLOCKS"]
