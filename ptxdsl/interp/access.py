"""The memory-access detectors: data races, uninitialised reads, unfinished cp.async,
generic-proxy writes read by the async proxy without a fence (:mod:`.proxy`).

:func:`track` is called for every access that passed the bounds and alignment
checks, with the per-byte :class:`~.hb.Tracker` of its state space and the
happens-before knowledge of :mod:`.hb`.
"""
from __future__ import annotations

import numpy as np

from . import landing
from .groups import overwrite
from .proxy import check_read, is_async, record_write

_KIND = {"read": "reads", "write": "writes", "atomic": "atomically updates",
         "strong_read": "reads (.relaxed/.acquire/.volatile)"}


def _describe(sp, byte: int) -> tuple[int, str]:
    addr = sp.base + byte % sp.row_bytes
    return addr, sp.nearest(addr)


def _who(mach, t: int, other: int) -> str:
    if other < 0:
        return "other threads"
    if mach.cta[other] == mach.cta[t]:
        return f"thread {mach.tid_str(other)}"
    return mach.where(other)


def _race(mach, instr, sp, t, other, byte, kind, other_kind, other_step=None):
    addr, near = _describe(sp, byte)
    by = mach.async_reads.get(other_step) if other_step is not None else None
    how = (f" through the {by.opcode} at {by.loc} (an asynchronous read: it ends when its "
           f"group retires, so only what follows that wait_group is ordered after it)"
           if by is not None else "")
    mach.fail(instr, f"{sp.name}-memory data race at address {addr:#x} ({near}): this thread "
                     f"{_KIND[kind]} it and {_who(mach, t, other)} {other_kind} it{how}, and "
                     f"nothing orders the two (no bar.sync both took part in, no "
                     f"{'cluster barrier, ' if mach.cluster_size > 1 else ''}mbarrier phase or "
                     f"atomic between them)", t)


def _all_ordered(hb, th, writers, steps, per_cta: bool) -> bool:
    """Cheap sufficient test: every reading warp synchronised with every writing warp
    (and its own lanes) after the newest of these writes. ``per_cta``: only warps of
    one CTA can share bytes (shared memory without clusters)."""
    smax = steps.max()
    rw = np.unique(th // 32)
    pw = np.flatnonzero(np.bincount(writers // 32, minlength=hb.K.shape[0]))
    k = np.where(rw[:, None] == pw[None, :], hb.lanesync[rw][:, None], hb.K[np.ix_(rw, pw)])
    if per_cta:
        k = np.where(rw[:, None] // hb.W == pw[None, :] // hb.W, k, smax)
    return bool(k.min() >= smax)


def track_block(mach, instr, sp, t: int, off: np.ndarray, nbytes: int, kind: str) -> None:
    """:func:`track` of one thread's access of many elements at once (a TMA box, a wgmma
    operand): elements that fill whole 16-byte chunks are tracked as those chunks, in
    ascending order (the same bytes, far fewer records to check)."""
    off = np.asarray(off, np.int64)
    per = 16 // nbytes if nbytes < 16 else 0
    if per > 1 and len(off) % per == 0:
        g = off.reshape(-1, per)
        if not (g[:, 0] % 16).any() and (g == g[:, :1] + np.arange(per) * nbytes).all():
            off, nbytes = np.unique(g[:, 0]), 16
            if len(off) * per != len(g):      # chunks read twice: keep the exact records
                off, nbytes = np.asarray(g.reshape(-1)), 16 // per
    track(mach, instr, sp, np.full(len(off), t), off, nbytes, kind)


def check_grid_wait(mach, instr, th: np.ndarray, kind: str) -> None:
    """In a ``pdl=True`` kernel, a thread touches global memory only after its
    ``griddepcontrol.wait``: before it, the previous kernel on the stream may still be
    running, writing what this one reads or reading what it writes."""
    bad = ~mach.grid_waited[th]
    if bad.any():
        mach.fail(instr, f"global memory {kind} before griddepcontrol.wait in a kernel "
                         f"launched with pdl=True (programmatic dependent launch): it may "
                         f"start before the previous kernel on its stream has finished, so "
                         f"every thread must execute ptx.inst.griddepcontrol.wait() before "
                         f"it touches global memory", int(th[int(np.argmax(bad))]))


def track(mach, instr, sp, th: np.ndarray, off: np.ndarray, nbytes: int, kind: str) -> None:
    """Check and record an access of ``nbytes`` at byte offsets ``off`` by threads ``th``.

    ``kind``: "read", "write", "atomic" or "strong_read". Accesses are aligned to
    ``nbytes``, so two threads of one instruction touch the same bytes entirely or not
    at all; bytes several threads read at once (broadcasts) are checked once.
    """
    if mach.grid_waited is not None and sp.name == "global" and len(th):
        check_grid_wait(mach, instr, th, {"atomic": "atomic update", "write": "write"}.get(
            kind, "read"))
    tr = sp.tracker
    if tr is None or not len(th):
        return
    k = np.arange(nbytes)
    if len(off) < 2 or bool((off[1:] > off[:-1]).all()):
        uo, rep, inv, cnt = off, th, None, None
    else:
        uo, first, inv, cnt = np.unique(off, return_index=True, return_inverse=True,
                                        return_counts=True)
        rep = th[first]
    dup = cnt is not None and bool((cnt > 1).any())
    bu = (uo[:, None] + k).reshape(-1)
    if tr.any_pending:
        bad = tr.pending[bu] > 0
        if bad.any():
            i = int(np.argmax(bad))
            addr, near = _describe(sp, int(bu[i]))
            cp = landing.describe(mach, sp, int(bu[i]))
            if cp is not None:
                mach.fail(instr, f"{_KIND[kind]} shared memory at {addr:#x} ({near}) that the "
                                 f"asynchronous copy at {cp.instr.loc} (issued by thread "
                                 f"{mach.tid_str(cp.thread)}) is still writing: its bytes "
                                 f"land only when the mbarrier phase it completes on does; "
                                 f"wait on that phase (mbarrier.try_wait) before touching "
                                 f"them", int(rep[i // nbytes]))
            mach.fail(instr, f"{_KIND[kind]} shared memory at {addr:#x} ({near}) that a "
                             f"cp.async of this thread or another is still writing: wait for "
                             f"it first (cp.async.wait_group / wait_all, then a barrier if "
                             f"another thread issued it)", int(rep[i // nbytes]))
    if kind != "read" and tr.reads and tr.any_reading:
        overwrite(mach, instr, sp, bu, rep[0])
    if kind != "write" and mach.check_init and not tr.all_init:
        bad = ~tr.init[bu]
        if bad.any():
            i = int(np.argmax(bad))
            addr, near = _describe(sp, int(bu[i]))
            what = ("shared memory starts uninitialised" if sp.name == "shared" else
                    "outputs the caller does not pass start uninitialised")
            mach.fail(instr, f"read of uninitialised memory at {addr:#x} ({near}): no "
                             f"thread wrote this byte before ({what}; write it first, pass "
                             f"the output initialised, or interpret(..., "
                             f"allow_uninitialized=True))", int(rep[i // nbytes]))
    if not mach.check_races:
        if kind not in ("read", "strong_read"):
            tr.init[bu] = True
        return
    hb = mach.hb
    if tr.written:
        wu = tr.w_tid[bu]
        has = wu >= 0
        if has.any() and not _all_ordered(hb, th, wu[has], tr.w_step[bu[has]],
                                          tr.reads and mach.cluster_size == 1):
            b = (off[:, None] + k).reshape(-1)       # per thread, exactly
            t = np.repeat(th.astype(np.int64), nbytes)
            wt = tr.w_tid[b]
            idx = np.flatnonzero(wt >= 0)
            bi = b[idx]
            ok = hb.ordered(t[idx], wt[idx], tr.w_step[bi])
            if kind in ("atomic", "strong_read"):
                ok |= tr.w_atom[bi]
            if not ok.all():
                i = int(idx[np.argmax(~ok)])
                _race(mach, instr, sp, int(t[i]), int(wt[i]), int(b[i]), kind,
                      "updated" if tr.w_atom[b[i]] else "wrote")
    if kind == "read" and tr.reads and is_async(instr):
        mach.async_reads[mach.steps] = instr     # (named if a write races with it)
    if tr.reads and kind == "read" and tr.written and is_async(instr):
        tb = np.repeat(rep, nbytes)
        for t in np.unique(rep).tolist():          # (one reading thread, as a rule)
            check_read(mach, instr, sp, t, bu[tb == t])
    if kind == "strong_read" or (kind == "read" and not tr.reads):
        return
    if dup and kind == "write" and sp.name != "param":
        i = int(np.argmax(cnt > 1))
        two = th[inv == i][:2]
        _race(mach, instr, sp, int(two[1]), int(two[0]), int(uo[i]), kind, "writes")
    if kind != "read":
        b = (off[:, None] + k).reshape(-1)
        t = np.repeat(th.astype(np.int64), nbytes)
        if tr.reads:
            rt = tr.r_tid[b]
            bad = np.zeros(len(b), bool)
            one = np.flatnonzero(rt >= 0)
            if len(one):
                bo = b[one]
                bad[one] = ~hb.ordered(t[one], rt[one], tr.r_step[bo])
                for slot, step in ((tr.r_tid2, tr.r_step2), (tr.r_tid3, tr.r_step3)):
                    r2 = slot[bo]
                    two = np.flatnonzero(r2 >= 0)
                    if len(two):
                        bad[one[two]] |= ~hb.ordered(t[one[two]], r2[two], step[bo[two]])
                        slot[bo] = -1
            many = np.flatnonzero(rt == -2)
            if len(many):
                bm = b[many]
                bad[many] = (tr.r_cta[bm] >= 0) & ~hb.ordered_many(   # readers' CTA
                    t[many], tr.r_mask[bm], tr.r_step[bm], np.maximum(tr.r_cta[bm], 0))
            if bad.any():
                i = int(np.argmax(bad))
                _race(mach, instr, sp, int(t[i]), int(rt[i]), int(b[i]), kind, "read",
                      int(tr.r_step[b[i]]))
            tr.r_tid[b] = -1
            tr.r_mask[b] = 0
            tr.r_cta[b] = -1
        tr.written = True
        tr.w_tid[b] = t
        tr.w_step[b] = mach.steps
        tr.w_atom[b] = kind == "atomic"
        tr.init[b] = True
        if tr.reads:
            record_write(instr, tr, b)
        return
    bits = np.uint64(1) << ((th % mach.P) // 32).astype(np.uint64)
    if dup:   # several threads of this instruction read the same bytes
        mask_u = np.zeros(len(uo), np.uint64)
        np.bitwise_or.at(mask_u, inv, bits)
        t_u = np.where(cnt == 1, rep, -2).astype(np.int64)
        c_u = mach.cta[rep]
    else:
        mask_u, t_u, c_u = bits, rep.astype(np.int64), mach.cta[rep]
    tb = np.repeat(t_u, nbytes)
    mb = np.repeat(mask_u, nbytes)
    cb = np.repeat(c_u, nbytes)
    rt = tr.r_tid[bu]
    single = (tb >= 0) & ((rt == -1) | (rt == tb))
    if single.all():
        tr.r_tid[bu] = tb
        tr.r_mask[bu] = mb
        tr.r_cta[bu] = cb
    else:
        # A second (third) reading thread moves the first (and second) one slot on (each
        # keeps its own step: two or three warpgroups releasing a buffer at different
        # times are told apart); a fourth falls back to the reader-warp mask and the
        # newest step.
        r2, r3 = tr.r_tid2[bu], tr.r_tid3[bu]
        second = (tb >= 0) & (rt >= 0) & ~single & ((r2 == -1) | (r2 == tb))
        third = ((tb >= 0) & (rt >= 0) & ~single & ~second & (r2 >= 0)
                 & ((r3 == -1) | (r3 == tb)))
        keep = single | second | third
        tr.r_tid3[bu] = np.where(third, r2, np.where(keep, r3, -1))
        tr.r_step3[bu] = np.where(third, tr.r_step2[bu], tr.r_step3[bu])
        tr.r_tid2[bu] = np.where(second | third, rt, np.where(keep, r2, -1))
        tr.r_step2[bu] = np.where(second | third, tr.r_step[bu], tr.r_step2[bu])

        def bit(x):
            return np.where(x >= 0, np.uint64(1) << ((np.maximum(x, 0) % mach.P) // 32)
                            .astype(np.uint64), np.uint64(0))
        tr.r_tid[bu] = np.where(keep, tb, -2)
        tr.r_mask[bu] = np.where(keep, mb, tr.r_mask[bu] | bit(rt) | bit(r2) | bit(r3) | mb)
        rc = tr.r_cta[bu]
        tr.r_cta[bu] = np.where((rc == -1) | (rc == cb), cb, -2)
    tr.r_step[bu] = mach.steps
