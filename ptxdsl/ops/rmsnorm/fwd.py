"""RMSNorm forward kernels, written in the DSL.

``y = x * rstd * w`` with ``rstd = 1 / sqrt(mean(x^2) + eps)`` per row, f32
accumulation, output in x's dtype. One kernel per (N, dtypes, variant) serves
every number of rows ``M`` (a named dim) and any row stride.

Schedule (see :func:`plan`):

* **row per CTA** for long rows: the row lives in registers between the two
  passes (x is read from DRAM once), every access is 16 bytes, the block
  reduction is a warp butterfly + one ``bar.sync`` + every thread summing the
  per-warp partials from shared memory (no second barrier, no serial thread).
* **row per warp (or per 2..16 lanes)** for short rows: several rows per CTA,
  the reduction is shuffles only.
* **two passes** for rows too long for registers, and for half-precision rows of 256+
  threads (measured faster): x is re-read (from L1/L2) after the reduction.

A ragged tail (N not a multiple of the vector width times the threads) is
predicated: guarded loads leave zeros, guarded stores skip.
"""
from __future__ import annotations

from dataclasses import dataclass

from ... import Tile, kernel
from ...dsl import ptx, reg
from ...core.types import PtxType, f32, u32

from .._common.launch_order import after_previous_kernel, pdl_for
from .._common.reduce import RowSum
from .._common.rowio import l2_policy, load_chunk, narrow, store_chunk
from .row import add_residual, rstd_of, scale, store_rstd, unpack, with_offset

WARP = 32
# x's first read kept in L2 for the reduction; the two-pass second read lets L1 and L2
# drop it (bench/results/rmsnorm_tune_h200.md, "forward: cache hints").
X_POLICY = "evict_last"
RELOAD_HINTS = ("L1::evict_first",)
RELOAD_POLICY = "evict_first"


class RowSplit:
    """How a row of ``n`` elements splits into ``vec``-element chunks over ``threads``
    (for plans with those three fields)."""

    n: int
    vec: int
    threads: int

    @property
    def chunks(self) -> int:
        return -(-self.n // self.vec)

    @property
    def per_thread(self) -> int:
        """Chunks each thread handles (the last may be partial across the row)."""
        return -(-self.chunks // self.threads)

    @property
    def ragged(self) -> bool:
        return self.chunks % self.threads != 0


@dataclass(frozen=True)
class Plan(RowSplit):
    """How one RMSNorm forward kernel is laid out over threads."""

    n: int
    vec: int            # elements per access (16 bytes for aligned f32/halves)
    threads: int        # threads per row
    rows_per_cta: int
    two_pass: bool = False
    preload_w: bool = True  # weights loaded before the reduction (needs registers)
    # Cache hints of x's first read, of w's and of y's stores, and w's L2 eviction
    # priority (None: the default). x's first read always goes under an L2 evict_last
    # policy and a two-pass schedule's second read with .L1::evict_first under
    # evict_first (X_POLICY, RELOAD_HINTS, RELOAD_POLICY).
    x_hints: tuple[str, ...] = ("L1::evict_last",)
    y_hints: tuple[str, ...] = ()
    w_hints: tuple[str, ...] = ()
    w_policy: str | None = None
    # CTAs per SM ptxas must leave room for (.minnctapersm; None: its own choice).
    min_ctas: int | None = None
    # Two-pass: chunks whose second read of x (and w) is issued before the first of
    # their y stores. ptxas cannot move a load above a store to y (it may alias x or w),
    # so with 1 each chunk's loads wait for the previous chunk's round trip; with the
    # thread's every chunk (as Inductor's kernel does) all the loads are in flight at
    # once, at the price of the registers holding them.
    reload_batch: int = 1

    def __post_init__(self):
        if self.reload_batch < 1:
            raise ValueError(f"reload_batch: chunks read ahead of their stores, at least 1, "
                             f"not {self.reload_batch}")

    @property
    def block(self) -> int:
        return self.threads * self.rows_per_cta


def max_vec(n: int, dtype: PtxType, stride: int | None = None) -> int:
    """The widest chunk (<= 16 bytes) that divides the row length and the stride."""
    vec = 16 // dtype.bytes
    while vec > 1 and (n % vec or (stride is not None and stride % vec)):
        vec //= 2
    return vec


def plan(n: int, dtype: PtxType, vec: int | None = None, *, threads: int | None = None,
         rows_per_cta: int | None = None) -> Plan:
    """Choose the schedule for rows of ``n`` elements (see the module docstring)."""
    vec = vec or max_vec(n, dtype)
    chunks = -(-n // vec)
    if threads is None:
        if chunks <= 2 * WARP:
            # Short rows: a group of lanes per row, <= 4 chunks per lane. (At 128 chunks
            # a CTA of 128 threads per row is faster: bench/results/rmsnorm_tune_h200.md,
            # "forward: threads per row".)
            threads = WARP
            while threads > 1 and threads // 2 * 4 >= chunks:
                threads //= 2
        else:
            # Long rows: two 16-byte chunks per thread, 128 to 512 threads (512 beat 256
            # and 1024 from 4096 f32 up to 16384 f32: bench/results/rmsnorm_tune_h200.md,
            # "forward: threads per row").
            threads = min(512, max(128, -(-chunks // 2)))
            if -(-chunks // threads) * vec > 32:  # keep the row in registers if 1024 can
                threads = min(1024, -(-chunks * vec // 32))
            threads = -(-threads // WARP) * WARP
    values = -(-chunks // threads) * vec  # f32 registers per thread for its part of x
    two_pass = values > 32
    if rows_per_cta is None:
        rows_per_cta = max(1, 256 // threads) if threads <= WARP else 1
    # 64K registers per SM: keep w in registers too only if one CTA still fits.
    preload_w = not two_pass and threads * rows_per_cta * (2 * values + 24) <= 65536
    if dtype.bytes == 2 and threads * rows_per_cta >= 256:
        # Half-precision rows of 256+ threads read x a second time (from L1/L2) after the
        # reduction instead of keeping it in registers: as fast or faster at 13 of the 14
        # such shapes measured, while rows of 128 threads or fewer were slower that way
        # (bench/results/rmsnorm_tune_h200.md, "forward: two passes for half rows").
        two_pass = True
    return Plan(n, vec, threads, rows_per_cta, two_pass, preload_w)


def forward_specs(N: int, dtype: PtxType, wdtype: PtxType, residual: bool, with_rstd: bool):
    """In/out Tiles and argument names shared by every forward kernel variant."""
    ins = [Tile("M", N, dtype, stride="sx")]
    if residual:
        ins.append(Tile("M", N, dtype, stride="sr"))
    ins.append(Tile(N, wdtype))
    outs = [Tile("M", N, dtype)]
    if residual:
        outs.append(Tile("M", N, dtype, stride="sr"))
    if with_rstd:
        outs.append(Tile("M", f32))
    names = ["X"] + (["R"] if residual else []) + ["W", "Y"] + (["H"] if residual else []) \
        + (["RSTD"] if with_rstd else [])
    return tuple(ins), tuple(outs), names


def build_forward(p: Plan, dtype: PtxType, wdtype: PtxType, *, eps: float = 1e-6,
                  residual: bool = False, with_rstd: bool = False, arch: str = "sm_90a",
                  offset: float = 0.0):
    """Trace-ready RMSNorm forward kernel for one plan (``y = x * rstd * (offset + w)``;
    ``offset`` 0 records exactly the plain kernel).

    Arguments, in order: X (M, N) [strided rows], [R (M, N) residual, strided],
    W (N,), then outputs Y (M, N), [H (M, N): x + residual, usually R itself],
    [RSTD (M,) f32].
    """
    N, T, R, V = p.n, p.threads, p.rows_per_cta, p.vec
    K = p.per_thread
    es, wes = dtype.bytes, wdtype.bytes
    ins, outs, names = forward_specs(N, dtype, wdtype, residual, with_rstd)
    pdl = pdl_for(arch)

    @kernel(in_specs=ins, out_specs=outs,
            grid=lambda M: (-(-M // R), 1, 1), block=(p.block, 1, 1), arch=arch,
            name=f"rms_norm_fwd_{dtype.name}_{N}", arg_names=names, min_ctas_per_sm=p.min_ctas,
            pdl=pdl)
    def rms_norm_fwd(*args):
        X, Rs, W, Y, H, RSTD = unpack(args, residual, with_rstd)

        tid = reg.scalar(u32); ptx.inst.mov.u32(tid, ptx.special.tid.x())
        cta = reg.scalar(u32); ptx.inst.mov.u32(cta, ptx.special.ctaid.x())
        after_previous_kernel(pdl, p.block)
        if R > 1:
            lane = tid & (T - 1)
            row = cta * R + (tid >> (T.bit_length() - 1))
        else:
            lane, row = tid, cta
        # Lane groups past the last row still take part in the shuffles (a branch
        # around them would leave lanes of the membermask behind); only their
        # memory accesses are switched off.
        rowok = row < ptx.dim("M") if R > 1 else None
        _row_body(p, X, Rs, W, Y, H, RSTD, row, lane, tid, dtype, wdtype, eps,
                  es, wes, K, V, T, rowok, offset)

    return rms_norm_fwd


def _row_body(p, X, Rs, W, Y, H, RSTD, row, lane, tid, dtype, wdtype, eps, es, wes,
              K, V, T, rowok, offset=0.0):
    N = p.n
    px = ptx.global_ptrs(X)[0]
    pw = ptx.global_ptrs(W)[0]
    py = ptx.global_ptrs(Y)[0]
    sx = X.row_stride
    lane_x = lane * (V * es)          # byte offset of this thread's first chunk
    xrow = px + row * (sx * es) + lane_x
    yrow = py + row * (N * es) + lane_x
    wrow = pw + lane * (V * wes)
    if Rs is not None:
        pr = ptx.global_ptrs(Rs)[0]
        sr = Rs.row_stride
        rrow = pr + row * (sr * es) + lane_x
        ph = ptx.global_ptrs(H)[0]
        hrow = ph + row * (sr * es) + lane_x

    def guard(k):
        """Predicate for chunk k of this thread, or None when it always exists."""
        if not p.ragged or (k + 1) * T <= p.chunks:
            return rowok
        inside = lane < (p.chunks - k * T)
        return inside if rowok is None else inside & rowok

    preds = [guard(k) for k in range(K)]
    step = T * V * es
    policies: dict = {}
    xpol = l2_policy(X_POLICY, policies)
    wpol = l2_policy(p.w_policy, policies)
    rpol = l2_policy(RELOAD_POLICY, policies) if p.two_pass else None
    acc = reg.scalar(f32, init=0.0)
    xs = []
    for k in range(K):
        x = load_chunk(xrow, k * step, dtype, V, pred=preds[k], hints=p.x_hints, policy=xpol)
        if Rs is not None:
            r = load_chunk(rrow, k * step, dtype, V, pred=preds[k], hints=p.x_hints,
                           policy=xpol)
            x = add_residual(x, r, dtype)
            store_chunk(hrow, k * step, dtype, narrow(x, dtype), pred=preds[k])
        for v in x:
            ptx.inst.fma.rn.f32(acc, v, v, acc)
        if not p.two_pass:
            xs.append(x)
    # Weights do not depend on the row statistics: load them before the reduction
    # so their latency hides behind it.
    ws = [with_offset(load_chunk(wrow, k * T * V * wes, wdtype, V, pred=preds[k],
                                 hints=p.w_hints, policy=wpol), offset)
          for k in range(K)] if p.preload_w else []

    total = RowSum(T, tid, looped=False)(acc)
    rstd = rstd_of(total, N, eps)
    if RSTD is not None:
        store_rstd(RSTD, row, rstd, lane, rowok)

    B = p.reload_batch if p.two_pass else 1
    for k0 in range(0, K, B):
        group = range(k0, min(K, k0 + B))
        loaded = []
        for k in group:
            if p.two_pass:
                src = hrow if Rs is not None else xrow
                x = load_chunk(src, k * step, dtype, V, pred=preds[k], hints=RELOAD_HINTS,
                               policy=rpol)
            else:
                x = xs[k]
            w = ws[k] if p.preload_w else with_offset(
                load_chunk(wrow, k * T * V * wes, wdtype, V, pred=preds[k], hints=p.w_hints,
                           policy=wpol), offset)
            loaded.append((k, x, w))
        for k, x, w in loaded:
            store_chunk(yrow, k * step, dtype, narrow(scale(x, w, rstd), dtype),
                        pred=preds[k], hints=p.y_hints)
