"""The tile scheduler: which output tile a persistent CTA computes next.

A persistent grid of ``G`` CTAs (one per SM, in clusters of ``c`` along M) walks
the cluster tiles ``t = cluster_id, cluster_id + G/c, ...``. Tile ``t`` is mapped
to a (tile row, tile column) pair in *grouped* (rasterized) order: the tile rows
are cut into groups of ``group`` rows, and inside a group the order runs down a
column first::

    group 0 (rows 0..group-1)      group 1 (rows group..2*group-1)
    t=0  t=g    t=2g  ...          t=G0    ...
    t=1  t=g+1  ...
    ...

so the ``G`` tiles in flight at any moment cover about ``group`` tile rows and
``G / group`` tile columns: A's ``group`` row panels and B's column panels are
read from DRAM once and then from L2 by every tile that shares them, instead of
one full row of tiles streaming all of B through L2 per row. The last group may
hold fewer rows; the formula handles it.

The mapping is computed on the device from ``t`` alone (no schedule table in
global memory): :func:`tile_coords` records it, :func:`tile_order` is the same
function in Python (for tests and the docs' picture). A cluster tile covers
``c`` CTA tiles along M; CTA rank ``r`` of the cluster takes tile row
``c * row + r``.
"""
from __future__ import annotations

from ...dsl import ptx
from ...core.types import u32


def tile_coords_py(t: int, rows: int, cols: int, group: int) -> tuple[int, int]:
    """(tile row, tile column) of cluster tile ``t`` in a ``rows x cols`` grid."""
    per_group = group * cols
    g, inner = divmod(t, per_group)
    first = g * group
    height = min(rows - first, group)
    return first + inner % height, inner // height


def tile_order(rows: int, cols: int, group: int) -> list[tuple[int, int]]:
    """Every tile of a ``rows x cols`` grid, in scheduling order."""
    return [tile_coords_py(t, rows, cols, group) for t in range(rows * cols)]


def tile_coords(t, rows, cols, group: int):
    """Record the grouped mapping of cluster tile ``t`` (a ``.u32`` register) onto
    ``rows x cols`` cluster tiles (registers or ints); returns (row, col) registers.

    Emits, with ``per = group * cols``: ``div.u32``/``rem.u32`` of ``t`` by ``per``,
    ``mul.lo.u32`` (first row), ``sub.u32`` + ``min.u32`` (the group's height),
    ``rem.u32``/``div.u32`` of the remainder by the height, ``add.u32``. About 10
    instructions per tile, once per 128x256 tile: nothing against its 2*K/16 wgmmas.
    """
    per = cols * group
    g = t // per
    inner = t - g * per
    first = g * group
    height = ptx.min(rows - first, group)
    row = first + inner % height
    col = inner // height
    return row, col


def persistent_grid(tiles: int, sms: int, cluster: int, one_each: bool = False) -> int:
    """CTAs to launch: at most one per SM (in whole clusters), never more than the tiles
    need (``tiles`` counts CTA tiles, a multiple of the cluster), and the fewest clusters
    that finish in the same number of rounds: 1024 cluster tiles on 66 cluster slots take
    16 rounds, and so do 64 clusters (1024 / 16), so 64 are launched. Every cluster then
    runs the same number of tiles, and at the power cap the idle SMs leave more power to
    the others (``bench/results/matmul_power_h100.json``). ``one_each``: a kernel that
    must give every CTA at most one tile (``Plan.epi_in_ring``), refused where it cannot."""
    slots = max(1, sms // cluster)
    units = -(-tiles // cluster)
    if units <= slots:
        return max(cluster, units * cluster)
    if one_each:
        raise ValueError(f"Plan.epi_in_ring stages C in the ring, one tile per CTA: {tiles} "
                         f"tiles for {slots * cluster} CTAs")
    rounds = -(-units // slots)
    return -(-units // rounds) * cluster


__all__ = ["tile_coords", "tile_coords_py", "tile_order", "persistent_grid", "u32"]
