"""Floating-point arithmetic on the lanes of f16, bf16, f32, f64 and the packed x2 forms:
the rounded operations, min / max, abs / neg and comparisons, as pure functions
``fn(match, *values)`` that the instruction families call (:mod:`.intops` for the
opcodes integers share, :mod:`.floatops`, :mod:`.convert`).

Rounded operations (add, sub, mul, fma/mad, div, rcp, sqrt) are exact in
every rounding mode (see :mod:`ptxdsl.interp.fround`). ``.ftz`` flushes
subnormal inputs and results to zero of the same sign, ``.sat`` clamps to
[0, 1] (NaN -> +0) and NaN results are the canonical NaN (all payload bits
set: ``0x7fffffff`` for f32, ``0x7fff`` for f16/bf16).
"""
from __future__ import annotations

import numpy as np

from ...core.errors import InterpreterError
from .. import fround as fr


_BASE = {"f16x2": "f16", "bf16x2": "bf16"}


def fmt_for(t) -> fr.Fmt:
    return fr.fmt_of(_BASE.get(t.name, t.name))


def unpack(x, t) -> list[np.ndarray]:
    """Operand of type ``t`` -> exact f64 values, one array per lane (two for x2 types)."""
    x = np.asarray(x)
    n = t.name
    if n in ("f32", "f64", "f16"):
        return [x.astype(np.float64)]
    if n == "bf16":
        return [fr.decode(x, fr.FMTS["bf16"])]
    f = fmt_for(t)
    u = x.astype(np.uint32)
    return [fr.decode((u & np.uint32(0xFFFF)).astype(np.uint16), f),
            fr.decode((u >> np.uint32(16)).astype(np.uint16), f)]


def pack(bits: list[np.ndarray], t):
    """Bit patterns per lane -> the numpy value of type ``t``."""
    n = t.name
    if n in ("f16x2", "bf16x2"):
        return bits[0].astype(np.uint32) | (bits[1].astype(np.uint32) << np.uint32(16))
    b = np.asarray(bits[0])
    return b.view(t.np_dtype)


def flush_in(v: np.ndarray, f: fr.Fmt) -> np.ndarray:
    tiny = fr.tiny_of(f)
    return np.where(np.abs(v) < tiny, np.copysign(0.0, v), v)


def _ftz_allowed(m) -> bool:
    return m.has("ftz")


def lanewise(m, fn, *xs, mode=None, canon=True, relu_zero=False):
    """Apply ``fn(*f64 lanes, mode, fmt) -> bits`` per lane with .ftz/.sat/NaN handling.
    ``relu_zero``: .relu also turns -0.0 into +0.0 (fma does, min/max do not)."""
    t = m.type
    f = fmt_for(t)
    ftz = _ftz_allowed(m)
    lanes = [unpack(x, t) for x in xs]
    out = []
    for vals in zip(*lanes):
        if ftz:
            vals = [flush_in(v, f) for v in vals]
        with np.errstate(all="ignore"):
            bits = fn(*vals, mode, f)
        if canon:
            bits = fr.canonical_nan(bits, f)
        if ftz:
            bits = fr.flush_subnormal(bits, f)
        if m.has("sat"):
            bits = fr.saturate(bits, f)
        if m.has("relu"):
            v = fr.decode(bits, f)
            neg = (v < 0) | (np.signbit(v) & (v == 0)) if relu_zero else v < 0
            bits = np.where(neg, f.udtype(0), bits).astype(f.udtype)
        out.append(bits)
    return pack(out, t)


def rounding(m, group="rounding"):
    """The rounding modifier of ``group`` (``.rn`` when none or an integer one)."""
    r = m.chosen.get(group, "rn")
    return r if r in ("rn", "rz", "rm", "rp") else "rn"


def fadd(m, a, b):
    return lanewise(m, fr.add, a, b, mode=rounding(m))


def fsub(m, a, b):
    return lanewise(m, lambda x, y, mode, f: fr.add(x, -y, mode, f), a, b, mode=rounding(m))


def fmul(m, a, b):
    return lanewise(m, fr.mul, a, b, mode=rounding(m))


def ffma(m, a, b, c):
    # Measured on an H100 by the edge sweep: fma.relu gives +0.0 for a -0.0 result, and
    # fma.{rz,rm,rp}.bf16x2 rounds to nearest (ptxas 13 drops the directed rounding).
    mode = "rn" if m.type.name == "bf16x2" else rounding(m)
    if m.type.name == "bf16" and mode != "rn":
        return _fma_bf16_directed(a, b, c, mode)
    return lanewise(m, fr.fma, a, b, c, mode=mode, relu_zero=True)


def _fma_bf16_directed(a, b, c, mode):
    """fma.{rz,rm,rp}{.relu}.bf16: no model. The H100 edge sweep (ptxas 13) gave results
    that follow no rounding mode for these scalar forms (e.g. fma.rm.bf16 of 1 ulp *
    1.0078 + 0 gave 2 ulp, and infinities came back as NaN), so the interpreter refuses
    them rather than guess; .rn and the bf16x2 forms are modelled and measured."""
    raise InterpreterError(
        f"fma.{mode}.bf16 has no CPU model: on an H100 (ptxas 13) its results follow no "
        f"IEEE rounding; use fma.rn.bf16, or compute in f32 and cvt.{mode}.bf16.f32")


def fdiv(m, a, b):
    return lanewise(m, fr.div, a, b, mode=rounding(m, "kind"))


def _bitop(m, a, fn):
    t = m.type
    f = fmt_for(t)
    x = np.asarray(a)
    u = x.view(np.dtype(f"u{x.dtype.itemsize}"))
    if m.has("ftz"):
        lanes = [u] if t.lanes == 1 else [(u & np.uint32(0xFFFF)).astype(np.uint16),
                                          (u >> np.uint32(16)).astype(np.uint16)]
        lanes = [fr.flush_subnormal(ln.astype(f.udtype), f) for ln in lanes]
        u = lanes[0] if t.lanes == 1 else (lanes[0].astype(np.uint32)
                                          | (lanes[1].astype(np.uint32) << np.uint32(16)))
    sign = (1 << (f.bits - 1))
    sign = sign | (sign << 16) if t.lanes == 2 else sign
    return fn(u, u.dtype.type(sign)).view(x.dtype)


def fabs(m, a):
    return _bitop(m, a, lambda u, s: u & ~s)


def fneg(m, a):
    return _bitop(m, a, lambda u, s: u ^ s)


def _minmax(is_min: bool):
    def fn(m, a, b):
        nan_mode = m.has("NaN")

        def lane(x, y, mode, f):
            pick_x = (x < y) if is_min else (x > y)
            # -0 orders below +0
            both_zero = (x == 0) & (y == 0)
            pick_x |= both_zero & (np.signbit(x) if is_min else ~np.signbit(x))
            r = np.where(pick_x, x, y)
            xn, yn = np.isnan(x), np.isnan(y)
            r = np.where(xn & ~yn, y, np.where(yn & ~xn, x, r))
            if nan_mode:
                r = np.where(xn | yn, np.nan, r)
            return fr.from_f64(np.where(np.isnan(r), np.nan, r), "rn", f)
        return lanewise(m, lane, a, b)
    return fn


fmin = _minmax(True)


fmax = _minmax(False)


# ------------------------------------------------------------------------ compare
def fcompare(m, cmp, a, b):
    t = m.type
    f = fmt_for(t)
    x, y = unpack(a, t)[0], unpack(b, t)[0]
    if m.has("ftz"):
        x, y = flush_in(x, f), flush_in(y, f)
    nan = np.isnan(x) | np.isnan(y)
    base = cmp.rstrip("u") if cmp not in ("num", "nan") else cmp
    if base == "num":
        return ~nan
    if base == "nan":
        return nan
    r = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
         "gt": np.greater, "ge": np.greater_equal}[base](x, y)
    if cmp.endswith("u"):
        return r | nan
    return r & ~nan
