"""The cluster instructions: ``barrier.cluster``, ``mapa`` / ``getctarank`` and the
asynchronous remote stores ``st.async`` / ``red.async`` (launch order, shared::cluster
addresses and the exit check: :mod:`ptxdsl.interp.cluster`).

``barrier.cluster``: a generation completes when every thread of the cluster that
has not exited has arrived (exiting stops counting, as on hardware); each thread
alternates arrive and wait (twice in a row is an error). Arrivals release and waits
acquire (:mod:`ptxdsl.interp.hb`), ``.relaxed`` arrivals release nothing.

``st.async`` / ``red.async`` write (reduce) into the peer at once and complete their
bytes on the mbarrier in the same CTA as the destination; the writes are the issuing
thread's, ordered before the phase completes.
"""
from __future__ import annotations

import numpy as np

from ..addressing import addresses, check
from ..cluster import OFFSET_MASK, ClusterState, state
from ..memory import RANK_SHIFT, SHARED_WINDOW
from ..schedule import Blocked
from ..warps import aligned_check
from .atomic import atomic
from .mbarrier import mbarrier_complete_tx


# ---------------------------------------------------------------------- barrier.cluster
def _settle(mach, st: ClusterState, c: int) -> None:
    n = mach.cluster_size * mach.P
    rng = slice(c * n, (c + 1) * n)
    arrived = st.pending[rng] & (st.gen_at[rng] == st.gen[c])
    if arrived.any() and not (mach.valid[rng] & ~mach.exited[rng] & ~arrived).any():
        st.gen[c] += 1
        mach.events += 1


def _clusters(mach, mask) -> list[int]:
    return np.unique(mach.cta[mask] // mach.cluster_size).tolist()


def barrier_cluster(mach, instr, mask):
    st = state(mach)
    if instr.match.aligned and not mach.per_thread:
        aligned_check(mach, instr, mask)
    cl = mach.cta // mach.cluster_size
    if instr.match.chosen["mode"] == "arrive":
        twice = mask & st.pending
        if twice.any():
            mach.fail(instr, "arrives at the cluster barrier again without having waited "
                             "for its previous arrival (barrier.cluster.wait comes between "
                             "two arrivals)", int(np.argmax(twice)))
        st.gen_at[mask] = st.gen[cl[mask]]
        st.pending |= mask
        for c in _clusters(mach, mask):
            ws = np.unique(np.flatnonzero(mask & (cl == c)) // 32)
            if instr.match.chosen.get("sem") != "relaxed":
                mach.hb.cluster_arrive((c, int(st.gen[c])), ws)
            mach.hb.cluster_arrive_inits((c, int(st.gen[c])), ws)
            _settle(mach, st, c)
        mach.events += 1
        return
    missing = mask & ~st.pending
    if missing.any():
        mach.fail(instr, "waits at the cluster barrier without having arrived "
                         "(barrier.cluster.arrive first)", int(np.argmax(missing)))
    for c in _clusters(mach, mask):
        _settle(mach, st, c)
    waiting = mask & (st.gen[cl] <= st.gen_at)
    if waiting.any():
        t = int(np.argmax(waiting))
        raise Blocked(lambda: _what(mach, st, int(cl[t])))
    for c in _clusters(mach, mask):
        sel = mask & (cl == c)
        for g in np.unique(st.gen_at[sel]).tolist():
            ws = np.unique(np.flatnonzero(sel & (st.gen_at == g)) // 32)
            mach.hb.cluster_acquire((c, g), ws)
    st.pending[mask] = False
    st.waited[mask] = st.gen_at[mask] + 1
    mach.events += 1


def _what(mach, st, c: int) -> str:
    P, n = mach.P, mach.cluster_size
    parts = []
    for r in range(n):
        rng = slice((c * n + r) * P, (c * n + r + 1) * P)
        live = mach.valid[rng] & ~mach.exited[rng]
        arrived = st.pending[rng] & (st.gen_at[rng] == st.gen[c])
        parts.append(f"rank {r}: {int(arrived.sum())} of {int((live | arrived).sum())}")
    return (f"the cluster barrier (generation {int(st.gen[c])}) to complete: threads arrived "
            f"per CTA {', '.join(parts)}")


# ---------------------------------------------------------------------- mapa, getctarank
def _shared32(mach, instr, mask, a, generic: bool):
    """The 32-bit shared(::cluster) value of operand ``a`` (a generic address when
    ``generic``), refusing generic addresses outside shared memory."""
    a = np.broadcast_to(np.asarray(a).astype(np.uint64), (mach.T,))
    if not generic:
        return a & np.uint64(0xFFFFFFFF)
    w = np.uint64(SHARED_WINDOW)
    bad = mask & ~((a >= w) & (a < w + np.uint64(1 << 32)))
    if bad.any():
        t = int(np.argmax(bad))
        mach.fail(instr, f"generic address {int(a[t]):#x} is not in shared memory (a "
                         f"generic shared address comes from cvta.shared)", t)
    return np.where(mask, a - w, np.uint64(0))


def mapa(mach, instr, mask):
    m = instr.match
    generic = m.chosen.get("space") is None
    if generic and m.type.bits == 32:
        mach.fail(instr, "mapa.u32 of a generic address: generic addresses are 64-bit "
                         "(mapa.u64), or write mapa.shared::cluster.u32")
    sa = _shared32(mach, instr, mask, mach.src(instr, 1, mask), generic)
    r = np.broadcast_to(np.asarray(mach.src(instr, 2, mask)).astype(np.int64), (mach.T,))
    bad = mask & ((r < 0) | (r >= mach.cluster_size))
    if bad.any():
        t = int(np.argmax(bad))
        mach.fail(instr, f"mapa to CTA rank {int(r[t])}, but the cluster has {mach.cluster_size} "
                         f"CTA(s) (ranks 0..{mach.cluster_size - 1})", t)
    off = sa & np.uint64(OFFSET_MASK)
    hi = sa >> np.uint64(RANK_SHIFT)
    sp = mach.spaces["shared"]
    inside = sp.in_bounds(off, 1) | sp.in_bounds(off - np.uint64(1), 1)  # or one past
    bad = mask & (~inside | (hi >= np.uint64(mach.cluster_size)))
    if bad.any():
        t = int(np.argmax(bad))
        mach.fail(instr, f"mapa of {int(sa[t]):#x}, which is no address of a shared "
                         f"variable of the cluster ({sp.nearest(int(off[t]))})", t)
    res = off | (r.astype(np.uint64) << np.uint64(RANK_SHIFT))
    if generic:
        res = res + np.uint64(SHARED_WINDOW)
    mach.dst(instr, 0, res.astype(m.type.np_dtype), mask)


def getctarank(mach, instr, mask):
    generic = instr.match.chosen.get("space") is None
    sa = _shared32(mach, instr, mask, mach.src(instr, 1, mask), generic)
    hi = (sa >> np.uint64(RANK_SHIFT)).astype(np.int64)
    bad = mask & (hi >= mach.cluster_size)
    if bad.any():
        t = int(np.argmax(bad))
        mach.fail(instr, f"{int(sa[t]):#x} is no shared::cluster address of this cluster "
                         f"({mach.cluster_size} CTAs)", t)
    mach.dst(instr, 0, hi.astype(np.uint32), mask)


# ---------------------------------------------------------------------- st.async, red.async
def _tx_targets(mach, instr, mask, threads, dst_groups):
    """The mbarrier (last operand) of each thread, in the CTA of its destination."""
    mb = addresses(mach, instr, instr.operands[-1], mask)[threads]
    (sp, _, moff), = check(mach, instr, threads, mb, "shared", 8, True, race=False)
    (_, _, doff), = dst_groups
    bad = moff // sp.row_bytes != doff // sp.row_bytes
    if bad.any():
        k = int(np.argmax(bad))
        n = mach.cluster_size
        mach.fail(instr, f"the mbarrier is in the CTA of rank {int(moff[k] // sp.row_bytes) % n}"
                         f" but the destination in the CTA of rank "
                         f"{int(doff[k] // sp.row_bytes) % n}: "
                         f"{instr.opcode} completes on an mbarrier of the destination's CTA",
                  int(threads[k]))
    return moff


def st_async(mach, instr, mask):
    m = instr.match
    t, n = m.type, m.vector
    threads = np.flatnonzero(mask)
    addr = addresses(mach, instr, instr.operands[0], mask)[threads]
    src = mach.src(instr, 1, mask)
    items = src if isinstance(src, list) else [src]
    vals = np.stack([np.broadcast_to(np.asarray(v).astype(t.np_dtype), (mach.T,))[threads]
                     for v in items], axis=1)
    groups = check(mach, instr, threads, addr, "shared", t.bytes * n, True)
    (sp, _, off), = groups
    moff = _tx_targets(mach, instr, mask, threads, groups)
    sp.write(off, vals)
    for th, mo in zip(threads.tolist(), moff.tolist()):
        mbarrier_complete_tx(mach, mo, t.bytes * n, instr, th)
    mach.events += 1


def red_async(mach, instr, mask):
    threads = np.flatnonzero(mask)
    t = instr.match.type
    addr = addresses(mach, instr, instr.operands[0], mask)[threads]
    groups = check(mach, instr, threads, addr, "shared", t.bytes, True, race=False)
    moff = _tx_targets(mach, instr, mask, threads, groups)
    atomic(mach, instr, mask, False)
    for th, mo in zip(threads.tolist(), moff.tolist()):
        mbarrier_complete_tx(mach, mo, t.bytes, instr, th)
    mach.events += 1


HANDLERS = {
    "barrier.cluster": barrier_cluster,
    "mapa": mapa,
    "getctarank": getctarank,
    "st.async": st_async,
    "red.async": red_async,
}
