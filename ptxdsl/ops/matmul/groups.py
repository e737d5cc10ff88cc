"""The tile scheduler of a grouped GEMM: which group, rows and tile column a tile index is.

``a`` holds the rows of ``G`` groups one after the other; group ``g`` is rows
``offs[g-1] .. offs[g]`` (``offs[-1] = 0``: ``torch._grouped_mm``'s cumulative ends, int32
in device memory, so a launch needs no copy of them to the host). Group ``g`` has
``ceil(m_g / bm)`` tile rows of ``bm`` rows (an empty group none) and every group
``tiles_n`` tile columns. Tiles are numbered group after group, and inside a group down
each tile column first::

    group 0 (3 tile rows)      group 1 (empty)   group 2 (1 tile row)
    t=0  t=3  t=6 ...                             t=3*tiles_n  t=3*tiles_n+1 ...
    t=1  t=4
    t=2  t=5

so the tiles in flight together share a group's ``b`` column panels (an expert's
weights, read from DRAM once and then from L2) and its rows of ``a``. A tile's last
rows may run into the next group's rows (or past ``a``: TMA's zero fill): the kernels
compute them and store none (:func:`.store.store_rows`). Both kernels scan ``offs`` on
the device for the tile count (:func:`group_tiles`, ``G`` cached loads). The SIMT kernel
(one tile per CTA) scans again for its tile's place (:func:`group_tile`); the persistent
Hopper kernel's tiles come in increasing order per CTA, so a :class:`GroupCursor` resumes
from the previous tile's group (a scan per tile cost up to a quarter of a 128 x 128 x
2048 tile's time at G = 64).
"""
from __future__ import annotations

from ...dsl import ptx, reg
from ...core.types import u32, u64


def uniform_value(r) -> None:
    """``r`` (``.u32``, the same in every lane of the warp, all 32 present) through
    ``redux.sync.min``: its value, which ptxas then writes to a uniform register."""
    ptx.inst("redux.sync.min.u32", r, r, 0xFFFFFFFF)


def _scan(poffs, ngroups, body) -> None:
    """Call ``body(g, start, end)`` for each group (``start``/``end``: its row range)."""
    ptr = reg.scalar(u64)
    ptx.inst.mov.u64(ptr, poffs)
    start = reg.scalar(u32, init=0)
    for g in ptx.range_(ngroups):
        end = reg.scalar(u32)
        ptx.inst.ld.global_.nc.u32(end, ptx.addr(ptr))
        body(g, start, end)
        ptx.inst.mov.u32(start, end)
        ptx.inst.add.u64(ptr, ptr, 4)


def group_tiles(poffs, ngroups, bm: int, tiles_n):
    """The number of tiles over all groups (a ``.u32`` register)."""
    total = reg.scalar(u32, init=0)

    def body(g, start, end):
        ptx.inst.add.u32(total, total, (end - start + (bm - 1)) // bm * tiles_n)
    _scan(poffs, ngroups, body)
    return total


def group_tile(poffs, ngroups, t, bm: int, tiles_n):
    """``(g, m0, end, tn, found)`` of tile ``t``: its group, first row, the group's end
    row, its tile column, and 1 (0 where ``t`` is past the last tile: the others are then
    0)."""
    rem = reg.scalar(u32)
    ptx.inst.mov.u32(rem, t)
    g_t, m0, last, tn, found = (reg.scalar(u32, init=0) for _ in range(5))

    def body(g, start, end):
        rows = (end - start + (bm - 1)) // bm
        tiles = rows * tiles_n
        with ptx.if_(found == 0):
            with ptx.if_(rem < tiles):
                col = rem // rows
                ptx.inst.mov.u32(tn, col)
                ptx.inst.mov.u32(m0, start + (rem - col * rows) * bm)
                ptx.inst.mov.u32(g_t, g)
                ptx.inst.mov.u32(last, end)
                ptx.inst.mov.u32(found, 1)
            with ptx.else_():
                ptx.inst.sub.u32(rem, rem, tiles)
    _scan(poffs, ngroups, body)
    return g_t, m0, last, tn, found


class GroupCursor:
    """Where increasing tile indices lie, resumed from the last one's group: registers
    ``g`` (the group), ``start`` (its first row) and ``before`` (the tiles of the groups
    before it) persist across :meth:`locate` calls of one thread.

    ``uniform`` (``Plan.uniform_cons``; every lane of each warp calls :meth:`locate`):
    the loaded group end and ``before`` pass :func:`uniform_value`, without which ptxas
    kept the whole tile loop of some plans in vector registers, the ring slot too, and
    moved each k-block's wgmma descriptors back with ``R2UR`` (docs/matmul.md)."""

    def __init__(self, poffs, bm: int, tiles_n, labels, uniform: bool = False):
        self.poffs, self.bm, self.tiles_n, self.labels = poffs, bm, tiles_n, labels
        self.uniform = uniform
        self.g, self.start, self.before = (reg.scalar(u32, init=0) for _ in range(3))

    def locate(self, t):
        """``(g, m0, end, tn)`` of tile ``t`` (below the tile count, at least the last
        ``t`` located): steps past each group whose tiles end at or before ``t``."""
        i = next(self.labels)
        top, done = ptx.new_label(f"group{i}"), ptx.new_label(f"group{i}_found")
        ptx.place(top)
        off = reg.scalar(u64)
        ptx.inst.mul.wide.u32(off, self.g, 4)
        end = reg.scalar(u32)
        ptx.inst.ld.global_.nc.u32(end, ptx.addr(self.poffs + off))
        if self.uniform:
            uniform_value(end)
        rows = (end - self.start + (self.bm - 1)) // self.bm
        after = self.before + rows * self.tiles_n
        ptx.bra(done, pred=t < after)
        ptx.inst.mov.u32(self.before, after)
        ptx.inst.mov.u32(self.start, end)
        ptx.inst.add.u32(self.g, self.g, 1)
        ptx.bra(top)
        ptx.place(done)
        if self.uniform:
            uniform_value(self.before)
        rem = t - self.before
        col = rem // rows
        return self.g, self.start + (rem - col * rows) * self.bm, end, col


def group_tiles_py(offs, bm: int, tiles_n: int) -> list[tuple[int, int, int, int]]:
    """:func:`group_tile` in Python: ``(g, m0, end, tn)`` of every tile, in order."""
    out, start = [], 0
    for g, end in enumerate(offs):
        rows = -(-(end - start) // bm)
        out += [(g, start + (t % rows) * bm, end, t // rows) for t in range(rows * tiles_n)]
        start = end
    return out


__all__ = ["group_tiles", "group_tile", "GroupCursor", "group_tiles_py", "uniform_value"]
