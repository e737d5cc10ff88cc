"""Clusters of CTAs on the interpreter: launch order and the cluster special registers,
the rank bits of shared addresses (distributed shared memory), the cluster state and
the exit check. (The cluster instructions: :mod:`.semantics.cluster`.)

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

Exit check. A CTA must not exit while a peer may still access its shared memory:
every synchronous remote access (ld/st/atom/red/mbarrier arrive through a cluster
address) obliges the target CTA to wait, before it exits, for the cluster barrier
the accessing thread arrives at next. A CTA that exits earlier, or an access to a
CTA that has exited, is an error naming both lines.
"""
from __future__ import annotations

import numpy as np

from .memory import RANK_SHIFT


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
