"""``ptx.warp``: butterfly reductions across the lanes of a warp."""
from __future__ import annotations

from ..core import ir
from ..core.errors import TraceError, user_location
from ..core.trace import current

_FULL = 0xFFFFFFFF


def _reduce(x: ir.Reg, op: str, width: int, mask: int) -> ir.Reg:
    b = current(f"ptx.warp.reduce_{op}")
    if not isinstance(x, ir.Reg) or x.dtype.name not in ("f32", "u32", "s32"):
        raise TraceError(f"ptx.warp.reduce_{op} works on f32, u32 or s32 registers, got {x!r}",
                         user_location())
    if width not in (2, 4, 8, 16, 32):
        raise TraceError(f"width must be a power of two from 2 to 32, got {width}",
                         user_location())
    tmp = b.new_reg(x.dtype)
    offset = width // 2
    while offset:
        b.inst(["shfl", "sync", "bfly", "b32"], (tmp, x, offset, 0x1F, mask))
        b.inst([op, x.dtype.name], (x, x, tmp))
        offset //= 2
    return x


def reduce_sum(x: ir.Reg, width: int = 32, mask: int = _FULL) -> ir.Reg:
    """In place: every lane of each ``width``-lane group gets the group's sum.

    Emits log2(width) pairs of ``shfl.sync.bfly.b32 t, x, off, 31, mask`` and
    ``add.T x, x, t`` (offsets 16, 8, 4, 2, 1 for a full warp).
    """
    return _reduce(x, "add", width, mask)


def reduce_max(x: ir.Reg, width: int = 32, mask: int = _FULL) -> ir.Reg:
    """Like :func:`reduce_sum` with ``max.T``."""
    return _reduce(x, "max", width, mask)


def reduce_min(x: ir.Reg, width: int = 32, mask: int = _FULL) -> ir.Reg:
    """Like :func:`reduce_sum` with ``min.T``."""
    return _reduce(x, "min", width, mask)
