"""Float-only instructions: fma, copysign, the ``.approx`` functions (rsqrt, ex2, lg2,
sin, cos, tanh), rcp and sqrt. Their arithmetic, and the float forms of the opcodes
integers share (add, mul, setp, ...), is :mod:`.floatmath`'s.

``.approx`` instructions compute the exact function in f64 and round it to
nearest, so the interpreter is always within the hardware's documented
bound. The bounds of the hardware (PTX ISA), which a GPU result may differ by:

=====================  ===================================================
instruction            hardware error bound (PTX ISA)
=====================  ===================================================
ex2.approx.f32         2 ulp (max relative error 2^-22.5 over the range)
ex2.approx.f16/bf16    max relative error 2^-9.9 (f16), 2^-7 (bf16)
lg2.approx.f32         max absolute error 2^-22 in (0.5, 2), 2^-22.6 rel. else
rsqrt.approx.f32       max relative error 2^-22.9
rsqrt.approx.f64       max relative error 2^-50 (approximately)
rcp.approx.f32         max relative error 2^-23 (1 ulp)
rcp.approx.ftz.f64     max relative error 2^-50 (approximately)
sqrt.approx.f32        max relative error 2^-23
div.approx.f32         2 ulp for |b| in [2^-126, 2^126]; 0 (or NaN for
                       a = inf) when 2^126 < |b| < 2^128
div.full.f32           2 ulp over the whole range
sin/cos.approx.f32     max absolute error 2^-20.9 in [-pi, pi]
tanh.approx.f32        max relative error 2^-11 (f16/bf16: 2^-10.7 / 2^-8)
=====================  ===================================================
"""
from __future__ import annotations

import numpy as np

from .. import fround as fr
from .alu import alu
from .floatmath import ffma, lanewise, rounding


@alu
def fma_(m, a, b, c):
    return ffma(m, a, b, c)


@alu
def copysign(m, a, b):
    x, y = np.asarray(a), np.asarray(b)
    udt = np.dtype(f"u{x.dtype.itemsize}")
    s = udt.type(1 << (x.dtype.itemsize * 8 - 1))
    u = (y.view(udt) & ~s) | (x.view(udt) & s)
    return u.view(x.dtype)


# ------------------------------------------------------------------------ math functions
def _approx(fn64):
    def lane(x, mode, f):
        return fr.from_f64(fn64(x), "rn", f)
    return lane


def _rsqrt(x):
    return 1.0 / np.sqrt(x)


@alu
def rsqrt(m, a):
    return lanewise(m, _approx(_rsqrt), a)


@alu
def ex2(m, a):
    return lanewise(m, _approx(np.exp2), a)


@alu
def lg2(m, a):
    return lanewise(m, _approx(np.log2), a)


@alu
def sin(m, a):
    return lanewise(m, _approx(np.sin), a)


@alu
def cos(m, a):
    return lanewise(m, _approx(np.cos), a)


@alu
def tanh(m, a):
    return lanewise(m, _approx(np.tanh), a)


@alu
def rcp(m, a):
    mode = rounding(m, "kind")
    return lanewise(m, lambda x, md, f: fr.div(np.ones_like(x), x, md, f), a, mode=mode)


@alu
def sqrt(m, a):
    return lanewise(m, fr.sqrt, a, mode=rounding(m, "kind"))


HANDLERS = {
    "fma": fma_,
    "copysign": copysign,
    "rsqrt": rsqrt,
    "ex2": ex2,
    "lg2": lg2,
    "sin": sin,
    "cos": cos,
    "tanh": tanh,
    "rcp": rcp,
    "sqrt": sqrt,
}
