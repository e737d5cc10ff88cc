"""The persistent RMSNorm forward: a fixed grid of CTAs walks the rows, one row ahead.

Each CTA (or lane group, for short rows) loads its weights once, then loops over
rows ``cta, cta + G, ...``: it issues the loads of the *next* row before the
reduction of the current one, so DRAM is busy while the row statistics are
formed, and stores the current row while the next one arrives. Same math,
hints and layouts as :mod:`.rms_norm_fwd` (whose :class:`~.rms_norm_fwd.Plan`
it takes), with ``G = sms * ctas_per_sm`` CTAs.
"""
from __future__ import annotations

from ptxdsl import kernel, ptx, reg
from ptxdsl.types import PtxType, f32, u32

from ._reduce import RowSum
from ._rowio import l2_policy, load_chunk, narrow, round_trip, store_chunk
from .rms_norm_fwd import Plan, forward_specs


def loop_ctas_per_sm(p: Plan) -> int:
    """CTAs per SM the register file allows (x, next x and w resident per thread);
    0 when not even one fits, or the row is too long for registers."""
    if p.two_pass or p.chunks < 4096:
        # Measured on an H200 (bench/rmsnorm_tune.py): one CTA per row is faster up
        # to 8192 f32 / 16384 halves; the loop wins from 4096 chunks (16384 f32) up.
        return 0
    values = p.per_thread * p.vec
    regs = 32 + values * 3
    return min(32, 2048 // p.block, 65536 // (p.block * regs))


def build_forward_loop(p: Plan, dtype: PtxType, wdtype: PtxType, grid: int, *,
                       eps: float = 1e-6, residual: bool = False, with_rstd: bool = False,
                       arch: str = "sm_90a"):
    """Persistent forward kernel over at most ``grid`` CTAs (same arguments as
    :func:`~.rms_norm_fwd.build_forward`)."""
    N, T, R, V, K = p.n, p.threads, p.rows_per_cta, p.vec, p.per_thread
    es, wes = dtype.bytes, wdtype.bytes
    ins, outs, names = forward_specs(N, dtype, wdtype, residual, with_rstd)
    shift = R.bit_length() - 1  # R is a power of two

    @kernel(in_specs=ins, out_specs=outs,
            grid=lambda M: (min(grid, -(-M // R)), 1, 1), block=(p.block, 1, 1), arch=arch,
            name=f"rms_norm_fwd_loop_{dtype.name}_{N}", arg_names=names)
    def rms_norm_fwd_loop(*args):
        it = iter(args)
        X = next(it)
        Rs = next(it) if residual else None
        W = next(it)
        Y = next(it)
        H = next(it) if residual else None
        RSTD = next(it) if with_rstd else None

        tid = reg.scalar(u32); ptx.inst.mov.u32(tid, ptx.special.tid.x())
        cta = reg.scalar(u32); ptx.inst.mov.u32(cta, ptx.special.ctaid.x())
        ncta = reg.scalar(u32); ptx.inst.mov.u32(ncta, ptx.special.nctaid.x())
        m = ptx.dim("M")
        if R > 1:
            lane, group = tid & (T - 1), tid >> (T.bit_length() - 1)
        else:
            lane, group = tid, 0
        nblocks = (m + (R - 1)) >> shift if R > 1 else m
        px, pw, py = ptx.global_ptrs(X, W, Y)
        sx = X.row_stride
        lane_b = lane * (V * es)
        x0 = px + lane_b
        y0 = py + lane_b
        w0 = pw + lane * (V * wes)
        if residual:
            pr, ph = ptx.global_ptrs(Rs, H)
            sr = Rs.row_stride
            r0, h0 = pr + lane_b, ph + lane_b
        step, wstep = T * V * es, T * V * wes

        def inside(k):
            """Whether chunk k of this thread exists (None: always)."""
            if not p.ragged or (k + 1) * T <= p.chunks:
                return None
            return lane < (p.chunks - k * T)

        def both(a, b):
            return b if a is None else (a if b is None else a & b)

        chunk_ok = [inside(k) for k in range(K)]
        policies: dict = {}
        xpol = l2_policy(p.x_policy, policies)
        ws = [load_chunk(w0, k * wstep, wdtype, V, pred=chunk_ok[k], hints=p.w_hints,
                         policy=l2_policy(p.w_policy, policies)) for k in range(K)]
        reduce = RowSum(T, tid, looped=True)

        def row_of(rb):
            return rb if R == 1 else (rb << shift) + group

        def load_row(rb):
            """x (or x + residual, rounded to dtype and stored to H) of row block rb."""
            row = row_of(rb)
            ok = row < m
            xs = []
            for k in range(K):
                g = both(chunk_ok[k], ok)
                x = load_chunk(x0 + row * (sx * es), k * step, dtype, V, pred=g,
                               hints=p.x_hints, policy=xpol)
                if residual:
                    r = load_chunk(r0 + row * (sr * es), k * step, dtype, V, pred=g,
                                   hints=p.x_hints, policy=xpol)
                    s = []
                    for a, b in zip(x, r):
                        t = reg.scalar(f32)
                        ptx.inst.add.f32(t, a, b)
                        s.append(t)
                    x = round_trip(s, dtype)
                    store_chunk(h0 + row * (sr * es), k * step, dtype, narrow(x, dtype), pred=g)
                xs.append(x)
            return xs

        cur = load_row(cta)
        for rb in ptx.range_(cta, nblocks, ncta):
            row = row_of(rb)
            acc = reg.scalar(f32, init=0.0)
            for x in cur:
                for v in x:
                    ptx.inst.fma.rn.f32(acc, v, v, acc)
            nxt = load_row(rb + ncta)
            total = reduce(acc)
            ms = reg.scalar(f32)
            ptx.inst.fma.rn.f32(ms, total, 1.0 / N, eps)
            rstd = reg.scalar(f32)
            ptx.inst.rsqrt.approx.f32(rstd, ms)
            ok = row < m
            if RSTD is not None:
                prs = ptx.global_ptrs(RSTD)[0]
                with ptx.if_((lane == 0) & ok):
                    ptx.inst.st.global_.f32(ptx.addr(prs + row * 4), rstd)
            yrow = y0 + row * (N * es)
            for k in range(K):
                ys = []
                for a, b in zip(cur[k], ws[k]):
                    t = reg.scalar(f32)
                    ptx.inst.mul.f32(t, a, rstd)
                    ptx.inst.mul.f32(t, t, b)
                    ys.append(t)
                store_chunk(yrow, k * step, dtype, narrow(ys, dtype),
                            pred=both(chunk_ok[k], ok), hints=p.y_hints)
            for c, n in zip(cur, nxt):
                for a, b in zip(c, n):
                    ptx.inst.mov.f32(a, b)

    return rms_norm_fwd_loop
