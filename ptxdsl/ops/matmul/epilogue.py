"""What every GEMM kernel does to an f32 accumulator before it is stored:
``act(acc + bias[col])``, then rounding to the output type.

Activations (``ACTIVATIONS``), each on one f32 register:

* ``relu``: ``max.NaN.f32 y, x, 0`` (a NaN stays NaN, as in torch; :mod:`.._common.nanmath`).
* ``gelu`` (the tanh form, ``torch.nn.functional.gelu(x, approximate="tanh")``):
  ``u = x * (c0 + c1 * x*x)``, ``y = 0.5x + 0.5x * tanh(u)`` with ``c0 = sqrt(2/pi)``,
  ``c1 = 0.044715 c0``: ``mul.f32`` x3, ``fma.rn.f32`` x2, ``tanh.approx.f32``.
* ``silu``: ``y = x / (1 + 2^(-x log2 e))``: ``mul.f32``, ``ex2.approx.ftz.f32``,
  ``add.f32``, ``rcp.approx.ftz.f32``, ``mul.f32``.

The approximate instructions are within about 2^-10 relative of the exact
function (``tanh.approx.f32``'s documented bound is 2^-10.987), below a bf16
output's rounding; f32 outputs of gelu/silu carry that error.
"""
from __future__ import annotations

import math

from ...dsl import ptx, reg
from ...core.types import f32
from .._common.nanmath import max_keep_nan

ACTIVATIONS = (None, "relu", "gelu", "silu")
_C0 = math.sqrt(2.0 / math.pi)
_C1 = _C0 * 0.044715
_LOG2E = 1.0 / math.log(2.0)


def activate(x, act: str | None):
    """``act(x)`` for an f32 register ``x`` (a new register; ``x`` itself for None)."""
    if act is None:
        return x
    if act == "relu":
        return max_keep_nan(None, x, 0.0)
    if act == "gelu":
        x2 = x * x
        inner = ptx.fma(x2, _C1, reg.scalar(f32, init=_C0))
        u = x * inner
        t = reg.scalar(f32)
        ptx.inst.tanh.approx.f32(t, u)
        h = x * 0.5
        return ptx.fma(h, t, h)
    if act == "silu":
        e = reg.scalar(f32)
        ptx.inst.ex2.approx.ftz.f32(e, x * (-_LOG2E))
        r = reg.scalar(f32)
        ptx.inst.rcp.approx.ftz.f32(r, e + 1.0)
        return x * r
    raise ValueError(f"activation must be one of {ACTIVATIONS}, got {act!r}")


def reference(x, act: str | None, np):
    """The same function on float64 arrays (for tests and benches): exact tanh / exp."""
    if act is None:
        return x
    if act == "relu":
        return np.maximum(x, 0.0)
    if act == "gelu":
        return 0.5 * x * (1.0 + np.tanh(_C0 * (x + 0.044715 * x ** 3)))
    if act == "silu":
        return x / (1.0 + np.exp(-x))
    raise ValueError(act)


__all__ = ["ACTIVATIONS", "activate", "reference"]
