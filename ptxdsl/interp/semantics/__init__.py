"""Opcode -> semantic function, keyed by the instruction table's opcode names.

A handler is ``handler(machine, instr, mask)``: it reads its operands for
the threads in ``mask`` and writes its results there. Pure per-thread
operations are written as ``fn(match, *sources) -> result`` and wrapped by
:func:`.alu.alu`.

Each instruction family is one module with a ``HANDLERS`` dict (opcode ->
handler); :data:`FAMILIES` lists them, and :data:`HANDLERS` is built from that
list (an opcode claimed by two families is an error). A family imports the
interpreter's core (machine state, addressing, detectors) and the helper modules
here (:mod:`.alu`, :mod:`.floatmath`, :mod:`.atomic`); the asynchronous copies
(:mod:`.bulk`, :mod:`.tma`, :mod:`.cluster`) complete on :mod:`.mbarrier`, which
imports no family.

``NO_CPU_SEMANTICS`` lists table opcodes the interpreter deliberately cannot
run (entries may also say so themselves with ``OpSpec(interp=False)``);
interpreting a kernel that uses one stops with an :class:`InterpreterError`.
``tests/interp/test_semantics.py`` checks that every table entry is in
exactly one of the two sets.
"""
from __future__ import annotations

from typing import Callable

from ...core.errors import InterpreterError
from ...isa import TABLE
from . import (barriers, bulk, cluster, control, convert, cpasync, floatops, hints, intops,
               mbarrier, memops, tensorcore, tma, warp, wgmma)

FAMILIES = (intops, floatops, convert, memops, cpasync, mbarrier, warp, control, barriers,
            tensorcore, wgmma, hints, tma, bulk, cluster)

# Every current table entry has CPU semantics; new entries without them go here.
NO_CPU_SEMANTICS: frozenset[str] = frozenset()


def _registry(families) -> dict[str, Callable]:
    out: dict[str, Callable] = {}
    owner: dict[str, str] = {}
    for fam in families:
        for op, fn in fam.HANDLERS.items():
            if op in out:
                raise AssertionError(f"{op} has a handler in {owner[op]} and in {fam.__name__}")
            out[op], owner[op] = fn, fam.__name__
    return out


def _unsupported(m, instr, mask):
    raise InterpreterError(
        f"{instr.opcode} has no CPU semantics in the interpreter; run this kernel on a GPU "
        f"(ptxdsl.interp.NO_CPU_SEMANTICS lists such instructions)", instr.loc)


HANDLERS: dict[str, Callable] = _registry(FAMILIES)
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
