"""Accumulator registers of a wgmma in flight: ``mach.held`` maps each register to the
threads whose copy a ``wgmma.mma_async`` will still write and that instruction
(:mod:`.semantics.wgmma`); the machine calls :func:`check_held` on every access to one of them."""
from __future__ import annotations


def check_held(mach, reg, instr, mask, how: str) -> None:
    """An access (``how``: "read" or "written") by the threads in ``mask`` to a register
    some of whose threads hold an accumulator in flight is an error for those threads."""
    threads, wg = mach.held[reg]
    both = threads & mask
    if both.any():
        mach.fail(instr, f"register %{reg.name} is {how} here, but it is an accumulator of "
                         f"the wgmma at {wg.loc}, still in flight: wait for it "
                         f"(wgmma.commit_group, then wgmma.wait_group) before touching it",
                  int(both.argmax()))
