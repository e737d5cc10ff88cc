"""Whole-body walks a trace needs when it finishes: which registers are read
(so deferred instructions whose results nobody uses resolve to nothing), in what
order registers first appear in the printed program (for dense renumbering), and
the resolution of deferred nodes."""
from __future__ import annotations

from . import ir


def collect_used(body, used: set) -> None:
    for node in body:
        if isinstance(node, ir.Instr):
            used.update(node.sources())
        elif isinstance(node, ir.Raw):
            used.update(node.regs())
        elif isinstance(node, ir.Deferred):
            used.update(getattr(node, "reads", ()))
        elif isinstance(node, ir.If):
            used.add(node.pred)
            collect_used(node.then_body, used)
            if node.else_body is not None:
                collect_used(node.else_body, used)
        elif isinstance(node, ir.Loop):
            for x in (node.start, node.stop, node.step):
                if isinstance(x, ir.Reg):
                    used.add(x)
            collect_used(node.body, used)


def collect_mentioned(body, out: dict) -> None:
    """Registers in the order the emitter prints them (``out`` is an ordered set)."""
    def add(*regs):
        for r in regs:
            if isinstance(r, ir.Reg):
                out.setdefault(r, None)

    for node in body:
        if isinstance(node, ir.Instr):
            add(node.guard)
            for op in node.operands:
                if isinstance(op, ir.Vec):
                    add(*op.items)
                elif isinstance(op, ir.Addr):
                    add(op.base)
                else:
                    add(op)
        elif isinstance(node, ir.Raw):
            add(*node.regs())
        elif isinstance(node, ir.If):
            add(node.pred)
            collect_mentioned(node.then_body, out)
            if node.else_body is not None:
                collect_mentioned(node.else_body, out)
        elif isinstance(node, ir.Loop):
            add(node.var, node.start, node.stop, node.step)
            collect_mentioned([i for i in (node.check,) if i is not None], out)
            add(node.cond)
            collect_mentioned(node.body, out)
            collect_mentioned([i for i in (node.incr,) if i is not None], out)


def resolve_deferred(body, used):
    out = []
    for node in body:
        if isinstance(node, ir.Deferred):
            out.extend(node.resolve(used))
        elif isinstance(node, ir.If):
            node.then_body = resolve_deferred(node.then_body, used)
            if node.else_body is not None:
                node.else_body = resolve_deferred(node.else_body, used)
            out.append(node)
        elif isinstance(node, ir.Loop):
            node.body = resolve_deferred(node.body, used)
            out.append(node)
        else:
            out.append(node)
    return out
