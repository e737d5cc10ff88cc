"""Module-level ``.global`` and ``.const`` variables on the interpreter.

On the GPU such a variable lives in the module's image, initialised from its
declaration. The interpreter places each one in global memory as an array of its own
(its initialiser's values, zeros after them), handed to the kernel as a hidden pointer
parameter: every thread first loads the variable's address into a register, and each
operand that names the variable (``[table+8]``, ``mov.u64 %rd, table``) uses the register
instead. A ``.const`` variable is read as global memory (``ld.const`` becomes
``ld.global``). The bounds, uninitialised-read and race detectors then cover it as any
array; it is not written back anywhere.
"""
from __future__ import annotations

import dataclasses
import re

import numpy as np

from ..core import ir
from ..core.errors import InterpreterError
from ..core.types import u64
from .resolve import _number, ptx_type


def initial_array(d, loc=None) -> np.ndarray:
    """The contents of a module variable: its initialiser's values, then zeros."""
    t = ptx_type(d.type, loc)
    vec = int(d.vector[1:]) if d.vector else 1
    n = vec
    for k in d.dims or ():
        if k == 0:
            raise InterpreterError(f"module variable {d.name}[] has no size the interpreter "
                                   f"can give it (declare its length)", loc)
        n *= k
    out = np.zeros(n, t.np_dtype)
    if d.init:
        text = re.sub(r"[{}\s]", "", d.init)
        vals = [v for v in text.split(",") if v]
        if len(vals) > n:
            raise InterpreterError(f"module variable {d.name} has {len(vals)} initial values "
                                   f"for {n} elements", loc)
        for i, v in enumerate(vals):
            try:
                x = _number(v[1:] if v.startswith("-") else v)
            except ValueError:
                raise InterpreterError(f"module variable {d.name}: the initial value {v!r} is "
                                       f"not a number (addresses of other variables are not "
                                       f"supported by the interpreter)", loc) from None
            x = -x if v.startswith("-") else x
            if hasattr(x, "bits") and not t.is_float:
                x = x.bits
            out[i] = np.array(x).astype(t.np_dtype) if t.is_float else \
                np.array(int(x) & ((1 << t.bits) - 1), f"u{t.bytes}").view(t.np_dtype)
    return out


def bind_module_vars(prog: ir.Program, decls, builder):
    """``prog`` with its module variables addressed through hidden pointer parameters,
    and the arrays those parameters point to (param name -> array)."""
    used = {}
    for instr in prog.walk():
        for op in instr.operands:
            base = op.base if isinstance(op, ir.Addr) else op
            if isinstance(base, ir.Symbol) and base.space in ("global", "const"):
                used[base.name] = base.space
    if not used:
        return prog, {}
    by_name = {d.name: d for d in decls}
    regs, params, arrays, prologue = {}, [], {}, []
    for name in used:
        d = by_name.get(name)
        if d is None:
            raise InterpreterError(f"the .{used[name]} variable {name} is not declared at "
                                   f"module level", None)
        pname = f"__modvar_{name}"
        arrays[pname] = initial_array(d)
        params.append(ir.Param(pname, u64, "ptr", pname))
        r = ir.Reg(f"__modvar_{name}", u64, builder)
        regs[name] = r
        prologue.append(builder.build(["ld", "param", "u64"],
                                      [r, ir.Addr(ir.Symbol(pname, "param"))], loc=None))

    def sub(op):
        if isinstance(op, ir.Symbol) and op.name in regs and op.space in ("global", "const"):
            return regs[op.name]
        if isinstance(op, ir.Addr):
            return ir.Addr(sub(op.base), op.offset, op.coords)
        return op

    def rewrite(instr):
        if not any(isinstance(o.base if isinstance(o, ir.Addr) else o, ir.Symbol)
                   and (o.base if isinstance(o, ir.Addr) else o).name in regs
                   for o in instr.operands):
            return instr
        chain = list(instr.match.mods)
        if instr.match.chosen.get("space") == "const":   # read as global memory
            chain[chain.index("const")] = "global"
        new = builder.build([instr.match.spec.opcode.split(".")[0],
                             *instr.match.spec.opcode.split(".")[1:], *chain],
                            [sub(o) for o in instr.operands], guard=instr.guard,
                            loc=instr.loc)
        new.guard_negated = instr.guard_negated
        return new

    body = prologue + [rewrite(n) if isinstance(n, ir.Instr) else n for n in prog.body]
    return dataclasses.replace(prog, body=body, params=list(prog.params) + params,
                               regs=list(prog.regs) + list(regs.values())), arrays
