"""Opcode -> semantic function, keyed by the instruction table's opcode names.

A handler is ``handler(machine, instr, mask)``: it reads its operands for
the threads in ``mask`` and writes its results there. Pure per-thread
operations are written as ``fn(match, *sources) -> result`` and wrapped by
:func:`alu`. The modules that define handlers register them on import, at
the bottom of this file.

``NO_CPU_SEMANTICS`` lists table opcodes the interpreter deliberately cannot
run (entries may also say so themselves with ``OpSpec(interp=False)``);
interpreting a kernel that uses one stops with an :class:`InterpreterError`.
``tests/test_interp_semantics.py`` checks that every table entry is in
exactly one of the two sets.
"""
from __future__ import annotations

from typing import Callable

from ..core.errors import InterpreterError
from ..isa import TABLE

HANDLERS: dict[str, Callable] = {}

# Every current table entry has CPU semantics; new entries without them go here.
NO_CPU_SEMANTICS: frozenset[str] = frozenset()


def handler(*opcodes: str):
    def deco(fn):
        for op in opcodes:
            HANDLERS[op] = fn
        return fn
    return deco


def alu(fn):
    """Wrap ``fn(match, *sources)`` as a handler writing its destination(s)."""
    def run(m, instr, mask):
        slots = instr.match.operands
        n = len(instr.operands)
        srcs = [m.src(instr, i, mask) for i, s in enumerate(slots) if not s.is_dest and i < n]
        res = fn(instr.match, *srcs)
        dests = [i for i, s in enumerate(slots) if s.is_dest]
        if len(dests) == 1:
            m.dst(instr, dests[0], res, mask)
        else:
            for i, v in zip(dests, res):
                m.dst(instr, i, v, mask)
    run.__name__ = fn.__name__
    run.__doc__ = fn.__doc__
    return run


def _unsupported(m, instr, mask):
    raise InterpreterError(
        f"{instr.opcode} has no CPU semantics in the interpreter; run this kernel on a GPU "
        f"(ptxdsl.interp.NO_CPU_SEMANTICS lists such instructions)", instr.loc)


HANDLERS["?"] = _unsupported


def supported() -> set[str]:
    """Table opcodes the interpreter runs."""
    return {s.opcode for s in TABLE if s.interp and s.opcode in HANDLERS
            and s.opcode not in NO_CPU_SEMANTICS}


def unsupported() -> set[str]:
    """Table opcodes marked as having no CPU semantics."""
    return {s.opcode for s in TABLE if not s.interp} | set(NO_CPU_SEMANTICS)


def handlers_for_run() -> dict:
    """The handler map a run uses: unsupported opcodes raise when reached."""
    h = dict(HANDLERS)
    for op in unsupported():
        h[op] = _unsupported
    return h


from . import (
    intops, floatops, convert, memops, warp, control, barriers, tensorcore, hopper, tma, bulk,
    cluster)
