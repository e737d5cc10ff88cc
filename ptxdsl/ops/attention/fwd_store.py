"""What the forward's consumers write out (:mod:`.fwd`): O through a swizzled staging
buffer and TMA stores (``Config.tma_store``), and O and the row LSE by ``st.global`` from
registers."""
from __future__ import annotations

import contextlib

from ...core.types import b32, f32, pred
from ...dsl import ptx, reg
from .config import padded
from .softmax import quad_reduce, row_inverse, row_lse
from .tiles import PANEL, ROW, s32_of as _s32


def stage_out(o_acc, l, lane, lw, warp, cons, stage, sched, w, d, dtype, bm, nc, *,
              late=None, whole=None) -> None:
    """``Config.tma_store``: this consumer's 64 rows of O / l into its half of the staging
    buffer (64-column panels of 128-byte swizzled rows, what a TMA box of (1, 64, 1, 64)
    reads), then one thread stores each panel with TMA, which clips rows past SQ and
    columns past D. Element (row, col) of a panel is at byte ``row * 128 + 16 * ((col / 8)
    ^ (row & 7)) + 2 * (col & 7)``; a thread's two rows share ``row & 7``. Before the
    buffer is written again, the previous tile's stores must have read it
    (``cp.async.bulk.wait_group.read 0``, then the warpgroup meets at named barrier 3 +
    consumer). ``late`` (``Config.late_epilogue``, a wgmma in flight): ``(inv_l, on)``, the
    rows' ``1 / l`` computed before (:func:`normalizers`: ``rcp.rn`` has a slow path
    ptxas calls) and whether there is a tile to write at all; then no branch (lane 0's
    TMA instructions and every store under a guard), and O / l into new registers
    (:func:`_scaled`): ptxas serializes every wgmma of a kernel where one is in flight
    across a branch, a call, or a write of wgmma accumulator registers. ``whole`` (a
    predicate, the schedule's :meth:`~.tiles.Dense.whole`; None: always): where the TMA
    stores run (varlen: not where the sequence ends inside the rows)."""
    guarded = late is not None
    bar = 1 + nc + cons                          # after the ping-pong barriers 1 .. nc
    with _lane0(lane, guarded) as g:
        ptx.tma.wait(0, read=True, pred=g)
    ptx.inst("bar.sync", bar, 128)
    mine = stage + cons * (64 * ROW)
    frow = warp * 16 + (lw >> 2)
    q = frow & 7
    fb = (lw & 3) * (2 * dtype.bytes)            # the thread's pair inside a 16-byte chunk
    xs = [(q << 4) + fb if c == 0 else ((q ^ c) << 4) + fb for c in range(8)]
    bases = [mine + frow * ROW, mine + (frow + 8) * ROW]
    inv = late[0] if guarded else normalizers(l)
    elems = list(o_acc)
    for g in range(0, len(elems), 4):            # 8-column group g / 4: rows r0, r0 + 8
        col = 8 * (g // 4)
        pnl, c = divmod(col // 8, 8)
        for r in range(2):
            lo, hi = (_scaled(x, inv[r], guarded) for x in elems[g + 2 * r: g + 2 * r + 2])
            pair = reg.scalar(b32)
            ptx.inst(f"cvt.rn.{dtype.name}x2.f32", pair, hi, lo)
            ptx.inst("st.shared.b32", ptx.addr(bases[r] + xs[c], pnl * bm * ROW), pair)
    for col in range(d, padded(d), 8):           # head dim 96: the box's columns past D,
        pnl, c = divmod(col // 8, 8)             # which TMA reads (and does not store)
        for r in range(2):
            ptx.inst("st.shared.b32", ptx.addr(bases[r] + xs[c], pnl * bm * ROW), 0)
    ptx.inst("fence.proxy.async.shared::cta")
    ptx.inst("bar.sync", bar, 128)
    with _lane0(lane, guarded) as g:     # (whole: varlen's, not where the sequence ends)
        g = g & late[1] if guarded else None
        g = g if whole is None else whole if g is None else g & whole
        for p in range(padded(d) // PANEL):
            ptx.tma.store(sched.to, sched.o_coords(p, w, cons), mine + p * bm * ROW, pred=g)
        ptx.tma.commit(pred=g)


def epilogue(o_acc, m, l, rows, urows, fcol, lw, po, pl, sched, w, d, dtype, *,
              store: bool = True, late=None) -> None:
    """O / l in 16-bit pairs (``cvt.rn``) by ``st.global.b32`` (unless ``store`` is False:
    :func:`stage_out` stored it; a predicate: where it holds, the rows :func:`stage_out`
    did not store, O / l and ``l``'s quad sum done there), LSE = (m + lg2 l) ln 2 by one
    thread of each quad; rows past the sequence are not written; a row with no key gives
    0 and -inf. ``late``: as in :func:`stage_out` (the stores then under guards, not
    branches)."""
    guarded = late is not None
    writes = store is not False                           # (O by st.global, or some of it)
    staged = not guarded and not isinstance(store, bool)  # (O / l in place already)
    sq_s = _s32(sched.row_bound(w))
    for r in range(2):
        if guarded:
            inv, some = late[0][r], reg.scalar(pred)
            ptx.inst.setp.gt.f32(some, l[r], 0.0)
        else:
            if store is True:
                quad_reduce(l[r], "add")
            inv, some = row_inverse(l[r])
        inside = rows[r] < sq_s
        if guarded:
            inside = inside & late[1]
        with _nothing() if guarded else ptx.if_(inside):
            row = sched.out_row(w, urows[r]) if writes else None
            ptr = po + (row * d + fcol) * dtype.bytes if writes else None
            elems = list(o_acc) if writes else []
            o_pred = inside if guarded else None          # (O's rows: a predicate store
            if not isinstance(store, bool):               # adds its own)
                o_pred = store if o_pred is None else o_pred & store
            for g in range(0, len(elems), 4):     # elements g, g + 1: row r0; g + 2, g + 3: r0 + 8
                i = g + 2 * r
                lo, hi = elems[i: i + 2] if staged else \
                    (_scaled(x, inv, guarded) for x in elems[i: i + 2])
                pair = reg.scalar(b32)
                ptx.inst(f"cvt.rn.{dtype.name}x2.f32", pair, hi, lo)
                ptx.inst("st.global.b32", ptx.addr(ptr, (8 * (i // 4)) * dtype.bytes), pair,
                         pred=o_pred)
            first = (lw & 3) == 0
            with _nothing() if guarded else ptx.if_(first):
                val = row_lse(l[r], m[r], some)
                ptx.inst("st.global.f32", ptx.addr(pl + sched.lse_at(w, urows[r]) * 4), val,
                         pred=inside & first if guarded else None)


def normalizers(l) -> list:
    """Each of the thread's two rows' ``1 / l`` (0 for a row that saw no key), ``l``
    summed over the quad first (in place)."""
    inv = []
    for r in range(2):
        quad_reduce(l[r], "add")
        inv.append(row_inverse(l[r])[0])
    return inv


def _scaled(x, inv, fresh: bool):
    """``x * inv`` (``mul.f32``) in place, or (``fresh``) into a new register: ptxas may
    give O's copy (``Config.late_epilogue``) O's accumulator registers."""
    out = reg.scalar(f32) if fresh else x
    ptx.inst.mul.f32(out, x, inv)
    return out


@contextlib.contextmanager
def _lane0(lane, guarded: bool):
    """``with`` body for lane 0 of the warpgroup: a branch (yields None), or (``guarded``)
    straight-line code whose instructions take the yielded guard."""
    if guarded:
        yield lane == 0
    else:
        with ptx.if_(lane == 0):
            yield None


@contextlib.contextmanager
def _nothing():
    yield


__all__ = ["stage_out", "epilogue", "normalizers"]
