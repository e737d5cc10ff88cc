"""RMSNorm backward kernels, written in the DSL.

For ``y = x * rstd * w`` (rstd saved by the forward pass):

* ``dx = rstd * (dy*w - x * rstd^2 * mean(dy*w*x))``
* ``dw = sum over rows of dy * x * rstd``

``dw`` is reduced deterministically: a persistent grid of ``G`` CTAs (``G`` a
compile-time constant, from the device's SM count) walks the rows
``cta, cta+G, ...`` in a fixed order, keeps its dw partial in registers and
writes one row of an f32 ``(G, N)`` buffer; a second kernel sums that buffer
down its columns, again in a fixed order. No float atomics: the same inputs
give the same bits on every run.
"""
from __future__ import annotations

from dataclasses import dataclass

from ptxdsl import Tile, kernel, ptx, reg, smem
from ptxdsl.types import PtxType, f32, u32

from ._reduce import RowSum
from ._rowio import load_chunk, narrow, store_chunk
from .rms_norm_fwd import WARP, max_vec

@dataclass(frozen=True)
class BwdPlan:
    n: int
    vec: int
    threads: int           # threads per row (= per CTA)
    grid: int              # G: persistent CTAs (rows cta, cta+G, ...)
    prefetch: bool = True  # load the next row while reducing this one
    preload_w: bool = True
    # Rows too long for registers: stream x/dy twice (the second read mostly hits
    # L2) and keep the dw partial in the CTA's own row of the f32 partial buffer.
    streaming: bool = False

    @property
    def chunks(self) -> int:
        return -(-self.n // self.vec)

    @property
    def per_thread(self) -> int:
        return -(-self.chunks // self.threads)

    @property
    def ragged(self) -> bool:
        return self.chunks % self.threads != 0


def plan_backward(n: int, dtype: PtxType, sms: int = 132, *, vec: int | None = None,
                  threads: int | None = None, ctas_per_sm: int | None = None,
                  prefetch: bool | None = None) -> BwdPlan:
    vec = vec or max_vec(n, dtype)
    chunks = -(-n // vec)
    if threads is None:
        # ~16 values of each of x, dy, dw per thread, and 512 threads when the row
        # has the chunks for them (tuned on an H200 with bench/rmsnorm_tune.py).
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
    regs = regs_for(prefetch, streaming)
    if ctas_per_sm is None:
        # Hopper: at most 32 CTAs, 2048 threads and 64K registers per SM.
        ctas_per_sm = max(1, min(32, 2048 // threads, 65536 // (threads * regs)))
    return BwdPlan(n, vec, threads, sms * ctas_per_sm, prefetch and not streaming,
                   not streaming, streaming)


def build_backward(p: BwdPlan, dtype: PtxType, wdtype: PtxType, *, arch: str = "sm_90a"):
    """dX and the per-CTA dW partials.

    Arguments: DY (M, N), X (M, N) (strided rows), W (N,), RSTD (M,) f32;
    outputs DX (M, N), DWP (G, N) f32.
    """
    N, T, V, G, K = p.n, p.threads, p.vec, p.grid, p.per_thread
    es, wes = dtype.bytes, wdtype.bytes

    @kernel(in_specs=(Tile("M", N, dtype, stride="sdy"), Tile("M", N, dtype, stride="sx"),
                      Tile(N, wdtype), Tile("M", f32)),
            out_specs=(Tile("M", N, dtype), Tile(G, N, f32)),
            grid=(G, 1, 1), block=(T, 1, 1), arch=arch,
            name=f"rms_norm_bwd_{dtype.name}_{N}")
    def rms_norm_bwd(DY, X, W, RSTD, DX, DWP):
        pdy, px, pw, prs, pdx, pdwp = ptx.global_ptrs(DY, X, W, RSTD, DX, DWP)
        tid = reg.scalar(u32); ptx.inst.mov.u32(tid, ptx.special.tid.x())
        cta = reg.scalar(u32); ptx.inst.mov.u32(cta, ptx.special.ctaid.x())
        m = ptx.dim("M")
        sdy, sx = DY.row_stride, X.row_stride
        lane_b = tid * (V * es)
        dy0 = pdy + lane_b
        x0 = px + lane_b
        dx0 = pdx + lane_b
        wrow = pw + tid * (V * wes)

        def guard(k):
            if not p.ragged or (k + 1) * T <= p.chunks:
                return None
            return tid < (p.chunks - k * T)

        preds = [guard(k) for k in range(K)]
        step = T * V * es
        prow = pdwp + cta * (N * 4) + tid * (V * 4)
        if p.streaming:
            _streaming_rows(p, dtype, wdtype, cta, m, dy0, x0, dx0, wrow, prow, prs, sdy, sx,
                            preds, tid)
            return
        ws = [load_chunk(wrow, k * T * V * wes, wdtype, V, pred=preds[k]) for k in range(K)]
        dw = [reg.scalar(f32, init=0.0) for _ in range(K * V)]
        row_sum = RowSum(T, tid, looped=True)

        def row_ptrs(row):
            return (dy0 + row * (sdy * es), x0 + row * (sx * es))

        def load_row(row, ok):
            pdy_r, px_r = row_ptrs(row)
            dys, xs = [], []
            for k in range(K):
                g = _and(preds[k], ok)
                dys.append(load_chunk(pdy_r, k * step, dtype, V, pred=g))
                xs.append(load_chunk(px_r, k * step, dtype, V, pred=g))
            return dys, xs

        if p.prefetch:
            cur_dy, cur_x = load_row(cta, cta < m)
        for row in ptx.range_(cta, m, G):
            if p.prefetch:
                dys, xs = cur_dy, cur_x
            else:
                dys, xs = load_row(row, None)
            rstd = reg.scalar(f32)
            ptx.inst.ld.global_.nc.f32(rstd, ptx.addr(prs + row * 4))
            dot = reg.scalar(f32, init=0.0)
            gw = []  # dy * w, reused by dx
            for k in range(K):
                for d, x, w in zip(dys[k], xs[k], ws[k]):
                    t = reg.scalar(f32)
                    ptx.inst.mul.f32(t, d, w)
                    ptx.inst.fma.rn.f32(dot, t, x, dot)
                    gw.append(t)
            if p.prefetch:
                nxt = row + G
                nxt_dy, nxt_x = load_row(nxt, nxt < m)
            total = row_sum(dot)
            # k = rstd^2 * mean(dy*w*x); dx = rstd * (dy*w - x*k)
            c = reg.scalar(f32)
            ptx.inst.mul.f32(c, rstd, rstd)
            ptx.inst.mul.f32(c, c, total)
            ptx.inst.mul.f32(c, c, 1.0 / N)
            pdx_r = dx0 + row * (N * es)
            i = 0
            for k in range(K):
                outs = []
                for d, x in zip(dys[k], xs[k]):
                    t = reg.scalar(f32)
                    ptx.inst.neg.f32(t, x)
                    ptx.inst.fma.rn.f32(t, t, c, gw[i])
                    ptx.inst.mul.f32(t, t, rstd)
                    outs.append(t)
                    xh = reg.scalar(f32)
                    ptx.inst.mul.f32(xh, x, rstd)
                    ptx.inst.fma.rn.f32(dw[i], d, xh, dw[i])
                    i += 1
                store_chunk(pdx_r, k * step, dtype, narrow(outs, dtype), pred=preds[k])
            if p.prefetch:
                for cur, new in ((cur_dy, nxt_dy), (cur_x, nxt_x)):
                    for a_list, b_list in zip(cur, new):
                        for a, b in zip(a_list, b_list):
                            ptx.inst.mov.f32(a, b)
        for k in range(K):
            store_chunk(prow, k * T * V * 4, f32, dw[k * V:(k + 1) * V], pred=preds[k])

    return rms_norm_bwd


def _streaming_rows(p, dtype, wdtype, cta, m, dy0, x0, dx0, wrow, prow, prs, sdy, sx, preds,
                    tid):
    """The long-row backward: two streamed passes per row, dw partial in global memory."""
    N, T, V, G, K = p.n, p.threads, p.vec, p.grid, p.per_thread
    es, wes = dtype.bytes, wdtype.bytes
    step, wstep, pstep = T * V * es, T * V * wes, T * V * 4
    zeros = [reg.scalar(f32, init=0.0) for _ in range(V)]
    for k in range(K):
        store_chunk(prow, k * pstep, f32, zeros, pred=preds[k])
    row_sum = RowSum(T, tid, looped=True)
    for row in ptx.range_(cta, m, G):
        rstd = reg.scalar(f32)
        ptx.inst.ld.global_.nc.f32(rstd, ptx.addr(prs + row * 4))
        pdy_r, px_r = dy0 + row * (sdy * es), x0 + row * (sx * es)
        dot = reg.scalar(f32, init=0.0)
        for k in range(K):
            d = load_chunk(pdy_r, k * step, dtype, V, pred=preds[k])
            x = load_chunk(px_r, k * step, dtype, V, pred=preds[k])
            w = load_chunk(wrow, k * wstep, wdtype, V, pred=preds[k])
            for a, b, c in zip(d, x, w):
                t = reg.scalar(f32)
                ptx.inst.mul.f32(t, a, c)
                ptx.inst.fma.rn.f32(dot, t, b, dot)
        total = row_sum(dot)
        c = reg.scalar(f32)
        ptx.inst.mul.f32(c, rstd, rstd)
        ptx.inst.mul.f32(c, c, total)
        ptx.inst.mul.f32(c, c, 1.0 / N)
        pdx_r = dx0 + row * (N * es)
        for k in range(K):
            d = load_chunk(pdy_r, k * step, dtype, V, pred=preds[k])
            x = load_chunk(px_r, k * step, dtype, V, pred=preds[k])
            w = load_chunk(wrow, k * wstep, wdtype, V, pred=preds[k])
            acc = load_chunk(prow, k * pstep, f32, V, pred=preds[k])
            outs = []
            for a, b, ww, s in zip(d, x, w, acc):
                t = reg.scalar(f32)
                ptx.inst.mul.f32(t, a, ww)
                u = reg.scalar(f32)
                ptx.inst.neg.f32(u, b)
                ptx.inst.fma.rn.f32(u, u, c, t)
                ptx.inst.mul.f32(u, u, rstd)
                outs.append(u)
                xh = reg.scalar(f32)
                ptx.inst.mul.f32(xh, b, rstd)
                ptx.inst.fma.rn.f32(s, a, xh, s)
            store_chunk(pdx_r, k * step, dtype, narrow(outs, dtype), pred=preds[k])
            store_chunk(prow, k * pstep, f32, acc, pred=preds[k])


def _and(a, b):
    if a is None:
        return b
    if b is None:
        return a
    return a & b


def build_dw_reduce(n: int, g: int, wdtype: PtxType, *, arch: str = "sm_90a",
                    slices: int = 8):
    """dW[j] = sum over g of DWP[g, j], in a fixed order (f32 accumulation).

    A CTA covers 128 columns (32 lanes x 4) with ``slices`` rows of threads;
    each thread sums every ``slices``-th partial row (loads unrolled at trace
    time, so all are in flight together), then one thread per column adds the
    ``slices`` results in order.
    """
    vec = 4 if n % 4 == 0 else 1
    cols = 32 * vec
    per = -(-g // slices)

    @kernel(in_specs=(Tile(g, n, f32),), out_specs=(Tile(n, wdtype),),
            grid=(-(-n // cols), 1, 1), block=(32, slices, 1), arch=arch,
            name=f"rms_norm_dw_{wdtype.name}_{n}")
    def rms_norm_dw(DWP, DW):
        pp, pd = ptx.global_ptrs(DWP, DW)
        tx = reg.scalar(u32); ptx.inst.mov.u32(tx, ptx.special.tid.x())
        ty = reg.scalar(u32); ptx.inst.mov.u32(ty, ptx.special.tid.y())
        cta = reg.scalar(u32); ptx.inst.mov.u32(cta, ptx.special.ctaid.x())
        col = cta * cols + tx * vec
        ok = col < n
        acc = [reg.scalar(f32, init=0.0) for _ in range(vec)]
        base = pp + col * 4 + ty * (n * 4)
        for i in range(per):
            gi_ok = ok if (i + 1) * slices <= g else ok & (ty < g - i * slices)
            vals = load_chunk(base, i * slices * n * 4, f32, vec, pred=gi_ok)
            for a, v in zip(acc, vals):
                ptx.inst.add.f32(a, a, v)
        red = smem.alloc(f32, (slices, cols))
        for j in range(vec):
            red[ty, tx * vec + j] = acc[j]
        ptx.bar.sync(0)
        with ptx.if_(ty == 0):
            with ptx.if_(ok):
                out = []
                for j in range(vec):
                    s = reg.scalar(f32, init=0.0)
                    for t in range(slices):
                        ptx.inst.add.f32(s, s, red[t, tx * vec + j])
                    out.append(s)
                store_chunk(pd + col * wdtype.bytes, 0, wdtype, narrow(out, wdtype))

    return rms_norm_dw
