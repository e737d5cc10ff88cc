"""Warp specialisation: register budgets per warpgroup role and named CTA barriers.

=================================  ================================================
``setmaxnreg(n, inc=True)``        ``setmaxnreg.inc.sync.aligned.u32 n`` (``.dec`` with
                                   ``inc=False``): every thread of the warpgroup gets
                                   ``n`` registers (24..256, a multiple of 8)
``named_barrier(id, count=)``      a handle (no instruction); ``.sync()`` records
                                   ``bar.sync id[, count]``, ``.arrive()``
                                   ``bar.arrive id, count``
=================================  ================================================
"""
from __future__ import annotations

from ..core.errors import TraceError, user_location
from ..core.trace import current

__all__ = ["setmaxnreg", "named_barrier", "NamedBarrier"]


def setmaxnreg(count: int, *, inc: bool = True, pred=None) -> None:
    """``setmaxnreg.{inc|dec}.sync.aligned.u32 count``."""
    current("ptx.setmaxnreg").inst(["setmaxnreg", "inc" if inc else "dec", "sync", "aligned",
                                    "u32"], (count,), guard=pred)


class NamedBarrier:
    """A CTA barrier number (an int 0..15 or a register) with an optional thread count."""

    __slots__ = ("barrier", "count")

    def __init__(self, barrier, count=None):
        self.barrier = barrier
        self.count = count

    def sync(self, *, pred=None) -> None:
        """``bar.sync id[, count]``."""
        args = (self.barrier,) if self.count is None else (self.barrier, self.count)
        current("NamedBarrier.sync").inst(["bar", "sync"], args, guard=pred)

    def arrive(self, *, pred=None) -> None:
        """``bar.arrive id, count`` (a producer's half; needs ``count``)."""
        if self.count is None:
            raise TraceError("bar.arrive needs the barrier's thread count: "
                             "ptx.named_barrier(id, count=n)", user_location())
        current("NamedBarrier.arrive").inst(["bar", "arrive"], (self.barrier, self.count),
                                            guard=pred)


def named_barrier(barrier, *, count=None) -> NamedBarrier:
    """A :class:`NamedBarrier` (records nothing until ``.sync()`` / ``.arrive()``)."""
    return NamedBarrier(barrier, count)
