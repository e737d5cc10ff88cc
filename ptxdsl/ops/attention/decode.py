"""The decode forward (flash-decoding): few query rows (``SQ <= 16``) against a long K/V.

:func:`run` launches two kernels (one with a fused plan): :mod:`.decode_split` splits
every tile's keys over ``NS`` CTAs (a tile is one GQA group's heads x ``64 / G`` query
positions of one batch, so each CTA reads its K/V once for the whole group) and writes
partial ``(O, LSE)`` in f32; :mod:`.decode_combine` merges them into ``out`` and the LSE
(a fused plan: the last split of each tile to finish does, in the same launch, with a
ticket word per tile from :func:`.counter.tile_tickets`; a cluster-merging plan: the
tile's splits as one cluster, through distributed shared memory, :mod:`.decode_cluster`,
with no partials in global memory). ``NS`` comes from the plan
table ``decode_plans.json`` (tile shape, ring depth, how many CTAs per SM to fill, the
fewest key blocks a split is worth) and the device's SM count: enough splits that the
grid fills the GPU, no more than the keys make worth it.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

from ...core.types import f32
from .._common.kernels import KernelCache
from .config import Mask
from .counter import tile_tickets
from .decode_cluster import MAX_CLUSTER, ClusterMerge
from .decode_combine import build_combine
from .decode_split import ROWS, build_split, smem_bytes
from .plan import SMEM_PER_CTA

HEAD_DIMS = (64, 128)
MAX_SQ = 16                  # query rows per head the decode path takes
KERNELS = KernelCache(limit=128)


@dataclass(frozen=True)
class DecodePlan:
    """``block_n`` keys per K/V block, ``stages`` blocks in the ring, splits enough for
    ``ctas_per_sm`` CTAs on every SM, each split at least ``min_blocks`` blocks;
    ``fused``: the last split of a tile merges the partials (one launch) where the tile
    holds at most ``fused_max_rows`` query rows (heads x positions: one CTA merges them
    all, which pays off for few), else the combine kernel does; ``l2_ahead``: blocks of
    K and V a split prefetches into L2 before it waits for the previous kernel;
    ``late_go``: the next kernel may start once every split has issued its last K/V
    load (default: as soon as each has waited for the previous kernel), so that the
    next launch's L2 prefetches land near this one's tail, not at its start;
    ``tmap_prefetch``: the tensor maps are prefetched before that wait;
    ``cluster_merge`` (a fused plan): a tile's splits, at most ``cluster_max`` (16: the
    non-portable size; 8 portable) and ``D / 8``, run as one cluster and merge through
    distributed shared memory (:mod:`.decode_cluster`) instead of global partials and
    the last split's merge."""

    block_n: int = 128
    stages: int = 3
    ctas_per_sm: int = 1
    min_blocks: int = 2
    fused: bool = False
    l2_ahead: int = 0
    fused_max_rows: int = ROWS
    late_go: bool = False
    tmap_prefetch: bool = False
    cluster_merge: bool = False
    cluster_max: int = MAX_CLUSTER

    def __post_init__(self):
        if self.block_n % 16 or not 16 <= self.block_n <= 256 or self.stages < 1 \
                or self.ctas_per_sm < 1 or self.min_blocks < 1 or self.l2_ahead < 0 \
                or not 1 <= self.fused_max_rows <= ROWS \
                or not 1 <= self.cluster_max <= MAX_CLUSTER:
            raise ValueError(f"bad decode plan {self}")

    def for_tile(self, sq: int, group: int) -> "DecodePlan":
        """The plan for tiles of ``group`` heads x ``sq`` positions (at most ``64 / group``
        positions a tile): fused only where a tile's rows are few enough."""
        if self.fused and min(sq, ROWS // group) * group > self.fused_max_rows:
            return replace(self, fused=False)
        return self


@lru_cache(maxsize=1)
def rows() -> tuple[dict, ...]:
    return tuple(json.loads(Path(__file__).with_name("decode_plans.json").read_text())["rows"])


@lru_cache(maxsize=None)
def choose(head_dim: int, dtype_name: str) -> DecodePlan:
    """The first row of ``decode_plans.json`` that holds (head dim, dtype)."""
    for row in rows():
        if head_dim in row["head_dims"] and dtype_name in row["dtypes"]:
            p = DecodePlan(**row["plan"])
            extra = max(ClusterMerge(n, head_dim, p.fused_max_rows).nbytes + 24
                        for n in range(1, min(MAX_CLUSTER, head_dim // 8) + 1)) \
                if p.cluster_merge else 0
            assert smem_bytes(p.block_n, p.stages, head_dim) + extra <= SMEM_PER_CTA, (row, p)
            return p
    raise ValueError(f"no decode plan for head dim {head_dim} ({dtype_name})")


def takes(sq: int, head_dim: int, group: int) -> bool:
    """Whether a call runs the decode path: few query rows, a head dim it is built for,
    a GQA group that packs whole into its 64 rows (others: the main forward)."""
    return sq <= MAX_SQ and head_dim in HEAD_DIMS and ROWS % group == 0


def splits_for(plan: DecodePlan, tiles: int, blocks: int, sms: int) -> int:
    """Splits of each tile's ``blocks`` key blocks: as many as ``tiles x splits`` CTAs
    fit in one wave of ``ctas_per_sm`` per SM (a second, partial wave would double the
    time), none shorter than ``min_blocks``."""
    want = plan.ctas_per_sm * sms // tiles
    return max(1, min(want, blocks // plan.min_blocks))


def cluster_splits(plan: DecodePlan, ns: int, d: int) -> int:
    """The split count a cluster-merging plan runs for ``ns`` wanted: one cluster of at
    most ``plan.cluster_max`` CTAs and ``D / 8`` (a column block each); 0 for other
    plans."""
    if not (plan.fused and plan.cluster_merge):
        return 0
    return max(1, min(ns, plan.cluster_max, d // 8))


@lru_cache(maxsize=64)
def _resident(kern, ordinal: int) -> int:
    from ...runtime import prepare
    return prepare(kern).resident_clusters(ordinal)


def clusters_fit(frame, q, kern, clusters: int) -> bool:
    """Whether the device runs ``clusters`` clusters of ``kern`` at once (the driver's
    occupancy calculator, asked once per kernel and device: a GPC too harvested for a
    cluster of 16 would leave one for a second wave); always on the interpreter."""
    info = frame.device(q)
    return info is None or _resident(kern, info.ordinal) >= clusters


def kernels(plan: DecodePlan, dtype, d: int, group: int, mask: Mask, scale: float,
            softcap: float, arch: str, cluster: int = 0):
    """The (split, combine) kernel pair, built once per key (a fused plan: combine None;
    ``cluster``: the split count of a cluster-merging plan, :func:`cluster_splits`)."""
    if cluster:
        key = ("cluster", plan.block_n, plan.stages, plan.l2_ahead, plan.late_go,
               plan.tmap_prefetch, plan.fused_max_rows, cluster, dtype.name, d, group,
               mask, scale, softcap, arch)
        return KERNELS.get(key, lambda: build_split(
            plan.block_n, plan.stages, dtype, d, group, mask, scale=scale, softcap=softcap,
            arch=arch, fused=True, l2_ahead=plan.l2_ahead, late_go=plan.late_go,
            tmap_prefetch=plan.tmap_prefetch, cluster=cluster,
            max_rows=plan.fused_max_rows)), None
    split = KERNELS.get(("split", plan.block_n, plan.stages, plan.fused, plan.l2_ahead,
                         plan.late_go, plan.tmap_prefetch, dtype.name, d, group, mask, scale,
                         softcap, arch),
                        lambda: build_split(plan.block_n, plan.stages, dtype, d, group, mask,
                                            scale=scale, softcap=softcap, arch=arch,
                                            fused=plan.fused, l2_ahead=plan.l2_ahead,
                                            late_go=plan.late_go,
                                            tmap_prefetch=plan.tmap_prefetch))
    if plan.fused:
        return split, None
    combine = KERNELS.get(("combine", dtype.name, d, arch),
                          lambda: build_combine(dtype, d, arch=arch))
    return split, combine


def run(frame, dtype, q, k, v, out, lse, *, causal: bool, softmax_scale, window_size,
        softcap: float, splits: int | None = None, plan: DecodePlan | None = None,
        launches: list | None = None):
    """Both passes on ``frame`` (contiguous q, k, v; ``out`` and ``lse`` allocated); returns
    ``(outputs, tickets)``: what the launch writing out and lse returns (the interpreter's
    (out, lse)), and for a fused plan ``(tickets, replay)`` (:func:`.counter.tile_tickets`,
    for the op's memo; on the interpreter the words after the launch), else None (a
    cluster-merging plan too: one launch of q, k, v, out and lse).
    ``splits`` / ``plan`` override the table's choice (tests, tuning); ``launches``
    gathers each (kernel, args) for the op's memo."""
    b, sq, h, d = (int(x) for x in q.shape)
    sk, hk = int(k.shape[1]), int(k.shape[2])
    group = h // hk
    plan = (plan or choose(d, dtype.name)).for_tile(sq, group)
    scale = float(d ** -0.5 if softmax_scale is None else softmax_scale)
    left, right = window_size
    mask = Mask(left, 0 if causal else right)
    arch = frame.arch(q)
    tiles = b * hk * -(-sq // (ROWS // group))
    ns = splits or splits_for(plan, tiles, -(-sk // plan.block_n), frame.sms(q))
    cluster = cluster_splits(plan, ns, d)
    split, combine = kernels(plan, dtype, d, group, mask, scale, float(softcap), arch,
                             cluster)
    if cluster and not clusters_fit(frame, q, split, tiles):
        # fewer clusters of this size at once than tiles: the ticket merge's one wave
        plan, cluster = replace(plan, cluster_merge=False), 0
        split, combine = kernels(plan, dtype, d, group, mask, scale, float(softcap), arch)
    if cluster:                     # one launch, out and lse only
        if launches is not None:
            launches.append((split, (q, k, v, out, lse)))
        res = frame.run(split, q, k, v, out, lse)
        return (None if frame.on_gpu() else res), None
    opart = frame.empty((ns, b, h, sq, d), q, f32)
    lpart = frame.empty((ns, b, h, sq), q, f32)
    if plan.fused:
        tickets = tile_tickets(frame, q, tiles)
        args = (q, k, v, opart, lpart, out, lse, tickets[0])
        if launches is not None:
            launches.append((split, args))
        res = frame.run(split, *args)
        return (None, tickets) if frame.on_gpu() else (res[2:4], (res[4], None))
    if launches is not None:
        launches += [(split, (q, k, v, opart, lpart)), (combine, (opart, lpart, out, lse))]
    res = frame.run(split, q, k, v, opart, lpart)
    if not frame.on_gpu():
        opart, lpart = res
    return frame.run(combine, opart, lpart, out, lse), None


__all__ = ["run", "takes", "choose", "splits_for", "cluster_splits", "clusters_fit", "kernels",
           "DecodePlan", "HEAD_DIMS", "MAX_SQ", "KERNELS"]
