"""Thread exit, CTA barriers and memory ordering.

Named barriers are per CTA and go through generations. ``bar.sync`` /
``barrier.sync`` without a count completes when every thread of the CTA that
has not exited has arrived (threads that exit later, or run off the end of
the kernel, stop counting, as on hardware). With a count ``b``, arrivals are
counted per warp (32 each, as the hardware does), ``bar.arrive`` included,
and the generation completes at exactly ``b``; more is an error. A thread
at ``.sync`` waits (:class:`~.schedule.Blocked`) until its generation
completes; a completed generation orders the memory accesses of the threads
that arrived before it with those of the threads that waited at it (see
:mod:`.hb`), and nobody else's. ``.aligned`` forms (``bar.sync``) must be
executed by every thread of a warp that has not exited.

Memory fences (``membar``, ``fence``) need no action: the interpreter makes
every write visible at once.
"""
from __future__ import annotations

import numpy as np

from ..errors import InterpreterError
from .schedule import Blocked
from .semantics import handler


@handler("ret", "exit")
def exit_(mach, instr, mask):
    mach.exited |= mask
    mach.events += 1


@handler("trap")
def trap(mach, instr, mask):
    mach.fail(instr, "trap executed: the kernel aborts here (on a GPU the launch fails)",
              int(np.argmax(mask)))


@handler("membar", "fence")
def fence(mach, instr, mask):
    return None


@handler("bra")
def bra(mach, instr, mask):  # pragma: no cover - the machine runs branches itself
    raise InterpreterError("bra reached the handler table", instr.loc)


def _ids(mach, instr, mask, i):
    v = np.broadcast_to(np.asarray(mach.src(instr, i, mask)).astype(np.int64), (mach.T,))
    per = v.reshape(mach.ncta, mach.P)
    act = mask.reshape(mach.ncta, mach.P)
    first = np.where(act.any(1), per[np.arange(mach.ncta), np.argmax(act, 1)], -1)
    bad = act & (per != first[:, None])
    if bad.any():
        t = int(np.argmax(bad.reshape(-1)))
        mach.fail(instr, "threads of one CTA name different barriers or counts here", t)
    return first


class BarrierState:
    """One named barrier of one CTA: arrivals of the current generation."""

    __slots__ = ("count", "expected", "gen", "arrived", "waiting", "instr")

    def __init__(self, P: int):
        self.count = 0
        self.expected = None        # the thread count of a counted generation
        self.gen = 0
        self.arrived = np.zeros(P, bool)   # CTA-local threads that arrived (any mode)
        self.waiting = np.zeros(P, bool)   # ... of which wait (.sync)
        self.instr = None                  # the instruction of the first arrival


def _settle(mach, c: int, bid: int, st: BarrierState) -> None:
    """Complete the generation if every thread it needs has arrived."""
    if st.count == 0:
        return
    if st.expected is not None:
        need = st.expected
    else:
        live = ~mach.exited[c * mach.P:(c + 1) * mach.P]
        need = int((live | st.arrived).sum())
    if st.count < need:
        return
    mach.hb.barrier(c, st.arrived, st.waiting)
    st.gen += 1
    st.count = 0
    st.expected = None
    st.arrived[:] = False
    st.waiting[:] = False
    st.instr = None
    mach.events += 1


def _aligned_check(mach, instr, mask):
    """An .aligned barrier is executed by every live thread of each warp that reaches it.
    (Not checked when threads are scheduled one by one: that run only happens after the
    same kernel ran with whole warps up to a deadlock.)"""
    act = mask.reshape(-1, 32)
    live = (~mach.exited).reshape(-1, 32)
    part = act.any(1) & ((live & ~act).any(1))
    if part.any():
        w = int(np.argmax(part))
        missing = int(np.argmax(live[w] & ~act[w]))
        mach.fail(instr, f"{instr.opcode} is .aligned: every thread of a warp must execute it "
                         f"together, but thread {mach.tid_str(w * 32 + missing)} of this warp "
                         f"is elsewhere (a branch that splits the warp); use a non-aligned "
                         f"barrier.sync or make the branch warp-uniform",
                  w * 32 + int(np.argmax(act[w])))


@handler("bar", "barrier")
def barrier(mach, instr, mask):
    sync = instr.match.chosen["mode"] == "sync"
    ids = _ids(mach, instr, mask, 0)
    counted = len(instr.operands) > 1
    counts = _ids(mach, instr, mask, 1) if counted else None
    if instr.match.aligned and not mach.per_thread:
        _aligned_check(mach, instr, mask)
    act = mask.reshape(mach.ncta, mach.P)
    waits = []
    for c in np.flatnonzero(act.any(1)):
        c = int(c)
        bid = int(ids[c])
        first_t = c * mach.P + int(np.argmax(act[c]))
        st = mach.bars.get((c, bid))
        if st is None:
            st = mach.bars[(c, bid)] = BarrierState(mach.P)
        if counted:
            expected = int(counts[c])
            if expected % 32:
                mach.fail(instr, f"barrier thread count {expected} is not a multiple of the "
                                 f"warp size (32)", first_t)
            if st.count and st.expected != expected:
                mach.fail(instr, f"barrier {bid} is awaited with {st.expected} threads "
                                 f"(at {st.instr.loc if st.instr else '?'}) but arrived at "
                                 f"here with {expected}", first_t)
            st.expected = expected
            st.count += int(act[c].reshape(-1, 32).any(1).sum()) * 32
            limit = expected
        else:
            if st.expected is not None and st.count:
                mach.fail(instr, f"barrier {bid} is used with a thread count "
                                 f"({st.expected}) and without one at once", first_t)
            st.count += int(act[c].sum())
            limit = int((~mach.exited[c * mach.P:(c + 1) * mach.P] | st.arrived).sum())
        st.arrived |= act[c]
        if sync:
            st.waiting |= act[c]
        if st.instr is None:
            st.instr = instr
        if st.count > limit:
            mach.fail(instr, f"barrier {bid}: {st.count} threads arrived but it expects "
                             f"{limit} (a bar.arrive or bar.sync too many, before the "
                             f"waiting threads took the last generation?)", first_t)
        if sync:
            waits.append((c, bid, st, st.gen))
        _settle(mach, c, bid, st)
    mach.events += 1
    pending = [w for w in waits if w[2].gen == w[3]]
    if not pending:
        return
    c, bid, st, _ = pending[0]

    def what():
        live = int((~mach.exited[c * mach.P:(c + 1) * mach.P] | st.arrived).sum())
        need = st.expected if st.expected is not None else live
        return (f"barrier {bid}: {st.count} of the {need} threads it needs have arrived"
                + (f" ({len(pending)} CTAs waiting)" if len(pending) > 1 else ""))

    def poll():
        for c, bid, st, gen in pending:
            if st.gen == gen:
                _settle(mach, c, bid, st)
        return all(st.gen != gen for _, _, st, gen in pending)
    raise Blocked(what, poll=poll)
