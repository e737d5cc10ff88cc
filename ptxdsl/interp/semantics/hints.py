"""Instructions that change no value: prefetches, griddepcontrol and setmaxnreg. The
interpreter keeps only what their rules need (which threads waited for the previous
grid, the CTA's register pool and each warpgroup's count) and checks those rules.
"""
from __future__ import annotations

from ..registers import Pool
from ..warps import warpgroups


def no_effect(mach, instr, mask):
    """Prefetches change no value; the interpreter runs one grid at a time, so letting
    dependents start changes nothing either."""
    return None


def grid_wait(mach, instr, mask):
    """Nothing runs before this grid in the interpreter, so the wait returns at once; the
    threads that executed it may touch global memory in a ``pdl=True`` kernel
    (:func:`ptxdsl.interp.access.check_grid_wait`)."""
    if mach.grid_waited is not None:
        mach.grid_waited[mask] = True


def setmaxnreg(mach, instr, mask):
    """A register budget changes no value, but its rules are checked: the count is a
    multiple of 8 in 24..256; every thread of the warpgroup executes this one
    instruction together; ``.inc`` never lowers and ``.dec`` never raises the warpgroup's
    count; and ``.inc`` takes its registers from the CTA's pool, waiting until other
    warpgroups' ``.dec`` gave enough back (:mod:`..registers`)."""
    n = int(instr.operands[0].value)
    if n % 8 or not 24 <= n <= 256:
        mach.fail(instr, f"setmaxnreg takes a register count from 24 to 256, a multiple of "
                         f"8; got {n}")
    groups = warpgroups(mach, instr, mask)
    if mach.reg_pool is None:
        mach.reg_pool = Pool(mach, instr)
    mach.reg_pool.change(mach, instr, groups, n, instr.match.chosen["action"] == "inc")


HANDLERS = {
    "prefetch": no_effect,
    "cp.async.bulk.prefetch.tensor": no_effect,
    "griddepcontrol.launch_dependents": no_effect,
    "griddepcontrol.wait": grid_wait,
    "setmaxnreg": setmaxnreg,
}
