"""The RMSNorm forward for rows too long for one CTA: a cluster of CTAs per row (sm_90).

Each CTA of a cluster of ``C`` (:class:`~.cluster_row.ClusterSplit`) loads its slice
of the row into registers (half-precision rows as the 32-bit words they were loaded
as: two elements per register), sums its squares, and the cluster adds the CTAs'
partial sums through distributed shared memory (:class:`~.cluster_row.ClusterSum`:
one ``barrier.cluster`` phase). Every CTA then normalises its slice from registers
and writes y: x is read from DRAM once, and no CTA waits for another longer than the
exchange of ``C*W`` floats.

One cluster per row, ``M * C`` CTAs, each short-lived; several clusters share an SM
(``min_ctas``: the CTAs per SM ptxas must leave registers for), so one CTA's loads
overlap another's exchange and stores.

Before any CTA stores into a peer's shared memory the peer must have started: the
kernel's first instruction is ``barrier.cluster.arrive.relaxed.aligned`` and its
matching ``wait`` comes right before the first remote store, after the row's loads
were issued, so the wait costs nothing in the common case. After the exchange no CTA
touches a peer's shared memory again, so a CTA may exit as soon as it is done.

The two-pass variant (``ClusterPlan.two_pass``) reads its slice twice instead, the second
time from L1, and exchanges the sums through ``st.async`` and an mbarrier: a cluster
barrier between the reads would empty L1. Its wide slices (one CTA per SM, up to 16
chunks a thread) hold a thread's first ``hold`` chunks in registers and read only the
rest twice. The persistent variant (``stages``) walks the rows through a shared-memory
ring. The plan (``plan_long.long_rows``) chooses among them.
"""
from __future__ import annotations

from dataclasses import dataclass

from ... import kernel
from ...dsl import ptx, reg
from ...core.types import PtxType, f32, u32

from .._common.launch_order import after_previous_kernel, pdl_for
from .._common.rowio import l2_policy, narrow, store_chunk
from .cluster_row import MAX_CLUSTER, WARP, ClusterSplit, ClusterSum, Ring, Slice, load_raw, widen
from .fwd import forward_specs, max_vec
from .row import add_residual, rstd_of, scale, store_rstd, unpack, with_offset

# Bytes of the row each thread keeps in registers (8 chunks of 16 bytes: 32 registers).
THREAD_BYTES = 128
MAX_THREADS = 512
# Shared memory the persistent variant's ring may take (227 KiB less the slots' arrays).
RING_BYTES = 219 * 1024
# The most a ring may take for two CTAs to share an SM (228 KiB per SM, less each CTA's
# 1 KiB reserve, its exchange slots and its static shared memory, with room).
PAIR_RING_BYTES = 108 * 1024


@dataclass(frozen=True)
class ClusterPlan(ClusterSplit):
    """A cluster forward: the split and its variant. w is loaded after the exchange
    (from L2), so the registers it would hold across it go to a second CTA per SM."""

    min_ctas: int | None = 2
    # Persistent variant (stages > 0): ``grid`` clusters walk the rows through a ring of
    # ``stages`` shared-memory buffers of their slices (one CTA per SM); 0: one cluster
    # per row, the slice in registers.
    stages: int = 0
    grid: int = 0
    # One-row kernel: x read with .L1::no_allocate (it is read once; L1 is left to w),
    # and w's slice prefetched into L1 (prefetch.global.L1) before the exchange, so its
    # loads after it need not wait for L2.
    prefetch_w: bool = True
    # One-row kernel: the slice read twice, for the sum (kept in L1 and L2: evict_last)
    # and after the exchange (evict_first), instead of held in registers: few registers
    # per thread, so two 1024-thread CTAs share an SM. Its exchange goes through st.async
    # and an mbarrier (ClusterSum tx), since a cluster barrier's wait empties L1
    # (bench/results/rmsnorm_long_tx_exchange_h200.json,
    # rmsnorm_long_two_pass_clusters_h200.json).
    two_pass: bool = False
    # Two-pass: chunks whose second read (and w) is issued before their y stores, as in
    # :class:`~.fwd.Plan` (1: chunk by chunk).
    reload_batch: int = 1
    # One-row kernel: cache hints of x's first read (None: L1::evict_last when read
    # twice, L1::no_allocate when w is prefetched into L1, none otherwise) and of y's
    # stores.
    x_hints: tuple[str, ...] | None = None
    y_hints: tuple[str, ...] = ()
    # Two-pass: chunks per thread (its first ones) held in registers from the first
    # read instead of read again (read once: L1::no_allocate, L2 evict_first), so a
    # slice may be larger than the L1 share its CTA gets.
    hold: int = 0

    def __post_init__(self):
        super().__post_init__()
        if self.two_pass and self.stages:
            raise ValueError("two_pass reads its slices from global memory (stages 0), "
                             "not through a ring")
        if self.hold and not (self.two_pass and 0 < self.hold <= self.per_thread):
            raise ValueError(f"hold: chunks a two-pass thread keeps in registers, 1 to "
                             f"per_thread ({self.per_thread}), not {self.hold} "
                             f"(two_pass={self.two_pass})")
        if self.reload_batch < 1:
            raise ValueError(f"reload_batch: chunks read ahead of their stores, at least 1, "
                             f"not {self.reload_batch}")

    @property
    def block(self) -> int:
        return self.threads


def plan_cluster(n: int, dtype: PtxType, vec: int | None = None, *,
                 cluster: int | None = None, threads: int | None = None,
                 per_thread: int | None = None, min_ctas: int | None = 2, stages: int = 0, clusters: int | None = None,
                 sms: int = 132, two_pass: bool = False) -> ClusterPlan | None:
    """The cluster split of rows of ``n``: ``THREAD_BYTES`` per thread, at most
    ``MAX_THREADS`` threads per CTA, as few CTAs per cluster as that allows (then the
    threads evened out over them). None when even 16 CTAs of 512 threads cannot hold the
    row at 64 registers of it per thread. ``stages > 0``: the persistent variant, its
    ring in shared memory (None where the buffers do not fit), ``clusters`` clusters
    (default: the CTAs per SM, one or two as the rings fit, times ``sms // C``).
    ``two_pass``: the one-row kernel reading its slice twice (:class:`ClusterPlan`), two
    CTAs per SM whatever the threads."""
    vec = vec or max_vec(n, dtype)
    chunks = -(-n // vec)
    if per_thread is None and cluster is not None and threads is not None:
        per_thread = -(-chunks // (cluster * threads))  # the split asked for, evened out
    if per_thread is None:
        per_thread = max(1, THREAD_BYTES // (4 * _regs_per_chunk(vec, dtype)))
        if cluster is None and chunks > MAX_CLUSTER * MAX_THREADS * per_thread:
            per_thread = -(-chunks // (MAX_CLUSTER * MAX_THREADS))
            if per_thread * _regs_per_chunk(vec, dtype) * 4 > 2 * THREAD_BYTES:
                return None
    if cluster is None:
        cluster = max(1, -(-chunks // ((threads or MAX_THREADS) * per_thread)))
    if threads is None:
        threads = -(-chunks // (cluster * per_thread))
        threads = max(WARP, -(-threads // WARP) * WARP)
        # fewer chunks per thread where the last CTA would otherwise be left empty
        while per_thread > 1 and (cluster - 1) * threads * per_thread >= chunks:
            per_thread -= 1
    if cluster > MAX_CLUSTER:
        return None
    if min_ctas == 2 and not two_pass and (
            per_thread * _regs_per_chunk(vec, dtype) * 4 > THREAD_BYTES or
            threads > MAX_THREADS):
        min_ctas = 1  # more of the row per SM than two CTAs leave registers for
    if stages:
        ring = stages * threads * per_thread * 16
        if vec * dtype.bytes != 16 or ring > RING_BYTES:
            return None
        # two CTAs per SM where two rings fit: clusters pack the SMs of a GPC more fully
        # (one CTA per SM of a cluster of 4 leaves SMs of a GPC idle) and one CTA's
        # exchange overlaps the other's copies
        min_ctas = 2 if ring <= PAIR_RING_BYTES and threads <= MAX_THREADS else 1
        clusters = clusters or max(1, sms * min_ctas // cluster)
    return ClusterPlan(n, vec, cluster, threads, per_thread, min_ctas,
                       stages, clusters or 0, prefetch_w=not two_pass, two_pass=two_pass)


def _regs_per_chunk(vec: int, dtype: PtxType) -> int:
    """Registers a kept chunk takes (:func:`~.cluster_row.load_raw`): halves two to a
    register, but one each when loaded singly (vec 1), f32 one each."""
    return vec if dtype == f32 or vec == 1 else vec // 2


def build_forward_cluster(p: ClusterPlan, dtype: PtxType, wdtype: PtxType, *,
                          eps: float = 1e-6, residual: bool = False, with_rstd: bool = False,
                          arch: str = "sm_90a", offset: float = 0.0):
    """The cluster forward kernel for plan ``p`` (the arguments of
    :func:`~.fwd.build_forward`: X, [R], W, Y, [H], [RSTD]; ``offset`` as there)."""
    N, C, T = p.n, p.cluster, p.threads
    ins, outs, names = forward_specs(N, dtype, wdtype, residual, with_rstd)
    if p.stages and residual:
        raise ValueError("the persistent cluster forward (stages > 0) takes no residual; "
                         "plan_cluster(stages=0) gives the one-row-per-cluster kernel")
    if p.two_pass and residual:
        raise ValueError("the two-pass cluster forward takes no residual; "
                         "plan_cluster(two_pass=False) holds the slice in registers")
    grid = (lambda M: (M * C, 1, 1)) if not p.stages else (p.grid * C, 1, 1)
    kind = f"cluster{C}" + (f"_ring{p.stages}" if p.stages else "_2pass" if p.two_pass else "")

    pdl = pdl_for(arch)

    @kernel(in_specs=ins, out_specs=outs, grid=grid, block=(T, 1, 1),
            cluster=(C, 1, 1), arch=arch, name=f"rms_norm_fwd_{kind}_{dtype.name}_{N}",
            arg_names=names, min_ctas_per_sm=p.min_ctas, pdl=pdl)
    def rms_norm_fwd_cluster(*args):
        X, Rs, W, Y, H, RSTD = unpack(args, residual, with_rstd)
        # Peers must have started before this CTA writes their shared memory (waited
        # for just before the exchange, by then long true; two_pass: before the loads).
        tx = None
        if p.two_pass:
            tid = reg.scalar(u32)
            ptx.inst.mov.u32(tid, ptx.special.tid.x())
            tx = ClusterSum(p, tid, ptx.cluster.ctarank(), tx=True,
                            buffers=1)
        ptx.cluster.arrive(relaxed=True, aligned=True)
        if tx is not None:
            # Peers' mbarriers initialised before any push. Waited for here, before the
            # row's loads: the wait's cluster-scope acquire would empty L1 of them.
            ptx.cluster.wait(aligned=True)
        after_previous_kernel(pdl, 0 if p.stages else T)
        at = Slice(p) if tx is None else Slice(p, tx.tid, tx.rank)
        q = reg.scalar(u32)
        ptx.inst.mov.u32(q, ptx.special.clusterid.x())
        if tx is not None:
            _one_row(p, at, q, X, Rs, W, Y, H, RSTD, dtype, wdtype, eps, offset, tx)
            return
        body = _ring_rows if p.stages else _one_row
        body(p, at, q, X, Rs, W, Y, H, RSTD, dtype, wdtype, eps, offset)

    return rms_norm_fwd_cluster


def _one_row(p, at, row, X, Rs, W, Y, H, RSTD, dtype, wdtype, eps, offset=0.0, reduce=None):
    """Cluster ``row``'s row: the slice loaded into registers (or, ``p.two_pass``, read
    for its sum and again for y), the exchange, y. ``reduce``: the two-pass
    kernel's :class:`ClusterSum` (None: a kernel of one row per cluster, whose
    first exchange waits for its peers to have started)."""
    N, K, V = p.n, p.per_thread, p.vec
    es, wes = dtype.bytes, wdtype.bytes
    residual = Rs is not None
    tid, rank = at.tid, at.rank
    first = reduce is None
    reduce = reduce or ClusterSum(p, tid, rank)
    px, pw, py = ptx.global_ptrs(X, W, Y)
    sx = X.row_stride
    xrow = px + row * (sx * es) + at.offset(es)
    yrow = py + row * (N * es) + at.offset(es)
    wrow = pw + at.offset(wes)
    step, wstep = at.step(es), at.step(wes)
    policies: dict = {}
    # Read once: L2 may drop x first, and (w prefetched into L1) L1 leaves it out. Read
    # twice: L1 and L2 keep it for the second read, which lets them drop it.
    xpol = l2_policy("evict_last" if p.two_pass else "evict_first", policies)
    xhints = p.x_hints
    if xhints is None:
        xhints = (("L1::evict_last",) if p.two_pass else
                  ("L1::no_allocate",) if p.prefetch_w else ())
    wpol = l2_policy("evict_last", policies)
    preds = at.preds

    keep, acc = [], reg.scalar(f32, init=0.0)
    if residual:
        pr, ph = ptx.global_ptrs(Rs, H)
        sr = Rs.row_stride
        rrow = pr + row * (sr * es) + at.offset(es)
        hrow = ph + row * (sr * es) + at.offset(es)
    held = p.hold if p.two_pass else 0
    once = l2_policy("evict_first", policies) if held else None
    for k in range(K):
        if k < held:  # read once, kept in registers
            raw = load_raw(xrow, k * step, dtype, V, pred=preds[k], policy=once,
                           hints=("L1::no_allocate",))
        else:
            raw = load_raw(xrow, k * step, dtype, V, pred=preds[k], policy=xpol,
                           hints=xhints)
        if residual:
            r = load_raw(rrow, k * step, dtype, V, pred=preds[k], policy=xpol, hints=xhints)
            h = add_residual(widen(raw, dtype), widen(r, dtype), dtype)
            hn = narrow(h, dtype)
            store_chunk(hrow, k * step, dtype, hn, pred=preds[k])
            raw = h if dtype == f32 or V == 1 else hn
            vals = h
        else:
            vals = widen(raw, dtype)
        for v in vals:
            ptx.inst.fma.rn.f32(acc, v, v, acc)
        keep.append(None if p.two_pass and k >= held else raw)
    if p.prefetch_w:
        for k in range(K):
            for half in range(0, V * wes, 16):  # f32 weights beside half x: 32 bytes
                ptx.inst.prefetch.global_.L1(ptx.addr(wrow, k * wstep + half), pred=preds[k])

    total = reduce(acc, first=first)
    rstd = rstd_of(total, N, eps)
    if RSTD is not None:
        store_rstd(RSTD, row, rstd, tid | rank)
    B = p.reload_batch if p.two_pass else 1
    for k0 in range(0, K, B):
        loaded = []
        for k in range(k0, min(K, k0 + B)):
            w = load_raw(wrow, k * wstep, wdtype, V, pred=preds[k], policy=wpol)
            raw = keep[k]
            if raw is None:  # two_pass: from L1 (or L2)
                raw = load_raw(xrow, k * step, dtype, V, pred=preds[k],
                               hints=("L1::evict_first",),
                               policy=l2_policy("evict_first", policies))
            loaded.append((k, raw, w))
        for k, raw, w in loaded:
            y = scale(widen(raw, dtype), with_offset(widen(w, wdtype), offset), rstd)
            store_chunk(yrow, k * step, dtype, narrow(y, dtype), pred=preds[k],
                        hints=p.y_hints)


def _ring_rows(p, at, q, X, Rs, W, Y, H, RSTD, dtype, wdtype, eps, offset=0.0):
    """Rows ``q, q + Q, ...`` through a ring of ``p.stages`` shared-memory buffers
    (:class:`~.cluster_row.Ring`), w held in registers throughout; x is read from the
    ring twice (for the sum, then for y)."""
    N, K, V, Q = p.n, p.per_thread, p.vec, p.grid
    es, wes = dtype.bytes, wdtype.bytes
    tid, rank, preds = at.tid, at.rank, at.preds
    m = ptx.dim("M")
    px, pw, py = ptx.global_ptrs(X, W, Y)
    step, wstep = at.step(es), at.step(wes)
    ws = [load_raw(pw + at.offset(wes), k * wstep, wdtype, V, pred=preds[k])
          for k in range(K)]
    reduce = ClusterSum(p, tid, rank, buffers=2)
    ring = Ring(p, tid, preds, ((px + at.offset(es), X.row_stride * es),), p.stages, m, Q)
    y0 = py + at.offset(es)
    ring.prime(q)
    ptx.cluster.wait(aligned=True)  # every peer has started before the first push
    for row in ptx.range_(q, m, Q):
        ring.next(row)
        acc = reg.scalar(f32, init=0.0)
        for k in range(K):
            for v in ring.chunk(0, k, dtype):
                ptx.inst.fma.rn.f32(acc, v, v, acc)
        rstd = rstd_of(reduce(acc), N, eps)
        if RSTD is not None:
            store_rstd(RSTD, row, rstd, tid | rank)
        yrow = y0 + row * (N * es)
        for k in range(K):
            y = scale(ring.chunk(0, k, dtype), with_offset(widen(ws[k], wdtype), offset),
                      rstd)
            store_chunk(yrow, k * step, dtype, narrow(y, dtype), pred=preds[k])
        ring.advance()
