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
    ``scale_b`` as ``(KB, NB)``, both row-major f32."""

    def __init__(self, psa, psb, m, nb):
        self.psa, self.psb, self.m, self.nb = psa, psb, m, nb

    def factors(self, kb, row, n0):
        """``scale_a[kb, row + 8h] * scale_b[kb, n0 / 128]`` for h = 0, 1."""
        sb = _load(self.psb, kb * self.nb + (n0 >> 7))
        base = kb * self.m + row
        return [_load(self.psa, base if h == 0 else base + 8,
                      (row if h == 0 else row + 8) < self.m) * sb for h in range(2)]


def promote(acc, part, factors) -> None:
    """``acc += part * factor`` of each value's row (fragment value ``i`` of an m64nN
    accumulator lies in row ``frow + 8 * ((i >> 1) & 1)``)."""
    for i, (a, p) in enumerate(zip(acc, part)):
        ptx.inst.fma.rn.f32(a, p, factors[(i >> 1) & 1], a)


__all__ = ["RowScales", "BlockScales", "promote"]
