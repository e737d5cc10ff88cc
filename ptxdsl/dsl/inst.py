"""``ptx.inst``: one PTX instruction spelled as a chain of Python attributes.

``ptx.inst.<opcode>.<modifiers...>(operands...)`` records one instruction,
checked against the instruction table. Python spells PTX names with two
small rules: a trailing ``_`` dodges a keyword (``global_`` is ``.global``)
and ``__`` stands for ``::`` (``L1__evict_last`` is ``.L1::evict_last``).
``ptx.raw`` records a line the table does not check (an escape hatch).
"""
from __future__ import annotations

import string

from ..core import ir
from ..core.errors import TraceError, user_location
from ..core.trace import current

__all__ = ["inst", "raw", "ptx_name"]


def ptx_name(attr: str) -> str:
    """Python attribute -> PTX modifier.

    ``global_`` -> ``global``, ``L1__evict_last`` -> ``L1::evict_last``, ``_2d`` -> ``2d``
    (a name part that starts with a digit, such as TMA's dimensions).
    """
    if attr[:1] == "_" and attr[1:2].isdigit():
        attr = attr[1:]
    return attr.rstrip("_").replace("__", "::")


class _Chain:
    """An instruction being spelled: each attribute adds one dotted part."""

    __slots__ = ("_parts",)

    def __init__(self, parts: tuple[str, ...]):
        self._parts = parts

    def __getattr__(self, name: str) -> "_Chain":
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _Chain(self._parts + (ptx_name(name),))

    def __call__(self, *operands, pred=None, comment: str | None = None):
        """Record the instruction; returns its destination register (or None)."""
        b = current(f"ptx.inst.{'.'.join(self._parts)}")
        instr = b.inst(self._parts, operands, guard=pred, comment=comment)
        d = instr.dests()
        return d[0] if len(d) == 1 else (d or None)

    def __repr__(self) -> str:
        return f"ptx.inst.{'.'.join(self._parts)}"


class _Inst:
    def __getattr__(self, name: str) -> _Chain:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _Chain((ptx_name(name),))

    def __call__(self, text: str, *operands, pred=None):
        """``ptx.inst("ld.global.L1::evict_last.v4.f32", regs, addr)``: the chain as one string."""
        b = current(f"ptx.inst({text!r})")
        instr = b.inst(tuple(text.split(".")), operands, guard=pred)
        d = instr.dests()
        return d[0] if len(d) == 1 else (d or None)


inst = _Inst()


def raw(text: str, *operands) -> None:
    """Record one PTX instruction line that ptxdsl does NOT check: an escape hatch for
    an instruction the table does not have yet.

    ``text`` is printed verbatim (a trailing ``;`` is added if missing) with each ``{}``
    replaced by the next operand as PTX spells it: registers (``%r3``, named after
    renumbering), ``ptx.addr(...)`` (``[%rd0+8]``), Python ints. Literal braces (vector
    operands) are written ``{{`` and ``}}`` when operands are given. Nothing validates
    the line: ptxas does, at ``kernel.check()``, whose result lists every raw line as
    ``unchecked``; the interpreter refuses a kernel that has one. Registers given as
    operands count as written by the line (so later reads of them pass the verifier).
    """
    b = current("ptx.raw")
    loc = user_location()
    if not isinstance(text, str) or not text.strip():
        raise TraceError(f"ptx.raw takes one PTX instruction as a string, got {text!r}", loc)
    if "\n" in text:
        raise TraceError("ptx.raw takes one instruction line; call it once per line", loc)
    ops = []
    for op in operands:
        if isinstance(op, ir.Reg):
            b.own(op)
        elif isinstance(op, ir.Addr):
            if isinstance(op.base, ir.Reg):
                b.own(op.base)
        elif isinstance(op, bool) or not isinstance(op, (int, ir.Special)):
            raise TraceError(f"ptx.raw operands are registers, ptx.addr(...) addresses, "
                             f"special registers or ints, got {op!r}", loc)
        ops.append(op)
    text = text.strip()
    if ops:
        try:
            fields = [f for _, f, _, _ in string.Formatter().parse(text) if f is not None]
            text.format(*["x"] * len(ops))
        except (IndexError, KeyError, ValueError) as e:
            raise TraceError(f"ptx.raw text {text!r} does not take {len(ops)} operand(s) "
                             f"through {{}} placeholders ({e}); write literal braces as "
                             f"{{{{ and }}}}", loc) from None
        if len(fields) != len(ops):
            raise TraceError(f"ptx.raw got {len(ops)} operand(s) for {len(fields)} {{}} "
                             f"placeholder(s) in {text!r}", loc)
    else:
        text = text.replace("{", "{{").replace("}", "}}")
    node = ir.Raw(text, tuple(str(o) if isinstance(o, int) else o for o in ops), loc)
    for r in node.regs():
        b.writes[r] = b.writes.get(r, 0) + 1
    b.append(node)
