"""``ptx.bar``: CTA barriers."""
from __future__ import annotations

from .trace import current


def sync(barrier: int = 0, count=None) -> None:
    """``bar.sync barrier[, count]``: wait until ``count`` threads (default: the CTA) arrive."""
    args = (barrier,) if count is None else (barrier, count)
    current("ptx.bar.sync").inst(["bar", "sync"], args)


def arrive(barrier: int, count) -> None:
    """``bar.arrive barrier, count``: arrive without waiting (producer side)."""
    current("ptx.bar.arrive").inst(["bar", "arrive"], (barrier, count))
