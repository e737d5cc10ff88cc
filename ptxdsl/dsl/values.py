"""Value helpers of kernel bodies: conversions, selects, fused multiply-adds, min/max,
packing two 16-bit values into one register and back. Each records one instruction
whose result is a new register (two for ``ptx.unpack``); a special register given as
an operand is read with ``mov`` first.
"""
from __future__ import annotations

from ..core import ir
from ..core.errors import TraceError, user_location
from ..core.trace import current
from ..core.types import PtxType, move_type
from .operands import as_pred
from .reg import as_reg

__all__ = ["cvt", "select", "fma", "min", "max", "pack", "unpack"]


def _rounding_for(dst: PtxType, src: PtxType) -> list[str]:
    if dst.is_float and src.is_float:
        if dst.name in ("f16x2", "bf16x2"):
            return ["rn"]
        return ["rn"] if dst.bits < src.bits else []
    if src.is_float and not dst.is_float:
        return ["rzi"]  # C semantics: truncate toward zero
    if dst.is_float:
        return ["rn"]
    return []


def _need_type(what: str, dtype) -> None:
    if not isinstance(dtype, PtxType):
        raise TraceError(f"{what} needs a ptxdsl type such as f32 or u32 (from ptxdsl.types), "
                         f"got {dtype!r}", user_location())


def cvt(dtype: PtxType, x, rounding: str | None = None, *, sat: bool = False) -> ir.Reg:
    """Convert into a new register: ``cvt[.rnd][.sat].dtype.srctype``.

    Defaults follow C: ``.rn`` for int->float and narrowing float->float,
    ``.rzi`` (truncate) for float->int, none for exact widening.
    """
    b = current("ptx.cvt")
    _need_type("ptx.cvt", dtype)
    x = as_reg(x)
    if not isinstance(x, ir.Reg):
        raise TraceError(f"ptx.cvt converts a register, got {x!r}", user_location())
    mods = [rounding] if rounding else _rounding_for(dtype, x.dtype)
    if sat:
        mods.append("sat")
    d = b.new_reg(dtype)
    src = x.dtype if x.dtype.kind != "b" else x.dtype
    b.inst(["cvt", *mods, dtype.name, src.name], (d, x))
    return d


def _typed_by(what: str, *xs) -> PtxType:
    """The type of the first register among ``xs`` (after reading special registers)."""
    for x in xs:
        if isinstance(x, (ir.Reg, ir.Special)):
            return x.dtype
    raise TraceError(f"{what} takes its type from a register operand, got only "
                     f"{', '.join(repr(x) for x in xs)}; put one value in a register first "
                     f"(reg.scalar(f32, init=...))", user_location())


def select(p, a, b_) -> ir.Reg:
    """``selp.T d, a, b, p``: ``a`` where ``p`` holds, else ``b`` (``selp.b16``/``.b32``
    for half-precision registers)."""
    bld = current("ptx.select")
    p = as_pred(p, "ptx.select")
    t = _typed_by("ptx.select", a, b_)
    d = bld.new_reg(t)
    bld.inst(["selp", move_type(t).name], (d, a, b_, p))
    return d


def fma(a, b_, c) -> ir.Reg:
    """``fma.rn.T d, a, b, c`` into a new register (one rounding)."""
    bld = current("ptx.fma")
    t = _typed_by("ptx.fma", a, b_, c)
    d = bld.new_reg(t)
    bld.inst(["fma", "rn", t.name], (d, a, b_, c))
    return d


def min(a, b_) -> ir.Reg:  # noqa: A001
    """``min.T`` into a new register."""
    bld = current("ptx.min")
    t = _typed_by("ptx.min", a, b_)
    d = bld.new_reg(t)
    bld.inst(["min", t.name], (d, a, b_))
    return d


def max(a, b_) -> ir.Reg:  # noqa: A001
    """``max.T`` into a new register."""
    bld = current("ptx.max")
    t = _typed_by("ptx.max", a, b_)
    d = bld.new_reg(t)
    bld.inst(["max", t.name], (d, a, b_))
    return d


def pack(dtype: PtxType, lo, hi) -> ir.Reg:
    """``mov.b32 d, {lo, hi}``: two 16-bit registers into one 32-bit (e.g. f16x2)."""
    bld = current("ptx.pack")
    _need_type("ptx.pack", dtype)
    d = bld.new_reg(dtype)
    bld.inst(["mov", f"b{dtype.bits}"], (d, [lo, hi]))
    return d


def unpack(x, dtype: PtxType) -> tuple[ir.Reg, ir.Reg]:
    """``mov.b32 {lo, hi}, x``: split a 32-bit register into two 16-bit ones of ``dtype``."""
    bld = current("ptx.unpack")
    x = as_reg(x)
    if not isinstance(x, ir.Reg):
        raise TraceError(f"ptx.unpack splits a register, got {x!r}", user_location())
    _need_type("ptx.unpack", dtype)
    lo, hi = bld.new_reg(dtype), bld.new_reg(dtype)
    bld.inst(["mov", f"b{x.dtype.bits}"], ([lo, hi], x))
    return lo, hi
