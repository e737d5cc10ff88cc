"""Whole-program checks on a finished trace.

Trace-time validation already checked each instruction against the table;
this pass checks what only the whole program shows: every register is
written before it is read (in program order), every branch target exists
exactly once, operand types still agree with their instruction, and no
``bar.sync`` sits where only some threads of a CTA can reach it.
"""
from __future__ import annotations

from . import ir
from .errors import VerifyError
from .types import compatible

# Special registers that differ between threads of one CTA: a branch on them
# is divergent, and a barrier inside it deadlocks or is undefined.
_THREAD_VARYING = ("tid.", "laneid", "warpid", "clock", "lanemask")


def verify(prog: ir.Program) -> None:
    """Raise :class:`VerifyError` (naming the user's line) on the first problem found."""
    _Checker(prog).run()


class _Checker:
    def __init__(self, prog: ir.Program):
        self.prog = prog
        self.defined: set = set()
        self.varying: set = set()
        self.labels_placed: dict[str, ir.Label] = {}
        self.labels_used: list[tuple[str, object]] = []

    def run(self) -> None:
        self.body(self.prog.body, divergent=None)
        for name, loc in self.labels_used:
            if name not in self.labels_placed:
                raise VerifyError(f"branch to label {name!r}, which is never placed "
                                  f"(ptx.place(label) or ptx.label(name))", loc)

    def read(self, reg, loc, what="read") -> None:
        if isinstance(reg, ir.Reg) and reg not in self.defined:
            raise VerifyError(
                f"register %{reg.name} (.{reg.dtype.name}) is {what} here before any "
                f"instruction writes it; initialise it (reg.scalar(..., init=...)) first", loc)

    def body(self, nodes, divergent) -> None:
        for node in nodes:
            if isinstance(node, ir.Instr):
                self.instr(node, divergent)
            elif isinstance(node, ir.Label):
                if node.name in self.labels_placed:
                    raise VerifyError(f"label {node.name!r} placed twice", node.loc)
                self.labels_placed[node.name] = node
            elif isinstance(node, ir.If):
                self.read(node.pred, node.loc, "tested")
                why = divergent or (node.loc if node.pred in self.varying else None)
                self.body(node.then_body, why)
                if node.else_body is not None:
                    self.body(node.else_body, why)
            elif isinstance(node, ir.Loop):
                for x in (node.start, node.stop, node.step):
                    self.read(x, node.loc)
                self.read(node.var, node.loc)
                varies = any(x in self.varying for x in (node.start, node.stop, node.step)
                             if isinstance(x, ir.Reg))
                self.defined.add(node.cond)
                if varies:
                    self.varying.update((node.var, node.cond))
                self.body(node.body, divergent or (node.loc if varies else None))
            else:  # pragma: no cover
                raise VerifyError(f"unexpected IR node {node!r}")

    def instr(self, instr: ir.Instr, divergent) -> None:
        loc = instr.loc
        for r in instr.sources():
            self.read(r, loc)
        self.types(instr)
        for op in instr.operands:
            if isinstance(op, ir.LabelRef):
                self.labels_used.append((op.name, loc))
        spec = instr.match.spec
        # an aligned barrier (bar.sync, barrier.sync.aligned) must be reached by every
        # thread of its scope: inside a thread-dependent branch it deadlocks. With an
        # explicit thread count (bar.sync id, n) only n threads take part: that is how
        # the warpgroups of a warp-specialised kernel meet, each in its own branch.
        counted = len(instr.operands) > 1  # bar.sync a, b: the count b is given
        if "barrier" in spec.effects and spec.scope != "thread" and divergent is not None \
                and instr.match.aligned and not counted:
            raise VerifyError(
                f"{instr.opcode} inside a branch or loop that depends on the thread index "
                f"(opened at {divergent}): threads that skip it never arrive, so the CTA "
                f"deadlocks. Move the barrier out of the branch", loc)
        varies = any(r in self.varying for r in instr.sources()) or any(
            isinstance(o, ir.Special) and o.name.startswith(_THREAD_VARYING)
            for o in instr.operands) or spec.varies
        for d in instr.dests():
            self.defined.add(d)
            if varies:
                self.varying.add(d)

    def types(self, instr: ir.Instr) -> None:
        m = instr.match
        for slot, op in zip(m.operands, instr.operands):
            want = m.resolve_type(slot.ty)
            if want is None or m.spec.packs or m.spec.subword:
                continue
            regs = op.items if isinstance(op, ir.Vec) else (op,)
            for r in regs:
                if isinstance(r, ir.Reg) and not compatible(r.dtype, want):
                    raise VerifyError(f"{m.text}: %{r.name} is .{r.dtype.name}, the "
                                      f"instruction needs .{want.name}", instr.loc)
