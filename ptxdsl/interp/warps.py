"""Which threads execute a collective instruction together: the checks of warp- and
warpgroup-collective (``.aligned``) instructions.

:func:`full_warps` (mma.sync, ldmatrix, ...) and :func:`warpgroups` (wgmma,
setmaxnreg) return the warps / warpgroups executing an instruction and refuse one
that only some of its lanes reached; :func:`aligned_check` refuses an ``.aligned``
barrier that a branch split.
"""
from __future__ import annotations

import numpy as np


def full_warps(mach, instr, mask) -> np.ndarray:
    """Indices of the warps executing ``instr``; refuses warps with missing lanes."""
    w = (mask & mach.valid).reshape(-1, 32)
    some, every = w.any(1), w.all(1)
    partial = some & ~every
    if partial.any():
        k = int(np.argmax(partial))
        missing = [i for i in range(32) if not w[k, i]]
        mach.fail(instr, f"is warp-collective (.sync.aligned): all 32 lanes of a warp must "
                         f"execute it together, but lanes {missing} of this warp did not "
                         f"(they took another branch, exited, or lie past the CTA's last "
                         f"thread); move it out of the branch or use whole warps", k * 32 +
                  int(np.argmax(w[k])))
    return np.flatnonzero(every)


def warpgroups(mach, instr, mask) -> list[np.ndarray]:
    """The warpgroups executing ``instr``: every thread of 4 aligned warps, or an error."""
    g = (mask & mach.valid).reshape(-1, 128) if mach.T % 128 == 0 else None
    if g is None:
        mach.fail(instr, "is warpgroup-collective: the CTA needs a multiple of 128 threads")
    some, every = g.any(1), g.all(1)
    if (some & ~every).any():
        k = int(np.argmax(some & ~every))
        missing = [i for i in range(128) if not g[k, i]]
        mach.fail(instr, f"is warpgroup-collective (.sync.aligned): all 128 threads of a "
                         f"warpgroup must execute it together; threads {missing[:8]}... of "
                         f"this warpgroup did not", k * 128)
    return [np.arange(k * 128, k * 128 + 128) for k in np.flatnonzero(every)]


def aligned_check(mach, instr, mask):
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
