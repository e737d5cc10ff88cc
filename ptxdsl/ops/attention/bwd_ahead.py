"""The next step's Sᵀ issued before this step ends (``BwdConfig.s_ahead``). With
``dk_last`` a consumer warpgroup's step ends with dQ and dK in flight, dQ staged once its
group is done, a wait for dK, the ring slot's release and the stage's hand-over; the next
step's Sᵀ = K·Qᵀ is issued only after those, the loop's back edge and the next slot's
``full`` wait. Here it is issued into an accumulator that lives across the back edge,
behind dK (``1``: the pipe runs it while dQ is staged; dQ's accumulator and Sᵀ's are
live at once) or behind the stage (``2``: dQ's registers free again, Sᵀ queued behind dK
before its wait), and the step itself starts with dPᵀ. Each step waits for its groups
(the next Sᵀ's too) before its end: ptxas serializes the wgmmas when an accumulator read
in the loop was left in flight across the back edge.

The slot's ``full`` wait is skipped after the warpgroup's last step (and before the first
of a CTA with none), but the wgmmas are not: their Sᵀ reads the current slot (or slot 0)
and is discarded, since a wgmma under a branch makes ptxas serialize them all."""
from __future__ import annotations

from ...core.types import pred, s32, u32
from ...dsl import ptx, reg
from .._common.ring import wait
from .bwd_steps import score_gemm


class Ahead:
    """One consumer warpgroup's carried Sᵀ accumulator and its issue points. ``mode``:
    ``BwdConfig.s_ahead``; ``score``: ``(mma, k_w, d, bn, bm)`` of
    :func:`.bwd_steps.score_gemm`; ``q_of(slot)``: a ring slot's Q tile; ``steps``: the
    warpgroup's step count (heads of the group x row blocks)."""

    def __init__(self, mode: int, *, labels, full, stages: int, ring, q_of, score, steps,
                 bw: int):
        self.mode, self.labels, self.full, self.stages = mode, labels, full, stages
        self.ring, self.q_of, self.score = ring, q_of, score
        self.acc = ptx.wgmma.accumulator(bw)
        self.left = reg.scalar(s32)
        ptx.inst.mov.s32(self.left, steps)
        # groups behind dQ's when it is waited for: dK, and (1) the next Sᵀ; behind dK's:
        # the next Sᵀ
        self.wait_dq, self.wait_dk = (2 if mode == 1 else 1), 1

    def _issue(self, live, slot, phase) -> None:
        """Wait (where ``live``) for ``slot``'s Q and dO (phase ``phase``); Sᵀ from it."""
        mma, k_w, d, bn, bm = self.score
        with ptx.if_(live):
            wait(self.labels, self.full + slot * 8, phase)
        ptx.inst("wgmma.fence.sync.aligned")
        score_gemm(mma, self.acc, k_w, self.q_of(slot), d, bn, bm)
        ptx.inst("wgmma.commit_group.sync.aligned")

    @staticmethod
    def top() -> None:
        """A step's start: the carried Sᵀ done (a ``wait_group 0``: ptxas tracks no
        group count across the back edge and would serialize every wgmma)."""
        ptx.inst("wgmma.wait_group.sync.aligned", 0)

    def first(self) -> None:
        """Before the loop: the first step's Sᵀ (ring slot 0, phase 0)."""
        zero = reg.scalar(u32, init=0)
        self._issue(self.left > 0, zero, zero)

    def _next(self) -> None:
        """The next step's Sᵀ from the next ring slot (after the last step: this one's)."""
        nxt = self.ring.slot + 1
        wrap, live = reg.scalar(pred), reg.scalar(pred)
        ptx.inst.setp.eq.u32(wrap, nxt, self.stages)
        ptx.inst.setp.gt.s32(live, self.left, 1)
        slot, flip, src = reg.scalar(u32), reg.scalar(u32), reg.scalar(u32)
        ptx.inst.selp.u32(slot, 0, nxt, wrap)
        ptx.inst.selp.u32(flip, 1, 0, wrap)
        ptx.inst.selp.u32(src, slot, self.ring.slot, live)
        self._issue(live, src, self.ring.phase ^ flip)
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
        """After the loop: a CTA with no step still issued the first Sᵀ."""
        ptx.inst("wgmma.wait_group.sync.aligned", 0)


__all__ = ["Ahead"]
