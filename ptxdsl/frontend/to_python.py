"""``PtxKernel.to_python()``: DSL source that records the same instructions.

Each instruction becomes ``ptx.inst.<opcode>(operands, pred=p)``, each label
``ptx.label``, each register a ``reg.scalar`` bound to a Python name like the PTX one,
each shared variable an ``smem.alloc``. The DSL names a kernel's parameters itself
(``<tensor>_ptr``, ``<dim>_dim``; pointers first), so the signature is translated, not
copied: a 64-bit parameter becomes a one-byte Tile ``a<i>`` (its pointer ``a<i>_ptr``),
a 32-bit integer parameter a named dim ``d<i>`` (``d<i>_dim``) carried by the first
Tile's shape. Other parameters (floats, byte arrays), dynamic shared memory and ``.func``
calls are refused with a message; lines kept raw stay ``ptx.raw`` lines.
"""
from __future__ import annotations

import keyword
import re

from ..core import ir
from ..core.emit import fmt_instr
from ..core.errors import TraceError
from ..isa import INSTRUCTIONS

_NAME = re.compile(r"[^0-9A-Za-z_]")


def _py(name: str) -> str:
    n = _NAME.sub("_", name)
    if not n or n[0].isdigit() or keyword.iskeyword(n):
        n = "v_" + n
    return n


class _Names:
    def __init__(self):
        self.taken: dict[str, str] = {}

    def get(self, key: str) -> str:
        if key not in self.taken:
            base = _py(key)
            n, k = base, 1
            while n in self.taken.values():
                n, k = f"{base}_{k}", k + 1
            self.taken[key] = n
        return self.taken[key]


def _signature(kernel):
    ptrs, dims, rename = [], [], {}
    for i, p in enumerate(kernel.params):
        if p.space != "param" or p.count is not None:
            raise TraceError(f"to_python: parameter {p.name} (.{p.type}"
                             f"{'[]' if p.count is not None else ''}) has no DSL spelling yet")
        bits = int(re.sub(r"\D", "", p.type) or 0)
        if bits == 64 and p.type[0] in "bus":
            ptrs.append(f"a{i}")
            rename[p.name] = f"a{i}_ptr"
        elif bits == 32 and p.type[0] in "bus":
            dims.append(f"d{i}")
            rename[p.name] = f"d{i}_dim"
        else:
            raise TraceError(f"to_python: parameter {p.name} (.{p.type}) has no DSL spelling "
                             f"yet (64-bit pointers and 32-bit integers do)")
    if dims and not ptrs:
        raise TraceError("to_python: a kernel with integer parameters and no pointer has no "
                         "DSL spelling yet (named dims ride on a Tile)")
    return ptrs, dims, rename


def to_python(kernel) -> str:
    fn = kernel.fn
    prog = fn.program
    ptrs, dims, rename = _signature(kernel)
    names = _Names()
    for a in ptrs:
        names.taken[a] = a
    tiles = [f"Tile({', '.join(map(repr, dims))}, u8)" if i == 0 and dims else "Tile(1, u8)"
             for i, _ in enumerate(ptrs)]
    block = (1, 1, 1)
    for d in fn.directives:
        if d.startswith((".maxntid", ".reqntid")):
            vals = tuple(int(v) for v in d.split(" ", 1)[1].split(","))
            block = vals + (1,) * (3 - len(vals))
    lines = [
        "# Translated from PTX by ptxdsl (PtxKernel.to_python).",
        "# Parameters: " + ", ".join(f"{k} -> {v}" for k, v in rename.items()),
        "from ptxdsl import Tile, kernel, ptx, reg, smem",
        "from ptxdsl.core import ir",
        "from ptxdsl.types import *  # noqa: F401,F403",
        "",
        "",
        f"@kernel([{', '.join(tiles)}], [], block={block!r}, arch={prog.arch!r}, "
        f"version={tuple(prog.ptx_version)!r}, name={fn.name!r})",
        f"def {_py(fn.name)}({', '.join(ptrs)}):",
    ]
    body = []
    shared = {}
    for d in prog.shared:
        v = names.get("smem_" + d.name)
        shared[d.name] = v
        if d.dynamic:   # sized at launch (interpret(..., shared=BYTES))
            body.append(f"{v} = smem.alloc({d.dtype.name}, 1, align={d.align}, dynamic=True)")
        else:
            body.append(f"{v} = smem.alloc({d.dtype.name}, {d.shape!r}, align={d.align})")
    for r in prog.regs:
        body.append(f"{names.get(r.name)} = reg.scalar({r.dtype.name})")

    def operand(op) -> str:
        if isinstance(op, ir.Reg):
            return names.get(op.name)
        if isinstance(op, ir.Imm):
            return repr(op.value)
        if isinstance(op, ir.Special):
            return f"ptx.sreg({op.name!r})"
        if isinstance(op, ir.Symbol):
            if op.space == "shared":
                return f"{shared[op.name]}.__ptx_addr__().base"
            return f"ir.Symbol({rename.get(op.name, op.name)!r}, {op.space!r})"
        if isinstance(op, ir.Addr):
            if isinstance(op.base, ir.Symbol) and op.base.space == "param":
                base = operand(op.base)
                return f"ir.Addr({base}, {op.offset})"
            base = operand(op.base)
            coords = f", coords=[{', '.join(operand(c) for c in op.coords)}]" if op.coords else ""
            off = f", {op.offset}" if op.offset else ""
            return f"ptx.addr({base}{off}{coords})"
        if isinstance(op, ir.Vec):
            return "[" + ", ".join(operand(x) for x in op.items) + "]"
        if isinstance(op, ir.LabelRef):
            return repr(op.name)
        if op is ir.SINK:
            return "ptx.sink"
        raise TraceError(f"to_python: cannot spell operand {op!r}")

    nodes = list(prog.body)
    tail = [n for n in nodes if not isinstance(n, ir.Label)][-1:]
    if tail and isinstance(tail[0], ir.Instr) and tail[0].match.spec is INSTRUCTIONS["ret"] \
            and tail[0].guard is None:
        nodes.remove(tail[0])   # the DSL ends every kernel with its own ret
    for node in nodes:
        if isinstance(node, ir.Label):
            body.append(f"ptx.label({node.name!r})")
        elif isinstance(node, ir.Raw):
            body.append(f"ptx.raw({node.text.format(*node.operands)!r})")
        elif isinstance(node, ir.Instr):
            pred_imm = any(isinstance(o, ir.Imm) and o.dtype.is_pred for o in node.operands)
            if node.guard_negated or pred_imm:
                # no DSL spelling for @!p guards or predicate immediates: an unchecked line
                text = fmt_instr_text(node)
                fmt_args = ", ".join(names.get(r.name) for r in _regs_in(node))
                body.append(f"ptx.raw({text!r}{', ' + fmt_args if fmt_args else ''})")
                continue
            chain = ", ".join(operand(o) for o in node.operands)
            pred = f"pred={names.get(node.guard.name)}" if node.guard is not None else ""
            args = ", ".join(x for x in (chain, pred) if x)
            body.append(f"ptx.inst({node.opcode!r}, {args})" if args else
                        f"ptx.inst({node.opcode!r})")
    lines += ["    " + b for b in body] or ["    pass"]
    return "\n".join(lines) + "\n"


def _regs_in(node: ir.Instr) -> list:
    out = [node.guard] if node.guard is not None else []
    for op in node.operands:
        ir._collect_regs(op, out)
    return out


def fmt_instr_text(node: ir.Instr) -> str:
    """The instruction as ``ptx.raw`` text: each register a ``{}`` placeholder."""
    text = fmt_instr(node).replace("{", "{{").replace("}", "}}")
    for r in _regs_in(node):
        text = re.sub(rf"%{re.escape(r.name)}(?![\w$])", "{}", text, count=1)
    return text.rstrip(";")

