"""Named CTA barriers: ``bar`` / ``barrier`` ``.sync`` and ``.arrive``, and ``bar.red``.

As on the hardware, each CTA has 16 barriers (ids 0..15) that go through
generations, and different warps of one CTA may use different barriers at the same
instruction (``bar.sync id, 128`` with a per-warpgroup ``id``: each warpgroup of a
warp-specialised kernel meets at its own barrier). The id and the thread count
are read per thread and must be uniform across the lanes of a warp that execute
together (the hardware reads them once per warp).

* Without a count, a generation completes when every thread of the CTA that has not
  exited has arrived (threads that exit later, or run off the end of the kernel,
  stop counting).
* With a count ``b`` (a positive multiple of 32, at most the CTA's threads rounded up
  to whole warps), arrivals are counted per warp, 32 each (the hardware marks a
  warp's arrival, not its threads'), ``bar.arrive`` included, and the generation
  completes at exactly ``b``. More arrivals than ``b`` in one generation, two counts
  for one generation, or a counted and an uncounted use at once are errors.
* ``bar.red.popc.u32 d, a{, b}, c`` / ``bar.red.{and,or}.pred p, a{, b}, c`` are a
  ``.sync`` that also reduces the predicate ``c`` over every thread arriving in the
  generation; every waiting thread receives the result. A generation is all ``red``
  with one operation, or none (the PTX ISA forbids mixing them with
  ``bar.sync`` / ``bar.arrive`` on one barrier).

A thread at ``.sync`` / ``.red`` waits (:class:`~ptxdsl.interp.schedule.Blocked`) until its
generation completes; a completed generation orders the memory accesses of the
threads that arrived before it with those of the threads that waited at it (see
:mod:`ptxdsl.interp.hb`), and nobody else's. ``.aligned`` forms (``bar.*``) must be executed by
every thread of a warp that has not exited.
"""
from __future__ import annotations

import numpy as np

from ..schedule import Blocked
from ..warps import aligned_check

NBARRIERS = 16


class BarrierState:
    """One named barrier of one CTA: arrivals of the current generation."""

    __slots__ = ("count", "expected", "gen", "arrived", "waiting", "instr", "red", "acc",
                 "results", "last")

    def __init__(self, P: int):
        self.count = 0
        self.expected = None        # the thread count of a counted generation
        self.gen = 0
        self.arrived = np.zeros(P, bool)   # CTA-local threads that arrived (any mode)
        self.waiting = np.zeros(P, bool)   # ... of which wait (.sync / .red)
        self.instr = None                  # the instruction of the first arrival
        self.red = None                    # bar.red operation of this generation, or ""
        self.acc = 0                       # bar.red: threads whose predicate was true
        self.results: dict = {}            # generation -> (true count, threads) of bar.red
        self.last = None                   # (warps, step, instr) of the last counted one


def _settle(mach, c: int, st: BarrierState) -> None:
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
    if st.expected is not None:
        _roles_apart(mach, c, st)
    mach.hb.barrier(c, st.arrived, st.waiting)
    if st.red:
        st.results[st.gen] = (st.acc, int(st.arrived.sum()))
        st.results.pop(st.gen - 64, None)     # long done: every waiter has read it
    st.gen += 1
    st.count = 0
    st.expected = None
    st.arrived[:] = False
    st.waiting[:] = False
    st.instr = None
    st.red = None
    st.acc = 0
    mach.events += 1


def _roles_apart(mach, c: int, st: BarrierState) -> None:
    """A counted generation whose warps differ from the previous one's must be ordered
    after it: otherwise the two sets of warps (two warpgroups' roles sharing an id) may
    be at the barrier at once on the GPU, and it completes at the first ``count``
    arrivals, from either set."""
    warps = st.arrived.reshape(-1, 32).any(1)
    last, st.last = st.last, (warps, mach.steps, st.instr)
    if last is None or np.array_equal(last[0], warps):
        return
    hb = mach.hb
    base = c * hb.W
    before = base + np.flatnonzero(last[0])
    for w in (base + np.flatnonzero(warps & ~last[0])).tolist():
        if not (hb.K[w, before] >= last[1]).any():
            t = c * mach.P + (w - base) * 32
            mach.fail(st.instr, f"named barrier generation of warps "
                                f"{np.flatnonzero(warps).tolist()} follows one of warps "
                                f"{np.flatnonzero(last[0]).tolist()} (at {last[2].loc}) on "
                                f"the same barrier id, and nothing orders warp {w - base} "
                                f"after that one: on the GPU both sets may be at the "
                                f"barrier at once, and it completes at the first "
                                f"{st.expected} arrivals from either; give each role its "
                                f"own barrier id", t)


def whole_cta(instr) -> bool:
    """An ``.aligned`` CTA barrier without a thread count (``bar.sync 0``, ``bar.red``
    without ``b``): one instruction every thread of the CTA executes together."""
    spec = instr.match.spec
    if spec.opcode not in HANDLERS or not instr.match.aligned:
        return False
    return len(instr.operands) == (3 if spec.opcode.endswith("red") else 1)


def passed(mach, instr, threads) -> None:
    """``threads`` went past the whole-CTA barrier ``instr`` (executed it, or a forward
    ``bra`` jumped over it): each thread's count of passes, which must agree among the
    threads arriving there for one generation (:func:`_rounds_apart`)."""
    n = mach.bar_passes.get(instr)
    if n is None:
        n = mach.bar_passes[instr] = np.zeros(mach.T, np.int32)
    n[threads] += 1


def _rounds_apart(mach, instr, c, bid, st, sub, first_t) -> None:
    """Threads meeting at one whole-CTA barrier instruction for one generation went past
    it the same number of times; a thread that a ``bra`` took past it in an earlier
    round meets the others a round late (the GPU pairs the rounds wrongly)."""
    n = mach.bar_passes[instr][c * mach.P:(c + 1) * mach.P]
    met = n[st.arrived | sub]
    if met.min() == met.max():
        return
    ws = sorted({int(x) // 32 for x in np.flatnonzero(st.arrived | sub)})
    mach.fail(instr, f"barrier {bid}: warps {ws} meet at this .aligned barrier for one "
                     f"generation, but some have gone past it {int(met.min())} times and "
                     f"others {int(met.max())} times (this arrival and the times a branch "
                     f"jumped over it counted): a branch that depends on the thread took some past "
                     f"it in an earlier round, and on the GPU the rounds pair wrongly. Make "
                     f"the branch uniform across the CTA", first_t)


def _skipped(mach, instr, c, bid, st, sub, first_t) -> None:
    """An ``.aligned`` barrier without a count is one instruction every thread of the CTA
    executes: threads arriving for one generation at two of them (a thread-dependent
    ``bra`` took some past the first) meet at the wrong barrier on the GPU."""
    here = sorted({int(x) // 32 for x in np.flatnonzero(sub)})
    there = sorted({int(x) // 32 for x in np.flatnonzero(st.arrived)})
    mach.fail(instr, f"barrier {bid} has no thread count, so every thread of the CTA must "
                     f"reach the same .aligned barrier instruction, but warps {here} arrive "
                     f"here while warps {there} wait at {st.instr.loc} in the same "
                     f"generation: a branch that depends on the thread took some threads past "
                     f"one of them; on the GPU they meet at the wrong barrier, and the CTA "
                     f"may hang or run unsynchronised. Make the branch uniform across the "
                     f"CTA (or give the roles counted named barriers)", first_t)


def _per_thread(mach, instr, i, mask) -> np.ndarray:
    return np.broadcast_to(np.asarray(mach.src(instr, i, mask)).astype(np.int64), (mach.T,))


def _warp_uniform(mach, instr, mask, v: np.ndarray, what: str) -> None:
    """``v`` must be the same for the active lanes of each warp."""
    w = v.reshape(-1, 32)
    act = mask.reshape(-1, 32)
    first = w[np.arange(len(w)), np.argmax(act, 1)]
    bad = act & (w != first[:, None])
    if bad.any():
        t = int(np.argmax(bad.reshape(-1)))
        mach.fail(instr, f"lanes of one warp name different barrier {what}s here "
                         f"({int(first[t // 32])} and {int(v[t])}): the hardware reads one "
                         f"{what} per warp; make it warp-uniform", t)


def arrive(mach, instr, mask, id_op: int, count_op: int | None, sync: bool,
           red: tuple | None = None):
    """Arrive at the barriers the threads of ``mask`` name; returns the generations the
    waiting ones (``sync``) wait for: ``[(cta, id, state, generation, threads)]``.
    ``red``: ``(operation, per-thread predicate)`` of a ``bar.red``."""
    ids = _per_thread(mach, instr, id_op, mask)
    counts = _per_thread(mach, instr, count_op, mask) if count_op is not None else None
    bad = mask & ((ids < 0) | (ids >= NBARRIERS))
    if bad.any():
        t = int(np.argmax(bad))
        mach.fail(instr, f"barrier id {int(ids[t])} is out of range: a CTA has "
                         f"{NBARRIERS} barriers, 0 to {NBARRIERS - 1}", t)
    _warp_uniform(mach, instr, mask, ids, "id")
    if counts is not None:
        _warp_uniform(mach, instr, mask, counts, "thread count")
        bad = mask & ((counts <= 0) | (counts % 32 != 0) | (counts > mach.P))
        if bad.any():
            t = int(np.argmax(bad))
            n = int(counts[t])
            why = (f"more than the CTA's {mach.nthreads} threads ({mach.P} in whole warps): "
                   f"the barrier could never complete" if n > mach.P else
                   "not a positive multiple of the warp size (32)")
            mach.fail(instr, f"barrier thread count {n} is {why}", t)
    if instr.match.aligned and not mach.per_thread:
        aligned_check(mach, instr, mask)
    if counts is None and whole_cta(instr):
        passed(mach, instr, mask)
    act = mask.reshape(mach.ncta, mach.P)
    idc = ids.reshape(mach.ncta, mach.P)
    waits = []
    for c in np.flatnonzero(act.any(1)).tolist():
        for bid in np.unique(idc[c][act[c]]).tolist():
            sub = act[c] & (idc[c] == bid)
            first_t = c * mach.P + int(np.argmax(sub))
            st = mach.bars.get((c, bid))
            if st is None:
                st = mach.bars[(c, bid)] = BarrierState(mach.P)
            _arrive_one(mach, instr, c, bid, st, sub, first_t, counts, red, sync)
            if sync:
                waits.append((c, bid, st, st.gen, sub))
            _settle(mach, c, st)
    mach.events += 1
    return waits


def _arrive_one(mach, instr, c, bid, st, sub, first_t, counts, red, sync):
    kind = red[0] if red else ""
    if st.count and (st.red or "") != kind:
        other = f"bar.red.{st.red}" if st.red else "bar.sync / bar.arrive"
        here = f"bar.red.{kind}" if kind else "bar.sync / bar.arrive"
        mach.fail(instr, f"barrier {bid}: this generation began with {other} (at "
                         f"{st.instr.loc if st.instr else '?'}) and {here} arrives here; "
                         f"the arrivals of one generation must all be the same reduction, "
                         f"or none", first_t)
    if counts is not None:
        expected = int(counts[first_t])
        others = sub & (counts.reshape(mach.ncta, mach.P)[c] != expected)
        if others.any():
            mach.fail(instr, f"threads arriving at barrier {bid} together name different "
                             f"thread counts ({expected} and "
                             f"{int(counts[c * mach.P + int(np.argmax(others))])})", first_t)
        if st.count and st.expected != expected:
            if st.expected is None:
                mach.fail(instr, f"barrier {bid} is used without a thread count (at "
                                 f"{st.instr.loc if st.instr else '?'}) and with one "
                                 f"({expected}) here in the same generation", first_t)
            mach.fail(instr, f"barrier {bid} is awaited with {st.expected} threads "
                             f"(at {st.instr.loc if st.instr else '?'}) but arrived at "
                             f"here with {expected}; every arrival of a generation must "
                             f"name the same count", first_t)
        st.expected = expected
        warps = sub.reshape(-1, 32).any(1)
        if mach.per_thread:     # a warp split into threads still arrives once
            warps &= ~st.arrived.reshape(-1, 32).any(1)
        st.count += int(warps.sum()) * 32
        limit = expected
    else:
        if st.expected is not None and st.count:
            mach.fail(instr, f"barrier {bid} is used with a thread count ({st.expected}, at "
                             f"{st.instr.loc if st.instr else '?'}) and without one here "
                             f"in the same generation", first_t)
        if st.count and st.instr is not instr and (instr.match.aligned or
                                                   st.instr.match.aligned):
            _skipped(mach, instr, c, bid, st, sub, first_t)
        if instr in mach.bar_passes:
            _rounds_apart(mach, instr, c, bid, st, sub, first_t)
        st.count += int(sub.sum())
        limit = int((~mach.exited[c * mach.P:(c + 1) * mach.P] | st.arrived | sub).sum())
    st.arrived |= sub
    if sync:
        st.waiting |= sub
    st.red = kind
    if red:
        st.acc += int((red[1].reshape(mach.ncta, mach.P)[c] & sub).sum())
    if st.instr is None:
        st.instr = instr
    if st.count > limit:
        mach.fail(instr, f"barrier {bid}: {st.count} threads arrived but it expects "
                         f"{limit} (a bar.arrive or bar.sync too many, before the "
                         f"waiting threads took the last generation?)", first_t)


def wait(mach, waits, done=None) -> None:
    """Block until every generation in ``waits`` completed (then ``done(waits)``)."""
    pending = [w for w in waits if w[2].gen == w[3]]
    if not pending:
        if done:
            done(waits)
        return
    c, bid, st, _, _ = pending[0]

    def what():
        live = int((~mach.exited[c * mach.P:(c + 1) * mach.P] | st.arrived).sum())
        need = st.expected if st.expected is not None else live
        return (f"barrier {bid}: {st.count} of the {need} threads it needs have arrived"
                + (f" ({len(pending)} barriers waited for)" if len(pending) > 1 else ""))

    def poll():
        for c, bid, st, gen, _ in pending:
            if st.gen == gen:
                _settle(mach, c, st)
        if any(st.gen == gen for _, _, st, gen, _ in pending):
            return False
        if done:
            done(waits)
        return True
    raise Blocked(what, poll=poll)


def barrier(mach, instr, mask):
    sync = instr.match.chosen["mode"] == "sync"
    counted = len(instr.operands) > 1
    waits = arrive(mach, instr, mask, 0, 1 if counted else None, sync)
    wait(mach, waits)


def bar_red(mach, instr, mask):
    """``d, a{, b}, c``: arrive with predicate ``c``, wait, receive the reduction."""
    op = instr.match.chosen["op"]
    counted = len(instr.operands) > 3
    p = np.broadcast_to(np.asarray(mach.src(instr, len(instr.operands) - 1, mask)).astype(bool),
                        (mach.T,))
    waits = arrive(mach, instr, mask, 1, 2 if counted else None, True, (op, p))

    def deliver(ws):
        out = np.zeros(mach.T, np.uint32 if op == "popc" else bool)
        for c, _, st, gen, sub in ws:
            true, n = st.results[gen]
            sel = np.zeros(mach.T, bool)
            sel[c * mach.P:(c + 1) * mach.P] = sub
            v = true if op == "popc" else (true == n if op == "and" else true > 0)
            out[sel & mask] = v
        mach.dst(instr, 0, out, mask)
    wait(mach, waits, deliver)


HANDLERS = {
    "bar": barrier,
    "barrier": barrier,
    "bar.red": bar_red,
    "barrier.red": bar_red,
    "barrier.cta.red": bar_red,
}
