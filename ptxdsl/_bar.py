"""``ptx.bar``: CTA barriers."""
from __future__ import annotations

from . import ir
from .errors import TraceError, user_location
from .trace import current


def _check(barrier, count) -> None:
    # ptxas only finds these when assembling; say it at the user's line instead.
    if isinstance(barrier, int) and not 0 <= barrier <= 15:
        raise TraceError(f"barrier number {barrier} is out of range: a CTA has barriers "
                         f"0 to 15", user_location())
    if isinstance(count, int) and (count <= 0 or count % 32):
        raise TraceError(f"barrier thread count {count} must be a positive multiple of the "
                         f"warp size (32)", user_location())
    for x in (barrier, count):
        if x is not None and not isinstance(x, (int, ir.Reg)) or isinstance(x, bool):
            raise TraceError(f"barrier operands are ints or u32 registers, got {x!r}",
                             user_location())


def sync(barrier: int = 0, count=None) -> None:
    """``bar.sync barrier[, count]``: wait until ``count`` threads (default: the CTA) arrive."""
    b = current("ptx.bar.sync")
    _check(barrier, count)
    args = (barrier,) if count is None else (barrier, count)
    b.inst(["bar", "sync"], args)


def arrive(barrier: int, count) -> None:
    """``bar.arrive barrier, count``: arrive without waiting (producer side)."""
    b = current("ptx.bar.arrive")
    _check(barrier, count)
    b.inst(["bar", "arrive"], (barrier, count))
