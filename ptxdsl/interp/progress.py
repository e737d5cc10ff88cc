"""No progress: loops whose threads go round without changing anything.

A backward ``bra`` (``ptx.loop``, a label and a branch back to it) closes a loop: the
ops from the label to the branch. When its threads come back to the branch with the
same threads active, the same values in every register the loop names, and nothing
written to memory and no event (an arrival, an exit, a copy landing: ``mach.events``)
anywhere since the last look, the loop is at a fixed point: run alone it goes round
forever, polling a flag nobody sets, or spinning on nothing at all.

In lockstep that means another thread must change something first (or nobody will), so
the batch is rerun with scheduled units (:mod:`.schedule`). A unit at a fixed point
yields (a :class:`~.schedule.Blocked` with ``spin``); another unit writing memory lets it
look again, and a round in which every unit waits or spins with nothing changed is
reported, naming each spinning loop and the addresses its loads poll. Loops whose
registers keep changing (a counter, ``%clock``) are bounded by ``max_seconds`` instead;
every :data:`PREEMPT_EVERY` rounds they let the other threads run (in lockstep: the batch
is rerun with units), so a poll with a retry count sees a flag another warp sets.
"""
from __future__ import annotations

import numpy as np

from ..core import ir
from ..core.errors import InterpreterError
from .addressing import WINDOWS, addresses, space_of
from .memory import RANK_SHIFT, SHARED_WINDOW

# backward jumps of one loop between two looks at its state (a look costs a gather of
# the loop's registers; a spinning unit goes round twice this often before it yields)
SPIN_EVERY = 32
# backward jumps after which a loop that keeps changing lets the other threads run, when
# some are outside it (a poll with a retry count: the GPU runs the flag's setter alongside)
PREEMPT_EVERY = 1024


TIMERS = frozenset({"clock", "clock64", "globaltimer"})


def instructions(ops):
    """The instructions of the ops, nested regions included, in program order."""
    for op in ops:
        instr = getattr(op, "instr", None)
        if instr is not None:
            yield instr
        node = getattr(op, "node", None)
        if isinstance(node, ir.Loop):
            yield node.check
        for blk in (getattr(op, "then", None), getattr(op, "els", None),
                    getattr(op, "body", None)):
            if blk is not None:
                yield from instructions(blk.ops)
        if isinstance(node, ir.Loop):
            yield node.incr


def loop_registers(ops) -> tuple:
    """The registers the ops write (nested regions included): the loop's state besides
    memory. Values computed from a timer (``%clock``, ``%globaltimer``: a poll's timeout)
    are left out, so a poll that could only end by trapping makes no progress; unless the
    closing branch itself depends on one (a delay loop, which the time ends)."""
    instrs = list(instructions(ops))
    written: dict = {}
    timed: set = set()
    for _ in range(2):            # twice: a value carried round the loop
        for instr in instrs:
            dests = instr.dests()
            for r in dests:
                written[r] = None
            if any(isinstance(x, ir.Special) and x.name in TIMERS for x in instr.operands) \
                    or any(r in timed for r in instr.sources()):
                timed.update(dests)
    if instrs and instrs[-1].guard in timed:
        return tuple(written)
    return tuple(r for r in written if r not in timed)


def loop_loads(ops) -> tuple:
    """The instructions of the ops (nested included) that read memory into a register:
    what a spinning loop polls."""
    return tuple(i for i in instructions(ops)
                 if i.match.spec.access in ("read", "read_write") and i.dests()
                 and any(isinstance(x, ir.Addr) and not x.coords for x in i.operands))


def memory_version(mach) -> int:
    return sum(sp.version for sp in mach.spaces.values())


def fingerprint(mach, regs, taken) -> tuple:
    """The state a loop's next round depends on, for the threads ``taken`` (see the
    module docstring)."""
    vals = []
    for r in regs:
        v = mach.regs.get(r)
        if v is not None:
            vals.append(v[taken].tobytes())
    return (mach.events, memory_version(mach), taken.tobytes(), b"".join(vals),
            mach.cc[taken].tobytes())


def _where(mach, instr, addr: int, t: int) -> str:
    """``addr`` placed in its allocation, with the value it holds for thread ``t``."""
    space = space_of(instr.match)
    if space is None:
        if SHARED_WINDOW <= addr < SHARED_WINDOW + (1 << 32):
            space, addr = "shared", addr - SHARED_WINDOW
        elif WINDOWS["param"] <= addr < WINDOWS["param"] + (1 << 32):
            space, addr = "param", addr - WINDOWS["param"]
        else:
            space = "global"
    row = 0
    if space == "shared":
        addr &= (1 << RANK_SHIFT) - 1
        row = int(mach.cta[t])
    sp = mach.spaces.get(space)
    if sp is None:
        return f"{space} {addr:#x}"
    text = f"{space} {addr:#x} ({sp.nearest(addr)})"
    ty = instr.match.type
    off = addr - sp.base + row * sp.row_bytes
    if ty is not None and bool(sp.in_bounds(np.asarray([addr], np.uint64), ty.bytes)[0]) \
            and off % ty.bytes == 0:
        v = sp.read(np.asarray([off], np.int64), ty.np_dtype, 1)[0, 0]
        text += f", which holds {v}"
    return text


def spin_message(mach, bra, loads, taken, label_loc) -> str:
    """What a loop at a fixed point waits for: the values its loads keep reading."""
    t = int(np.argmax(taken))
    polls = []
    for instr in loads:
        op = next(x for x in instr.operands if isinstance(x, ir.Addr))
        try:
            a = int(addresses(mach, instr, op, taken)[t])
        except InterpreterError:   # an address register not written in every thread
            continue
        polls.append(f"{instr.opcode} at {instr.loc} reads {_where(mach, instr, a, t)}")
    what = ("; ".join(polls[:3]) + (" and more" if len(polls) > 3 else "")) if polls else \
        "it reads no memory at all"
    return (f"the loop from {label_loc} to this branch comes back with the same "
            f"registers and no memory changed ({what}): it waits for a value no running "
            f"thread will write, or never ends")
