"""Operands a kernel body builds: memory addresses, global pointers, kernel parameters
and dimensions, predicates, and the sink ``_``.

Each helper's docstring says what it records (``ptx.addr`` with an int offset records
nothing; one with a register offset records an ``add``).
"""
from __future__ import annotations

from ..core import ir
from ..core.errors import TraceError, user_location
from ..core.trace import current
from ..core.types import PtxType, u32, u64
from .reg import as_reg

__all__ = ["addr", "sink", "global_ptr", "global_ptrs", "dim", "param", "as_pred"]


def param(dtype: PtxType, name: str) -> ir.Reg:
    """A kernel parameter's value in a new register: ``ld.param.T`` (``mov.b64 %rd, name``
    for an array parameter such as a tensor map: its address).

    ``name`` is a parameter's PTX name or what the kernel's specs call it: a named dim
    (``"K"`` reads ``K_dim``, what pyptx's ``raw_params`` name), a stride, a tensor (its
    pointer, ``.u64``).
    """
    b = current("ptx.param")
    by_name = {p.name: p for p in b.params}
    p = None
    for cand in (name, f"{name}_dim", f"{name}_stride", f"{name}_ptr"):
        p = by_name.get(cand)
        if p is not None:
            break
    if p is None:
        raise TraceError(f"ptx.param: this kernel has no parameter {name!r} (parameters: "
                         f"{', '.join(by_name) or 'none'})", user_location())
    if p.count > 1:
        if dtype.bits != 64:
            raise TraceError(f"ptx.param({dtype.name}, {name!r}): {p.name} is an array; its "
                             f"address is a 64-bit value", user_location())
        r = b.new_reg(dtype)
        b.inst(["mov", "b64"], (r, ir.Symbol(p.name, "param")))
        return r
    if dtype.bits != p.dtype.bits:
        raise TraceError(f"ptx.param({dtype.name}, {name!r}): {p.name} is .{p.dtype.name} "
                         f"({p.dtype.bits} bits)", user_location())
    r = b.new_reg(dtype)
    b.inst(["ld", "param", dtype.name], (r, ir.Addr(ir.Symbol(p.name, "param"))))
    return r


# The sink destination ``_`` (mbarrier.arrive on a peer CTA's barrier returns no state).
sink = ir.SINK


def addr(base, offset=0, *, coords=None) -> ir.Addr:
    """A memory operand ``[base+offset]``.

    ``base`` is a 32/64-bit register or a shared array; an int ``offset`` is
    folded into the operand (no instruction), a register offset records one
    ``add`` (``base + offset``). ``coords=[x, y, ...]`` makes a tensor-map
    operand ``[tmap, {x, y}]`` for TMA copies (``base`` addresses the map).
    """
    if coords is not None:
        if isinstance(base, ir.Special):
            base = as_reg(base)
        if not isinstance(base, (ir.Reg, ir.Symbol)) or offset != 0:
            raise TraceError("a tensor-map operand is ptx.addr(tmap, coords=[...]) with a "
                             ".u64 register or a tensor-map parameter as tmap", user_location())
        return ir.Addr(base, 0, tuple(coords))
    if hasattr(base, "__ptx_addr__"):
        a = base.__ptx_addr__()
        base, offset = a.base, a.offset + offset if isinstance(offset, int) else offset
        if not isinstance(offset, int):
            raise TraceError("a shared array address takes only an int offset; index it "
                             "with alloc.addr(i, j) instead", user_location())
    if isinstance(offset, (ir.Reg, ir.Special)):
        base = as_reg(base) + offset
        offset = 0
    elif isinstance(offset, bool) or not isinstance(offset, int):
        raise TraceError(f"ptx.addr offset must be an int or a register, got {offset!r}",
                         user_location())
    if isinstance(base, ir.Special):
        base = as_reg(base)
    if not isinstance(base, (ir.Reg, ir.Symbol)):
        raise TraceError(f"ptx.addr needs a register (a pointer) or a shared array, got "
                         f"{type(base).__name__}", user_location())
    return ir.Addr(base, offset)


def global_ptr(tensor) -> ir.Reg:
    """``ld.param.u64`` + ``cvta.to.global.u64``: the global address of a tensor argument."""
    b = current("ptx.global_ptr")
    param = getattr(tensor, "param", None)
    if param is None or param.kind != "ptr":
        raise TraceError(f"ptx.global_ptrs takes the kernel's tensor arguments, got "
                         f"{tensor!r}", user_location())
    raw = b.new_reg(u64)
    b.inst(["ld", "param", "u64"], (raw, ir.Addr(ir.Symbol(param.name, "param"))))
    ptr = b.new_reg(u64)
    b.inst(["cvta", "to", "global", "u64"], (ptr, raw))
    return ptr


def global_ptrs(*tensors) -> list[ir.Reg]:
    """One :func:`global_ptr` per argument, in order: ``px, pw, py = ptx.global_ptrs(X, W, Y)``."""
    return [global_ptr(t) for t in tensors]


def dim(name_or_tensor, axis: int | None = None, *, kind: str = "dim"):
    """The value of a dimension: a Python int for concrete dims, else ``ld.param.u32``.

    ``ptx.dim("B")`` reads the named dim; ``ptx.dim(X, 0)`` reads X's axis 0;
    ``ptx.dim("sx", kind="stride")`` reads a named row stride.
    """
    b = current("ptx.dim")
    if axis is not None:
        tile = getattr(name_or_tensor, "tile", None)
        if tile is None:
            raise TraceError(f"ptx.dim(X, axis) takes a tensor argument of the kernel, got "
                             f"{name_or_tensor!r}", user_location())
        if isinstance(axis, bool) or not isinstance(axis, int) or \
                not -len(tile.dims) <= axis < len(tile.dims):
            raise TraceError(f"ptx.dim: no axis {axis} in {tile}, which has "
                             f"{len(tile.dims)} dimensions", user_location())
        size = tile.dims[axis]
        if isinstance(size, int):
            return size
        name = size
    else:
        name = name_or_tensor
    for p in b.params:
        if p.kind == kind and p.name == f"{name}_{kind}":
            r = b.new_reg(u32)
            b.inst(["ld", "param", "u32"], (r, ir.Addr(ir.Symbol(p.name, "param"))))
            return r
    known = sorted(p.name.rsplit("_", 1)[0] for p in b.params if p.kind == kind)
    raise TraceError(f"no dynamic {kind} named {name!r} in this kernel's specs "
                     f"(named dims: {', '.join(known) or 'none'})", user_location())


def as_pred(p, what: str) -> ir.Reg:
    """``p`` as a predicate operand of ``what``: a ``.pred`` register, never a Python bool."""
    if isinstance(p, bool):
        raise TraceError(f"{what} got the Python bool {p}: that is decided while tracing, so "
                         f"use a plain Python `if`; {what} needs a predicate register "
                         f"(e.g. tid < n)", user_location())
    if not isinstance(p, ir.Reg) or not p.dtype.is_pred:
        raise TraceError(f"{what} needs a predicate register (a comparison such as "
                         f"`tid < n`), got {p!r}", user_location())
    current().own(p)
    return p
