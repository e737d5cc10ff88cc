"""Calls on the interpreter: each ``call`` is replaced by the callee's body.

The interpreter has no call stack and no per-thread ``.param`` memory, so the program
it runs is the kernel with every call inlined (the PTX that ptxas and the GPU see keeps
its calls). A ``.param`` variable a call passes (``st.param`` before the call, ``ld.param``
in the callee) becomes one register per stored value, keyed by variable and byte
offset: a store writes it, a load of the same bytes reads it. A callee's registers and
labels get a per-call prefix, its ``ret`` branches to the end of its copy, and a ``.reg``
parameter or return value is a ``mov`` in or out. Recursion, indirect calls and loads
that split or merge stored values are refused with the line that needs them.
"""
from __future__ import annotations

import dataclasses
import struct

from ..core import ir
from ..core.errors import InterpreterError, IsaError
from ..core.types import ALL_TYPES
from ..isa import INSTRUCTIONS

MAX_DEPTH = 32


def has_calls(prog: ir.Program) -> bool:
    return any(i.match.spec.form == "call" for i in prog.walk())


def inline_calls(fn, functions) -> ir.Program:
    """``fn``'s program with every call replaced by its callee's body (``functions``:
    name -> Function of the module)."""
    prog = fn.program
    if not has_calls(prog):
        return prog
    run = _Inliner(fn, functions)
    body = run.expand(prog.body, _Ctx(fn, {}, {}, {}, None, (fn.name,)))
    return dataclasses.replace(prog, body=body, regs=list(prog.regs) + run.new_regs)


@dataclasses.dataclass
class _Ctx:
    fn: object
    regs: dict            # callee register name -> its copy
    labels: dict          # callee label -> its copy
    alias: dict           # callee .param name -> the caller's variable it stands for
    ret_label: str | None
    stack: tuple


class _Inliner:
    def __init__(self, fn, functions):
        self.top = fn
        self.b = fn.builder
        self.functions = functions
        self.new_regs: list[ir.Reg] = []
        self.slots: dict = {}       # (variable, byte offset) -> (register, bytes)
        self.ncalls = 0
        # .param variables passed through registers: the kernel's own (call arguments and
        # results) and, per inlined call, the callee's parameters and variables
        self.local = {d.name for d in fn.vars if d.space == "param"}

    # ------------------------------------------------------------------ helpers
    def _reg(self, name: str, dtype) -> ir.Reg:
        r = ir.Reg(name, dtype, self.b)
        self.new_regs.append(r)
        return r

    def _build(self, chain, args, like: ir.Instr, guard=None, negated=None):
        g = like.guard if guard is None else guard
        instr = self.b.build(chain, args, guard=g, loc=like.loc)
        instr.guard_negated = like.guard_negated if negated is None else negated
        return instr

    def _sub(self, op, ctx: _Ctx):
        if isinstance(op, ir.Reg):
            return ctx.regs.get(op.name, op)
        if isinstance(op, ir.Vec):
            return ir.Vec(tuple(self._sub(x, ctx) for x in op.items))
        if isinstance(op, ir.Addr):
            return ir.Addr(self._sub(op.base, ctx), op.offset,
                           tuple(self._sub(x, ctx) for x in op.coords))
        if isinstance(op, ir.Symbol) and op.space == "param" and op.name in ctx.alias:
            return ir.Symbol(ctx.alias[op.name], "param", True)
        if isinstance(op, ir.LabelRef):
            return ir.LabelRef(ctx.labels.get(op.name, op.name))
        return op

    def _passed(self, op) -> str | None:
        """The variable name when ``op`` addresses a .param variable a call passes."""
        base = op.base if isinstance(op, ir.Addr) else op
        if isinstance(base, ir.Symbol) and base.space == "param" and base.name in self.local:
            return base.name
        return None

    # ------------------------------------------------------------------ the walk
    def expand(self, body, ctx: _Ctx) -> list:
        out = []
        for node in body:
            if isinstance(node, ir.Label):
                out.append(ir.Label(ctx.labels.get(node.name, node.name), node.loc))
            elif isinstance(node, ir.Instr):
                out.extend(self._instr(node, ctx))
            else:
                out.append(node)
        return out

    def _instr(self, instr: ir.Instr, ctx: _Ctx) -> list:
        spec = instr.match.spec
        ops = tuple(self._sub(o, ctx) for o in instr.operands)
        guard = ctx.regs.get(instr.guard.name, instr.guard) if instr.guard is not None else None
        new = dataclasses.replace(instr, operands=ops, guard=guard)
        if spec.form == "call":
            return self._call(new, ctx)
        if spec is INSTRUCTIONS["ret"] and ctx.ret_label is not None:
            return [self._build(["bra"], [ctx.ret_label], new)]
        if spec.access in ("read", "write") and instr.match.chosen.get("space") == "param":
            k = next(i for i, s in enumerate(instr.match.operands) if s.role == "a")
            var = self._passed(ops[k])
            if var is not None:
                return self._load(new, var, ops[k].offset) if spec.access == "read" else \
                    self._store(new, var, ops[k].offset)
        for o in ops:
            if self._passed(o) is not None:
                raise InterpreterError(
                    f"{instr.opcode}: takes the address of the call variable "
                    f"{self._passed(o)}; the interpreter runs calls by inlining and passes "
                    f".param variables in registers, so only ld.param/st.param may name them",
                    instr.loc)
        return [new]

    # ------------------------------------------------------------------ .param traffic
    def _items(self, instr: ir.Instr, value):
        t = instr.match.type
        return t, (list(value.items) if isinstance(value, ir.Vec) else [value])

    def _store(self, instr: ir.Instr, var: str, offset: int) -> list:
        t, items = self._items(instr, instr.operands[1])
        out = []
        bits = max(16, t.bits)
        for j, x in enumerate(items):
            key = (var, offset + j * t.bytes)
            have = self.slots.get(key)
            if have is not None and have[1] != t.bytes:
                raise InterpreterError(
                    f"{instr.opcode}: stores {t.bytes} bytes at {var}+{key[1]}, where an "
                    f"earlier store put {have[1]}; the interpreter passes each stored value "
                    f"of a .param variable as one register", instr.loc)
            if have is None:
                have = (self._reg(f"__{var}_{key[1]}", ALL_TYPES[f"b{bits}"]), t.bytes)
                self.slots[key] = have
            slot = have[0]
            if isinstance(x, ir.Imm):
                out.append(self._build(["mov", f"b{bits}"], [slot, _imm_bits(x)], instr))
            elif x.dtype.bits == bits:
                out.append(self._build(["mov", f"b{bits}"], [slot, x], instr))
            else:
                out.append(self._build(["cvt", f"u{bits}", f"u{x.dtype.bits}"], [slot, x],
                                       instr))
        return out

    def _load(self, instr: ir.Instr, var: str, offset: int) -> list:
        t, items = self._items(instr, instr.operands[0])
        out = []
        for j, x in enumerate(items):
            key = (var, offset + j * t.bytes)
            have = self.slots.get(key)
            if have is None or have[1] != t.bytes:
                what = (f"{have[1]}-byte value" if have else "no value")
                raise InterpreterError(
                    f"{instr.opcode}: loads {t.bytes} bytes at {var}+{key[1]}, where the "
                    f"program stored {what} before; the interpreter passes each stored value "
                    f"of a .param variable as one register (load what was stored)", instr.loc)
            slot = have[0]
            if x is ir.SINK:
                continue
            if t.bits == x.dtype.bits == slot.dtype.bits:
                out.append(self._build(["mov", f"b{t.bits}"], [x, slot], instr))
            else:   # sub-word values widen as ld would (.s8 sign-extends, others zero)
                k = "s" if t.kind == "s" else "u"
                out.append(self._build(["cvt", f"{k}{x.dtype.bits}", f"{k}{t.bits}"],
                                       [x, slot], instr))
        return out

    # ------------------------------------------------------------------ calls
    def _call(self, instr: ir.Instr, ctx: _Ctx) -> list:
        rets, fname, args = instr.operands
        name = fname.name
        callee = self.functions.get(name)
        if callee is None or callee.program is None:
            raise InterpreterError(f"call: {name} has no body in this module (a prototype or "
                                   f".extern function); the interpreter runs only calls it "
                                   f"can inline", instr.loc)
        if name in ctx.stack or len(ctx.stack) > MAX_DEPTH:
            raise InterpreterError(f"call: {name} calls itself ({' -> '.join(ctx.stack)} -> "
                                   f"{name}); the interpreter runs calls by inlining, which "
                                   f"recursion defeats", instr.loc)
        if len(args.items) != len(callee.params) or \
                len(rets.items) != len(callee.returns or []):
            raise InterpreterError(f"call: {name} takes {len(callee.params)} arguments and "
                                   f"{len(callee.returns or [])} return values, the call "
                                   f"passes {len(args.items)} and {len(rets.items)}",
                                   instr.loc)
        bad = [d.name for d in callee.vars if d.space != "param"]
        if bad:
            raise InterpreterError(f"call: {name} declares .{callee.vars[0].space} variables "
                                   f"({', '.join(bad)}), which inlining cannot share; the "
                                   f"interpreter does not run it", instr.loc)
        self.ncalls += 1
        pre = f"{name}_c{self.ncalls}_"
        regs = {r.name: self._reg(pre + r.name, r.dtype) for r in callee.program.regs}
        labels = {n.name: pre + n.name for n in callee.program.body
                  if isinstance(n, ir.Label)}
        alias = {}
        out = []
        skip = None
        if instr.guard is not None:   # @p call: jump over the inlined body unless p
            skip = f"$__skip_{pre}"
            out.append(self._build(["bra"], [skip], instr, negated=not instr.guard_negated))
        plain = dataclasses.replace(instr, guard=None, guard_negated=False)
        moves_out = []
        for formals, actuals, inward in ((callee.params, args.items, True),
                                         (callee.returns or [], rets.items, False)):
            for p, a in zip(formals, actuals):
                if p.space == "reg":
                    mine = regs[p.name.lstrip("%")]
                    if not isinstance(a, (ir.Reg, ir.Imm)):
                        raise InterpreterError(f"call: {name}'s .reg parameter {p.name} is "
                                               f"passed {a!r}, not a register", instr.loc)
                    bits = mine.dtype.bits if not mine.dtype.is_pred else None
                    chain = ["mov", "pred" if bits is None else f"b{bits}"]
                    if inward:
                        val = _imm_bits(a) if isinstance(a, ir.Imm) else a
                        out.append(self._build(chain, [mine, val], plain))
                    else:
                        moves_out.append(self._build(chain, [a, mine], plain))
                elif isinstance(a, ir.Symbol):
                    alias[p.name] = a.name
                else:
                    raise InterpreterError(f"call: {name}'s .param parameter {p.name} is "
                                           f"passed {a!r}; pass a .param variable", instr.loc)
        for d in callee.vars:      # the callee's own call variables
            alias[d.name] = pre + d.name
            self.local.add(pre + d.name)
        sub = _Ctx(callee, regs, labels, alias, f"$__ret_{pre}", ctx.stack + (name,))
        try:
            out.extend(self.expand(callee.program.body, sub))
        except IsaError as e:   # pragma: no cover - the callee parsed with these forms
            raise InterpreterError(f"call: inlining {name}: {e.message}", instr.loc) from None
        out.append(ir.Label(sub.ret_label, instr.loc))
        out.extend(moves_out)
        if skip is not None:
            out.append(ir.Label(skip, instr.loc))
        return out


def _imm_bits(x: ir.Imm) -> int:
    """An immediate's bits (a float immediate stored to a .param as its encoding)."""
    if isinstance(x.value, float):
        fmt = {16: "<e", 32: "<f", 64: "<d"}[x.dtype.bits]
        raw = struct.pack(fmt, x.value)
        return int.from_bytes(raw, "little")
    return int(x.value) & ((1 << x.dtype.bits) - 1)
