"""RMSNorm backward kernel, written in the DSL.

For ``y = x * rstd * w`` (rstd saved by the forward pass):

* ``dx = rstd * (dy*w - x * rstd^2 * mean(dy*w*x))``
* ``dw = sum over rows of dy * x * rstd``

With Gemma's ``offset`` (``y = x * rstd * (offset + w)``) dx reads ``offset + w`` for
``w`` (added once per loaded weight, :func:`~.row.with_offset`); dw keeps its form.

One launch does both. ``dw`` is reduced deterministically: a persistent grid of
``G`` CTAs (``G`` a compile-time constant, from the device's SM count and the
kernel's occupancy) walks the rows ``cta, cta+G, ...`` in a fixed order, keeps its
dw partial in registers and writes one row of an f32 ``(G, N)`` scratch buffer.
The last ``K`` CTAs to finish (one per column tile of the sum) wait for the rest
(:func:`~.bwd_dw.late_arrivals`) and then sum that buffer down its columns, again
in a fixed order; the others exit. No float atomics: the same inputs give the same
bits on every run, whichever CTAs do the sum.

Few rows, few CTAs: every CTA writes a whole partial row, and the sum reads all ``G``
of them, whether or not the CTA had a row: for one row, megabytes of partials
(bench/results/rmsnorm_h100.json). So a call of fewer rows than the device's grid
runs ``min(G, M rounded up to a power of two)`` CTAs (:func:`rows_grid`,
``plan_backward(rows=M)``): one grid, so one set of bits, per row count, and at most
about log2(G) more kernels per (N, dtype) (nine below 396). A grid of no more CTAs
than a CTA has warps needs no barrier: the last CTA to finish its rows sums dW alone,
a column tile per warp (``last_arrival``, ``sum_partials_by_warp``), while the
others exit.

Short rows: a CTA holds several rows at once, one per row group (``BwdPlan.groups``),
and writes one partial row for all of them (see :class:`BwdPlan`).

The workspace ``WS`` is two u32, zero before first use: the few-row kernels' arrival
counter, which their last arrival resets, and the late arrivals' word, whose top bit
flips when all ``G`` CTAs have added to it (:func:`~.bwd_dw.late_arrivals`). Both are
left ready for the next launch, so one workspace serves every launch on one stream,
whatever its ``G``.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ... import Tile, kernel
from ...dsl import ptx, reg, smem
from ...core.types import PtxType, b32, f32, u32

from .._common.launch_order import after_previous_kernel, pdl_for
from .._common.reduce import RowSum
from .._common.rowio import l2_policy, l2_prefetch_rows, load_chunk, narrow, store_chunk
from .bwd_dw import (
    MAX_DW_CLUSTER, STATIC_GROUP_SMEM, cluster_dw, dw_narrow, dw_summers, last_arrival,
    late_arrivals, shared_vec, sum_partials, sum_partials_by_warp)
from .bwd_row import dot_chunk, dx_chunk, dx_coeff
from .bwd_staged import MAX_VALUES, SMEM_PER_CTA, SMEM_SLACK, max_stages, stage_bytes, staged_rows
from .fwd import WARP, RowSplit, max_vec
from .row import with_offset

# The resident-row kernel's dy and x loads, as the forward's x (fwd.X_POLICY): faster
# than plain loads at most shapes measured (bench/results/rmsnorm_tune_h200.md,
# "backward: cache hints").
IN_HINTS = ("L1::evict_last",)
IN_POLICY = "evict_last"


@dataclass(frozen=True)
class BwdPlan(RowSplit):
    n: int
    vec: int
    threads: int           # threads per row (= per CTA)
    grid: int              # G: persistent CTAs (rows cta, cta+G, ...)
    prefetch: bool = True  # load the next row while reducing this one
    preload_w: bool = True
    # Rows too long for registers: stream x/dy twice (the second read mostly hits
    # L2) and keep the dw partial in the CTA's own row of the f32 partial buffer.
    streaming: bool = False
    # dW summed in the same launch by the last CTAs to finish; else by
    # build_dw_reduce in a second launch (small rows, whose grid is so large that
    # summing its partials would be left to too few CTAs).
    fused: bool = True
    # Resident rows with prefetch: thread 0 also asks the bulk copy engine to bring the
    # row after the prefetched one (row + 2G) of dy and x into L2
    # (cp.async.bulk.prefetch.L2), so that more of DRAM's latency is covered than one
    # row of registers covers. Needs 16-byte rows (vec * element size == 16).
    l2_ahead: bool = False
    # Long rows through a ring of this many shared-memory row buffers of dy and x
    # (bwd_staged: cp.async several rows ahead, dw partial in registers)
    # instead of streaming them twice from global memory. 0: off.
    stages: int = 0
    # Rows a CTA holds at once, each by its own ``threads`` threads (a "row group", with
    # its own named barrier for the row's sum); the groups add their dw partials in
    # shared memory, in group order, and the CTA writes one partial row. So an SM keeps
    # as many rows in flight as ``groups`` one-row CTAs would, and the dW sum reads
    # ``groups`` times fewer partial rows (resident rows, power-of-two ``threads``).
    groups: int = 1

    @property
    def cluster_dw(self) -> int:
        """CTAs of the one cluster that sums dW in shared memory (1: a single CTA that
        stores its dW; grids of at most MAX_DW_CLUSTER one-row CTAs, :meth:`for_rows`, through
        distributed shared memory, :func:`~.bwd_dw.cluster_dw`); 0 where dW goes through
        the global partial rows."""
        ok = (self.fused and self.grid <= MAX_DW_CLUSTER
              and self.groups == 1 and not (self.streaming or self.stages))
        return self.grid if ok else 0

    @property
    def grid_sum(self) -> bool:
        """Whether the last CTAs to arrive share dW's sum (:func:`~.bwd_dw.late_arrivals`):
        fused, not in one cluster, and more CTAs than a CTA has warps (fewer: the last CTA
        to arrive sums alone)."""
        return self.fused and not self.cluster_dw and self.grid > self.slices

    @property
    def block(self) -> int:
        """Threads of a CTA."""
        return self.threads * self.groups

    @property
    def slices(self) -> int:
        """Warps of a CTA, each summing every ``slices``-th partial row for dW."""
        return self.block // WARP

    @property
    def row_step(self) -> int:
        """Rows the whole grid holds at once: a row group's next row is this far on."""
        return self.grid * self.groups

    def for_rows(self, rows: int) -> BwdPlan:
        """This plan for a call of ``rows`` rows: with fewer rows than CTAs, its grid cut
        to :func:`rows_grid` of one-row CTAs (the plan itself where that changes
        nothing). The smaller grid's dW sum is fused wherever this plan's was, and
        wherever its partial rows per thread are few enough (:data:`MAX_FUSED_ROWS`).
        Everything else stays: the kernel is this plan's with a smaller ``G`` (every CTA
        owns at most one row)."""
        if rows >= self.grid and self.groups > 1:
            return self
        g = rows_grid(self.grid, rows)
        if g == self.grid and self.groups == 1:
            return self
        one = replace(self, grid=g, groups=1)
        return replace(one, fused=self.fused or -(-g // one.slices) <= MAX_FUSED_ROWS)


def rows_grid(grid: int, rows: int) -> int:
    """The persistent grid for ``rows`` rows: ``grid``, or fewer CTAs where there are
    fewer rows, ``rows`` rounded up to a power of two (a CTA without a row still
    writes a partial row of zeros that the dW sum reads; the rounding keeps the
    kernels built per (N, dtype) to about ``log2(grid)``)."""
    return min(grid, 1 << (max(1, rows) - 1).bit_length())


# Most partial rows one thread sums in the fused dW reduction.
MAX_FUSED_ROWS = 128

# Shared memory a CTA's row groups may take to add their dw partials (one CTA per SM
# holds them: 16 one-warp rows of 1024 halves take 64 KiB).
MAX_GROUP_SMEM = 96 * 1024


def group_smem(n: int, vec: int, threads: int, groups: int) -> int:
    """Bytes of shared memory for the dw partials of the ``groups`` row groups (each
    group's, so that every thread of the CTA can then sum a few columns)."""
    chunks = -(-n // vec)
    per_thread = -(-chunks // threads)
    return groups * per_thread * threads * vec * 4


def plan_backward(n: int, dtype: PtxType, sms: int = 132, *, vec: int | None = None,
                  threads: int | None = None, ctas_per_sm: int | None = None,
                  prefetch: bool | None = None, fused: bool | None = None,
                  stages: int | None = None, rows: int | None = None,
                  groups: int = 1) -> BwdPlan:
    """The backward schedule for rows of ``n``: threads per row, the persistent grid,
    and how a row is held (registers, optionally with the next row prefetched;
    a shared-memory ring of ``stages`` rows; or streamed twice from global memory).

    ``groups``: rows a CTA holds at once (:attr:`BwdPlan.groups`); ``ctas_per_sm``
    then counts CTAs of ``groups`` rows.

    ``rows``: the call's row count, where known; fewer rows than the grid cut the
    grid (:meth:`BwdPlan.for_rows`)."""
    vec = vec or max_vec(n, dtype)
    chunks = -(-n // vec)
    if threads is None:
        # ~16 values of each of x, dy, dw per thread, and 512 threads when the row
        # has the chunks for them (tuned on an H200 with lab/rmsnorm_tune.py).
        per = max(1, 16 // vec)
        threads = min(1024, max(min(512, chunks), -(-chunks // per)))
        threads = -(-threads // WARP) * WARP
    values = -(-chunks // threads) * vec

    def regs_for(prefetch, streaming):
        # x, dy, w and the dw accumulator per value (+ x, dy again when prefetching)
        return 40 if streaming else 24 + values * (4 + (2 if prefetch else 0))

    streaming = values > 32
    if prefetch is None:
        prefetch = values <= 16 and not streaming
    # One CTA must fit in the 64K registers of an SM: give up prefetching, then
    # register residency, until it does.
    if threads * regs_for(prefetch, streaming) > 65536:
        prefetch = False
    if threads * regs_for(prefetch, streaming) > 65536:
        streaming = True
    if stages is None:
        stages = max_stages(n, dtype, threads, vec) if streaming else 0
    elif stages and max_stages(n, dtype, threads, vec, cap=stages) < stages:
        raise ValueError(f"plan_backward: {stages} shared-memory row buffers of {n} "
                         f"{dtype.name} do not fit (at most "
                         f"{max_stages(n, dtype, threads, vec, cap=stages)}: the staged kernel "
                         f"needs 16-byte chunks, at most {MAX_VALUES} values per thread and "
                         f"{stage_bytes(n, dtype)} bytes per buffer of {SMEM_PER_CTA})")
    regs = regs_for(prefetch, streaming)
    smem_cap = 32
    block = threads * groups
    if groups > 1:
        why = ("its rows are streamed or staged through shared memory" if streaming or stages
               else f"its rows take {threads} threads, not a power of two"
               if threads & (threads - 1) else
               f"that is {block} threads per CTA (at most 1024)" if block > 1024 else
               f"rows of {threads} threads sum at a named barrier per group (at most 15)"
               if threads > WARP and groups > 15 else
               f"their dw partials take {group_smem(n, vec, threads, groups)} bytes of "
               f"shared memory (at most {MAX_GROUP_SMEM})"
               if group_smem(n, vec, threads, groups) > MAX_GROUP_SMEM else None)
        if why:
            raise ValueError(f"plan_backward: {groups} row groups per CTA do not suit N={n} "
                             f"{dtype.name}: {why}. Row groups need rows held in registers "
                             f"by a power-of-two number of threads; groups=1 always fits")
    if groups > 1:
        smem_cap = min(smem_cap, SMEM_PER_CTA // group_smem(n, vec, threads, groups))
    if stages:
        # dw and dy*w per value, the rest as the streaming kernel
        streaming, prefetch, regs = False, False, 24 + 2 * values
        smem_cap = SMEM_PER_CTA // (stages * stage_bytes(n, dtype) + SMEM_SLACK)
    if ctas_per_sm is None:
        # Hopper: at most 32 CTAs, 2048 threads and 64K registers per SM.
        ctas_per_sm = max(1, min(smem_cap, 2048 // block, 65536 // (block * regs)))
    grid = sms * ctas_per_sm
    asked = fused
    if fused is None:
        fused = -(-grid // (block // WARP)) <= MAX_FUSED_ROWS
    p = BwdPlan(n, vec, threads, grid, prefetch and not streaming,
                not (streaming or stages), streaming, fused, stages=stages, groups=groups)
    if rows is not None:
        p = p.for_rows(rows)
        if asked is not None:
            p = replace(p, fused=asked)
    return p


def build_backward(p: BwdPlan, dtype: PtxType, wdtype: PtxType, *, arch: str = "sm_90a",
                   offset: float = 0.0):
    """The backward kernel for plan ``p`` (of ``y = x * rstd * (offset + w)``; ``offset``
    0 records exactly the plain kernel).

    Fused (``p.fused``, one launch): arguments DY (M, N), X (M, N)
    (strided rows), W (N,), RSTD (M,) f32, WS (2,) 32-bit arrival workspace (zero
    before its first launch; launches leave it so); outputs DX (M, N), DW (N,),
    DWP (G, N) f32 scratch for the per-CTA partials.

    Unfused: DY, X, W, RSTD; outputs DX and DWP, which :func:`build_dw_reduce`
    then sums into DW.
    """
    N, G = p.n, p.grid
    rows_in = (Tile("M", N, dtype, stride="sdy"), Tile("M", N, dtype, stride="sx"),
               Tile(N, wdtype), Tile("M", f32))
    name = f"rms_norm_bwd_{dtype.name}_{N}"
    pdl = pdl_for(arch)
    if p.fused:
        # Few rows' grids (no more CTAs than a CTA has warps): the last CTA to finish its
        # rows sums dW alone, so nobody waits for anybody. Larger grids share the sum
        # among their last arrivals, which wait only for CTAs that arrive after them
        # (late_arrivals), so no launch needs to be cooperative (slower per call:
        # bench/results/rmsnorm_bwd_late_arrivals_h100.json); the device must only hold
        # the K that wait (resident=K). Grids of a few CTAs sum in one cluster
        # (p.cluster_dw; WS and DWP go unused).
        C = p.cluster_dw
        last = not (C or p.grid_sum)
        thin = dw_narrow(p.n, G)
        K = dw_summers(p.n, G, thin)

        @kernel(in_specs=rows_in + (Tile(2, b32),),
                out_specs=(Tile("M", N, dtype), Tile(N, wdtype), Tile(G, N, f32)),
                grid=(G, 1, 1), block=(p.block, 1, 1), arch=arch,
                cluster=(C, 1, 1) if C > 1 else None, resident=K if p.grid_sum else None,
                name=name,
                # The prefetch's few extra registers must not cost the CTA its SM, nor
                # may the staged kernel's (at 1024 threads ptxas would take 66-75), nor
                # may row groups' (ptxas took 152 for 384 threads of 64-thread rows).
                min_ctas_per_sm=1 if p.l2_ahead or p.stages or p.groups > 1 else None,
                arg_names=("DY", "X", "W", "RSTD", "WS", "DX", "DW", "DWP"), pdl=pdl)
        def rms_norm_bwd(DY, X, W, RSTD, WS, DX, DW, DWP):
            after_previous_kernel(pdl)
            tid, cta, pdwp, kept = _rows(p, dtype, wdtype, DY, X, W, RSTD, DX, DWP, offset,
                                         keep=bool(C))
            pws, pdw = ptx.global_ptrs(WS, DW)
            if C:
                dw, preds = kept
                cluster_dw(p, wdtype, dw, tid, preds, cta, pdw)
                return
            # Thread 0's arrival (atom.acq_rel.gpu) after this bar.sync releases every
            # thread's partial stores: release is cumulative, and the barrier puts the
            # other threads' stores before it. (A fence.acq_rel.gpu in every thread
            # before the bar.sync, as there was, only added a fence ahead of the
            # atomic's own.)
            ptx.bar.sync(0)
            if last:
                with ptx.if_(last_arrival(pws, tid, G)):
                    sum_partials_by_warp(p.n, G, p.slices, wdtype, pdwp, pdw, tid)
            else:
                slot = late_arrivals(pws, tid, cta, G, K)
                with ptx.if_(slot < K):
                    sum_partials(p.n, G, p.slices, K, wdtype, pdwp, pdw, tid, slot, thin)
        return rms_norm_bwd

    @kernel(in_specs=rows_in, out_specs=(Tile("M", N, dtype), Tile(G, N, f32)),
            grid=(G, 1, 1), block=(p.block, 1, 1), arch=arch, name=name,
            min_ctas_per_sm=1 if p.stages or p.groups > 1 else None,
            arg_names=("DY", "X", "W", "RSTD", "DX", "DWP"), pdl=pdl)
    def rms_norm_bwd_partials(DY, X, W, RSTD, DX, DWP):
        after_previous_kernel(pdl)
        _rows(p, dtype, wdtype, DY, X, W, RSTD, DX, DWP, offset)
    return rms_norm_bwd_partials


def _rows(p, dtype, wdtype, DY, X, W, RSTD, DX, DWP, offset, keep=False):
    """dX for the CTA's rows and its dW partial row in DWP; returns (tid, cta, DWP ptr,
    None). ``keep`` (one-row CTAs holding rows in registers): the partial is not stored
    but returned, as (its registers, the guards of the thread's chunks)."""
    N, T, V, K = p.n, p.threads, p.vec, p.per_thread
    es, wes = dtype.bytes, wdtype.bytes
    pdy, px, pw, prs, pdx, pdwp = ptx.global_ptrs(DY, X, W, RSTD, DX, DWP)
    tid = reg.scalar(u32); ptx.inst.mov.u32(tid, ptx.special.tid.x())
    cta = reg.scalar(u32); ptx.inst.mov.u32(cta, ptx.special.ctaid.x())
    m = ptx.dim("M")
    sdy, sx = DY.row_stride, X.row_stride
    # The thread's place in its row (``lane``) and its row group; a CTA's groups take
    # its rows cta*groups + group, then every row_step-th.
    if p.groups > 1:
        lane, group = tid & (T - 1), tid >> (T.bit_length() - 1)
        first = cta * p.groups + group
    else:
        lane, group, first = tid, None, cta
    lane_b = lane * (V * es)
    dy0 = pdy + lane_b
    x0 = px + lane_b
    dx0 = pdx + lane_b
    wrow = pw + lane * (V * wes)

    def guard(k):
        if not p.ragged or (k + 1) * T <= p.chunks:
            return None
        return lane < (p.chunks - k * T)

    preds = [guard(k) for k in range(K)]
    pcta = pdwp + cta * (N * 4)  # the CTA's partial row
    prow = pcta + lane * (V * 4)
    if p.stages or p.streaming:
        rows = staged_rows if p.stages else _streaming_rows
        rows(p, dtype, wdtype, cta, m, dy0, x0, dx0, wrow, prow, prs, sdy, sx, preds, tid,
             offset)
    else:
        dw = _resident_rows(p, dtype, wdtype, first, m, dy0, x0, dx0, wrow, prow, prs, sdy,
                            sx, preds, lane, offset, group, (tid, pcta), keep=keep)
        if keep:
            return tid, cta, pdwp, (dw, preds)
    return tid, cta, pdwp, None


def _resident_rows(p, dtype, wdtype, first, m, dy0, x0, dx0, wrow, prow, prs, sdy, sx, preds,
                   tid, offset=0.0, group=None, cta_row=None, keep=False):
    """Rows held in registers (x, dy read once); the dw partial in registers too.

    ``first``: this thread's first row (its CTA's, or its row group's); the next are
    ``p.row_step`` apart. ``tid``: the thread's place in its row. ``group``: its row
    group (a register; None: one row per CTA), whose partial dw is summed with the
    other groups' in shared memory into the CTA's partial row (:func:`_add_groups`).
    ``cta_row``: (the thread's index in its CTA, the CTA's partial row), for groups.
    ``keep`` (no groups): the partial's registers are returned, not stored."""
    N, T, V, G, K = p.n, p.threads, p.vec, p.row_step, p.per_thread
    es, wes = dtype.bytes, wdtype.bytes
    step = T * V * es
    ws = [with_offset(load_chunk(wrow, k * T * V * wes, wdtype, V, pred=preds[k]), offset)
          for k in range(K)]
    dw = [reg.scalar(f32, init=0.0) for _ in range(K * V)]
    row_sum = RowSum(T, tid, looped=True, groups=p.groups, group=group)
    pol = l2_policy(IN_POLICY, {})

    def load_row(row, ok):
        pdy_r, px_r = dy0 + row * (sdy * es), x0 + row * (sx * es)
        dys, xs = [], []
        for k in range(K):
            g = _and(preds[k], ok)
            dys.append(load_chunk(pdy_r, k * step, dtype, V, pred=g, hints=IN_HINTS,
                                  policy=pol))
            xs.append(load_chunk(px_r, k * step, dtype, V, pred=g, hints=IN_HINTS,
                                 policy=pol))
        return dys, xs

    ahead = p.l2_ahead and p.prefetch and V * es == 16

    def l2_prefetch(row):
        # tid 0's chunk pointers are the row starts; the whole row, in one request each
        l2_prefetch_rows(tid, row, m, ((dy0, sdy * es), (x0, sx * es)), N * es, pol)

    if p.prefetch:
        cur_dy, cur_x = load_row(first, first < m)
        if ahead:
            l2_prefetch(first + G)
    for row in ptx.range_(first, m, G):
        if ahead:  # first in the body, where the fewest registers are live
            l2_prefetch(row + 2 * G)
        if p.prefetch:
            dys, xs = cur_dy, cur_x
        else:
            dys, xs = load_row(row, None)
        rstd = reg.scalar(f32)
        ptx.inst.ld.global_.nc.f32(rstd, ptx.addr(prs + row * 4))
        dot = reg.scalar(f32, init=0.0)
        gw = []  # dy * w, reused by dx
        for k in range(K):
            dot_chunk(dys[k], xs[k], ws[k], dot, gw)
        if p.prefetch:
            nxt = row + G
            nxt_dy, nxt_x = load_row(nxt, nxt < m)
        c = dx_coeff(rstd, row_sum(dot), N)
        pdx_r = dx0 + row * (N * es)
        for k in range(K):
            part = slice(k * V, (k + 1) * V)
            outs = dx_chunk(dys[k], xs[k], gw[part], dw[part], c, rstd)
            store_chunk(pdx_r, k * step, dtype, narrow(outs, dtype), pred=preds[k])
        if p.prefetch:
            for cur, new in ((cur_dy, nxt_dy), (cur_x, nxt_x)):
                for a_list, b_list in zip(cur, new):
                    for a, b in zip(a_list, b_list):
                        ptx.inst.mov.f32(a, b)
    if keep:
        return dw
    if group is None:
        for k in range(K):
            store_chunk(prow, k * T * V * 4, f32, dw[k * V:(k + 1) * V], pred=preds[k])
    else:
        _add_groups(p, dw, tid, group, *cta_row)


def _add_groups(p, dw, lane, group, tid, pcta):
    """The CTA's partial row of dw: every group puts its partial in shared memory, one
    barrier, then every thread of the CTA sums a few columns over the groups, in group
    order (the same bits on every run, and those of adding the groups one by one to the
    first's), and stores them. With one-warp rows (16 groups) a single group adding the
    others would make 15 dependent adds per value its own."""
    N, T, V, K, R = p.n, p.threads, p.vec, p.per_thread, p.groups
    cols = K * T * V
    parts = smem.alloc(f32, (R, cols), dynamic=R * cols * 4 > STATIC_GROUP_SMEM)
    sv = min(V, 4)  # widest shared-memory vector of a chunk's values
    for k in range(K):
        at = parts.addr(group, lane * V + k * T * V)
        for j in range(0, V, sv):
            shared_vec("st", ptx.addr(at.base, at.offset + 4 * j), dw[k * V + j:k * V + j + sv])
    ptx.bar.sync(0)
    # Four neighbouring columns per thread where rows keep 16-byte alignment.
    w = 4 if N % 4 == 0 else 1
    for c0 in range(0, N, p.block * w):
        c = tid * w + c0
        with ptx.if_(c < N):
            at = parts.addr(0, c)  # group g's columns are g * cols floats on
            acc = [reg.scalar(f32) for _ in range(w)]
            shared_vec("ld", at, acc)
            for g in range(1, R):
                vals = [reg.scalar(f32) for _ in range(w)]
                shared_vec("ld", ptx.addr(at.base, at.offset + 4 * g * cols), vals)
                for a, b in zip(acc, vals):
                    ptx.inst.add.f32(a, a, b)
            store_chunk(pcta + c * 4, 0, f32, acc)


def _streaming_rows(p, dtype, wdtype, cta, m, dy0, x0, dx0, wrow, prow, prs, sdy, sx, preds,
                    tid, offset=0.0):
    """The long-row backward: two streamed passes per row, dw partial in global memory."""
    N, T, V, G, K = p.n, p.threads, p.vec, p.grid, p.per_thread
    es, wes = dtype.bytes, wdtype.bytes
    step, wstep, pstep = T * V * es, T * V * wes, T * V * 4
    zeros = [reg.scalar(f32, init=0.0) for _ in range(V)]
    for k in range(K):
        store_chunk(prow, k * pstep, f32, zeros, pred=preds[k])
    row_sum = RowSum(T, tid, looped=True)
    for row in ptx.range_(cta, m, G):
        if p.l2_ahead and V * es == 16:
            # The CTA's next row heads for L2 while this one is summed and written:
            # with one CTA per SM nothing else keeps DRAM busy in the second pass.
            l2_prefetch_rows(tid, row + G, m, ((dy0, sdy * es), (x0, sx * es)), N * es)
        rstd = reg.scalar(f32)
        ptx.inst.ld.global_.nc.f32(rstd, ptx.addr(prs + row * 4))
        pdy_r, px_r = dy0 + row * (sdy * es), x0 + row * (sx * es)
        dot = reg.scalar(f32, init=0.0)
        for k in range(K):
            d = load_chunk(pdy_r, k * step, dtype, V, pred=preds[k])
            x = load_chunk(px_r, k * step, dtype, V, pred=preds[k])
            w = with_offset(load_chunk(wrow, k * wstep, wdtype, V, pred=preds[k]), offset)
            dot_chunk(d, x, w, dot, [])  # dy * w is computed again in the second pass
        c = dx_coeff(rstd, row_sum(dot), N)
        pdx_r = dx0 + row * (N * es)
        for k in range(K):
            d = load_chunk(pdy_r, k * step, dtype, V, pred=preds[k])
            x = load_chunk(px_r, k * step, dtype, V, pred=preds[k])
            w = with_offset(load_chunk(wrow, k * wstep, wdtype, V, pred=preds[k]), offset)
            acc = load_chunk(prow, k * pstep, f32, V, pred=preds[k])
            gw = []
            for a, ww in zip(d, w):
                t = reg.scalar(f32)
                ptx.inst.mul.f32(t, a, ww)
                gw.append(t)
            outs = dx_chunk(d, x, gw, acc, c, rstd)
            store_chunk(pdx_r, k * step, dtype, narrow(outs, dtype), pred=preds[k])
            store_chunk(prow, k * pstep, f32, acc, pred=preds[k])


def _and(a, b):
    if a is None:
        return b
    if b is None:
        return a
    return a & b
