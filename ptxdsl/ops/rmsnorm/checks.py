"""What every RMSNorm op checks of its arguments before planning."""
from __future__ import annotations

from ...core.errors import LaunchError, user_location
from ...core.types import f32

__all__ = ["check_arrays", "offset_value"]


def check_arrays(x, weight, n, frame):
    """x's and weight's shapes against each other; their element types ``(dt, wdt)``."""
    if x.ndim < 1 or n < 1:
        raise LaunchError(f"rms_norm needs x with a last dim of at least 1, got shape "
                          f"{tuple(x.shape)}")
    if tuple(weight.shape) != (n,):
        raise LaunchError(f"weight must have shape ({n},) to match x's last dim, got "
                          f"{tuple(weight.shape)}")
    dt, wdt = frame.dtype(x), frame.dtype(weight)
    if wdt not in (dt, f32):
        raise LaunchError(f"weight dtype must be x's ({dt.name}) or float32, got {wdt.name}")
    return dt, wdt


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
