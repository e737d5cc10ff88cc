"""The next step's Sᵀ issued before this step ends (``BwdConfig.s_ahead``). With
``dk_last`` a consumer warpgroup's step ends with dQ and dK in flight, dQ staged once its
group is done, a wait for dK, the ring slot's release and the stage's hand-over; the next
step's Sᵀ = K·Qᵀ is issued only after those, the loop's back edge and the next slot's
``full`` wait. Here it is issued into an accumulator carried across the back edge,
behind dK (``1``: run while dQ is staged) or behind dQ's stores to the stage (``2``:
queued behind dK; dQ's accumulator is Sᵀ's own registers), and the step starts with
dPᵀ. With ``dq_warp`` the stage is handed to the writer right behind the next Sᵀ, not
after dK's wait (its ``fence.proxy.async``, a ``MEMBAR``, runs under the wgmmas). The
end of a step waits for dK only (``wait_group 1``), the start of the next for
the carried Sᵀ (``wait_group 0``: ptxas counts no groups across the back edge, and a
``wait_group 1`` there makes it serialize every wgmma, C7514).

Before the first step of a CTA with none, and after the warpgroup's last step, the
slot's wait and the wgmmas are skipped (the commit stays: an empty group; ptxas adds a
warpgroup.arrive after the branch, C7519); with 128-row steps (head dim 64) ptxas spills
and serializes around the in-loop branch, so there the last step's is computed from its
own slot (still holding its data) and discarded. ptxas -v sm_90a: head dim 64
(``block_m`` 128) takes both without spills or serialization; at head dim 128
(``dq_split``) ``1`` is serialized (C7512: dQ's and the next Sᵀ's accumulators and dK's
A do not fit beside dK and dV), ``2`` is not."""

from __future__ import annotations

from ...core.types import pred, s32, u32
from ...dsl import ptx, reg
from .._common.ring import wait
from .bwd_config import BLOCK_M as BM
from .bwd_steps import score_gemm


class Ahead:
    """One consumer warpgroup's carried Sᵀ accumulator and its issue points. ``mode``:
    ``BwdConfig.s_ahead``; ``score``: ``(mma, k_w, d, bn, bm)`` of
    :func:`.bwd_steps.score_gemm`; ``q_of(slot)``: a ring slot's Q tile; ``steps``: the
    warpgroup's step count (heads of the group x row blocks)."""

    def __init__(self, mode: int, *, labels, full, stages: int, ring, q_of, score, steps,
                 bw: int, k_tile=None):
        self.mode, self.labels, self.full, self.stages = mode, labels, full, stages
        self.k_tile = k_tile
        self.ring, self.q_of, self.score = ring, q_of, score
        self.acc, self.width = ptx.wgmma.accumulator(bw), bw
        self.left = reg.scalar(s32)
        ptx.inst.mov.s32(self.left, steps)
        # groups behind dQ's when it is waited for: dK, and (1) the next Sᵀ; behind dK's:
        # the next Sᵀ
        self.wait_dq, self.wait_dk = (2 if mode == 1 else 1), 1

    def _issue(self, live, slot, phase, skip: bool = True) -> None:
        """Where ``live``: wait for ``slot``'s Q and dO (phase ``phase``); Sᵀ from it
        there too (``skip``) or in any case; a group either way."""
        with ptx.if_(live):
            wait(self.labels, self.full + slot * 8, phase)
            if skip:
                self._gemm(slot)
        if not skip:
            self._gemm(slot)
        ptx.inst("wgmma.commit_group.sync.aligned")

    def _gemm(self, slot) -> None:
        mma, k_w, d, bn, bm = self.score
        ptx.inst("wgmma.fence.sync.aligned")
        score_gemm(mma, self.acc, k_w, self.q_of(slot), d, bn, bm)

    def dq_acc(self, n: int):
        """dQ's accumulator: (2, at Sᵀ's width) Sᵀ's own registers, so that the next Sᵀ,
        issued once dQ is staged, takes registers no wgmma in flight reads (else ptxas
        packs dSᵀ, dK's A, into Sᵀ's and serializes every wgmma, C7512)."""
        return self.acc if self.mode == 2 and n == self.width else ptx.wgmma.accumulator(n)

    @staticmethod
    def top() -> None:
        """A step's start: the carried Sᵀ done (a ``wait_group 0``: ptxas tracks no
        group count across the back edge and would serialize every wgmma, C7514)."""
        ptx.inst("wgmma.wait_group.sync.aligned", 0)

    def first(self, slot=None, phase=None) -> None:
        """Before the loop: the first step's Sᵀ (ring slot 0, phase 0, or ``slot`` and
        ``phase`` where the ring runs on from an earlier key block: kv_pair). ``k_tile``
        (``BwdConfig.ahead_k``, K's whole tile, loaded): issued in any case, from K's
        tile where the CTA has no step (Q's slot is never written there; the result is
        discarded), so no branch meets the wgmmas (ptxas's C7519)."""
        if slot is not None:
            self._issue(self.left > 0, slot, phase)
            return
        zero = reg.scalar(u32, init=0)
        if self.k_tile is None:
            self._issue(self.left > 0, zero, zero)
            return
        live, src = reg.scalar(pred), reg.scalar(u32)
        ptx.inst.setp.gt.s32(live, self.left, 0)
        with ptx.if_(live):
            wait(self.labels, self.full, zero)
        ptx.inst.selp.u32(src, self.q_of(zero), self.k_tile, live)
        mma, k_w, d, bn, bm = self.score
        ptx.inst("wgmma.fence.sync.aligned")
        score_gemm(mma, self.acc, k_w, src, d, bn, bm)
        ptx.inst("wgmma.commit_group.sync.aligned")

    def _next(self) -> None:
        """The next step's Sᵀ from the next ring slot, unless this step is the last (or,
        with 128-row steps, from this step's slot, discarded)."""
        nxt = self.ring.slot + 1
        wrap, live = reg.scalar(pred), reg.scalar(pred)
        ptx.inst.setp.eq.u32(wrap, nxt, self.stages)
        ptx.inst.setp.gt.s32(live, self.left, 1)
        slot, flip, src = reg.scalar(u32), reg.scalar(u32), reg.scalar(u32)
        ptx.inst.selp.u32(slot, 0, nxt, wrap)
        ptx.inst.selp.u32(flip, 1, 0, wrap)
        ptx.inst.selp.u32(src, slot, self.ring.slot, live)
        self._issue(live, src, self.ring.phase ^ flip, self.score[4] == BM)
        ptx.inst.sub.s32(self.left, self.left, 1)

    def after_dq(self) -> None:
        """Behind dQ, before dK (1): dV's group done, so Pᵀ's packed registers (its A) are
        free before the next Sᵀ's accumulator is written; dQ stays in flight."""
        if self.mode == 1:
            ptx.inst("wgmma.wait_group.sync.aligned", 1)

    def after_dk(self) -> None:
        if self.mode == 1:
            self._next()

    def after_stage(self) -> None:
        if self.mode == 2:
            self._next()

    @staticmethod
    def drain() -> None:
        """After the loop: nothing left in flight (128-row steps: the last step's
        discarded Sᵀ)."""
        ptx.inst("wgmma.wait_group.sync.aligned", 0)


__all__ = ["Ahead"]
