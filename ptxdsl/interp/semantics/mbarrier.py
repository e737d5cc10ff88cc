"""mbarrier objects: their state and every mbarrier instruction (init, arrive,
arrive.expect_tx, expect_tx, complete_tx, test_wait, try_wait, inval).

Arrivals, expected and completed transaction bytes and phases live in
``mach.mbarriers`` keyed by the shared byte offset of the object (the byte counts are
checked by :mod:`ptxdsl.interp.transactions`); :func:`mbarrier_expect_tx` and
:func:`mbarrier_complete_tx` are the entry points for asynchronous (bulk / tensor)
copies, the families that complete on an mbarrier (:mod:`.bulk`, :mod:`.tma`,
:mod:`.cluster`). Waits park the warp (see :mod:`ptxdsl.interp.schedule`) until the
phase completes.
"""
from __future__ import annotations

import numpy as np

from ...core import ir
from .. import landing, transactions
from ..addressing import addresses, check, space_of
from ..schedule import Blocked


def _mbar_targets(mach, instr, mask):
    threads = np.flatnonzero(mask)
    addr = addresses(mach, instr, instr.operands[[isinstance(o, ir.Addr)
                                                  for o in instr.operands].index(True)], mask)
    space = space_of(instr.match)
    out = []
    for sp, sel, off in check(mach, instr, threads, addr[threads], space, 8, True, race=False):
        out.extend(zip(threads[sel].tolist(), off.tolist()))
    return out


def _mbar_state(mach, instr, t, key, ts=None):
    """The mbarrier's state, checked: initialised, and its init ordered before the use by
    each thread of ``ts`` (default ``[t]``) of another warp than the initialising thread's:
    a bar.sync (or a cluster barrier) after the init, as on the GPU, where another warp
    may otherwise use it before it is set up."""
    st = mach.mbarriers.get(key)
    if st is None:
        mach.fail(instr, "mbarrier object used before mbarrier.init (or after mbarrier.inval)",
                  t)
    seen = st["ordered"]          # warps known to be ordered after the init (for good)
    by, at = st["init"]
    for u in ([t] if ts is None else ts):
        if u // 32 == by // 32 or u // 32 in seen:   # (its own warp: reconverged lanes)
            continue
        if not mach.hb.init_ordered(u, by, at):
            mach.fail(instr, f"uses an mbarrier that thread {mach.tid_str(by)} initialised at "
                             f"{st['init_at']}, but nothing orders that mbarrier.init before "
                             f"this use (put a bar.sync, or fence.mbarrier_init and a cluster "
                             f"barrier for peer CTAs, between the init and other threads' "
                             f"arrivals and waits)", u)
        seen.add(u // 32)
    return st


def mbarrier_init(mach, instr, mask):
    count = np.broadcast_to(np.asarray(mach.src(instr, 1, mask)).astype(np.int64), (mach.T,))
    for t, off in _mbar_targets(mach, instr, mask):
        mach.mbarriers[off] = {"expected": int(count[t]), "pending": int(count[t]), "phase": 0,
                               "tx": 0, "init": (t, mach.steps), "init_at": instr.loc,
                               "ordered": set()}
    mach.events += 1


def _phase_done(mach, off: int, st, instr=None, t=None) -> None:
    """Complete the current phase once its arrivals and transaction bytes are all in."""
    if st["pending"] == 0 and st["tx"] == 0:
        st["phase"] += 1
        st["pending"] = st["expected"]
        transactions.new_phase(st)
        mach.hb.mbarrier_complete(off)
        mach.events += 1
        if st.get("waiters"):
            _skipped(mach, off, st, instr, t)


def _skipped(mach, off, st, instr, t) -> None:
    """Parity waits parked on the mbarrier: a phase completing while one of them has not
    yet seen the phase it waited for, which already completed, leaves it waiting for a
    parity that passed (an arrival count too small, or a side that ran a phase ahead)."""
    for w, e in st["waiters"].items():
        if e[1]:
            sp = mach.spaces["shared"]
            where = sp.nearest(sp.base + off % sp.row_bytes)
            mach.fail(instr, f"completes phase {st['phase'] - 1} of the mbarrier {where} "
                             f"while thread {mach.tid_str(e[3])}, waiting at {e[2].loc} for "
                             f"the phase with parity {e[0]}, has not yet seen phase "
                             f"{st['phase'] - 2}, which it waited for: it would wait for a "
                             f"parity that already passed (does the mbarrier's count match "
                             f"its arrivals? does a side run a phase ahead of its waits?)", t)
        if (st["phase"] & 1) != e[0]:
            e[1] = True


def mbarrier_expect_tx(mach, off: int, nbytes: int, instr=None, thread=None) -> None:
    """Add ``nbytes`` expected transaction bytes to the current phase of the mbarrier at
    shared byte offset ``off`` (as ``expect_tx`` does)."""
    transactions.expect(mach, mach.mbarriers[off], int(nbytes), instr, thread)


def mbarrier_complete_tx(mach, off: int, nbytes: int, instr=None, thread=None,
                         release=None) -> None:
    """An asynchronous copy delivered ``nbytes`` to the mbarrier at shared byte offset
    ``off`` (``Space.offsets`` of its address): the phase completes when the count reaches
    zero with no arrivals pending. For bulk / tensor copies (``.mbarrier::complete_tx``):
    write the copied bytes first (through :func:`ptxdsl.interp.access.track` as writes of
    the issuing ``thread``), then call this with that ``thread``, so that a consumer's
    acquire of the phase orders the copy's writes before its reads (``release``: the
    happens-before vector to release instead of the thread's current one)."""
    st = mach.mbarriers.get(off)
    if st is None:
        mach.fail(instr, "an asynchronous copy completes on an mbarrier that was never "
                         "initialised (mbarrier.init)", thread)
    if release is not None:
        mach.hb.mbarrier_release(off, release)
    elif thread is not None:    # the copy's writes happen before the phase completes
        mach.hb.mbarrier_arrive(off, int(thread))
    transactions.complete(mach, st, int(nbytes), instr, thread)
    _phase_done(mach, off, st, instr, thread)


def _by_barrier(targets) -> dict:
    """``{offset: [threads, in order]}`` of ``_mbar_targets``' pairs."""
    groups: dict = {}
    for t, off in targets:
        groups.setdefault(off, []).append(t)
    return groups


def _arrive(mach, instr, mask, tx=None):
    """Arrivals, one barrier at a time: threads arriving on one barrier within its phase's
    remaining count are taken together (the same tokens, one release per warp); arrivals
    that would run past the phase go one by one."""
    tokens = np.zeros(mach.T, np.uint64)
    txv = None if tx is None else np.broadcast_to(np.asarray(tx).astype(np.int64), (mach.T,))
    for off, ts in _by_barrier(_mbar_targets(mach, instr, mask)).items():
        st = _mbar_state(mach, instr, ts[0], off, ts)
        if len(ts) > st["pending"] and landing.land(mach, {off}):
            st = _mbar_state(mach, instr, ts[0], off)   # copies in flight may end the phase
        if len(ts) > st["pending"]:
            for t in ts:
                _arrive_one(mach, instr, st, off, t, txv)
            continue
        tokens[ts] = st["phase"]
        if txv is not None:
            transactions.expect(mach, st, int(txv[ts].sum()), instr, ts[0])
        st["pending"] -= len(ts)
        transactions.arrived(mach, st, instr, ts[-1])
        seen = set()
        for t in ts:
            if t // 32 not in seen:
                seen.add(t // 32)
                mach.hb.mbarrier_arrive(off, t)
        _phase_done(mach, off, st, instr, ts[-1])
    mach.events += 1
    mach.dst(instr, 0, tokens, mask)


def _arrive_one(mach, instr, st, off, t, txv):
    if txv is not None:
        transactions.expect(mach, st, int(txv[t]), instr, t)
    st["pending"] -= 1
    if st["pending"] < 0:
        mach.fail(instr, "mbarrier received more arrivals than its expected count", t)
    transactions.arrived(mach, st, instr, t)
    mach.hb.mbarrier_arrive(off, t)
    _phase_done(mach, off, st, instr, t)


def mbarrier_arrive(mach, instr, mask):
    _arrive(mach, instr, mask)


def mbarrier_arrive_expect_tx(mach, instr, mask):
    _arrive(mach, instr, mask, mach.src(instr, 2, mask))


def _wait(mach, instr, mask, parity: bool):
    """Parked (Blocked) until the phase completed for every thread, then true and an
    acquire; when nothing else can progress it may give up and return false."""
    arg = np.broadcast_to(np.asarray(mach.src(instr, 2, mask)).astype(np.int64), (mach.T,))
    done = np.zeros(mach.T, bool)
    targets = _mbar_targets(mach, instr, mask)
    groups = _by_barrier(targets)
    def check():
        for off, ts in groups.items():
            st = _mbar_state(mach, instr, ts[0], off, ts)
            a = arg[ts]
            done[ts] = (st["phase"] & 1) != (a & 1) if parity else st["phase"] > a
    check()
    if (mask & ~done).any() and landing.land(mach, {o for t, o in targets if not done[t]}):
        check()                              # copies in flight land when waited for
    if (mask & ~done).any():
        t = int(np.argmax(mask & ~done))
        off = dict(targets)[t]
        sp = mach.spaces["shared"]

        def what():
            st = mach.mbarriers.get(off, {})
            want = (f"the phase with parity {int(arg[t]) & 1}" if parity
                    else f"phase {int(arg[t])}")
            text = (f"the mbarrier {sp.nearest(sp.base + off % sp.row_bytes)} to complete "
                    f"{want} (it is in phase {st.get('phase')}, waiting for "
                    f"{st.get('pending')} more arrivals and {st.get('tx')} transaction bytes)")
            if st and st["pending"] == 0 and st["tx"] > 0:
                text += (f"; every arrival is in but {st['tx']} announced bytes never arrived: "
                         f"{transactions.summary(st)}")
            return text
        if parity:                            # parked: watched for skipped phases
            for u, o in targets:
                if not done[u]:
                    mach.mbarriers[o].setdefault("waiters", {})[u // 32] = \
                        [int(arg[u]) & 1, False, instr, u]

        def give_up():
            _unpark(mach, targets)
            mach.dst(instr, 0, done, mask)
        raise Blocked(what, fallback=give_up)
    _unpark(mach, targets)
    for off, ts in groups.items():           # one acquire per warp and barrier
        seen = set()
        for t in ts:
            if t // 32 not in seen:
                seen.add(t // 32)
                mach.hb.mbarrier_acquire(off, t)
    mach.dst(instr, 0, done, mask)


def _unpark(mach, targets) -> None:
    for u, o in targets:
        st = mach.mbarriers.get(o)
        if st is not None and st.get("waiters"):
            st["waiters"].pop(u // 32, None)


def mbarrier_test_wait(mach, instr, mask):
    _wait(mach, instr, mask, instr.match.has("parity"))


def mbarrier_try_wait(mach, instr, mask):
    _wait(mach, instr, mask, instr.match.has("parity"))


def mbarrier_inval(mach, instr, mask):
    for _, off in _mbar_targets(mach, instr, mask):
        mach.mbarriers.pop(off, None)


def mbarrier_tx(mach, instr, mask):
    """expect_tx adds transaction bytes to the current phase; complete_tx delivers them
    (as a copy would, completing the phase when nothing else is pending); either may
    name a peer CTA's mbarrier (.shared::cluster)."""
    n = np.broadcast_to(np.asarray(mach.src(instr, 1, mask)).astype(np.int64), (mach.T,))
    complete = instr.match.spec.opcode.endswith("complete_tx")
    for t, off in _mbar_targets(mach, instr, mask):
        st = _mbar_state(mach, instr, t, off)
        if complete:
            mbarrier_complete_tx(mach, off, int(n[t]), instr, t)
        else:
            transactions.expect(mach, st, int(n[t]), instr, t)
    mach.events += 1


HANDLERS = {
    "mbarrier.init": mbarrier_init,
    "mbarrier.arrive": mbarrier_arrive,
    "mbarrier.arrive.expect_tx": mbarrier_arrive_expect_tx,
    "mbarrier.expect_tx": mbarrier_tx,
    "mbarrier.complete_tx": mbarrier_tx,
    "mbarrier.test_wait": mbarrier_test_wait,
    "mbarrier.try_wait": mbarrier_try_wait,
    "mbarrier.inval": mbarrier_inval,
}
