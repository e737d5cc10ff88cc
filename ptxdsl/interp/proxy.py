"""The async-proxy detector: generic-proxy writes to shared memory that the async proxy
reads without a ``fence.proxy.async`` between them.

Hopper reaches shared memory through two proxies. Plain stores (``st.shared``,
``stmatrix``, atomics, ``cp.async``) go through the *generic* proxy; TMA and bulk
copies and wgmma's operand reads go through the *async* proxy (their table entries say
``proxy="async"``). A write through one proxy is not seen by a read through the other
unless a proxy fence lies between them: the epilogue that stages C with ``st.shared``
and stores it with TMA needs ``fence.proxy.async.shared::cta`` after the stores and
before the barrier that hands the buffer to the thread issuing the store.

The model (the causality order of the PTX memory model, at warp granularity). The
tracker (:class:`~.hb.Tracker`) marks each byte whose last write went through the
generic proxy. A ``fence.proxy.async`` (or ``.shared::cta`` / ``.shared::cluster``;
``.global`` fences global memory only) executed by warp ``v`` at step ``f`` covers
every write that happens before it (:meth:`.hb.HappensBefore.proxy_fence` keeps, per
warp, its latest proxy fence and what the warp knew then). An async-proxy read ``R`` of
a byte last written through the generic proxy by warp ``u`` at step ``s`` is accepted
when some warp's latest fence covers that write and happens before ``R``: it is a
warp executing ``R`` (all four warps of a warpgroup for wgmma), or it is ordered before
``R`` by a barrier or an mbarrier phase. Otherwise the run stops with an
:class:`~ptxdsl.core.errors.InterpreterError` naming the reading instruction's line, the
writer and where the fence belongs.
"""
from __future__ import annotations

import numpy as np


def is_async(instr) -> bool:
    return instr.match.spec.proxy == "async"


def record_write(instr, tr, b: np.ndarray) -> None:
    """Bytes ``b`` of shared memory were just written through ``instr``'s proxy."""
    tr.w_generic[b] = not is_async(instr)


def covers_shared(instr) -> bool:
    """Whether ``instr`` is a proxy fence toward the async proxy that covers shared memory."""
    ch = instr.match.chosen
    return (ch.get("sem") == "proxy" and ch.get("proxykind") == "async"
            and ch.get("scope") in (None, "shared::cta", "shared::cluster"))


def fence(mach, instr, mask) -> None:
    """``fence.proxy.async`` by the threads in ``mask``."""
    if covers_shared(instr):
        mach.hb.proxy_fence(np.flatnonzero(mask.reshape(-1, 32).any(1)))


def _reader_warps(mach, instr, t: int) -> list[int]:
    """The warps whose program order puts their fences before a read by thread ``t``:
    its warp, or every warp of its warpgroup for warpgroup-collective reads (wgmma)."""
    w = t // 32
    if instr.match.spec.scope == "warpgroup":
        return [w // 4 * 4 + k for k in range(4) if w // 4 * 4 + k < mach.T // 32]
    return [w]


def check_read(mach, instr, sp, t: int, b: np.ndarray) -> None:
    """An async-proxy read of bytes ``b`` (shared memory) by thread ``t``."""
    tr = sp.tracker
    wt = tr.w_tid[b]
    gen = (wt >= 0) & tr.w_generic[b]
    if not gen.any():
        return
    bi = b[gen]
    ww = tr.w_tid[bi].astype(np.int64) // 32
    ws = tr.w_step[bi].astype(np.int64)
    hb = mach.hb
    ok = np.zeros(len(bi), bool)
    seen = np.zeros(len(bi), bool)        # covered by some fence, ordered or not
    if hb.FS is not None:
        readers = _reader_warps(mach, instr, t)
        W = mach.P // 32
        cta = t // mach.P
        for v in range(cta * W, cta * W + W):
            if hb.FS[v] < 0:
                continue
            cov = hb.FK[v, ww] >= ws
            if not cov.any():
                continue
            seen |= cov
            if v in readers or any(hb.K[u, v] >= hb.FS[v] for u in readers):
                ok |= cov
    if ok.all():
        return
    i = int(np.argmax(~ok))
    byte = int(bi[i])
    addr = sp.base + byte % sp.row_bytes
    writer = int(tr.w_tid[byte])
    who = (f"thread {mach.tid_str(writer)}" if mach.cta[writer] == mach.cta[t]
           else mach.where(writer))
    if seen[i]:
        why = ("the fence.proxy.async after it is not ordered before this read (fence in "
               "the writing threads before the barrier or mbarrier arrive that hands the "
               "data over, or in the reading thread after it)")
    else:
        why = ("no fence.proxy.async lies between the two: execute "
               "fence.proxy.async.shared::cta after the stores, in the threads that wrote, "
               "before the barrier or mbarrier arrive that hands the data over")
    mach.fail(instr, f"reads shared memory at {addr:#x} ({sp.nearest(addr)}) through the "
                     f"async proxy, but {who} wrote it through the generic proxy (a store "
                     f"from registers) and {why}; without it the tensor core / TMA may read "
                     f"stale bytes", t)
