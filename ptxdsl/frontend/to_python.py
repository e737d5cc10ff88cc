"""``PtxKernel.to_python()``: DSL source that records the same instructions.

Each instruction becomes ``ptx.inst.<opcode>(operands, pred=p)``, each label
``ptx.label``, each register a ``reg.scalar`` bound to a Python name like the PTX one,
each shared variable an ``smem.alloc``. The DSL names a kernel's parameters itself
(``<tensor>_ptr``, ``<dim>_dim``; pointers first), so the signature is translated, not
copied: a 64-bit parameter becomes a one-byte Tile named after it (``x_ptr`` -> ``x``,
printed ``x_ptr`` again), a 32-bit integer parameter a named dim (``n_dim`` -> ``n``)
carried by the first Tile's shape. Other parameters (floats, byte arrays) are refused
with a message, and so are calls; lines kept raw, negated guards and sources stay
``ptx.raw`` lines.
Bottom-tested loops (``L: ... @p bra L``) are raised into ``with ptx.loop("L", pred=p):``
blocks.
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
    """Python names from the PTX parameter names: a pointer ``x_ptr`` is the Tile ``x``
    (the DSL prints ``x_ptr`` again), a 32-bit ``n_dim`` the named dim ``n``; other names
    are kept whole (``k_param_0`` -> Tile ``k_param_0``, printed ``k_param_0_ptr``)."""
    ptrs, dims, rename = [], [], {}
    names = _Names()
    for i, p in enumerate(kernel.params):
        if p.space != "param" or p.count is not None:
            raise TraceError(f"to_python: parameter {p.name} (.{p.type}"
                             f"{'[]' if p.count is not None else ''}) has no DSL spelling yet")
        bits = int(re.sub(r"\D", "", p.type) or 0)
        if bits == 64 and p.type[0] in "bus":
            a = names.get(re.sub(r"_ptr$", "", p.name) or p.name)
            ptrs.append(a)
            rename[p.name] = f"{a}_ptr"
        elif bits == 32 and p.type[0] in "bus":
            d = names.get(re.sub(r"_dim$", "", p.name) or p.name)
            dims.append(d)
            rename[p.name] = f"{d}_dim"
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
    call = next((i for i in prog.walk() if i.match.spec.form == "call"), None)
    if call is not None:
        raise TraceError(f"to_python: kernel {fn.name} calls .func {call.operands[1].name} "
                         f"({call.loc}); the DSL has no device functions to call")
    ptrs, dims, rename = _signature(kernel)
    names = _Names()
    for a in ptrs + dims:
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
    def line(node) -> str:
        if isinstance(node, ir.Label):
            return f"ptx.label({node.name!r})"
        if isinstance(node, ir.Raw):
            return f"ptx.raw({node.text.format(*node.operands)!r})"
        pred_imm = any(isinstance(o, ir.Imm) and o.dtype.is_pred or isinstance(o, ir.Not)
                       for o in node.operands)
        if node.guard_negated or pred_imm:
            # no DSL spelling for @!p guards, !p sources or predicate immediates: an
            # unchecked line
            text = fmt_instr_text(node)
            fmt_args = ", ".join(names.get(r.name) for r in _regs_in(node))
            return f"ptx.raw({text!r}{', ' + fmt_args if fmt_args else ''})"
        chain = ", ".join(operand(o) for o in node.operands)
        pred = f"pred={names.get(node.guard.name)}" if node.guard is not None else ""
        args = ", ".join(x for x in (chain, pred) if x)
        return f"ptx.inst({node.opcode!r}, {args})" if args else f"ptx.inst({node.opcode!r})"

    body += _raised(nodes, line, names)
    lines += ["    " + b for b in body] or ["    pass"]
    return "\n".join(lines) + "\n"


def _back_branch(nodes, i: int) -> int | None:
    """The index of the last ``@p bra L`` / ``bra.uni L`` back to the label at ``i`` that
    ``ptx.loop`` prints the same way (None: the label heads no such loop)."""
    name = nodes[i].name
    for j in range(len(nodes) - 1, i, -1):
        n = nodes[j]
        if isinstance(n, ir.Instr) and n.match.spec is INSTRUCTIONS["bra"] and \
                n.operands[0].name == name and not n.guard_negated and \
                (n.guard is not None) != ("uni" in n.match.mods):
            return j
    return None


def _raised(nodes, line, names) -> list[str]:
    """Lines for ``nodes``, each bottom-tested loop (``L: ... @p bra L``) raised into a
    ``with ptx.loop("L", pred=p):`` block (the same instructions, indented), a counted
    one (``add i, i, step; setp ...; @p bra L``) noted as such."""
    out, i = [], 0
    while i < len(nodes):
        node = nodes[i]
        j = _back_branch(nodes, i) if isinstance(node, ir.Label) else None
        if j is None:
            out.append(line(node))
            i += 1
            continue
        bra = nodes[j]
        pred = f", pred={names.get(bra.guard.name)}" if bra.guard is not None else ""
        inner = nodes[i + 1:j]
        if len(inner) >= 2 and all(isinstance(x, ir.Instr) for x in inner[-2:]) and \
                inner[-2].match.spec is INSTRUCTIONS["add"] and \
                inner[-1].match.spec is INSTRUCTIONS["setp"] and bra.guard is not None and \
                inner[-1].operands[0] is bra.guard and inner[-2].operands[0] is \
                inner[-2].operands[1] and inner[-1].operands[1] is inner[-2].operands[0]:
            out.append(f"# counted loop: {names.get(inner[-2].operands[0].name)} steps by "
                       f"{_spell(inner[-2].operands[2], names)} while "
                       f"{inner[-1].match.chosen.get('cmp', '?')} "
                       f"{_spell(inner[-1].operands[2], names)}")
        out.append(f"with ptx.loop({node.name!r}{pred}):")
        out += ["    " + x for x in (_raised(inner, line, names) or ["pass"])]
        i = j + 1
    return out


def _spell(op, names) -> str:
    if isinstance(op, ir.Reg):
        return names.get(op.name)
    if isinstance(op, ir.Imm):
        return repr(op.value)
    return "?"


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

