"""Threads of a CTA waiting for each other and cooperating: ``ptx.bar`` (CTA barriers),
``ptx.named_barrier`` (a barrier handle for warp-specialised roles), ``ptx.fence`` (the
fences between the generic and async proxies), ``ptx.warp`` (butterfly reductions
across a warp's lanes) and ``ptx.setmaxnreg`` (a warpgroup's register budget).

=====================================  ===============================================
``bar.sync(id=0, count=None)``         ``bar.sync id[, count]``
``bar.arrive(id, count)``              ``bar.arrive id, count``
``named_barrier(id, count=)``          a handle (no instruction); ``.sync()`` records
                                       ``bar.sync id[, count]``, ``.arrive()``
                                       ``bar.arrive id, count``
``fence.proxy_async()``                ``fence.proxy.async``
``fence.proxy_async_shared_cta()``     ``fence.proxy.async.shared::cta``: make threads'
                                       shared-memory writes (``mbarrier.init``, an epilogue
                                       tile) visible to TMA and wgmma
``fence.proxy_async_global()``         ``fence.proxy.async.global``
``fence.mbarrier_init()``              ``fence.mbarrier_init.release.cluster``: barriers
                                       just initialised, visible to the whole cluster
``warp.reduce_sum(x)`` (``_max``,      ``shfl.sync.bfly.b32`` and ``add``/``max``/``min``,
``_min``)                              log2(width) times, in place
``setmaxnreg(n, inc=True)``            ``setmaxnreg.inc.sync.aligned.u32 n`` (``.dec`` with
                                       ``inc=False``): every thread of the warpgroup gets
                                       ``n`` registers (24..256, a multiple of 8)
=====================================  ===============================================

The table checks barrier numbers and thread counts.
"""
from __future__ import annotations

from ..core import ir
from ..core.errors import TraceError, user_location
from ..core.trace import current

__all__ = ["bar", "fence", "warp", "Bar", "Fence", "Warp", "named_barrier", "NamedBarrier",
           "setmaxnreg"]


class Bar:
    """``ptx.bar``: CTA barriers."""

    @staticmethod
    def sync(barrier: int = 0, count=None, *, pred=None) -> None:
        """``bar.sync barrier[, count]``: wait until ``count`` threads (default: the CTA)
        arrive.

        ``barrier`` is 0..15; ``count`` a multiple of 32 (ints or u32 registers). ``pred``
        (a predicate register) guards it, ``@p bar.sync``: only the threads where it holds
        take part, so ``count`` must be theirs (pyptx's spelling for a role's barrier).
        """
        args = (barrier,) if count is None else (barrier, count)
        current("ptx.bar.sync").inst(["bar", "sync"], args, guard=pred)

    @staticmethod
    def arrive(barrier: int, count, *, pred=None) -> None:
        """``bar.arrive barrier, count``: arrive without waiting (producer side); ``pred``
        guards it as for :meth:`sync`."""
        current("ptx.bar.arrive").inst(["bar", "arrive"], (barrier, count), guard=pred)


bar = Bar()


class NamedBarrier:
    """A CTA barrier number (an int 0..15 or a register) with an optional thread count."""

    __slots__ = ("barrier", "count")

    def __init__(self, barrier, count=None):
        self.barrier = barrier
        self.count = count

    @property
    def barrier_id(self):
        """pyptx's name for :attr:`barrier`."""
        return self.barrier

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


class Fence:
    """``ptx.fence``: the fences Hopper pipelines need between the generic and async
    proxies."""

    @staticmethod
    def proxy_async(*, pred=None) -> None:
        """``fence.proxy.async``."""
        current("ptx.fence.proxy_async").inst(["fence", "proxy", "async"], (), guard=pred)

    @staticmethod
    def proxy_async_shared_cta(*, pred=None) -> None:
        """``fence.proxy.async.shared::cta``."""
        current("ptx.fence.proxy_async_shared_cta").inst(
            ["fence", "proxy", "async", "shared::cta"], (), guard=pred)

    @staticmethod
    def proxy_async_global(*, pred=None) -> None:
        """``fence.proxy.async.global``."""
        current("ptx.fence.proxy_async_global").inst(["fence", "proxy", "async", "global"],
                                                     (), guard=pred)

    @staticmethod
    def mbarrier_init(*, pred=None) -> None:
        """``fence.mbarrier_init.release.cluster``."""
        current("ptx.fence.mbarrier_init").inst(
            ["fence", "mbarrier_init", "release", "cluster"], (), guard=pred)


fence = Fence()

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


class Warp:
    """``ptx.warp``: butterfly reductions across the lanes of a warp."""

    @staticmethod
    def reduce_sum(x: ir.Reg, width: int = 32, mask: int = _FULL) -> ir.Reg:
        """In place: every lane of each ``width``-lane group gets the group's sum.

        Emits log2(width) pairs of ``shfl.sync.bfly.b32 t, x, off, 31, mask`` and
        ``add.T x, x, t`` (offsets 16, 8, 4, 2, 1 for a full warp).
        """
        return _reduce(x, "add", width, mask)

    @staticmethod
    def reduce_max(x: ir.Reg, width: int = 32, mask: int = _FULL) -> ir.Reg:
        """Like :meth:`reduce_sum` with ``max.T``."""
        return _reduce(x, "max", width, mask)

    @staticmethod
    def reduce_min(x: ir.Reg, width: int = 32, mask: int = _FULL) -> ir.Reg:
        """Like :meth:`reduce_sum` with ``min.T``."""
        return _reduce(x, "min", width, mask)


warp = Warp()


def setmaxnreg(count: int, *, inc: bool = True, pred=None) -> None:
    """``setmaxnreg.{inc|dec}.sync.aligned.u32 count``."""
    current("ptx.setmaxnreg").inst(["setmaxnreg", "inc" if inc else "dec", "sync", "aligned",
                                    "u32"], (count,), guard=pred)
