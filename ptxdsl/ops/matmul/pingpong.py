"""``Plan.pingpong``: two consumer warpgroups on alternate 64-row tiles (issue #50).

With two consumers on one tile (the default), both store their rows at the tile's end
and the tensor cores wait for the stores. Here the CTA's tiles are 64 rows
(``Plan.bm``), the producer loads them in order through the one ring as it does for
``Plan.consumers = 1``, and consumer ``w`` takes the CTA's tiles ``w, w + 2, ...``,
passing over the other's ``nk`` stages before each of its own (:func:`skip_stages`).
Each stage is released by the one consumer that read it (``Plan.stage_readers``), in
every CTA of a cluster along M as before.

A consumer may not wait on its own stages before the other has waited on all of its
tile's: a full barrier's parity names only the next phase, and one nk stages ahead
would pass on a phase two or more back (the interpreter reports the skipped phase it
causes on the empty barriers). So the two take turns (:class:`Turns`, two mbarriers of
one arrival): a consumer's mainloop starts once the other has issued its last stage's
wgmmas (before they retire), and its epilogue then runs under the other's wgmmas.
"""
from __future__ import annotations

from ...core.types import u32
from ...dsl import ptx, reg
from .._common.ring import wait


class Turns:
    """The consumers' turns at the ring: ``turn[w]`` (at ``addr + 8 w``) completes a phase
    when the other consumer has issued its tile's last stage. :meth:`init` (one
    thread, before the cluster's start), :meth:`start` (consumer 1 gives consumer 0 the
    first turn), then per tile :meth:`take` before the mainloop and :meth:`give` once its last stage
    is issued."""

    def __init__(self, addr, cons, lane, labels):
        self.addr, self.cons, self.lane, self.labels = addr, cons, lane, labels

    @staticmethod
    def init(addr) -> None:
        for w in range(2):
            ptx.inst("mbarrier.init.shared::cta.b64", ptx.addr(addr, 8 * w) if w else
                     ptx.addr(addr), 1)

    def start(self) -> None:
        self.parity = reg.scalar(u32, init=0)
        with ptx.if_((self.cons == 1) & (self.lane == 0)):
            self._arrive(self.addr)

    def take(self) -> None:
        wait(self.labels, self.addr + self.cons * 8, self.parity)
        ptx.inst.xor.b32(self.parity, self.parity, 1)

    def give(self) -> None:
        with ptx.if_(self.lane == 0):
            self._arrive(self.addr + (self.cons ^ 1) * 8)

    @staticmethod
    def _arrive(bar) -> None:
        ptx.inst("mbarrier.arrive.shared::cta.b64", ptx.sink, ptx.addr(bar))


def skip_stages(ring, count) -> None:
    """Advance ``ring`` (:class:`.._common.ring.Ring`) by ``count`` stages, a run-time
    ``.u32``: the slot modulo the ring's depth, the phase flipped once per wrap."""
    s = ring.slot + count
    wraps = s // ring.stages
    ptx.inst.xor.b32(ring.phase, ring.phase, wraps & 1)
    ptx.inst.mov.u32(ring.slot, s - wraps * ring.stages)


__all__ = ["skip_stages", "Turns"]
