"""Thread exit, CTA barriers and memory ordering.

``bar.sync``/``barrier.sync`` without a count completes, per CTA, when every
thread of the CTA that has not exited arrives at that instruction; a CTA
whose arrivals fall short stops the run (on hardware it would hang or be
undefined). With a count ``b``, arrivals are counted per warp (32 each, as
the hardware does) together with earlier ``bar.arrive``s on the same
barrier, and must total exactly ``b``. A completed barrier starts a new
race-detection epoch for the CTA's shared memory.

Memory fences (``membar``, ``fence``) need no action: the interpreter makes
every write visible at once.
"""
from __future__ import annotations

import numpy as np

from ..errors import InterpreterError
from .semantics import handler


@handler("ret", "exit")
def exit_(mach, instr, mask):
    mach.exited |= mask


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


@handler("bar", "barrier")
def barrier(mach, instr, mask):
    sync = instr.match.chosen["mode"] == "sync"
    ids = _ids(mach, instr, mask, 0)
    counted = len(instr.operands) > 1
    counts = _ids(mach, instr, mask, 1) if counted else None
    act = mask.reshape(mach.ncta, mach.P)
    live = (~mach.exited).reshape(mach.ncta, mach.P)
    arriving = act.any(1)
    done = np.zeros(mach.ncta, bool)
    for c in np.flatnonzero(arriving):
        bid = int(ids[c])
        pend = mach.bar_pending.setdefault(bid, np.zeros(mach.ncta, np.int64))
        if counted:
            warps = int(act[c].reshape(-1, 32).any(1).sum()) * 32
            total = pend[c] + warps
            expected = int(counts[c])
            if expected % 32:
                mach.fail(instr, f"barrier thread count {expected} is not a multiple of the "
                                 f"warp size (32)", c * mach.P + int(np.argmax(act[c])))
        else:
            total = pend[c] + int(act[c].sum())
            expected = int(live[c].sum())
        if total > expected:
            mach.fail(instr, f"barrier {bid}: {total} threads arrived but it expects "
                             f"{expected}", c * mach.P + int(np.argmax(act[c])))
        if total == expected:
            pend[c] = 0
            done[c] = True
        elif sync:
            missing = live[c] & ~act[c]
            who = ""
            if missing.any():
                who = (f"; thread {mach.local_tid_str(c, int(np.argmax(missing)))} did not "
                       f"arrive (it took another branch or left the loop)")
            mach.fail(instr, f"barrier {bid} reached by only {total} of the {expected} threads "
                             f"of the CTA that must arrive: a bar.sync inside divergent code "
                             f"hangs or is undefined on hardware{who}",
                      c * mach.P + int(np.argmax(act[c])))
        else:
            pend[c] = total
    sh = mach.spaces.get("shared")
    if done.any() and sh is not None and sh.races is not None:
        sh.races.reset(done)
