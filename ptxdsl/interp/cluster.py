"""Clusters of CTAs on the interpreter: cluster special registers, ``barrier.cluster``,
``mapa`` / ``getctarank``, distributed shared memory and the asynchronous remote stores.

Launch order. A kernel launched as clusters (``cluster=(x, y, z)`` or
``.reqnctapercluster``; ``ir.Program.cluster``) runs its grid as a sequence of
clusters: batch CTA ``c`` is rank ``c % n`` of cluster ``c // n`` (``n`` CTAs per
cluster), so the CTAs of one cluster are always in one batch, scheduled together
(they may wait for each other), each with its own row of shared memory. Ranks are
linear with x fastest (``%cluster_ctarank``); ``%ctaid = %clusterid * cluster +
%cluster_ctaid``. Without clusters every CTA is a cluster of one
(``%is_explicit_cluster`` false, ``%clusterid`` = ``%ctaid``).

Addresses, as an H100 gives them (:data:`.memory.RANK_SHIFT`): a shared address is a
32-bit offset in the shared window (``SHARED_BASE`` up) with the CTA's rank in its
cluster at bit 24 and up, so the same variable is at ``0x400``, ``0x1000400``,
``0x2000400``, ... in ranks 0, 1, 2 (``mov.u32 r, smem`` gives the CTA's own, which is
at once its shared::cta and its shared::cluster address). ``mapa`` swaps the rank,
``getctarank`` reads it. Generic addresses are the shared window plus that 32-bit
value. ``.shared::cluster`` and generic accesses through another rank's address reach
that CTA's row of shared memory (race-checked, uninitialised bytes and bounds as for
the CTA's own); a ``.shared::cta`` access through one is refused. Bits above the
cluster's ranks are left for the bounds check to report.

``barrier.cluster``: a generation completes when every thread of the cluster that
has not exited has arrived (exiting stops counting, as on hardware); each thread
alternates arrive and wait (twice in a row is an error). Arrivals release and waits
acquire (:mod:`.hb`), ``.relaxed`` arrivals release nothing.

``st.async`` / ``red.async`` write (reduce) into the peer at once and complete their
bytes on the mbarrier in the same CTA as the destination; the writes are the issuing
thread's, ordered before the phase completes.

Exit check. A CTA must not exit while a peer may still access its shared memory:
every synchronous remote access (ld/st/atom/red/mbarrier arrive through a cluster
address) obliges the target CTA to wait, before it exits, for the cluster barrier
the accessing thread arrives at next. A CTA that exits earlier, or an access to a
CTA that has exited, is an error naming both lines.
"""
from __future__ import annotations

import numpy as np

from .memory import RANK_SHIFT, SHARED_WINDOW
from .schedule import Blocked
from .semantics import handler

OFFSET_MASK = (1 << RANK_SHIFT) - 1


def specials(grid, cdims, g: np.ndarray, explicit: bool) -> dict:
    """``%ctaid`` and the cluster special registers of launch-order CTA index ``g``."""
    cx, cy, cz = cdims
    n = cx * cy * cz
    gx, gy, gz = grid
    ncl = (gx // cx, gy // cy, gz // cz)
    cl, r = g // n, g % n
    cid = (cl % ncl[0], (cl // ncl[0]) % ncl[1], cl // (ncl[0] * ncl[1]))
    rid = (r % cx, (r // cx) % cy, r // (cx * cy))
    out = {}
    for i, a in enumerate("xyz"):
        out[f"ctaid.{a}"] = cid[i] * cdims[i] + rid[i]
        out[f"clusterid.{a}"] = cid[i]
        out[f"nclusterid.{a}"] = ncl[i]
        out[f"cluster_ctaid.{a}"] = rid[i]
        out[f"cluster_nctaid.{a}"] = cdims[i]
    out["cluster_ctarank"] = r
    out["cluster_nctarank"] = n
    out["is_explicit_cluster"] = int(explicit)
    return out


class ClusterState:
    """``barrier.cluster`` generations and the remote accesses the exit check weighs."""

    def __init__(self, mach):
        n = mach.cluster_size
        self.gen = np.zeros(max(mach.ncta // n, 1), np.int64)   # per cluster of the batch
        self.pending = np.zeros(mach.T, bool)       # arrived, not yet waited
        self.gen_at = np.zeros(mach.T, np.int64)    # the generation it arrived into
        self.waited = np.zeros(mach.T, np.int64)    # generations waited for (count)
        self.need = np.full(mach.ncta, -1, np.int64)  # per CTA: generation to wait for
        self.need_at: dict = {}                     # CTA -> (instr, thread) of that access


def state(mach) -> ClusterState:
    st = getattr(mach, "cl", None)
    if st is None:
        st = mach.cl = ClusterState(mach)
    return st


# ---------------------------------------------------------------------- addresses
def shared_rows(mach, instr, th: np.ndarray, a: np.ndarray, cluster_ok: bool):
    """(CTA-local 32-bit shared addresses, batch CTA rows) of shared addresses ``a`` of
    threads ``th``: the rank bits (24 and up) select the CTA of the cluster, this thread's
    own or (``cluster_ok``: a shared::cluster or generic access) a peer's."""
    rows = mach.cta[th]
    if mach.cluster_size == 1:   # rank 0 everywhere: any rank bits fail the bounds check
        return a, rows
    hi = (a >> np.uint64(RANK_SHIFT)).astype(np.int64)
    own = mach.rank[th]
    inside = hi < mach.cluster_size
    other = inside & (hi != own)
    if other.any():
        k = int(np.argmax(other))
        if not cluster_ok:
            mach.fail(instr, f"address {int(a[k]):#x} is in the shared memory of the "
                             f"cluster's CTA of rank {int(hi[k])} (this thread's CTA is rank "
                             f"{int(own[k])}): a .shared::cta access reaches this CTA only; "
                             f"write .shared::cluster (or use a generic address)", int(th[k]))
        rows = np.where(other, rows - own + hi, rows)
        _remote(mach, instr, th[other], rows[other])
    return np.where(inside, a & np.uint64(OFFSET_MASK), a), rows


def _remote(mach, instr, th, rows) -> None:
    """Accesses by ``th`` to peer CTAs ``rows``: the peer must still run, and (for
    synchronous accesses) it owes a cluster-barrier wait before it exits."""
    P = mach.P
    for r in np.unique(rows).tolist():
        if mach.exited[r * P:(r + 1) * P].all():
            k = int(np.argmax(rows == r))
            mach.fail(instr, f"accesses the shared memory of the cluster's CTA of rank "
                             f"{r % mach.cluster_size}, which has exited (its shared memory is "
                             f"gone): keep it running with a cluster barrier "
                             f"(barrier.cluster.arrive/wait) after the last remote access "
                             f"and before it exits", int(th[k]))
    if "async_copy" in instr.match.spec.effects:
        return      # completes on the peer's mbarrier, which the peer waits for
    st = state(mach)
    cl = mach.cta[th] // mach.cluster_size
    nxt = np.where(st.pending[th], st.gen_at[th] + 1, st.gen[cl])
    for r in np.unique(rows).tolist():
        sel = rows == r
        g = int(nxt[sel].max())
        if g > st.need[r]:
            st.need[r] = g
            st.need_at[r] = (instr, int(th[sel][np.argmax(nxt[sel])]))


def on_exit(mach, instr) -> None:
    """Called after threads exit: a CTA now finished must not be owed a wait."""
    st = getattr(mach, "cl", None)
    if st is None or not st.need_at:
        return
    P = mach.P
    for r, (acc, t) in list(st.need_at.items()):
        rng = slice(r * P, (r + 1) * P)
        if not mach.exited[rng].all():
            continue
        del st.need_at[r]
        if int(st.waited[rng].max()) > st.need[r]:
            continue
        mach.fail(instr, f"the cluster's CTA of rank {r % mach.cluster_size} exits while the CTA "
                         f"of rank {int(mach.rank[t])} may still access its "
                         f"shared memory (the access at {acc.loc}, {acc.opcode}): its shared "
                         f"memory is gone once it exits; put a cluster barrier "
                         f"(barrier.cluster.arrive after the access, barrier.cluster.wait "
                         f"before this exit) between them", r * P + int(np.argmax(
                             mach.exited[rng] & mach.valid[rng])))


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


@handler("barrier.cluster")
def barrier_cluster(mach, instr, mask):
    from .barriers import _aligned_check
    st = state(mach)
    if instr.match.aligned and not mach.per_thread:
        _aligned_check(mach, instr, mask)
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
            if instr.match.chosen.get("sem") != "relaxed":
                ws = np.unique(np.flatnonzero(mask & (cl == c)) // 32)
                mach.hb.cluster_arrive((c, int(st.gen[c])), ws)
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


@handler("mapa")
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


@handler("getctarank")
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
    from .memops import addresses, check
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


@handler("st.async")
def st_async(mach, instr, mask):
    from .memops import addresses, check, mbarrier_complete_tx
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


@handler("red.async")
def red_async(mach, instr, mask):
    from .memops import addresses, atomic, check, mbarrier_complete_tx
    threads = np.flatnonzero(mask)
    t = instr.match.type
    addr = addresses(mach, instr, instr.operands[0], mask)[threads]
    groups = check(mach, instr, threads, addr, "shared", t.bytes, True, race=False)
    moff = _tx_targets(mach, instr, mask, threads, groups)
    atomic(mach, instr, mask, False)
    for th, mo in zip(threads.tolist(), moff.tolist()):
        mbarrier_complete_tx(mach, mo, t.bytes, instr, th)
    mach.events += 1


# ---------------------------------------------------------------------- multicast
def copy_rows(mach, instr, t: int, dst: int, mbar: int, ctamask):
    """(CTA-local destination, CTA-local mbarrier, batch CTA rows) of an asynchronous
    copy into shared::cluster by thread ``t``: the CTA the destination names, or each CTA
    of the 16-bit ``ctamask`` (``.multicast::cluster``) at the same CTA-local offsets."""
    th = np.array([t])
    d, drow = shared_rows(mach, instr, th, np.array([dst], np.uint64), True)
    b, brow = shared_rows(mach, instr, th, np.array([mbar], np.uint64), True)
    if ctamask is None:
        if drow[0] != brow[0]:
            n = mach.cluster_size
            mach.fail(instr, f"the destination is in the CTA of rank {int(drow[0]) % n} but "
                             f"the mbarrier in the CTA of rank {int(brow[0]) % n}: the copy "
                             f"completes on an mbarrier "
                             f"of the destination's CTA", t)
        return int(d[0]), int(b[0]), [int(drow[0])]
    bits = int(ctamask) & 0xFFFF
    ranks = [i for i in range(16) if bits >> i & 1]
    if not ranks or ranks[-1] >= mach.cluster_size:
        mach.fail(instr, f"the multicast ctaMask {bits:#06x} must name CTAs of the cluster "
                         f"(ranks 0..{mach.cluster_size - 1}, at least one)", t)
    base = int(mach.cta[t]) - int(mach.rank[t])
    rows = [base + r for r in ranks]
    _remote(mach, instr, np.full(len(rows), t), np.array(rows))
    return int(d[0]), int(b[0]), rows


def mbar_offset(mach, instr, t: int, bar: int) -> int:
    """The byte offset of the mbarrier at CTA-local shared address ``bar`` within a CTA's
    row of shared memory (checked: 8-byte aligned, inside a shared variable)."""
    sp = mach.spaces["shared"]
    if bar % 8 or not sp.in_bounds(np.asarray([bar], np.uint64), 8)[0]:
        mach.fail(instr, f"the mbarrier address {bar:#x} is no 8-byte aligned shared "
                         f"variable ({sp.nearest(bar)})", t)
    return bar - sp.base
