"""What the forward's consumers write out (:mod:`.fwd`): P into shared memory for the SS
form of P·V (``Config.p_smem``), O through a swizzled staging buffer and TMA stores
(``Config.tma_store``), and O and the row LSE by ``st.global`` from registers."""
from __future__ import annotations

from ...core.types import b32
from ...dsl import ptx, reg
from .config import padded
from .softmax import quad_reduce, row_inverse, row_lse
from .tiles import PANEL, ROW, s32_of as _s32


def store_p(s, p_at, lw, warp, dtype, bm, bar) -> None:
    """``Config.p_smem``: this thread's P elements (S after the softmax) as 16-bit pairs
    into the consumer's 64 rows of P at ``p_at`` (64-key panels of ``bm`` swizzled
    128-byte rows, what a K-major wgmma descriptor reads: element (row, key) of a panel
    at ``row * 128 + 16 * ((key / 8) ^ (row & 7)) + 2 * (key & 7)``), then
    ``fence.proxy.async`` (the generic-proxy stores before the async proxy's reads) and
    the warpgroup meets at named barrier ``bar``, so every warp's P is written before
    the P·V wgmma is issued."""
    frow = warp * 16 + (lw >> 2)
    q = frow & 7
    fb = (lw & 3) * (2 * dtype.bytes)
    xs = [(q << 4) + fb if c == 0 else ((q ^ c) << 4) + fb for c in range(8)]
    bases = [p_at + frow * ROW, p_at + (frow + 8) * ROW]
    # accumulator element g + 2r + {0, 1}: row r0 + 8r, keys fcol + 8 (g / 4) + {0, 1}
    for g in range(0, len(s), 4):
        key = 8 * (g // 4)
        pnl, c = divmod(key // 8, 8)
        for r in range(2):
            pair = reg.scalar(b32)
            ptx.inst(f"cvt.rn.{dtype.name}x2.f32", pair, s[g + 2 * r + 1], s[g + 2 * r])
            ptx.inst("st.shared.b32", ptx.addr(bases[r] + xs[c], pnl * bm * ROW), pair)
    ptx.inst("fence.proxy.async.shared::cta")
    ptx.inst("bar.sync", bar, 128)



def stage_out(o_acc, l, lane, lw, warp, cons, stage, sched, w, d, dtype, bm, nc) -> None:
    """``Config.tma_store``: this consumer's 64 rows of O / l into its half of the staging
    buffer (64-column panels of 128-byte swizzled rows, what a TMA box of (1, 64, 1, 64)
    reads), then one thread stores each panel with TMA, which clips rows past SQ and
    columns past D. Element (row, col) of a panel is at byte ``row * 128 + 16 * ((col / 8)
    ^ (row & 7)) + 2 * (col & 7)``; a thread's two rows share ``row & 7``. Before the
    buffer is written again, the previous tile's stores must have read it
    (``cp.async.bulk.wait_group.read 0``, then the warpgroup meets at named barrier 3 +
    consumer)."""
    bar = 1 + nc + cons                          # after the ping-pong barriers 1 .. nc
    with ptx.if_(lane == 0):
        ptx.tma.wait(0, read=True)
    ptx.inst("bar.sync", bar, 128)
    mine = stage + cons * (64 * ROW)
    frow = warp * 16 + (lw >> 2)
    q = frow & 7
    fb = (lw & 3) * (2 * dtype.bytes)            # the thread's pair inside a 16-byte chunk
    xs = [(q << 4) + fb if c == 0 else ((q ^ c) << 4) + fb for c in range(8)]
    bases = [mine + frow * ROW, mine + (frow + 8) * ROW]
    inv = []
    for r in range(2):
        quad_reduce(l[r], "add")
        inv.append(row_inverse(l[r])[0])
    elems = list(o_acc)
    for g in range(0, len(elems), 4):            # 8-column group g / 4: rows r0, r0 + 8
        col = 8 * (g // 4)
        pnl, c = divmod(col // 8, 8)
        for r in range(2):
            lo, hi = elems[g + 2 * r], elems[g + 2 * r + 1]
            ptx.inst.mul.f32(lo, lo, inv[r])
            ptx.inst.mul.f32(hi, hi, inv[r])
            pair = reg.scalar(b32)
            ptx.inst(f"cvt.rn.{dtype.name}x2.f32", pair, hi, lo)
            ptx.inst("st.shared.b32", ptx.addr(bases[r] + xs[c], pnl * bm * ROW), pair)
    for col in range(d, padded(d), 8):           # head dim 96: the box's columns past D,
        pnl, c = divmod(col // 8, 8)             # which TMA reads (and does not store)
        for r in range(2):
            ptx.inst("st.shared.b32", ptx.addr(bases[r] + xs[c], pnl * bm * ROW), 0)
    ptx.inst("fence.proxy.async.shared::cta")
    ptx.inst("bar.sync", bar, 128)
    with ptx.if_(lane == 0):
        for p in range(padded(d) // PANEL):
            ptx.tma.store(sched.to, [p * PANEL, w.head, w.m0 + cons * 64, w.batch],
                          mine + p * bm * ROW)
        ptx.tma.commit()


def epilogue(o_acc, m, l, rows, urows, fcol, lw, po, pl, sched, w, d, dtype, *,
              store: bool = True) -> None:
    """O / l in 16-bit pairs (``cvt.rn``) by ``st.global.b32`` (unless ``store`` is False:
    :func:`stage_out` stored it), LSE = (m + lg2 l) ln 2 by one thread of each quad; rows
    past the sequence are not written; a row with no key gives 0 and -inf."""
    sq_s = _s32(sched.row_bound(w))
    for r in range(2):
        if store:
            quad_reduce(l[r], "add")
        inv, some = row_inverse(l[r])
        with ptx.if_(rows[r] < sq_s):
            row = sched.out_row(w, urows[r]) if store else None
            ptr = po + (row * d + fcol) * dtype.bytes if store else None
            elems = list(o_acc) if store else []
            for g in range(0, len(elems), 4):     # elements g, g + 1: row r0; g + 2, g + 3: r0 + 8
                i = g + 2 * r
                lo, hi = elems[i], elems[i + 1]
                ptx.inst.mul.f32(lo, lo, inv)
                ptx.inst.mul.f32(hi, hi, inv)
                pair = reg.scalar(b32)
                ptx.inst(f"cvt.rn.{dtype.name}x2.f32", pair, hi, lo)
                ptx.inst("st.global.b32", ptx.addr(ptr, (8 * (i // 4)) * dtype.bytes), pair)
            with ptx.if_((lw & 3) == 0):
                val = row_lse(l[r], m[r], some)
                ptx.inst("st.global.f32", ptx.addr(pl + sched.lse_at(w, urows[r]) * 4), val)


__all__ = ["store_p", "stage_out", "epilogue"]
