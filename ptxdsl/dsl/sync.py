"""``ptx.bar``: CTA barriers (the table checks barrier numbers and thread counts)."""
from __future__ import annotations

from ..core.trace import current


def sync(barrier: int = 0, count=None) -> None:
    """``bar.sync barrier[, count]``: wait until ``count`` threads (default: the CTA) arrive.

    ``barrier`` is 0..15; ``count`` a multiple of 32 (ints or u32 registers).
    """
    args = (barrier,) if count is None else (barrier, count)
    current("ptx.bar.sync").inst(["bar", "sync"], args)


def arrive(barrier: int, count) -> None:
    """``bar.arrive barrier, count``: arrive without waiting (producer side)."""
    current("ptx.bar.arrive").inst(["bar", "arrive"], (barrier, count))
