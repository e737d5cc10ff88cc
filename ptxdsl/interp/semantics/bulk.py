"""Bulk copies and bulk groups: 1-D ``cp.async.bulk`` and ``cp.reduce.async.bulk`` and the
bookkeeping every bulk-group copy (TMA stores and reductions included) shares.

``cp.async.bulk`` (1-D, ``size`` bytes: a positive multiple of 16, both addresses
16-byte aligned):

* global -> shared::cluster and shared::cta -> shared::cluster
  (``.mbarrier::complete_tx::bytes``): the bytes are in flight until they land
  (:mod:`ptxdsl.interp.landing`), then written as the issuing thread's async-proxy
  writes, into the CTA the destination address names (this one or
  a peer of the cluster) or, with ``.multicast::cluster`` (global sources), into every
  CTA of the 16-bit ctaMask at the same offset; ``size`` transaction bytes complete on
  the mbarrier at the mbarrier operand's offset in each destination CTA (whose phase
  acquire orders them before a consumer);
* shared::cta -> global (``.bulk_group``): the bytes are read at once (async-proxy reads
  of the issuing thread: a generic store to them needs ``fence.proxy.async`` first, see
  :mod:`ptxdsl.interp.proxy`) and written to global memory; the copy joins the thread's open bulk
  group.

Bulk groups. ``cp.async.bulk.commit_group`` closes the issuing thread's open group;
``cp.async.bulk.wait_group[.read] N`` retires all but the ``N`` newest groups *that
thread* committed. Until a group is retired its copies may still be reading their
shared-memory source: a write to those bytes before then (by any thread, TMA loads
included) stops the run, naming the copy (the hardware would store whatever the buffer
holds by then).
"""
from __future__ import annotations

import numpy as np

from .. import cluster, landing
from ..access import track
from ..addressing import addresses
from ..groups import issued, retire, state
from .atomic import combine_bytes
from .mbarrier import mbarrier_complete_tx


def bulk_commit(mach, instr, mask):
    state(mach).groups[mask] += 1


def bulk_wait(mach, instr, mask):
    """Retire this thread's bulk groups older than the ``N`` newest (their copies have
    completed: they did when issued; ``.read``: their sources are free again)."""
    keep = int(instr.operands[0].value)
    st = state(mach)
    done = [p for p in st.pending if mask[p[0]] and p[1] < st.groups[p[0]] - keep]
    if done:
        retire(mach, done)
        st.pending = [p for p in st.pending if not (mask[p[0]] and
                                                    p[1] < st.groups[p[0]] - keep)]
    mach.events += 1


# ---------------------------------------------------------------- cp.async.bulk (1-D)
def _range(mach, instr, t: int, addr: int, size: int, space: str, write: bool, row=None):
    """(space, byte offsets of 16-byte chunks) of ``[addr, addr + size)``, checked: in
    global memory, this CTA's shared memory, or (``row``: ``addr`` CTA-local) that CTA's."""
    sp = mach.spaces["shared" if space.startswith("shared") else "global"]
    if sp.name == "shared" and row is None:
        a = np.asarray([addr & 0xFFFFFFFF], np.uint64)
        addr = int(cluster.shared_rows(mach, instr, np.asarray([t]), a, False)[0][0])
    if addr % 16:
        mach.fail(instr, f"the {'destination' if write else 'source'} {addr:#x} of a bulk "
                         f"copy must be 16-byte aligned", t)
    if not sp.in_bounds(np.asarray([addr], np.uint64), size)[0]:
        mach.fail(instr, f"the {size}-byte bulk copy {'into' if write else 'from'} {space} "
                         f"{addr:#x} reaches outside its allocation ({sp.nearest(addr)})", t)
    chunks = np.uint64(addr) + np.arange(0, size, 16, dtype=np.uint64)
    rows = (np.full(chunks.size, mach.cta[t] if row is None else row)
            if sp.name == "shared" else None)
    return sp, sp.offsets(chunks, rows)


def _size(mach, instr, t: int, size, what: str) -> int:
    """Thread ``t``'s byte count of a bulk copy or reduction, checked."""
    n = int(size[t])
    if n <= 0 or n % 16:
        mach.fail(instr, f"a bulk {what} moves a positive multiple of 16 bytes, got {n}", t)
    return n


def bulk_copy(mach, instr, mask):
    m = instr.match
    dst, src = m.chosen["dst"], m.chosen["src"]
    ops = instr.operands
    threads = np.flatnonzero(mask)
    da = addresses(mach, instr, ops[0], mask)
    sa = addresses(mach, instr, ops[1], mask)
    size = np.broadcast_to(np.asarray(mach.src(instr, 2, mask)).astype(np.int64), (mach.T,))
    to_shared = dst != "global"
    if to_shared:
        mbar = addresses(mach, instr, ops[3], mask) & np.uint64(0xFFFFFFFF)
        cmask = (np.broadcast_to(np.asarray(mach.src(instr, 4, mask)).astype(np.int64),
                                 (mach.T,)) if m.has("multicast::cluster") else None)
    for t in threads.tolist():
        n = _size(mach, instr, t, size, "copy")
        ssp, soff = _range(mach, instr, t, int(sa[t]), n, src, False)
        th = np.full(soff.size, t)
        track(mach, instr, ssp, th, soff, 16, "read")
        data = ssp.buf[soff[:, None] + np.arange(16)].copy()
        if not to_shared:
            dsp, doff = _range(mach, instr, t, int(da[t]), n, dst, True)
            track(mach, instr, dsp, th, doff, 16, "write")
            dsp.buf[doff[:, None] + np.arange(16)] = data
            dsp.version += 1
            issued(mach, instr, t, ssp, (soff[:, None] + np.arange(16)).reshape(-1))
            continue
        # into the CTA the destination names, or every CTA of the multicast mask
        local, bar, rows = cluster.copy_rows(mach, instr, t, int(da[t]) & 0xFFFFFFFF,
                                             int(mbar[t]),
                                             None if cmask is None else int(cmask[t]))
        boff = cluster.mbar_offset(mach, instr, t, bar)
        dests, bars = [], []
        for row in rows:
            dsp, doff = _range(mach, instr, t, local, n, dst, True, row)
            track(mach, instr, dsp, th, doff, 16, "write")
            dests.append((dsp, (doff[:, None] + np.arange(16)).reshape(-1), data.reshape(-1)))
            bars.append((boff + row * dsp.row_bytes, n))
        landing.start(mach, instr, t, dests, bars, mbarrier_complete_tx)
    mach.events += 1


def bulk_reduce(mach, instr, mask):
    """``cp.reduce.async.bulk`` (shared::cta -> global, ``.bulk_group``): the source read at
    once (as :func:`bulk_copy`'s store) and combined into global memory element by element,
    each an atomic update (:func:`.atomic.combine_bytes`); joins the open bulk group."""
    m = instr.match
    op, dtype = m.chosen["op"], m.type
    ops = instr.operands
    threads = np.flatnonzero(mask)
    da = addresses(mach, instr, ops[0], mask)
    sa = addresses(mach, instr, ops[1], mask)
    size = np.broadcast_to(np.asarray(mach.src(instr, 2, mask)).astype(np.int64), (mach.T,))
    e = dtype.bytes
    for t in threads.tolist():
        n = _size(mach, instr, t, size, "reduction")
        ssp, soff = _range(mach, instr, t, int(sa[t]), n, "shared::cta", False)
        dsp, doff = _range(mach, instr, t, int(da[t]), n, "global", True)
        th = np.full(soff.size, t)
        track(mach, instr, ssp, th, soff, 16, "read")
        track(mach, instr, dsp, th, doff, 16, "atomic")
        sb = (soff[:, None] + np.arange(0, 16, e)).reshape(-1)      # element offsets
        db = (doff[:, None] + np.arange(0, 16, e)).reshape(-1)
        cur = dsp.buf[db[:, None] + np.arange(e)]
        dsp.buf[db[:, None] + np.arange(e)] = combine_bytes(
            op, dtype, cur, ssp.buf[sb[:, None] + np.arange(e)])
        dsp.version += 1
        issued(mach, instr, t, ssp, (soff[:, None] + np.arange(16)).reshape(-1))
    mach.events += 1


HANDLERS = {
    "cp.async.bulk.commit_group": bulk_commit,
    "cp.async.bulk.wait_group": bulk_wait,
    "cp.async.bulk": bulk_copy,
    "cp.reduce.async.bulk": bulk_reduce,
}
