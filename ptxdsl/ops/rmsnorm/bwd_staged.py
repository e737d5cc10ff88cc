"""The staged RMSNorm backward for long rows: dy and x wait in shared memory.

Rows too long for a thread to hold its part of dy, x and the dw partial in
registers (16384 halves or f32 at 1024 threads) used to be *streamed*: both
passes read dy and x from global memory (the second mostly from L2) and the dw
partial lived in a global row that each row read and rewrote. With one CTA per
SM that left DRAM idle for the whole second pass.

Here each thread ``cp.async``-copies its own 16-byte chunks of dy and x into a
ring of ``stages`` row buffers in dynamic shared memory, several rows ahead, so
the copies of later rows are in flight while this one is reduced and written.
Both passes read the row from shared memory; dy * w of the first pass is kept in
registers for the second (w comes from L1 every row), and the dw partial stays in
registers until the CTA's last row. As in ``lab/rmsnorm_fwd_async.py``, a thread
reads only the chunks it copied, so the ring needs no barrier:
``cp.async.wait_group`` makes a thread's copies visible to that thread, and a
buffer is refilled only after the same thread has read it.
"""
from __future__ import annotations

from ...dsl import ptx, reg, smem
from ...core.types import PtxType, f32, u8, u32

from .._common.reduce import RowSum
from .._common.rowio import RING_ALIGN, l2_prefetch_rows, load_chunk, narrow, store_chunk
from .bwd_row import dot_chunk, dx_chunk, dx_coeff
from .row import both, with_offset

SMEM_PER_CTA = 227 * 1024  # Hopper: the most dynamic shared memory one CTA may opt into
# Room for the kernel's static arrays: the fused dW sum's tile (16 bytes per thread, up
# to 1024) and the row sum's per-warp partials.
SMEM_SLACK = 17 * 1024
MAX_VALUES = 16            # dw partial values per thread kept in registers (x2 for dy*w)


def stage_bytes(n: int, dtype: PtxType) -> int:
    """One ring buffer: a row of dy and a row of x."""
    return 2 * n * dtype.bytes


def max_stages(n: int, dtype: PtxType, threads: int, vec: int, *, cap: int = 2) -> int:
    """Ring buffers (at most ``cap``) that fit one CTA's shared memory for rows of ``n``,
    or 0 when the staged kernel does not apply: it copies 16-byte chunks and keeps at
    most MAX_VALUES dw values per thread in registers."""
    if vec * dtype.bytes != 16 or -(-n // (vec * threads)) * vec > MAX_VALUES:
        return 0
    return max(0, min(cap, (SMEM_PER_CTA - SMEM_SLACK) // stage_bytes(n, dtype)))


def staged_rows(p, dtype, wdtype, cta, m, dy0, x0, dx0, wrow, prow, prs, sdy, sx, preds, tid,
                offset=0.0):
    """dX for rows ``cta, cta + G, ...`` through the shared-memory ring; the dw
    partial in registers, stored to this CTA's row ``prow`` at the end."""
    N, T, V, G, K, S = p.n, p.threads, p.vec, p.grid, p.per_thread, p.stages
    es, wes = dtype.bytes, wdtype.bytes
    cb = V * es                      # bytes per chunk: one cp.async.cg
    if cb != 16 or S < 1:
        raise ValueError(f"the staged backward copies 16-byte chunks into at least one "
                         f"buffer; this plan has {V}x{es}-byte chunks and {S} buffers "
                         f"(plan_backward(stages=...) picks a plan that fits)")
    step, wstep = T * cb, T * V * wes
    sb = stage_bytes(N, dtype)
    xoff = N * es                    # x's row follows dy's in a buffer
    ring = smem.alloc(u8, (S * sb,), dynamic=True, align=RING_ALIGN)
    mine = ring.base + tid * cb      # this thread's first chunk of buffer 0
    dw = [reg.scalar(f32, init=0.0) for _ in range(K * V)]
    row_sum = RowSum(T, tid, looped=True)

    def issue(row, off):
        """Copy this thread's chunks of ``row`` into the buffer at ``off`` and close the
        group (an empty group past the last row keeps the count for wait_group)."""
        ok = row < m
        for base, stride, at in ((dy0, sdy, 0), (x0, sx, xoff)):
            src = base + row * (stride * es)
            for k in range(K):
                ptx.inst("cp.async.cg.shared.global", ptx.addr(mine + off, at + k * step),
                         ptx.addr(src, k * step), cb, pred=both(preds[k], ok))
        ptx.inst("cp.async.commit_group")

    take = reg.scalar(u32, init=0)             # buffer read this iteration
    fill = reg.scalar(u32, init=(S - 1) * sb)  # buffer refilled this iteration
    for s in range(S - 1):
        issue(cta + s * G, s * sb)
    for row in ptx.range_(cta, m, G):
        if p.l2_ahead:  # and the row after the ring's last towards L2
            l2_prefetch_rows(tid, row + S * G, m, ((dy0, sdy * es), (x0, sx * es)), N * es)
        issue(row + (S - 1) * G, fill)
        ptx.inst("cp.async.wait_group", S - 1)
        rstd = reg.scalar(f32)
        ptx.inst.ld.global_.nc.f32(rstd, ptx.addr(prs + row * 4))
        src = mine + take
        dot = reg.scalar(f32, init=0.0)
        gw = []  # dy * w, reused by dx
        def chunk(k):
            """This thread's chunk k of dy and of x, from the buffer being read."""
            return (load_chunk(src, k * step, dtype, V, pred=preds[k], space="shared"),
                    load_chunk(src, xoff + k * step, dtype, V, pred=preds[k], space="shared"))

        for k in range(K):
            d, x = chunk(k)
            # w from L1 each row: held across rows it would cost the registers of dw
            w = with_offset(load_chunk(wrow, k * wstep, wdtype, V, pred=preds[k]), offset)
            dot_chunk(d, x, w, dot, gw)
        c = dx_coeff(rstd, row_sum(dot), N)
        pdx_r = dx0 + row * (N * es)
        for k in range(K):
            # The second read of the row comes from shared memory too (registers are
            # what the staged kernel is short of).
            d, x = chunk(k)
            part = slice(k * V, (k + 1) * V)
            outs = dx_chunk(d, x, gw[part], dw[part], c, rstd)
            store_chunk(pdx_r, k * step, dtype, narrow(outs, dtype), pred=preds[k])
        # The buffer just read is the next one to refill; the read pointer moves on.
        ptx.inst.mov.u32(fill, take)
        ptx.inst.add.u32(take, take, sb)
        ptx.inst.selp.u32(take, 0, take, take == S * sb)
    for k in range(K):
        store_chunk(prow, k * T * V * 4, f32, dw[k * V:(k + 1) * V], pred=preds[k])
