"""The CTA's register pool, which ``setmaxnreg`` moves registers through.

A kernel that uses ``setmaxnreg`` starts every thread with one register count, which
ptxas derives from the entry's launch bounds (measured with ``ptxas -v``, CUDA 13.0,
sm_90a):

* ``.maxntid`` (or ``.reqntid``) N with ``.minnctapersm`` M: an SM's registers are four
  banks of 16384 and the warps of M CTAs are dealt to them in turn, so one bank holds
  ceil(M x ceil(N / 32) / 4) warps: 16384 / (32 x that), rounded down to 8 (168 for 384
  threads, 128 for 512, 80 for 384 with M = 2);
* ``.maxnreg`` R: at most R;
* at most 255, and no more than the largest count a ``setmaxnreg.inc`` asks for.

Given neither bound, ptxas cannot tell the count at entry and drops the kernel's
``setmaxnreg`` (info C7508, a performance loss); the interpreter then assumes the most a
CTA of the launch's block can start with (as with ``.maxntid`` = block and
``.minnctapersm 1``) and its reports say so.

Each CTA's pool holds what its warps were launched with (registers are allocated per
warp in units of 8 a thread). ``.dec`` gives a warpgroup's surplus back to it; ``.inc``
takes what it asks for, or waits (:class:`~.schedule.Blocked`) until another warpgroup's
``.dec`` has given enough back. A wait no ``.dec`` ends is a deadlock the scheduler
reports at the ``.inc`` with the pool's numbers.
"""
from __future__ import annotations

import numpy as np

from .schedule import Blocked

BANKS = 4
BANK_REGISTERS = 16384
MAX_PER_THREAD = 255


def allocated(count: int) -> int:
    """Registers a thread slot takes for ``count``: warps get them in units of 256."""
    return -(-count // 8) * 8


def by_threads(threads: int, ctas: int) -> int:
    """The count ptxas gives each thread so that ``ctas`` CTAs of ``threads`` fit."""
    warps_per_bank = -(-(-(-threads // 32) * ctas) // BANKS)
    return BANK_REGISTERS // (32 * warps_per_bank) // 8 * 8


def entry_count(prog, nthreads: int, asks) -> tuple[int, str, bool]:
    """(the count every thread starts with, where it comes from, whether ptxas knows it)
    for ``prog`` launched with ``nthreads`` threads a CTA; ``asks``: the counts its
    ``setmaxnreg.inc`` instructions ask for."""
    d = dict(prog.directives)
    ntid = next(((k, v) for k, v in d.items() if k in ("maxntid", "reqntid") and v), None)
    minctas = d.get("minnctapersm")
    maxnreg = (d.get("maxnreg") or (0,))[0]
    bounds = []
    if ntid is not None and minctas:
        n = int(np.prod(ntid[1]))
        bounds.append((by_threads(n, minctas[0]),
                       f".{ntid[0]} {n} with .minnctapersm {minctas[0]}"))
    if maxnreg:
        bounds.append((maxnreg, f".maxnreg {maxnreg}"))
    known = bool(bounds)
    if not known:
        bounds.append((by_threads(nthreads, 1), f"the most a CTA of {nthreads} threads can "
                       f"start with"))
    count, why = min(bounds)
    if count > MAX_PER_THREAD:
        count, why = MAX_PER_THREAD, "the most a thread can have"
    if asks and max(asks) < count:
        count, why = max(asks), f"the largest setmaxnreg.inc of the kernel, below the " \
                                f"{count} of {why}"
    return count, why, known


class Pool:
    """The register pools of a batch's CTAs and the count of each of their warpgroups."""

    def __init__(self, mach, instr):
        asks = [int(i.operands[0].value) for i in mach.prog.walk()
                if i.match.spec is instr.match.spec and i.match.chosen["action"] == "inc"]
        self.start, self.why, self.known = entry_count(mach.prog, mach.nthreads, asks)
        if mach.P % 128:
            mach.fail(instr, f"is warpgroup-collective: the CTA needs a multiple of 128 "
                             f"threads, not {mach.nthreads}", 0)
        self.P = mach.P
        self.threads = [128] * (mach.P // 128)
        groups = len(self.threads)
        self.count = np.full((mach.ncta, groups), self.start, np.int64)
        self.total = allocated(self.start) * mach.P
        self.free = np.zeros(mach.ncta, np.int64)
        self.set_at: dict = {}          # (CTA, warpgroup) -> the setmaxnreg that set it
        per_bank = -(-mach.P // 32 // BANKS) * 32 * allocated(self.start)
        if per_bank > BANK_REGISTERS:
            mach.fail(instr, f"a CTA of {mach.nthreads} threads starting with {self.start} "
                             f"registers each ({self.why}) needs {per_bank} of a register "
                             f"bank's {BANK_REGISTERS} (its warps are dealt to {BANKS} "
                             f"banks): the launch fails for lack of registers; lower "
                             f".maxnreg or give .maxntid with .minnctapersm", 0)

    def origin(self) -> str:
        text = f"{self.P} threads x {self.start}, the count at entry: {self.why}"
        if not self.known:
            text += ("; the kernel declares no launch bounds (.maxntid or .reqntid with "
                     ".minnctapersm, or .maxnreg), so ptxas cannot tell the count at entry "
                     "and ignores setmaxnreg (C7508): declare them")
        return text

    def change(self, mach, instr, groups, n: int, inc: bool) -> None:
        """Warpgroups ``groups`` (arrays of batch threads) set their count to ``n``; raises
        Blocked, changing nothing, when an ``.inc`` finds its CTA's pool short."""
        keys = [(int(t[0]) // self.P, int(t[0]) % self.P // 128, int(t[0])) for t in groups]
        for c, g, t in keys:
            old = int(self.count[c, g])
            if n < old if inc else n > old:
                d, other = ("inc", "dec") if inc else ("dec", "inc")
                at = self.set_at.get((c, g))
                whence = f"set at {at.loc}" if at is not None else f"at entry: {self.why}"
                mach.fail(instr, f"setmaxnreg.{d} to {n} would {'lower' if inc else 'raise'} "
                                 f"this warpgroup's budget of {old} registers ({whence}): "
                                 f".{d} only {'raises' if inc else 'lowers'} it; use "
                                 f"setmaxnreg.{other}, or a count "
                                 f"{'at least' if inc else 'at most'} {old}", t)
        need = np.zeros_like(self.free)
        for c, g, _ in keys:
            need[c] += self.threads[g] * (allocated(n) - allocated(int(self.count[c, g])))
        if inc and (need > self.free).any():
            c = int(np.argmax(need > self.free))
            mine = [g for cc, g, _ in keys if cc == c]
            raise Blocked(lambda: self._short(c, mine, n, int(need[c])),
                          headline=lambda: self._headline(c, mine, n, int(need[c])))
        self.free -= need
        for c, g, _ in keys:
            self.count[c, g] = n
            self.set_at[(c, g)] = instr
        if not inc and need.any():
            mach.events += 1            # registers given back: a waiting .inc may go on

    def _short(self, c, mine, n, need) -> str:
        return (f"setmaxnreg.inc to {n} waits for {need} registers; the CTA's pool has "
                f"{int(self.free[c])} free")

    def _headline(self, c, mine, n, need) -> str:
        ng = len(self.threads)
        held = ", ".join(f"warpgroup {g} {self.threads[g]} x {int(self.count[c, g])}"
                         for g in range(ng))
        asked = [n if g in mine else int(self.count[c, g]) for g in range(ng)]
        whose = f"warpgroup{'s' if len(mine) > 1 else ''} {', '.join(map(str, mine))}"
        return (f"setmaxnreg.inc to {n} ({whose}) waits forever: it asks {need} more "
                f"registers and the CTA's pool has {int(self.free[c])} free, and no "
                f"warpgroup still running gives any back (setmaxnreg.dec). The pool: "
                f"{self.total} = {self.origin()}; held: {held}. The counts asked add up to "
                f"{' + '.join(map(str, asked))} = {sum(asked)} a thread slot, more than the "
                f"{ng} x {allocated(self.start)} = {ng * allocated(self.start)} the pool "
                f"holds: lower them, or have the warpgroups that hold more give registers "
                f"back first")
