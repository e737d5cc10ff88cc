"""The combine pass of the decode forward: each output row merges its ``NS`` partial
``(O_s, lse_s)`` (O_s already divided by its own sum) in f32::

    lse = log(sum_s exp(lse_s)),   out = sum_s exp(lse_s - lse) * O_s

One warp per row of ``(B, H, SQ)``, each lane ``D / 32`` adjacent columns
(``ld.global.v4.f32`` at D = 128). The splits are read ``UNROLL`` at a time (loads
predicated past NS), all of a chunk's loads in flight before the chunk's math, and merged
online (running max in the log2 domain): a row costs one L2 round trip per chunk.
A row whose splits are all -inf (no key) gives 0 and -inf.
"""
from __future__ import annotations

from ... import Tile, kernel
from ...core.types import PtxType, b32, f32, pred, u32
from ...dsl import ptx, reg
from .._common.launch_order import after_previous_kernel, pdl_for
from .softmax import LOG2E, NEG_INF, lse_max, row_inverse, row_lse

UNROLL = 8           # splits whose loads one chunk keeps in flight
WARPS = 4            # rows per CTA
LAST_UNROLL = 16     # the fused merge's loads in flight: one L2 round trip up to 16 splits


def build_combine(dtype: PtxType, d: int, *, arch: str = "sm_90a"):
    """The combine kernel: opart (NS, B, H, SQ, D) f32 and lpart (NS, B, H, SQ) f32 in;
    out (B, SQ, H, D) in ``dtype`` and lse (B, H, SQ) f32 out."""
    if d % 64 or not 64 <= d <= 128:
        raise ValueError(f"head dim {d}: the combine takes 64 or 128")
    pdl = pdl_for(arch)                     # the splits are merged by merge_row

    def grid(B, H, SQ):
        return ((B * H * SQ + WARPS - 1) // WARPS, 1, 1)

    @kernel(in_specs=(Tile("NS", "B", "H", "SQ", d, f32), Tile("NS", "B", "H", "SQ", f32)),
            out_specs=(Tile("B", "SQ", "H", d, dtype), Tile("B", "H", "SQ", f32)),
            arg_names=("opart", "lpart", "out", "lse"), grid=grid, block=(32 * WARPS, 1, 1),
            arch=arch, name=f"attention_decode_combine_{dtype.name}_d{d}", pdl=pdl)
    def attention_decode_combine(op, lp, o, lse):
        ns, sq, nh = ptx.dim("NS"), ptx.dim("SQ"), ptx.dim("H")
        rows = ptx.dim("B") * nh * sq
        tid = reg.scalar(u32); ptx.inst.mov.u32(tid, ptx.special.tid.x())
        cta = reg.scalar(u32); ptx.inst.mov.u32(cta, ptx.special.ctaid.x())
        lane = tid & 31
        row = cta * WARPS + (tid >> 5)
        after_previous_kernel(pdl, 32 * WARPS)
        po, pl, pout, plse = ptx.global_ptrs(op, lp, o, lse)
        with ptx.if_(row < rows):
            acc, tot, mx = merge_row(po, pl, ns, rows, row, lane, d)

            def out_row():
                s = row % sq
                bh = row // sq
                return ((bh // nh) * sq + s) * nh + bh % nh
            store_row(dtype, d, acc, tot, mx, lane, pout, out_row, lambda: plse + row * 4)

    return attention_decode_combine


def merge_row(po, pl, ns, rows, row, lane, d: int, unroll: int = UNROLL):
    """Partial row ``row`` of each split ``0 .. ns-1`` (``rows`` per split) merged in split
    order (the order fixes the sum's rounding: the result does not depend on which
    split finished first); lane ``lane`` holds ``D / 32`` adjacent columns. Returns
    ``(acc, tot, mx)``: the lane's unnormalised columns, the row's sum of weights and
    running max (log2 domain)."""
    c = d // 32
    mx = reg.scalar(f32, init=NEG_INF)       # running max, log2 domain
    tot = reg.scalar(f32, init=0.0)
    acc = [reg.scalar(f32, init=0.0) for _ in range(c)]
    for s0 in ptx.range_(0, ns, unroll):
        xs, os_ = [], []
        for u in range(unroll):
            x = reg.scalar(f32, init=NEG_INF)
            ov = [reg.scalar(f32, init=0.0) for _ in range(c)]
            live = reg.scalar(pred)
            ptx.inst.setp.lt.u32(live, s0 + u, ns)
            prow = (s0 + u) * rows + row
            ptx.inst("ld.global.f32", x, ptx.addr(pl + prow * 4), pred=live)
            ptx.inst(f"ld.global.v{c}.f32", ov, ptx.addr(po + (prow * d + lane * c) * 4),
                     pred=live)
            xs.append(x)
            os_.append(ov)
        new, use, neg = lse_max(xs, mx)
        alpha = reg.scalar(f32)
        ptx.inst.sub.f32(alpha, mx, use)
        ptx.inst("ex2.approx.ftz.f32", alpha, alpha)
        ptx.inst.mul.f32(tot, tot, alpha)
        for a in acc:
            ptx.inst.mul.f32(a, a, alpha)
        for x, ov in zip(xs, os_):
            w = reg.scalar(f32)
            ptx.inst("fma.rn.f32", w, x, LOG2E, neg)
            ptx.inst("ex2.approx.ftz.f32", w, w)
            ptx.inst.add.f32(tot, tot, w)
            for a, y in zip(acc, ov):
                ptx.inst("fma.rn.f32", a, w, y, a)
        ptx.inst.mov.f32(mx, new)
    return acc, tot, mx


def store_row(dtype: PtxType, d: int, acc, tot, mx, lane, pout, out_row, lse_at) -> None:
    """A merged row (:func:`merge_row`) normalised into ``dtype`` at row ``out_row()`` of
    ``pout`` (called after the normaliser), and its LSE (lane 0) at ``lse_at()``."""
    c = d // 32
    inv, some = row_inverse(tot)
    orow = out_row()
    words = []
    for i in range(0, c, 2):
        ptx.inst.mul.f32(acc[i], acc[i], inv)
        ptx.inst.mul.f32(acc[i + 1], acc[i + 1], inv)
        w = reg.scalar(b32)
        ptx.inst(f"cvt.rn.{dtype.name}x2.f32", w, acc[i + 1], acc[i])
        words.append(w)
    at = ptx.addr(pout + (orow * d + lane * c) * dtype.bytes)
    if len(words) > 1:
        ptx.inst(f"st.global.v{len(words)}.b32", at, words)
    else:
        ptx.inst("st.global.b32", at, words[0])
    with ptx.if_(lane == 0):
        val = row_lse(tot, mx, some)
        ptx.inst("st.global.f32", ptx.addr(lse_at()), val)


def last_merges(dtype: PtxType, d: int, group: int, ns, tid, ticket, po, pl, pout, plse,
                tile, dims) -> None:
    """The fused combine, in the consumer warpgroup (``tid`` 0..127) of a split CTA once
    its partial rows are stored: thread 0 takes a ticket from the tile's word
    ``[ticket]`` (``atom.acq_rel.gpu`` after a barrier of the warpgroup, so the add
    releases every thread's partial stores, and the last add acquires every split's);
    the split that takes the last of ``ns`` tickets resets the word to zero for the next
    launch and merges the tile's rows, a warp per row (in split order, whichever split
    came last; all of up to ``LAST_UNROLL`` splits' loads in flight at once: the merge is
on the launch's critical path). ``tile``: (batch, K/V head, first query position, tile rows in use);
    ``dims``: (B, H, SQ)."""
    batch, hkv, sq0, used = tile
    nb, nh, sq = dims
    ptx.inst.bar.sync(1, 128)
    mine = reg.scalar(u32, init=0)
    with ptx.if_(tid == 0):
        ptx.inst.atom.acq_rel.gpu.global_.add.u32(mine, ptx.addr(ticket), 1)
        ptx.inst.add.u32(mine, mine, 1)
        with ptx.if_(mine == ns):
            ptx.inst.st.relaxed.gpu.global_.u32(ptx.addr(ticket), 0)
    last, is_last = reg.scalar(pred), reg.scalar(pred)
    ptx.inst.setp.eq.u32(last, mine, ns)
    ptx.inst.bar.red.or_.pred(is_last, 1, 128, last)
    lane, rows = tid & 31, nb * nh * sq
    with ptx.if_(is_last):
        for r in ptx.range_(tid >> 5, used, 4):
            head = hkv * group + r % group
            pos = sq0 + r // group
            prow = (batch * nh + head) * sq + pos
            acc, tot, mx = merge_row(po, pl, ns, rows, prow, lane, d, LAST_UNROLL)
            store_row(dtype, d, acc, tot, mx, lane, pout,
                      lambda: (batch * sq + pos) * nh + head, lambda: plse + prow * 4)


__all__ = ["build_combine", "last_merges", "merge_row", "store_row", "UNROLL", "WARPS"]
