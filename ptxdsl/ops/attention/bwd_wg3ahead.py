"""The next step's S issued before this step of :mod:`.bwd_wg3` ends
(``BwdConfig.wg3_ahead``), as :mod:`.bwd_ahead` does for the 64- and 128-key kernels.

wg3's step ends with dV, dQ and dK in flight, then dQ's stage and reduce-add, a wait for
dK, Q's slot given back; the next S = Q·K_wᵀ is issued only after those, the back edge
and the next slot's ``full`` wait, and its P only once it is done. Here it is issued
into an accumulator carried across the back edge: ``1`` right behind dK (it runs while
dQ is staged; dQ's and S's accumulators live at once), ``2`` behind dQ's stores to the
stage (queued behind dK). The next step starts with S done (``wait_group 0``: ptxas
counts no groups across the back edge), issues dP and computes P while dP runs, so the
tensor pipe has S between dO's release and the next dP as well (dO has one stage).

Every wg3 GEMM reads both operands from shared memory, so no wgmma in flight reads the
carried registers. The S of a step that does not exist (before the loop of a CTA with
none, after the warpgroup's last) reads K's tile (before) or this step's Q slot (after,
whose data stays: nothing is loaded behind the last step), and is discarded, so no
branch meets the wgmmas; only the slot's ``full`` wait is skipped there."""
from __future__ import annotations

from ...core.types import pred, s32, u32
from ...dsl import ptx, reg
from .._common.ring import wait
from .bwd_ring96 import finish_step


class Ahead3:
    """One consumer warpgroup's carried S (m64n32) and its issue points. ``mode``:
    ``BwdConfig.wg3_ahead``; ``gemm(acc, q_tile)``: S = Q·K_wᵀ into ``acc`` (fence,
    wgmmas, commit); ``q_of(slot)``: a ring slot's Q tile; ``steps``: the warpgroup's
    steps (heads of the group x row blocks, <= 0 for none)."""

    def __init__(self, mode: int, *, labels, full, stages: int, ring, q_of, gemm, steps,
                 k_tile):
        self.mode, self.labels, self.full, self.stages = mode, labels, full, stages
        self.ring, self.q_of, self.gemm, self.k_tile = ring, q_of, gemm, k_tile
        self.acc = ptx.wgmma.accumulator(32)
        self.left = reg.scalar(s32)
        ptx.inst.mov.s32(self.left, steps)

    def _issue(self, live, slot, phase, other) -> None:
        """Where ``live``: wait for ``slot``'s Q (phase ``phase``) and take S from it,
        else from the tile at ``other``; a group either way."""
        with ptx.if_(live):
            wait(self.labels, self.full + slot * 8, phase)
        src = reg.scalar(u32)
        ptx.inst.selp.u32(src, self.q_of(slot), other, live)
        self.gemm(self.acc, src)

    def first(self) -> None:
        """Before the loop: the first step's S (ring slot 0, phase 0), or K's tile's."""
        zero, live = reg.scalar(u32, init=0), reg.scalar(pred)
        ptx.inst.setp.gt.s32(live, self.left, 0)
        self._issue(live, zero, zero, self.k_tile)

    def next(self) -> None:
        """The next step's S from the next ring slot (the last step: its own slot's)."""
        nxt = self.ring.slot + 1
        wrap, live = reg.scalar(pred), reg.scalar(pred)
        ptx.inst.setp.eq.u32(wrap, nxt, self.stages)
        ptx.inst.setp.gt.s32(live, self.left, 1)
        slot, flip = reg.scalar(u32), reg.scalar(u32)
        ptx.inst.selp.u32(slot, 0, nxt, wrap)
        ptx.inst.selp.u32(flip, 1, 0, wrap)
        self._issue(live, slot, self.ring.phase ^ flip, self.q_of(self.ring.slot))
        ptx.inst.sub.s32(self.left, self.left, 1)

    @staticmethod
    def top() -> None:
        """A step's start: the carried S done."""
        ptx.inst("wgmma.wait_group.sync.aligned", 0)

    @staticmethod
    def drain() -> None:
        """After the loop: the last (discarded) S done."""
        ptx.inst("wgmma.wait_group.sync.aligned", 0)


def finish_ahead(c, w: int, lane, doempty, q_slot, stage, reduce, ahead: Ahead3) -> None:
    """:func:`.bwd_ring96.finish_step` with the next step's S issued behind dK (mode 1)
    or behind dQ's stage (mode 2): dO's slot given back once dV is done, dQ staged once
    it is, Q's slot once dK is (the S behind it may run on)."""
    if ahead.mode == 1:
        ahead.next()
    finish_step(c, w, lane, doempty, q_slot, stage, reduce,
                behind=1 if ahead.mode == 1 else 0,            # (S queued behind dK)
                after_stage=ahead.next if ahead.mode == 2 else None, dk_left=1)


__all__ = ["Ahead3", "finish_ahead"]
