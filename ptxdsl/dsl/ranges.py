"""How large can a 32-bit integer register get? An upper bound proved from the trace.

A product ``a * b`` of 32-bit integers that meets a 64-bit register (pointer arithmetic)
is exact as ``mul.wide``; when both operands are bounded so that the product fits in 32
bits, ``mul.lo`` then ``cvt.u64.u32`` is exact too, and cheaper: ptxas keeps the 32-bit
offset (one register, and an address of a uniform base plus a 32-bit offset) instead of
a 64-bit product per access. pyptx's examples compute every offset in 32 bits; a
``style="pyptx"`` kernel (``ptxdsl.pyptx.kernel``) gets the same code where ptxdsl can
prove it exact (ptxas 13.0 -v: pyptx's RMSNorm 54 -> 47 registers, SwiGLU 32 -> 24,
pyptx's own counts). Plain kernels keep ``mul.wide``: ptxas's register choices are not
monotone (ptxdsl's RMSNorm backward at 100 f16 columns: 32 -> 40).

The bound of a register is known when exactly one instruction of the whole kernel writes it
(unguarded), or when its writes are unguarded instructions at the kernel's top level with
no label, branch or raw text from the first to the last: they then run as one block, in
order, each seeing the previous one's value (``r = ctaid; r <<= 6``, as pyptx's examples
write it), and the bound is the largest of theirs. Each write is one of: ``mov`` of a
bounded value (``%tid``/``%ntid`` from the kernel's block, ``%ctaid``/``%nctaid`` from its
grid when that is a constant, ``%laneid``, an immediate, a register),
``add``, ``shl``, ``mul.lo``, ``mad.lo`` of bounded values (without wrapping), ``and``
with an immediate, ``shr.u``/``shr.b``, ``rem.u`` by an immediate, ``min.u``. Anything
else (``%ctaid`` of a grid computed per launch, loads, loop variables, any
other register written more than once) is unbounded.
"""
from __future__ import annotations

from ..core import ir

__all__ = ["bound"]

_LIMIT = 1 << 32
_DEPTH = 48


def _defs(owner) -> dict:
    """Register -> (number of writes in the kernel, the first writing Instr), from one
    walk of the trace (kept in the builder's per-trace cache)."""
    defs = owner.cache.get("_ranges_defs")
    if defs is not None:
        return defs
    defs, seqs, hazards = {}, {}, []

    def note(r, instr, pos=None):
        n, first = defs.get(r, (0, None))
        defs[r] = (n + 1, first if n else instr)
        seq = seqs.setdefault(r, [])
        if seq is not None:
            seqs[r] = seq + [(pos, instr)] if pos is not None and instr is not None else None

    def walk(body, top):
        for node in body:
            pos = len(hazards) if top else None
            if top:
                hazards.append(_jumps(node))
            if isinstance(node, ir.Instr):
                for d in node.dests():
                    note(d, node if node.guard is None else None, pos)
            elif isinstance(node, ir.Raw):
                for r in node.regs():
                    note(r, None)
            elif isinstance(node, ir.If):
                walk(node.then_body, False)
                walk(node.else_body or (), False)
            elif isinstance(node, ir.Loop):
                note(node.var, None)
                note(node.var, None)        # its start and every step
                walk(node.body, False)
    walk(owner.prologue, True)
    walk(owner.body, True)
    for r, seq in seqs.items():
        # Top-level writes with no label, branch or raw text from the first to the last run
        # as one block, in order: each sees the previous one's value.
        if seq and len(seq) > 1 and not any(hazards[seq[0][0]:seq[-1][0] + 1]):
            defs[r] = (len(seq), tuple(instr for _, instr in seq))
    owner.cache["_ranges_defs"] = defs
    return defs


def _jumps(node) -> bool:
    """Whether control can enter or leave the middle of ``node``'s position: a label, a
    branch, raw text, or a structured node holding one."""
    if isinstance(node, (ir.Label, ir.Raw)):
        return True
    if isinstance(node, ir.Instr):
        return node.opcode.split(".")[0] == "bra"
    if isinstance(node, ir.If):
        return any(map(_jumps, node.then_body)) or any(map(_jumps, node.else_body or ()))
    if isinstance(node, ir.Loop):
        return any(map(_jumps, node.body))
    return False


def _special(name: str, cache: dict) -> int | None:
    name = name.lstrip("%")
    axis = "xyz".find(name[-1]) if name[-2:-1] == "." else -1
    if axis < 0:
        return 31 if name == "laneid" else None
    block, grid = cache.get("block"), cache.get("grid")
    if name.startswith("tid.") and block:
        return block[axis] - 1
    if name.startswith("ntid.") and block:
        return block[axis]
    if name.startswith("ctaid.") and grid:
        return grid[axis] - 1
    if name.startswith("nctaid.") and grid:
        return grid[axis]
    return None


def bound(x, owner, depth: int = 0) -> int | None:
    """The largest unsigned value register (or operand) ``x`` can hold anywhere in the
    kernel being traced by ``owner``, or None when the trace proves none."""
    if isinstance(x, ir.Imm):
        x = x.value
    if isinstance(x, bool):
        return None
    if isinstance(x, int):
        return x & (_LIMIT - 1)
    if isinstance(x, ir.Special):
        return _special(x.name, owner.cache)
    if not isinstance(x, ir.Reg) or x.dtype.bits != 32 or x.dtype.kind == "f" \
            or depth > _DEPTH:
        return None
    if getattr(x, "_a", None) is not None:  # a ProductReg: its mul.lo, if never overwritten
        if owner.writes.get(x, 0):
            return None
        return _fits(_mul(bound(x._a, owner, depth + 1), bound(x._b, owner, depth + 1)))
    n, instr = _defs(owner).get(x, (0, None))
    if isinstance(instr, tuple):            # top-level writes in order: each sees the last
        top, prev = 0, None
        for w in instr:
            prev = _of(w, owner, depth + 1, {x: prev})
            if prev is None:
                return None
            top = max(top, prev)
        return top
    if n != 1 or instr is None:
        return None
    return _of(instr, owner, depth + 1)


def _mul(a, b):
    return None if a is None or b is None else a * b


def _fits(v):
    return v if v is not None and v < _LIMIT else None


def _of(instr: ir.Instr, owner, depth: int, known: dict | None = None) -> int | None:
    parts = instr.opcode.split(".")
    op, t = parts[0], parts[-1]
    if t not in ("u32", "s32", "b32"):
        return None
    srcs = [o.value if isinstance(o, ir.Imm) else o for o in instr.operands[1:]]

    def b(i):
        if known and isinstance(srcs[i], ir.Reg) and srcs[i] in known:
            return known[srcs[i]]
        return bound(srcs[i], owner, depth)
    if op == "mov" and len(srcs) == 1:
        return b(0)
    if op == "add" and len(parts) == 2:
        x, y = b(0), b(1)
        return None if x is None or y is None else _fits(x + y)
    if op == "shl":
        x, k = b(0), srcs[1]
        return _fits(x << k) if x is not None and isinstance(k, int) and k < 32 else None
    if op == "mul" and parts[1] == "lo":
        return _fits(_mul(b(0), b(1)))
    if op == "mad" and parts[1] == "lo":
        p, c = _fits(_mul(b(0), b(1))), b(2)
        return None if p is None or c is None else _fits(p + c)
    if op == "and":
        known = [v for v in (b(0), b(1)) if v is not None]
        return min(known) if known else None
    if op == "shr" and t != "s32":
        k = srcs[1]
        if not isinstance(k, int):
            return None
        x = b(0)
        return (_LIMIT - 1 if x is None else x) >> min(k, 31)
    if op == "rem" and t == "u32" and isinstance(srcs[1], int) and srcs[1] > 0:
        return srcs[1] - 1
    if op == "min" and t == "u32":
        known = [v for v in (b(0), b(1)) if v is not None]
        return min(known) if known else None
    return None
