"""Exact IEEE rounding of float results into f16, bf16, f32 and f64, in every PTX mode.

How results are made exact
--------------------------
*Narrow targets (f16, bf16, f32).* Inputs are widened to f64 and an
approximation ``s`` of the exact result ``x`` is computed in f64. A format
value ``c`` next to ``x`` is taken from ``s``; the two format values around
``x`` (``lo <= x <= hi``) and their midpoint are then placed by an exact
comparison ``cmp(v) = sign(x - v)`` that each operation supplies:

* add/sub: ``(s, e) = TwoSum(a, b)`` (so ``x = s + e`` exactly) and
  ``cmp(v) = sign((s - v) + e)`` (``s - v`` is exact: both are within a few
  target ulps of ``x``);
* mul: ``a * b`` is exact in f64 (at most 48 significant bits);
* fma: ``p = a * b`` exact, ``(s, e) = TwoSum(p, c)``;
* div / rcp: ``sign(a - v * b) * sign(b)``, sqrt: ``sign(a - v * v)``
  (``v`` has at most 25 significant bits, so the products are exact);
* conversions: ``sign(x - v)`` on the exact source value.

Directed modes pick ``lo``/``hi``; ``.rn`` compares ``x`` with the midpoint
and breaks exact ties to the even neighbour, so no double rounding can occur.

*f64 targets.* ``s`` is numpy's correctly rounded f64 result and only the
sign of the residual ``x - s`` is needed: TwoSum (add), Dekker's TwoProduct
(mul, and the residuals ``a - q*b`` of div, ``a - q*q`` of sqrt). ``fma.rn.f64``
uses Boldo & Melquiond's emulation (TwoProduct, TwoSum, an addition rounded to
odd, a final addition), which is exact in one format. Elements whose
exponents leave the range where those transforms are exact, and directed
``fma.f64``, go through Python ``fractions.Fraction`` one element at a time
(slow, rare).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ..core.types import f32_to_bf16_bits


@dataclass(frozen=True)
class Fmt:
    name: str
    bits: int
    man: int       # stored mantissa bits
    emax: int
    udtype: type

    @property
    def sign(self) -> int:
        return 1 << (self.bits - 1)

    @property
    def max(self) -> float:
        return float((2 - 2.0 ** -self.man) * 2.0 ** self.emax)

    @property
    def tiny(self) -> float:
        """Smallest normal magnitude (below it values are subnormal)."""
        return float(2.0 ** (1 - (2 ** (self.bits - 2 - self.man) - 1)))

    @property
    def canonical_nan(self) -> int:
        return (1 << (self.bits - 1)) - 1


FMTS = {
    "f16": Fmt("f16", 16, 10, 15, np.uint16),
    "bf16": Fmt("bf16", 16, 7, 127, np.uint16),
    "f32": Fmt("f32", 32, 23, 127, np.uint32),
    "f64": Fmt("f64", 64, 52, 1023, np.uint64),
}
# f16 exponent field is 5 bits, the others follow from bits - 1 - man.
_EXP_BITS = {"f16": 5, "bf16": 8, "f32": 8, "f64": 11}


def fmt_of(name: str) -> Fmt:
    return FMTS[name]


def tiny_of(f: Fmt) -> float:
    return 2.0 ** (2 - 2 ** (_EXP_BITS[f.name] - 1))


def decode(bits, f: Fmt) -> np.ndarray:
    """Bit patterns of format ``f`` -> exact f64 values."""
    bits = np.asarray(bits, f.udtype)
    if f.name == "f16":
        return bits.view(np.float16).astype(np.float64)
    if f.name == "bf16":
        return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32).astype(np.float64)
    if f.name == "f32":
        return bits.view(np.float32).astype(np.float64)
    return bits.view(np.float64).copy()


def encode_rn(x, f: Fmt) -> np.ndarray:
    """f64 values -> bit patterns, round to nearest even (bf16: via f32, a candidate only)."""
    x = np.asarray(x, np.float64)
    with np.errstate(all="ignore"):
        if f.name == "f16":
            return x.astype(np.float16).view(np.uint16)
        if f.name == "f32":
            return x.astype(np.float32).view(np.uint32)
        if f.name == "bf16":
            return f32_to_bf16_bits(x.astype(np.float32))
        return x.view(np.uint64).copy()


def _key(bits, f: Fmt) -> np.ndarray:
    b = np.asarray(bits).astype(np.int64) if f.bits < 64 else np.asarray(bits, np.uint64)
    if f.bits < 64:
        mag = b & (f.sign - 1)
        return np.where(b & f.sign, -mag, mag)
    mag = (b & np.uint64(f.sign - 1)).astype(np.int64)
    return np.where(b >> np.uint64(63), -mag, mag)


def _unkey(key, sign_hint, f: Fmt) -> np.ndarray:
    key = np.asarray(key, np.int64)
    neg = key < 0
    mag = np.abs(key)
    if f.bits < 64:
        out = np.where(neg, mag | f.sign, mag)
        # A step onto zero keeps the sign of where it came from (nextUp(-min) is -0).
        out = np.where(key == 0, sign_hint, out)
        return out.astype(f.udtype)
    out = mag.astype(np.uint64) | (neg.astype(np.uint64) << np.uint64(63))
    return np.where(key == 0, sign_hint, out).astype(np.uint64)


def next_up(bits, f: Fmt) -> np.ndarray:
    bits = np.asarray(bits, f.udtype)
    return _unkey(_key(bits, f) + 1, bits & f.udtype(f.sign), f)


def next_down(bits, f: Fmt) -> np.ndarray:
    bits = np.asarray(bits, f.udtype)
    return _unkey(_key(bits, f) - 1, bits & f.udtype(f.sign), f)


def _decode_ext(bits, f: Fmt) -> np.ndarray:
    """Like decode, but infinity counts as 2^(emax+1): the value the overflow threshold is halfway to."""
    v = decode(bits, f)
    return np.where(np.isinf(v), np.copysign(2.0 ** (f.emax + 1), v), v)


def sgn(x) -> np.ndarray:
    return np.sign(x)


def round_narrow(s, cmp, mode: str, f: Fmt, e=None, rn_exact: bool = False) -> np.ndarray:
    """Round the exact value ``x`` (approximated by f64 ``s``; ``cmp(v) = sign(x - v)``) to ``f``.

    Elements where ``s`` is not finite (NaN, or an exact infinity) convert directly.

    Fast path for ``.rn``: when ``s`` is the f64 rounding of an add, sub, mul,
    div or sqrt of ``f`` values (``rn_exact``), rounding ``s`` again is exact
    (53 >= 2p + 2 bits: double rounding is innocuous for these operations).
    With a known error term ``e`` (``x = s + e``: add, fma), ``RN(s)`` is
    ``RN(x)`` unless ``s`` sits exactly on a midpoint of ``f`` and ``e != 0``;
    only those elements, and ones near the subnormal or overflow range, take
    the exact path.
    """
    s = np.asarray(s, np.float64)
    if mode == "rn" and (rn_exact or e is not None):
        with np.errstate(all="ignore"):
            fast = encode_rn(s, f)
            need = np.zeros(s.shape, bool)
            if f.name == "bf16":  # encode_rn goes through f32: exact only from f32 values
                need |= np.isfinite(s) & (s.astype(np.float32) != s)
            if e is not None:
                shift = 52 - f.man
                low = s.view(np.uint64) & np.uint64((1 << shift) - 1)
                a = np.abs(s)
                odd = (low == np.uint64(1 << (shift - 1))) | (a < 2 * tiny_of(f)) | \
                    (a >= 2.0 ** f.emax)
                need |= odd & (np.asarray(e) != 0)
        if not need.any():
            return fast.astype(f.udtype)
        return np.where(need, round_narrow(s, cmp, mode, f), fast).astype(f.udtype)
    with np.errstate(all="ignore"):
        fin = np.isfinite(s)
        c = encode_rn(np.clip(s, -f.max, f.max), f)
        v = decode(c, f)
        t = cmp(v)
        lo = np.where(t < 0, next_down(c, f), c)
        hi = np.where(t > 0, next_up(c, f), c)
        if mode == "rm":
            r = lo
        elif mode == "rp":
            r = hi
        elif mode == "rz":
            pos = (v > 0) | ((v == 0) & (t > 0))
            r = np.where(pos, lo, hi)
        elif mode == "rn":
            mid = (_decode_ext(lo, f) + _decode_ext(hi, f)) * 0.5
            cm = cmp(mid)
            even_hi = (hi & f.udtype(1)) == 0
            pick = np.where(cm < 0, lo, np.where(cm > 0, hi, np.where(even_hi, hi, lo)))
            r = np.where(lo == hi, c, pick)
        else:
            raise ValueError(mode)
        return np.where(fin, r, encode_rn(s, f)).astype(f.udtype)


# ----------------------------------------------------------------------- error-free transforms
def two_sum(a, b):
    s = a + b
    bb = s - a
    e = (a - (s - bb)) + (b - bb)
    return s, e


_SPLIT = 134217729.0  # 2^27 + 1


def _split(a):
    c = _SPLIT * a
    hi = c - (c - a)
    return hi, a - hi


def two_prod(a, b):
    p = a * b
    ah, al = _split(a)
    bh, bl = _split(b)
    e = ((ah * bh - p) + ah * bl + al * bh) + al * bl
    return p, e


def _safe(*xs, lo=2.0 ** -900, hi=2.0 ** 900):
    """Where TwoProduct/TwoSum are exact: finite magnitudes in [lo, hi] or zero."""
    ok = np.ones(np.broadcast(*xs).shape, bool)
    for x in xs:
        ax = np.abs(x)
        ok &= np.isfinite(x) & ((ax == 0) | ((ax >= lo) & (ax <= hi)))
    return ok


def round64(s, sign_res, mode: str, overflow=None) -> np.ndarray:
    """Directed rounding to f64 given ``s = RN(x)`` and ``sign(x - s)``; returns f64 values."""
    s = np.asarray(s, np.float64)
    sign_res = np.nan_to_num(np.asarray(sign_res, np.float64))
    if mode == "rn":
        return s
    if overflow is not None and np.any(overflow):
        big = np.copysign(np.finfo(np.float64).max, s)
        sign_res = np.where(overflow, np.sign(s), sign_res)
        s = np.where(overflow, big, s)
    lo = np.where(sign_res < 0, np.nextafter(s, -np.inf), s)
    hi = np.where(sign_res > 0, np.nextafter(s, np.inf), s)
    if mode == "rm":
        return lo
    if mode == "rp":
        return hi
    pos = (s > 0) | ((s == 0) & (sign_res > 0))
    return np.where(pos, lo, hi)


def fraction_to_f64(x: Fraction, mode: str) -> float:
    """Correctly rounded f64 of an exact rational (Python's int division rounds correctly).

    An exact zero here comes from cancellation (x + (-x)), which IEEE makes -0
    in round-down and +0 otherwise.
    """
    if x == 0:
        return -0.0 if mode == "rm" else 0.0
    try:
        r = float(x)
    except OverflowError:
        r = math.inf if x > 0 else -math.inf
    if mode == "rn":
        return r
    fr = Fraction(r) if math.isfinite(r) else None
    if fr is None:  # overflowed: the largest finite value is the floor of x
        big = np.finfo(np.float64).max
        if mode == "rz" or (mode == "rm" and x > 0) or (mode == "rp" and x < 0):
            return math.copysign(big, r)
        return r
    if fr == x:
        return r
    below = fr < x
    if mode == "rm":
        return r if below else math.nextafter(r, -math.inf)
    if mode == "rp":
        return math.nextafter(r, math.inf) if below else r
    # rz
    if x > 0:
        return r if below else math.nextafter(r, -math.inf)
    return math.nextafter(r, math.inf) if below else r


def exact_elementwise(fn, arrays, mode: str, where) -> np.ndarray:
    """Evaluate ``fn(*Fractions) -> Fraction`` on the flagged elements, rounded to f64."""
    arrays = np.broadcast_arrays(*[np.asarray(a, np.float64) for a in arrays])
    out = np.zeros(arrays[0].shape, np.float64)
    for i in zip(*np.nonzero(where)):
        vals = [float(a[i]) for a in arrays]
        x = fn(*[Fraction(v) for v in vals])
        out[i] = fraction_to_f64(x, mode)
    return out


# ----------------------------------------------------------------------- operations
def _zero_sum_sign(r_bits, exact_zero, a, b, mode, f: Fmt):
    """IEEE: an exact zero sum is -0 when both addends are -0, or in .rm when they differ."""
    neg_a = np.signbit(a)
    neg_b = np.signbit(b)
    both_neg = neg_a & neg_b & (a == 0) & (b == 0)
    want_neg = both_neg | ((mode == "rm") & ~((a == 0) & (b == 0) & ~neg_a & ~neg_b))
    signed = np.where(want_neg, f.udtype(f.sign), f.udtype(0))
    return np.where(exact_zero, signed, r_bits).astype(f.udtype)


def add(a, b, mode: str, f: Fmt) -> np.ndarray:
    """a + b in f64 values -> bits of ``f``."""
    with np.errstate(all="ignore"):
        s, e = two_sum(a, b)
        if f.name != "f64":
            r = round_narrow(s, lambda v: sgn((s - v) + e), mode, f, e=e)
        else:
            ovf = np.isinf(s) & np.isfinite(a) & np.isfinite(b)
            r = round64(s, sgn(e), mode, ovf).view(np.uint64)
        exact_zero = (s == 0) & (e == 0)
        return _zero_sum_sign(r, exact_zero, a, b, mode, f)


def mul(a, b, mode: str, f: Fmt) -> np.ndarray:
    with np.errstate(all="ignore"):
        p = a * b
        if f.name != "f64":
            return round_narrow(p, lambda v: sgn(p - v), mode, f, rn_exact=True)
        if mode == "rn":
            return p.view(np.uint64)
        _, e = two_prod(a, b)
        ok = _safe(a, b) & _safe(p) & ((p != 0) | (a == 0) | (b == 0))
        r = round64(p, sgn(e), mode, np.isinf(p) & np.isfinite(a) & np.isfinite(b))
        bad = ~ok & np.isfinite(a) & np.isfinite(b) & (a != 0) & (b != 0)
        if bad.any():
            r = np.where(bad, exact_elementwise(lambda x, y: x * y, (a, b), mode, bad), r)
        return r.view(np.uint64)


def fma(a, b, c, mode: str, f: Fmt) -> np.ndarray:
    with np.errstate(all="ignore"):
        if f.name != "f64":
            p = a * b
            s, e = two_sum(p, c)
            r = round_narrow(s, lambda v: sgn((s - v) + e), mode, f, e=e)
            return _zero_sum_sign(r, (s == 0) & (e == 0), p, c, mode, f)
        fin = np.isfinite(a) & np.isfinite(b) & np.isfinite(c)
        p = a * b
        if mode == "rn":
            uh, ul = two_prod(a, b)
            th, tl = two_sum(c, uh)
            v, err = two_sum(tl, ul)
            vb = v.view(np.int64)
            # round to odd: an inexact sum with an even last bit moves one ulp toward the error
            odd_fix = (err != 0) & ((vb & 1) == 0)
            v = np.where(odd_fix, np.nextafter(v, np.where(err > 0, np.inf, -np.inf)), v)
            z = th + v
            z = np.where(fin, z, _nonfinite_fma(a, b, c, p))
            ok = _safe(a, b, c) & _safe(p) & (np.abs(p) >= 2.0 ** -800)
            bad = fin & ~ok
        else:
            z = np.where(fin, p + c, _nonfinite_fma(a, b, c, p))
            bad = fin
        # A zero factor makes the product an exact signed zero; a zero addend leaves a*b.
        zero_prod = fin & ((a == 0) | (b == 0))
        zero_c = fin & (c == 0) & ~zero_prod
        bad &= ~(zero_prod | zero_c)
        if bad.any():
            z = np.where(bad, exact_elementwise(lambda x, y, w: x * y + w, (a, b, c), mode, bad), z)
        if zero_prod.any():
            z = np.where(zero_prod, add(p, c, mode, f).view(np.float64), z)
        if zero_c.any():
            z = np.where(zero_c, mul(a, b, mode, f).view(np.float64), z)
        return np.asarray(z, np.float64).view(np.uint64)


def _nonfinite_fma(a, b, c, p):
    """a*b + c where some operand is not finite. The exact product of finite factors is
    finite even when ``p = a*b`` overflowed, so an infinite c wins: fma(1e308, 10, -inf)
    is -inf, not inf + -inf = NaN."""
    finite_ab = np.isfinite(a) & np.isfinite(b)
    return np.where(finite_ab & np.isinf(c), c, p + c)


def div(a, b, mode: str, f: Fmt) -> np.ndarray:
    with np.errstate(all="ignore"):
        q = a / b
        if f.name != "f64":
            return round_narrow(q, lambda v: sgn(a - v * b) * sgn(b), mode, f, rn_exact=True)
        if mode == "rn":
            return q.view(np.uint64)
        ph, pl = two_prod(q, b)
        res = sgn((a - ph) - pl) * sgn(b)
        r = round64(q, res, mode, np.isinf(q) & np.isfinite(a) & np.isfinite(b) & (b != 0))
        ok = _safe(a, b) & _safe(q) & ((q != 0) | (a == 0))
        bad = ~ok & np.isfinite(a) & np.isfinite(b) & (b != 0) & (a != 0)
        if bad.any():
            r = np.where(bad, exact_elementwise(lambda x, y: x / y, (a, b), mode, bad), r)
        return r.view(np.uint64)


def sqrt(a, mode: str, f: Fmt) -> np.ndarray:
    with np.errstate(all="ignore"):
        q = np.sqrt(a)
        if f.name != "f64":
            return round_narrow(q, lambda v: sgn(a - v * v), mode, f, rn_exact=True)
        if mode == "rn":
            return q.view(np.uint64)
        ph, pl = two_prod(q, q)
        r = round64(q, sgn((a - ph) - pl), mode)
        bad = ~(_safe(a) & _safe(q)) & np.isfinite(q) & (q != 0)
        if bad.any():
            # sign(x - q) = sign(a - q^2) exactly, with rationals
            idx = np.nonzero(bad)
            rr = r.copy()
            for i in zip(*idx):
                qi, ai = float(q[i]), Fraction(float(a[i]))
                lo, hi = (qi, math.nextafter(qi, math.inf))
                if Fraction(qi) ** 2 > ai:
                    lo, hi = math.nextafter(qi, -math.inf), qi
                if Fraction(lo) ** 2 == ai:
                    rr[i] = lo
                else:
                    rr[i] = {"rm": lo, "rz": lo, "rp": hi}[mode]
            r = rr
        return r.view(np.uint64)


def from_f64(x, mode: str, f: Fmt) -> np.ndarray:
    """Convert exact f64 values to ``f`` with rounding ``mode``."""
    x = np.asarray(x, np.float64)
    if f.name == "f64":
        return x.view(np.uint64)
    return round_narrow(x, lambda v: sgn(x - v), mode, f, rn_exact=True)


def from_int(x, mode: str, f: Fmt) -> np.ndarray:
    """Convert integers (any numpy int dtype) to ``f`` with rounding ``mode``."""
    x = np.asarray(x)
    if x.dtype.itemsize < 8:
        x64 = x.astype(np.float64)
        if f.name == "f64":
            return x64.view(np.uint64)
        return round_narrow(x64, lambda v: sgn(x64 - v), mode, f, rn_exact=True)
    signed = x.dtype.kind == "i"
    hi = (x >> 32).astype(np.float64) * 4294967296.0
    lo = (x & (np.int64(0xFFFFFFFF) if signed else np.uint64(0xFFFFFFFF))).astype(np.float64)

    def cmp(v):
        return sgn((hi - v) + lo)

    with np.errstate(all="ignore"):
        s = x.astype(np.float64)
        if f.name != "f64":
            return round_narrow(s, cmp, mode, f)
        return round64(s, cmp(s), mode).view(np.uint64)


def flush_subnormal(bits, f: Fmt) -> np.ndarray:
    """.ftz on bit patterns: subnormals become zero of the same sign."""
    bits = np.asarray(bits, f.udtype)
    exp_mask = f.udtype(((1 << _EXP_BITS[f.name]) - 1) << f.man)
    sub = (bits & exp_mask) == 0
    return np.where(sub, bits & f.udtype(f.sign), bits).astype(f.udtype)


def canonical_nan(bits, f: Fmt) -> np.ndarray:
    bits = np.asarray(bits, f.udtype)
    nan = np.isnan(decode(bits, f))
    return np.where(nan, f.udtype(f.canonical_nan), bits).astype(f.udtype)


def saturate(bits, f: Fmt) -> np.ndarray:
    """.sat: clamp to [0.0, 1.0]; NaN becomes +0.0."""
    v = decode(bits, f)
    one = encode_rn(np.float64(1.0), f)
    out = np.where(np.isnan(v) | (v <= 0), f.udtype(0), np.where(v >= 1, one, bits))
    return out.astype(f.udtype)
