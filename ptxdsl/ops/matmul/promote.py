"""Float8 scales beyond one per tensor in the Hopper kernel (:mod:`.fp8` has the modes).

* **Row-wise** (:class:`RowScales`): ``scale_a[row] * scale_b[col]`` multiplies each
  accumulator value in the epilogue (:mod:`.store`): the thread's two rows' ``scale_a``
  are loaded once per tile, ``scale_b`` per column pair beside the bias (predicated
  ``ld.global.nc``, cached in L1).
* **Block-wise** (:class:`BlockScales`, DeepGEMM's recipe): a ring stage of 8-bit operands
  is 128 elements of K, one scale block. Each consumer runs the stage's wgmmas into a
  second f32 accumulator (``part``, scale-d 0 on the first), loads the stage's scales
  while they run (``scale_a[kb, row]`` for its two rows, ``scale_b[kb, n0 / 128]`` for
  the tile, which lies in one 128-column block: :func:`.plan.for_scaling`), waits for
  them (``wgmma.wait_group 0``), releases the stage and promotes:
  ``acc = fma(part, scale_a * scale_b, acc)``. The other consumer's wgmmas keep the
  tensor cores busy while one promotes.
"""
from __future__ import annotations

from ...dsl import ptx, reg
from ...core.types import f32, u64
from .._common.rowio import load_chunk


def _wide(x, scale):
    d = reg.scalar(u64)
    ptx.inst.mul.wide.u32(d, x, scale)
    return d


def _load(ptr, index, ok=None):
    """f32 ``ptr[index]`` (0 where ``ok`` is false; unguarded without it)."""
    return load_chunk(ptr + _wide(index, 4), 0, f32, 1, pred=ok)[0]


class RowScales:
    """A tile's row-wise factors: ``rows[h]`` is ``scale_a`` of the thread's row ``frow +
    8h`` (0 past M); :meth:`column` loads ``scale_b`` of one column (0 past N)."""

    def __init__(self, psa, psb, row, m):
        self.psb = psb
        self.rows = [_load(psa, row if h == 0 else row + 8, (row if h == 0 else row + 8) < m)
                     for h in range(2)]

    def column(self, col, n):
        return _load(self.psb, col, col < n)


class BlockScales:
    """Block-wise scales of one consumer thread: ``scale_a`` as ``(KB, M)`` and
    ``scale_b`` as ``(KB, NB)``, both row-major f32, for ``count`` accumulator rows of
    the thread (two per m64 accumulator: ``frow`` and ``frow + 8``).

    The raw values live in fixed registers (:meth:`load` writes them, :meth:`factors`
    reads them): a k-block's scales are loaded after the previous k-block's promotion and
    multiplied after this k-block's wgmmas retired, so the load's latency hides under
    the wgmmas. A product taken as soon as the load is issued waits for it there."""

    def __init__(self, psa, psb, m, nb, count: int):
        self.psa, self.psb, self.m, self.nb = psa, psb, m, nb
        # A row past M is never loaded: its register keeps 0 or an earlier tile's scale,
        # which multiplies TMA's zero fill of that row and is never stored.
        self.sa = [reg.scalar(f32, init=0.0) for _ in range(count)]
        self.sb = reg.scalar(f32)

    def load(self, kb, rows, n0) -> None:
        """Start loading k-block ``kb``'s ``scale_a`` of each of ``rows`` and ``scale_b[kb,
        n0 / 128]`` (the tile's columns lie in one 128-column block)."""
        ptx.inst("ld.global.nc.f32", self.sb,
                 ptx.addr(self.psb + _wide(kb * self.nb + (n0 >> 7), 4)))
        base = kb * self.m
        for r, row in zip(self.sa, rows):
            ptx.inst("ld.global.nc.f32", r, ptx.addr(self.psa + _wide(base + row, 4)),
                     pred=row < self.m)

    def factors(self, wave: int = 0) -> list:
        """``scale_a * scale_b`` of accumulator ``wave``'s two rows (h = 0, 1)."""
        return [self.sa[2 * wave + h] * self.sb for h in range(2)]


def promote(acc, part, factors) -> None:
    """``acc += part * factor`` of each value's row (fragment value ``i`` of an m64nN
    accumulator lies in row ``frow + 8 * ((i >> 1) & 1)``)."""
    for i, (a, p) in enumerate(zip(acc, part)):
        ptx.inst.fma.rn.f32(a, p, factors[(i >> 1) & 1], a)


__all__ = ["RowScales", "BlockScales", "promote"]
