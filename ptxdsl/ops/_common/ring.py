"""The ring cursor and the mbarrier spin-wait of the ops' warp-specialized kernels (the
GEMM's TMA ring, attention's K/V ring), written once for both."""
from __future__ import annotations

from ...core.types import pred, u32
from ...dsl import ptx, reg

__all__ = ["Ring", "wait"]


class Ring:
    """Slot index and parity of a full/empty ring, advanced together (no division)."""

    def __init__(self, stages: int):
        self.stages = stages
        self.slot = reg.scalar(u32, init=0)
        self.phase = reg.scalar(u32, init=0)

    def advance(self) -> None:
        """``slot += 1``; on wrap-around ``slot = 0`` and ``phase ^= 1``."""
        ptx.inst.add.u32(self.slot, self.slot, 1)
        wrap = self.slot == self.stages
        ptx.inst.selp.u32(self.slot, 0, self.slot, wrap)
        flip = reg.scalar(u32)
        ptx.inst.selp.u32(flip, 1, 0, wrap)
        ptx.inst.xor.b32(self.phase, self.phase, flip)


def wait(labels, bar, parity, suspend_ns: int = 0) -> None:
    """Spin until the phase of ``bar`` with ``parity`` completed:
    ``L: mbarrier.try_wait.parity.shared::cta.b64 p, [bar], parity; @!p bra L``
    (``labels`` numbers the loops of one trace, so their names are the kernel's own).
    ``suspend_ns`` > 0 adds try_wait's suspend-time hint: the waiting warp sleeps until
    the phase completes or that long, instead of the hardware's default time slice, so a
    long wait retries (and takes issue slots) less often."""
    top = ptx.new_label(f"wait{next(labels)}")
    ptx.place(top)
    done = reg.scalar(pred)
    hint = (suspend_ns,) if suspend_ns else ()
    ptx.inst("mbarrier.try_wait.parity.shared::cta.b64", done, ptx.addr(bar), parity, *hint)
    ptx.bra(top, pred=~done)
