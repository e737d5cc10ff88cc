"""Thread exit, traps and memory ordering (named CTA barriers: :mod:`.barriers`).

Memory fences (``membar``, ``fence``) need no action: the interpreter makes
every write visible at once; ``fence.proxy.async`` feeds the async-proxy detector
(:mod:`ptxdsl.interp.proxy`).
"""
from __future__ import annotations

import numpy as np

from ...core.errors import InterpreterError
from .. import proxy
from ..cluster import on_exit


def exit_(mach, instr, mask):
    mach.exited |= mask
    mach.events += 1
    if getattr(mach, "cl", None) is not None:   # a CTA of a cluster that shared memory
        on_exit(mach, instr)


def trap(mach, instr, mask):
    mach.fail(instr, "trap executed: the kernel aborts here (on a GPU the launch fails)",
              int(np.argmax(mask)))


def fence(mach, instr, mask):
    """Memory fences need no action (every write is visible at once), except that
    ``fence.proxy.async`` makes generic writes visible to the async proxy
    (:mod:`ptxdsl.interp.proxy`) and ``fence.mbarrier_init`` publishes the thread's
    mbarrier.inits through its next cluster-barrier arrival (:mod:`ptxdsl.interp.hb`)."""
    proxy.fence(mach, instr, mask)
    if instr.match.chosen.get("sem") == "mbarrier_init":
        mach.hb.mbarrier_init_fence(np.flatnonzero(mask.reshape(-1, 32).any(1)))


def bra(mach, instr, mask):  # pragma: no cover - the machine runs branches itself
    raise InterpreterError("bra reached the handler table", instr.loc)


HANDLERS = {
    "ret": exit_,
    "exit": exit_,
    "trap": trap,
    "membar": fence,
    "fence": fence,
    "bra": bra,
}
