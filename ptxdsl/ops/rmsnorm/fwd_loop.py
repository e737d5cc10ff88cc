"""The persistent RMSNorm forward: a fixed grid of CTAs walks the rows, one row ahead.

Each CTA (or lane group, for short rows) loads its weights once, then loops over
rows ``cta, cta + G, ...``: it issues the loads of the *next* row before the
reduction of the current one, so DRAM is busy while the row statistics are
formed, and stores the current row while the next one arrives. Same math,
hints and layouts as :mod:`.fwd` (whose :class:`~.fwd.Plan`
it takes), with ``G = sms * ctas_per_sm`` CTAs.
"""
from __future__ import annotations

from ... import kernel
from ...dsl import ptx, reg
from ...core.types import PtxType, f32

from .._common.launch_order import after_previous_kernel, pdl_for
from .._common.reduce import RowSum
from .._common.rowio import l2_policy, load_chunk, narrow, store_chunk
from .fwd import X_POLICY, Plan, forward_specs
from .row import (
    add_residual, balanced_grid, both, persistent_rows, rstd_of, scale, store_rstd, unpack,
    with_offset)


def loop_ctas_per_sm(p: Plan) -> int:
    """CTAs per SM the register file allows (x, next x and w resident per thread);
    0 when not even one fits, or the row is too long for registers."""
    if p.two_pass or p.chunks < 4096:
        # Measured on an H200 (lab/rmsnorm_tune.py): one CTA per row is faster up
        # to 8192 f32 / 16384 halves; the loop wins from 4096 chunks (16384 f32) up, at
        # 1024 rows (for more rows, RowConfig.loop_rows_per_cta in plans.json).
        return 0
    values = p.per_thread * p.vec
    regs = 32 + values * 3
    return min(32, 2048 // p.block, 65536 // (p.block * regs))


def build_forward_loop(p: Plan, dtype: PtxType, wdtype: PtxType, grid: int, *,
                       eps: float = 1e-6, residual: bool = False, with_rstd: bool = False,
                       arch: str = "sm_90a", offset: float = 0.0):
    """Persistent forward kernel over at most ``grid`` CTAs (same arguments as
    :func:`~.fwd.build_forward`)."""
    N, T, R, V, K = p.n, p.threads, p.rows_per_cta, p.vec, p.per_thread
    es, wes = dtype.bytes, wdtype.bytes
    ins, outs, names = forward_specs(N, dtype, wdtype, residual, with_rstd)

    pdl = pdl_for(arch)

    @kernel(in_specs=ins, out_specs=outs,
            grid=lambda M: (balanced_grid(-(-M // R), grid), 1, 1), block=(p.block, 1, 1),
            arch=arch, name=f"rms_norm_fwd_loop_{dtype.name}_{N}", arg_names=names,
            pdl=pdl)
    def rms_norm_fwd_loop(*args):
        X, Rs, W, Y, H, RSTD = unpack(args, residual, with_rstd)
        after_previous_kernel(pdl)

        at = persistent_rows(p, X, W, Y, Rs, H, es, wes)
        tid, cta, ncta, m, lane, group = at.tid, at.cta, at.ncta, at.m, at.lane, at.group
        nblocks, sx, x0, y0, w0, chunk_ok = at.nblocks, at.sx, at.x0, at.y0, at.w0, at.chunk_ok
        if residual:
            sr, r0, h0 = at.sr, at.r0, at.h0
        step, wstep = T * V * es, T * V * wes
        policies: dict = {}
        xpol = l2_policy(X_POLICY, policies)
        ws = [with_offset(load_chunk(w0, k * wstep, wdtype, V, pred=chunk_ok[k],
                                     hints=p.w_hints, policy=l2_policy(p.w_policy, policies)),
                          offset) for k in range(K)]
        reduce = RowSum(T, tid, looped=True)

        def row_of(rb):
            return rb if R == 1 else (rb << at.shift) + group

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
                    x = add_residual(x, r, dtype)
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
            rstd = rstd_of(total, N, eps)
            ok = row < m
            if RSTD is not None:
                store_rstd(RSTD, row, rstd, lane, ok)
            yrow = y0 + row * (N * es)
            for k in range(K):
                store_chunk(yrow, k * step, dtype, narrow(scale(cur[k], ws[k], rstd), dtype),
                            pred=both(chunk_ok[k], ok), hints=p.y_hints)
            for c, n in zip(cur, nxt):
                for a, b in zip(c, n):
                    ptx.inst.mov.f32(a, b)

    return rms_norm_fwd_loop
