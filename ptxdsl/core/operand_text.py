"""How error messages name an operand or an operand slot, and a Python number checked as a
float immediate: the wording the tracer's operand checks share."""
from __future__ import annotations

import math

import numpy as np

from . import ir
from .errors import OperandTypeError
from .types import PtxType

_F32_MAX = 3.4028234663852886e38


def float_immediate(value, want: PtxType, where: str) -> float:
    """A Python number as a .f32/.f64 immediate; a finite value the type cannot hold
    (``1e39`` as .f32, ``10**400``) is an error, not an infinity."""
    try:
        v = float(value)
    except OverflowError:
        raise OperandTypeError(f"{where}: {value!r} is too large for .{want.name}") from None
    if want.name == "f32" and math.isfinite(v):
        with np.errstate(over="ignore"):
            if not np.isfinite(np.float32(v)):
                raise OperandTypeError(
                    f"{where}: {value!r} is out of the .f32 range (largest finite value "
                    f"{_F32_MAX:.9g}); use float('inf') for an infinity, or an .f64 "
                    f"register")
    return v


def slot_name(slot, m) -> str:
    names = {"d": "dest", "p": "pred dest", "V": "dest", "X": "value", "s": "src",
             "r": "src reg", "i": "constant", "a": "[address]", "l": "label", "q": "predicate"}
    t = m.resolve_type(slot.ty)
    base = names.get(slot.role, slot.role) + (f" .{t.name}" if t is not None else "")
    if slot.list_key:
        base = f"{names.get(slot.role, slot.role)} {{{m.count(slot)} x .{t.name}}}"
    return base + ("?" if slot.optional else "")


def describe(x) -> str:
    """An operand as an error message names it; a function that should have been called
    (``ptx.special.tid.x`` without ``()``) says so."""
    if isinstance(x, ir.Reg):
        return f"register %{x.name} (.{x.dtype.name})"
    if callable(x) and not isinstance(x, type):
        name = getattr(x, "ptx_name", None) or getattr(x, "__qualname__", type(x).__name__)
        return f"the function {name}, not called: call it, {name}()"
    return f"{type(x).__name__} {x!r}"


__all__ = ["describe", "float_immediate", "slot_name"]
