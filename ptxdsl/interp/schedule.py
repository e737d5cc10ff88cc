"""Scheduling: warps (or warpgroups) as independently scheduled units that yield at waits.

The machine first runs a batch of CTAs in lockstep (every thread in one numpy
vector, branches as masks): the fast path, and a legal schedule for every
kernel whose waits are already satisfied when they are reached. When an
instruction must wait for threads that lockstep has not run yet (a consumer
branch before its producer, a ring of mbarriers), the batch is run again from
its start with finer scheduling units: warpgroups, then warps (then warps of
one CTA each), each a Python generator over the structured program that
yields whenever it waits. The scheduler resumes units round-robin; a unit
whose wait is still unsatisfied yields again.

The waiting API (for semantic functions, e.g. in :mod:`.semantics.wgmma`)
-------------------------------------------------------------------------
A handler ``fn(mach, instr, mask)`` whose threads cannot go on yet raises
:class:`Blocked`:

``raise Blocked(what)``
    before changing any state: the scheduler parks the unit and *runs the
    instruction again* later (``what``, a string or a callable returning one
    when a deadlock is reported, says what it waits for, e.g.
    ``"phase 3 of the mbarrier at smem0[0]: 1 arrival and 4096 transaction
    bytes outstanding"``; it appears in deadlock reports).
``raise Blocked(what, poll=fn)``
    after the instruction has done its part (e.g. arrived at a barrier):
    the instruction counts as executed once ``fn()`` returns True; ``fn``
    may do the finishing work (an acquire).
``raise Blocked(what, headline=fn)``
    a wait that, when it is part of a deadlock, is its cause (``setmaxnreg.inc``: only
    a unit going on could give registers back): the report leads with ``fn()`` at the
    instruction's line.
``raise Blocked(what, fallback=fn)``
    for waits that may legally give up (``mbarrier.try_wait`` /
    ``test_wait`` return false): when nothing else can progress, the
    scheduler calls ``fn()`` once (which writes the "not yet" result) and
    lets the unit go on, so kernels that poll and do other work still run.

Only instructions whose table entry has a waiting effect (``barrier``,
``async_wait``, ``mbarrier``; see :data:`WAIT_EFFECTS`) may raise it.

Warpgroup-collective instructions (table scope ``"warpgroup"``: wgmma, setmaxnreg) are
executed once for all four warps of a warpgroup. When the units are finer than
warpgroups, the warps of a warpgroup meet at such an instruction and the last one to
arrive runs it for all (:func:`wait_at`); a warp that never arrives is a deadlock. Handlers
that may let another unit progress (arrivals, exits, completed copies) add 1
to ``mach.events``. A round in which every live unit is parked and no event
happened is a deadlock: at the finest level it is an
:class:`~ptxdsl.core.errors.InterpreterError` naming, for every unit, the user's
line it waits at and what for. A loop at a fixed point (:mod:`.progress`) parks its
unit too (``Blocked(..., spin=True)``); memory written by another unit in the round
counts as progress for it, and a round with only waits and spins is "no progress".
``mach.max_steps`` (``interpret(...,
max_steps=)``) bounds the instructions executed, so a livelock is an error
too, never a hang.
"""
from __future__ import annotations

import numpy as np

from ..core.errors import InterpreterError
from . import landing
from .progress import memory_version

# Table effects of instructions that may wait (and so may raise Blocked).
WAIT_EFFECTS = frozenset({"barrier", "async_wait", "mbarrier"})
TIMEOUT = "timeout"


class Blocked(Exception):
    """Raised by a semantic function whose threads must wait; see the module docstring."""

    def __init__(self, what: str, poll=None, fallback=None, spin: bool = False,
                 preempt: bool = False, headline=None):
        super().__init__(what)
        self.what = what
        self.headline = headline  # what a deadlock report leads with (see the docstring)
        self.poll = poll
        self.fallback = fallback
        self.spin = spin          # a loop at a fixed point (progress.py), not a wait
        self.preempt = preempt    # a long loop letting the others run (it progresses)


class Deadlock(Exception):
    """Internal: every unit of this level waits (the run is retried with finer units)."""

    def __init__(self, message: str, loc, partial: bool = False):
        super().__init__(message)
        self.message = message
        self.loc = loc
        self.partial = partial    # some unit waits with part of its threads elsewhere


def collective(instr) -> bool:
    """Warpgroup-collective: with warps as units, its warps meet before it runs."""
    return instr.match.spec.scope == "warpgroup"


def _meet(m, instr, mask, handler):
    """Generator: a warpgroup-collective instruction reached by one unit (a warp, or a
    thread) of a warpgroup. The units wait for each other here; the last to arrive runs
    the instruction once for the whole warpgroup (as the hardware does) and the others go
    on when it has."""
    live = m.valid & ~m.exited
    groups = np.flatnonzero((mask & live).reshape(-1, 128).any(1))
    entries = []
    for g in groups.tolist():
        key = (id(instr), g)
        e = m.meetings.get(key)
        if e is None:
            e = m.meetings[key] = {"mask": np.zeros(m.T, bool), "run": False,
                                   "done": False}
        e["mask"][g * 128:(g + 1) * 128] |= mask[g * 128:(g + 1) * 128]
        entries.append((g, key, e))
    m.events += 1
    while True:
        ready = [(g, k, e) for g, k, e in entries
                 if not e["run"] and not (live[g * 128:(g + 1) * 128]
                                          & ~e["mask"][g * 128:(g + 1) * 128]).any()]
        for g, k, e in ready:
            # the others go on once it has run: an instruction that waits (setmaxnreg.inc)
            # holds the whole warpgroup
            e["run"] = True
            del m.meetings[k]
            yield from wait_at(m, instr, e["mask"], handler, meet=False)
            e["done"] = True
            m.events += 1
        if all(e["done"] for _, _, e in entries):
            return
        g, _, e = next((x for x in entries if not x[2]["done"]))

        def what(g=g, e=e):
            if e["run"]:
                return ("warpgroup-collective: another warp of this warpgroup executes it "
                        "for all four, and waits there")
            missing = sorted({int(t) % m.P // 32 for t in np.flatnonzero(
                (live & ~e["mask"])[g * 128:(g + 1) * 128]) + g * 128})
            return (f"warpgroup-collective: warps {missing} of this warpgroup have not "
                    f"reached it (all four warps execute it together)")
        yield (instr, mask, Blocked(what))
        live = m.valid & ~m.exited


def wait_at(m, instr, mask, handler, meet: bool = True):
    """Generator: execute ``instr``, yielding while its handler reports Blocked."""
    if meet and m.split_warpgroups and collective(instr):
        yield from _meet(m, instr, mask, handler)
        return
    while True:
        try:
            m.exec_instr(instr, mask, handler)
            return
        except Blocked as b:
            if b.poll is None:
                sig = yield (instr, mask, b)
                if sig == TIMEOUT:
                    b.fallback()
                    return
                continue
            while not b.poll():
                yield (instr, mask, b)
            m.events += 1
            return


def levels(mach) -> list[tuple[str, list[np.ndarray]]]:
    """The unit partitions tried after lockstep, coarse to fine."""
    W = mach.P // 32
    out = []
    warp = mach.lin // 32
    if W > 4:
        g = warp // 4
        out.append(("warpgroup", [g == i for i in range(-(-W // 4))]))
    out.append(("warp", [warp == i for i in range(W)]))
    if mach.ncta > 1:
        out.append(("warp of one CTA", [(warp == i) & (mach.cta == c)
                                        for c in range(mach.ncta) for i in range(W)]))
    return out


def describe_unit(mach, unit: np.ndarray, mask=None) -> str:
    th = np.flatnonzero(unit & mach.valid)
    ctas = sorted(set(mach.cta[th].tolist()))
    lin = sorted(set(mach.lin[th].tolist()))
    warps = sorted({x // 32 for x in lin})
    who = f"warp {warps[0]}" if len(warps) == 1 else f"warps {warps[0]}-{warps[-1]}"
    if len(th) == 1:
        return f"thread {mach.where(int(th[0]))}"
    where = (mach.where(int(th[0])).split(" thread")[0] if len(ctas) == 1
             else f"{len(ctas)} CTAs")
    part = ""
    if mask is not None:
        act = np.flatnonzero(mask & unit)
        if 0 < len(act) < len(np.flatnonzero(unit & ~mach.exited)):
            part = (f"; threads {mach.tid_str(int(act[0]))}..{mach.tid_str(int(act[-1]))} "
                    f"wait here, the rest of the warp waits for them to reconverge")
    return (f"{who} (thread {mach.tid_str(int(th[0]))}..{mach.tid_str(int(th[-1]))}{part}) "
            f"of {where}")


def run_units(mach, top, units: list[np.ndarray], last: bool) -> None:
    """Run ``top`` with each of ``units`` (thread masks) as a scheduled unit."""
    gens = {}
    for i, u in enumerate(units):
        live = u & ~mach.exited
        if live.any():
            gens[i] = mach.gen_block(top, live)
    parked: dict = {}
    signal: dict = {}
    forced_at = None
    while gens:
        start = mach.events
        written = memory_version(mach)
        for i in list(gens):
            try:
                parked[i] = gens[i].send(signal.pop(i, None))
            except StopIteration:
                del gens[i]
                parked.pop(i, None)
                mach.exited |= units[i]
                mach.events += 1
            except Blocked as b:  # pragma: no cover - a table/handler mismatch
                raise InterpreterError(f"a semantic function waited ({b.what}) but its table "
                                       f"entry has no waiting effect {sorted(WAIT_EFFECTS)}")
        if not gens or mach.events != start or any(parked[i][2].preempt for i in gens):
            continue
        if memory_version(mach) != written and any(parked[i][2].spin for i in gens):
            continue             # a spinning unit may now read something new
        if landing.land(mach):       # every unit waits: the copies in flight land
            continue
        may_give_up = [i for i in gens if parked[i][2].fallback is not None]
        if may_give_up and forced_at != mach.events:
            forced_at = mach.events
            for i in may_give_up:
                signal[i] = TIMEOUT
            continue
        raise _deadlock(mach, units, gens, parked, last)


def thread_units(mach) -> list[np.ndarray]:
    """One unit per thread (for waits that split a warp, e.g. non-aligned barrier.sync)."""
    out = []
    for t in np.flatnonzero(mach.valid):
        u = np.zeros(mach.T, bool)
        u[t] = True
        out.append(u)
    return out


def _deadlock(mach, units, gens, parked, last) -> Deadlock:
    groups: dict = {}
    partial = False
    for i in gens:
        instr, mask, b = parked[i]
        what = b.what() if callable(b.what) else b.what
        partial |= bool(((units[i] & ~mach.exited) & ~mask).any())
        groups.setdefault((str(instr.loc), instr.opcode, what), []).append(i)
    lines = []
    for (loc, opcode, what), us in groups.items():
        first = us[0]
        more = f" and {len(us) - 1} more unit(s) like it" if len(us) > 1 else ""
        verb = "spins" if parked[first][2].spin else "waits"
        lines.append(f"  {describe_unit(mach, units[first], parked[first][1])}{more} {verb} "
                     f"at {loc}: {opcode}: {what}")
    done = [i for i in range(len(units)) if i not in gens and (units[i] & mach.valid).any()]
    if done:
        lines.append(f"  ({len(done)} other unit(s) have finished)")
    spins = [i for i in gens if parked[i][2].spin]
    first = parked[spins[0] if spins else next(iter(gens))][0]
    cause = next((parked[i] for i in gens if parked[i][2].headline is not None), None)
    hint = ("" if last else " (at a coarser scheduling level)")
    if spins:
        msg = ("no progress: every thread still running waits, or spins in a loop that "
               "changes nothing, and no thread will change what they wait for"
               f"{hint}:\n" + "\n".join(lines) +
               "\nCheck that each polled flag is written on a path that runs, and that "
               "each wait has a matching arrive.")
        g = mach.grid
        if mach.ncta < g[0] * g[1] * g[2]:
            msg += (f" This batch runs CTAs {mach.first_cta}..{mach.first_cta + mach.ncta - 1}"
                    f" of {g[0] * g[1] * g[2]}; the later ones start after it ends, so CTAs "
                    f"that wait for each other need @kernel(cooperative=True) or "
                    f"resident=N to run as one.")
    else:
        msg = ("deadlock: every thread still running waits, and none of the waits can be "
               f"satisfied{hint}:\n" + "\n".join(lines) +
               "\nCheck that each wait has a matching arrive (counts, phases/parities, "
               "transaction bytes) on a path that runs.")
    if cause is not None:
        first = cause[0]
        msg = f"{first.opcode}: {cause[2].headline()}\n{msg}"
    return Deadlock(msg, first.loc, partial)


def over_budget(mach, instr, seconds=None) -> None:
    if seconds is not None:
        raise InterpreterError(
            f"{instr.opcode}: the interpreter ran {seconds:g} CPU seconds ({mach.steps} "
            f"instructions) without finishing (a loop that never ends, or threads polling a "
            f"flag nobody sets?); raise the limit with interpret(..., max_seconds=S) if the "
            f"kernel is just long", instr.loc)
    raise InterpreterError(
        f"{instr.opcode}: the interpreter executed {mach.max_steps} instructions without "
        f"finishing (a loop that never ends, or threads polling a flag nobody sets?); "
        f"raise the limit with interpret(..., max_steps=N) if the kernel is just long",
        instr.loc)
