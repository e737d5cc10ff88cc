"""What every RMSNorm op checks of its arguments before planning. Every error names
the argument and the caller's line (ops are API here, ``core.errors.is_user_file``)."""
from __future__ import annotations

import math

from ...core.errors import LaunchError, user_location
from ...core.types import f32
from ...runtime.adapter import DTYPES, kind_of

__all__ = ["check_arrays", "check_like", "eps_value", "offset_value"]


def _error(op: str, msg: str) -> LaunchError:
    return LaunchError(f"{op}: {msg}", user_location())


def _dtype(frame, a, name: str):
    t = DTYPES.get(str(a.dtype).replace("torch.", ""))
    if t is None:
        raise _error(frame.op, f"{name} must be float32, float16 or bfloat16, got {a.dtype}")
    return t


def check_array(frame, a, name: str) -> None:
    """``a`` is an array of the call's framework (x's), not None, a list or a scalar."""
    if kind_of(a, frame.op, name) != frame.kind:
        raise _error(frame.op, f"{name} must be an array of x's kind ({frame.kind}), got "
                               f"{type(a).__name__}")


def check_arrays(x, weight, n, frame):
    """x's and weight's shapes against each other; their element types ``(dt, wdt)``."""
    check_array(frame, weight, "weight")
    if x.ndim < 1 or n < 1:
        raise _error(frame.op, f"x needs a last dim of at least 1, got shape "
                               f"{tuple(x.shape)}")
    if tuple(weight.shape) != (n,):
        raise _error(frame.op, f"weight must have shape ({n},) to match x's last dim, got "
                               f"{tuple(weight.shape)}")
    dt, wdt = _dtype(frame, x, "x"), _dtype(frame, weight, "weight")
    if wdt not in (dt, f32):
        raise _error(frame.op, f"weight dtype must be x's ({dt.name}) or float32, got "
                               f"{wdt.name}")
    return dt, wdt


def check_like(frame, a, name: str, x, dt) -> None:
    """``a`` (residual, dy, out) is an array of x's kind, shape and dtype."""
    check_array(frame, a, name)
    if tuple(a.shape) != tuple(x.shape) or _dtype(frame, a, name) != dt:
        raise _error(frame.op, f"{name} must have x's shape {tuple(x.shape)} and dtype "
                               f"{dt.name}, got {tuple(a.shape)} {a.dtype}")


def eps_value(eps, op: str = "rms_norm") -> float:
    """``eps`` as a finite float >= 0 (a clear error for anything else)."""
    if isinstance(eps, (bool, str, bytes)) or not hasattr(eps, "__float__"):
        raise _error(op, f"eps must be a real number, got {eps!r}")
    v = float(eps)
    if not (v >= 0 and math.isfinite(v)):
        raise _error(op, f"eps must be finite and >= 0, got {v}")
    return v


def offset_value(offset) -> float:
    """``offset`` as the f32 immediate the kernels add (a clear error for anything else)."""
    try:
        v = float(offset)
    except (TypeError, ValueError):
        raise LaunchError(f"offset must be a real number (Gemma: 1.0), got {offset!r}",
                          user_location()) from None
    if v != v or v in (float("inf"), float("-inf")):
        raise LaunchError(f"offset must be finite, got {v}", user_location())
    return v
