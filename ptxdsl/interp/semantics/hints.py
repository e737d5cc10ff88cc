"""Instructions that change no value: prefetches, griddepcontrol and setmaxnreg. The
interpreter keeps only what their rules need (which threads waited for the previous
grid, the register budgets of the warpgroups) and checks those rules.
"""
from __future__ import annotations

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


SM_REGISTERS = 65536


def setmaxnreg(mach, instr, mask):
    """A register budget changes no value, but its rules are checked: the count is a
    multiple of 8 in 24..256; every thread of the warpgroup executes this one
    instruction together; ``.inc`` never lowers and ``.dec`` never raises the budget the
    warpgroup set before; and the budgets the CTA's warpgroups set add up to at most the
    SM's 65536 registers (beyond, ``.inc`` waits forever for registers nobody frees)."""
    n = int(instr.operands[0].value)
    inc = instr.match.chosen["action"] == "inc"
    if n % 8 or not 24 <= n <= 256:
        mach.fail(instr, f"setmaxnreg takes a register count from 24 to 256, a multiple of "
                         f"8; got {n}")
    if not hasattr(mach, "reg_budgets"):
        mach.reg_budgets = {}               # batch warpgroup -> (count, instr)
    budgets = mach.reg_budgets
    ctas = set()
    for threads in warpgroups(mach, instr, mask):
        g, t = int(threads[0]) // 128, int(threads[0])
        old = budgets.get(g)
        if old is not None and (n < old[0] if inc else n > old[0]):
            d, other = ("inc", "dec") if inc else ("dec", "inc")
            mach.fail(instr, f"setmaxnreg.{d} to {n} would {'lower' if inc else 'raise'} this "
                             f"warpgroup's budget of {old[0]} registers (set at "
                             f"{old[1].loc}): .{d} only {'raises' if inc else 'lowers'} it; "
                             f"use setmaxnreg.{other}, or a count "
                             f"{'at least' if inc else 'at most'} {old[0]}", t)
        budgets[g] = (n, instr)
        ctas.add(t // mach.P)
    per_cta = mach.P // 128
    for c in ctas:
        mine = [budgets[g] for g in range(c * per_cta, (c + 1) * per_cta) if g in budgets]
        total = 128 * sum(b for b, _ in mine)
        if total > SM_REGISTERS:
            parts = " + ".join(f"128 x {b}" for b, _ in mine)
            mach.fail(instr, f"the register budgets of this CTA's warpgroups add up to {parts} "
                             f"= {total}, more than an SM's {SM_REGISTERS} registers: "
                             f"setmaxnreg.inc would wait forever for registers nobody frees; "
                             f"lower the counts (e.g. the producer's .dec first)",
                      c * mach.P)


HANDLERS = {
    "prefetch": no_effect,
    "cp.async.bulk.prefetch.tensor": no_effect,
    "griddepcontrol.launch_dependents": no_effect,
    "griddepcontrol.wait": grid_wait,
    "setmaxnreg": setmaxnreg,
}
