"""A parsed module -> canonical PTX text.

Canonical, not byte-identical: instructions print as the tracer's emitter prints them
(:func:`ptxdsl.core.emit.fmt_instr`: the table's modifier order, hex immediates,
``0f`` floats), declarations one per line, scopes flattened, comments and debug
information (``.file``, ``.loc``, ``.section``) dropped. Printing a parse of the printed
text gives the same text again.
"""
from __future__ import annotations

from ..core import ir
from ..core.emit import fmt_instr
from .decls import Function, Module, VarDecl


def emit_module(mod: Module, only: str | None = None) -> str:
    """The whole module; ``only``: keep one entry (and every ``.func`` and variable)."""
    out = [f".version {mod.version[0]}.{mod.version[1]}",
           f".target {', '.join(mod.target)}",
           f".address_size {mod.address_size}", ""]
    for item in mod.items:
        if isinstance(item, VarDecl):
            out.append(item.text())
        elif isinstance(item, str):
            out.append(item)
        elif only is None or item.kind != "entry" or item.name == only:
            out.append("")
            out.extend(function_lines(item))
    return "\n".join(out) + "\n"


def function_lines(fn: Function) -> list[str]:
    link = "".join(f".{x} " for x in fn.linkage)
    head = f"{link}.{fn.kind} "
    if fn.returns is not None:
        head += "(" + ", ".join(p.text() for p in fn.returns) + ") "
    head += fn.name
    lines = []
    if fn.params:
        lines.append(head + "(")
        for i, p in enumerate(fn.params):
            lines.append(f"\t{p.text()}{',' if i + 1 < len(fn.params) else ''}")
        lines.append(")")
    elif fn.kind == "entry" or fn.returns is not None:
        lines.append(head + "()")
    else:
        lines.append(head)
    lines.extend(fn.directives)
    if fn.program is None:
        lines[-1] += ";"
        return lines
    lines.append("{")
    lines.extend(f"\t{d.text()}" for d in fn.regs)
    lines.extend(f"\t{d.text()}" for d in fn.vars)
    lines.append("")
    for i, node in enumerate(fn.program.body):
        lines.extend(f"\t{p}" for p in fn.pragmas.get(i, ()))
        lines.append(node_line(node))
    lines.extend(f"\t{p}" for p in fn.pragmas.get(len(fn.program.body), ()))
    lines.append("}")
    return lines


def node_line(node) -> str:
    if isinstance(node, ir.Instr):
        return "\t" + fmt_instr(node)
    if isinstance(node, ir.Label):
        return f"{node.name}:"
    if isinstance(node, ir.Raw):
        return "\t" + node.text.format(*node.operands) + ";"
    raise TypeError(f"cannot print {node!r}")  # pragma: no cover
