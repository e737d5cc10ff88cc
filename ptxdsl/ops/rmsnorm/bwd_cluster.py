"""The RMSNorm backward for rows too long for one CTA: a cluster of CTAs per row (sm_90).

``dx = rstd * (dy*w - x * c)`` with ``c = rstd^2 * dot / N``, ``dot = sum(dy*w*x)``
over the whole row: the one quantity the CTAs of a cluster must share, reduced
through distributed shared memory (:class:`~.cluster_row.ClusterSum`, one
``barrier.cluster`` phase per row, its slots double-buffered).

A persistent grid of ``Q`` clusters of ``C`` CTAs walks the rows ``q, q + Q, ...``;
the CTA of rank ``r`` owns slice ``r`` of every row (:class:`~.cluster_row.ClusterSplit`)
and so the dw columns of that slice, whose partial sum over its rows it keeps in
registers (with w). dy and x reach it through a ring of ``stages`` shared-memory
buffers that each thread fills with ``cp.async`` copies of its own chunks, rows
ahead (as :mod:`.bwd_staged` does for whole rows): DRAM stays busy while a row is
reduced and written, and each element is read from DRAM once. A thread reads only
the chunks it copied, so the ring needs no barrier of its own.

At the end the CTA writes its dw partial to row ``q`` (its slice's columns) of an f32
``(Q, N)`` buffer, which :func:`~.bwd_dw.build_dw_reduce` sums in a fixed order in a
second launch: dW is bitwise deterministic for a given ``Q``, which the plan fixes
per device.
"""
from __future__ import annotations

from dataclasses import dataclass

from ... import Tile, kernel
from ...dsl import ptx, reg
from ...core.types import PtxType, f32, u32

from .._common.launch_order import after_previous_kernel, pdl_for
from .._common.rowio import load_chunk, narrow, store_chunk
from .bwd_row import dot_chunk, dx_chunk, dx_coeff
from .bwd_staged import SMEM_PER_CTA
from .cluster_row import MAX_CLUSTER, WARP, ClusterSplit, ClusterSum, Ring, Slice
from .fwd import max_vec
from .row import with_offset

# Bytes of the row's slice, per array (dy and x), one CTA stages per ring buffer at most
# (two such buffers of dy and x, and a third where it fits, in 227 KiB).
SLICE_BYTES = 32 * 1024
MAX_THREADS = 512
# Room for the static arrays beside the ring: the slots of ClusterSum (2 x 512 floats).
SMEM_SLACK = 8 * 1024


@dataclass(frozen=True)
class BwdClusterPlan(ClusterSplit):
    """A cluster backward: the split, ``grid`` clusters (``Q``) and ``stages`` ring
    buffers."""

    grid: int = 1
    stages: int = 2

    # dW is summed by a second launch (bwd_dw.build_dw_reduce), as for the unfused backward
    fused = False

    @property
    def stage_bytes(self) -> int:
        """One ring buffer: the CTA's slice of a row of dy and of x (16-byte chunks)."""
        return 2 * self.slice_chunks * 16


def plan_backward_cluster(n: int, dtype: PtxType, clusters: int | None = None, *,
                          sms: int = 132, vec: int | None = None, cluster: int | None = None,
                          threads: int | None = None,
                          stages: int | None = None) -> BwdClusterPlan | None:
    """The cluster backward's split of rows of ``n``: slices of at most ``SLICE_BYTES``
    per array (as few CTAs per cluster as that allows, at most 16), ``MAX_THREADS``
    threads at most, as many ring buffers as fit (at most 3), and ``clusters`` clusters
    (default: one CTA per SM, ``sms // C``). None where the row's chunks are not 16
    bytes (the ring copies 16-byte chunks) or a slice would not fit two buffers."""
    vec = vec or max_vec(n, dtype)
    if vec * dtype.bytes != 16:
        return None
    chunks = -(-n // vec)
    per_slice = SLICE_BYTES // 16
    if cluster is None:
        cluster = min(MAX_CLUSTER, max(1, -(-chunks // per_slice)))
    slice_chunks = -(-chunks // cluster)
    if threads is None:
        threads = min(MAX_THREADS, max(WARP, -(-slice_chunks // WARP) * WARP))
    per_thread = -(-slice_chunks // threads)
    if (cluster - 1) * threads * per_thread >= chunks:
        # rounding up left the last CTA nothing (50000 chunks: 16 x 512 x 7): fewer
        # threads, evened out over the chunks per thread, and where a warp's rounding
        # still overshoots (35859 chunks: 16 x 480 x 5), more chunks a thread
        for k in range(per_thread, per_thread + WARP):
            t = -(-(-(-slice_chunks // k)) // WARP) * WARP
            if (cluster - 1) * t * k < chunks:
                threads, per_thread = t, k
                break
    room = SMEM_PER_CTA - SMEM_SLACK
    stage = 2 * threads * per_thread * 16
    if stages is None:
        stages = min(3, room // stage)
    if stages < 1 or stages * stage > room:
        return None
    if clusters is None:
        clusters = max(1, sms // cluster)
    return BwdClusterPlan(n, vec, cluster, threads, per_thread, grid=clusters, stages=stages)


def build_backward_cluster(p: BwdClusterPlan, dtype: PtxType, wdtype: PtxType, *,
                           arch: str = "sm_90a", offset: float = 0.0):
    """The cluster backward kernel for plan ``p``: arguments DY (M, N), X (M, N) (strided
    rows), W (N,), RSTD (M,) f32; outputs DX (M, N) and DWP (Q, N) f32, the per-cluster dw
    partials that :func:`~.bwd_dw.build_dw_reduce` sums into DW. ``offset``: dx reads
    ``offset + w`` (:func:`~.row.with_offset`); dw keeps its form."""
    N, C, T, K, V, Q, S = p.n, p.cluster, p.threads, p.per_thread, p.vec, p.grid, p.stages
    es, wes = dtype.bytes, wdtype.bytes
    if V * es != 16:
        raise ValueError(f"the cluster backward copies 16-byte chunks; this plan has "
                         f"{V}x{es}-byte chunks")

    pdl = pdl_for(arch)

    @kernel(in_specs=(Tile("M", N, dtype, stride="sdy"), Tile("M", N, dtype, stride="sx"),
                      Tile(N, wdtype), Tile("M", f32)),
            out_specs=(Tile("M", N, dtype), Tile(Q, N, f32)),
            grid=(Q * C, 1, 1), block=(T, 1, 1), cluster=(C, 1, 1), arch=arch,
            min_ctas_per_sm=1, name=f"rms_norm_bwd_cluster{C}_{dtype.name}_{N}",
            arg_names=("DY", "X", "W", "RSTD", "DX", "DWP"), pdl=pdl)
    def rms_norm_bwd_cluster(DY, X, W, RSTD, DX, DWP):
        ptx.cluster.arrive(relaxed=True, aligned=True)
        after_previous_kernel(pdl)
        at = Slice(p)
        tid, rank, preds = at.tid, at.rank, at.preds
        q = reg.scalar(u32)
        ptx.inst.mov.u32(q, ptx.special.clusterid.x())
        m = ptx.dim("M")
        reduce = ClusterSum(p, tid, rank, buffers=2)
        pdy, px, pw, prs, pdx, pdwp = ptx.global_ptrs(DY, X, W, RSTD, DX, DWP)
        sdy, sx = DY.row_stride, X.row_stride
        dy0, x0, dx0 = pdy + at.offset(es), px + at.offset(es), pdx + at.offset(es)
        step, wstep, pstep = at.step(es), at.step(wes), at.step(4)
        ws = [with_offset(load_chunk(pw + at.offset(wes), k * wstep, wdtype, V, pred=preds[k]),
                          offset) for k in range(K)]
        dw = [reg.scalar(f32, init=0.0) for _ in range(K * V)]

        ring = Ring(p, tid, preds, ((dy0, sdy * es), (x0, sx * es)), S, m, Q)
        ring.prime(q)
        # every peer has started before the first push into its slots
        ptx.cluster.wait(aligned=True)
        for row in ptx.range_(q, m, Q):
            ring.next(row)
            rstd = reg.scalar(f32)
            ptx.inst.ld.global_.nc.f32(rstd, ptx.addr(prs + row * 4))
            dot = reg.scalar(f32, init=0.0)
            for k in range(K):
                dot_chunk(ring.chunk(0, k, dtype), ring.chunk(1, k, dtype), ws[k], dot, [])
            c = dx_coeff(rstd, reduce(dot), N)
            pdx_r = dx0 + row * (N * es)
            for k in range(K):
                d, x = ring.chunk(0, k, dtype), ring.chunk(1, k, dtype)
                gw = []
                for a, w in zip(d, ws[k]):
                    t = reg.scalar(f32)
                    ptx.inst.mul.f32(t, a, w)
                    gw.append(t)
                outs = dx_chunk(d, x, gw, dw[k * V:(k + 1) * V], c, rstd)
                store_chunk(pdx_r, k * step, dtype, narrow(outs, dtype), pred=preds[k])
            ring.advance()
        prow = pdwp + q * (N * 4) + at.offset(4)
        for k in range(K):
            store_chunk(prow, k * pstep, f32, dw[k * V:(k + 1) * V], pred=preds[k])

    return rms_norm_bwd_cluster
