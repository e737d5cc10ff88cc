"""Per-instruction semantics of the interpreter against numpy / exact references."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ptxdsl.interp import NO_CPU_SEMANTICS, supported, unsupported
from ptxdsl.interp.semantics import HANDLERS
from ptxdsl.isa import TABLE
from interp_ops import FORMATS, bits_of, ref_round, run_op, to_fraction, values_of

@pytest.fixture(autouse=True)
def _quiet_numpy():
    # references divide by zero and overflow on purpose (inf/NaN inputs)
    with np.errstate(all="ignore"):
        yield


SETTINGS = settings(max_examples=4, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])
N = 32


def test_every_table_entry_has_semantics_or_is_marked():
    table = {s.opcode for s in TABLE}
    assert supported() | unsupported() == table
    assert not supported() & unsupported()
    assert NO_CPU_SEMANTICS <= table | set(NO_CPU_SEMANTICS)
    for op in supported():
        assert HANDLERS[op].__module__.startswith("ptxdsl.interp")


# ---------------------------------------------------------------------- integers
INT_TYPES = {"u16": (16, False), "s16": (16, True), "u32": (32, False), "s32": (32, True),
             "u64": (64, False), "s64": (64, True)}


def ints(t, n=N):
    bits, signed = INT_TYPES[t]
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    edge = st.sampled_from([lo, hi, 0, 1, -1 if signed else 2, lo + 1, hi - 1])
    return st.lists(st.one_of(st.integers(lo, hi), edge), min_size=n, max_size=n)


def wrap(v, t):
    bits, signed = INT_TYPES[t]
    v &= (1 << bits) - 1
    if signed and v >> (bits - 1):
        v -= 1 << bits
    return v


def arr(vals, t):
    return np.array(vals, dtype=np.dtype(("i" if INT_TYPES[t][1] else "u") +
                                         str(INT_TYPES[t][0] // 8)))


def trunc_div(a, b):
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


INT_BINOPS = {
    "add": lambda a, b, t: a + b,
    "sub": lambda a, b, t: a - b,
    "mul.lo": lambda a, b, t: a * b,
    "mul.hi": lambda a, b, t: (a * b) >> INT_TYPES[t][0],
    "min": lambda a, b, t: min(a, b),
    "max": lambda a, b, t: max(a, b),
    "div": lambda a, b, t: -1 if b == 0 else trunc_div(a, b),
    # x % 0 is all ones like x / 0 (measured on an H100 by the edge sweep)
    "rem": lambda a, b, t: -1 if b == 0 else a - trunc_div(a, b) * b,
}


@pytest.mark.parametrize("t", sorted(INT_TYPES))
@pytest.mark.parametrize("op", sorted(INT_BINOPS))
@SETTINGS
@given(data=st.data())
def test_integer_binary(op, t, data):
    a = data.draw(ints(t))
    b = data.draw(ints(t))
    if op in ("div", "rem"):
        b = [x if x != 0 or i % 4 == 0 else 1 for i, x in enumerate(b)]
    got = run_op(f"{op}.{t}", [t, t], t, arr(a, t), arr(b, t))
    want = [wrap(INT_BINOPS[op](x, y, t), t) for x, y in zip(a, b)]
    assert got.tolist() == want


@pytest.mark.parametrize("t", ["u16", "s16", "u32", "s32"])
@SETTINGS
@given(data=st.data())
def test_mul_wide_and_mad(t, data):
    a, b = data.draw(ints(t)), data.draw(ints(t))
    wide = t[0] + str(INT_TYPES[t][0] * 2)
    c = data.draw(ints(wide))
    got = run_op(f"mul.wide.{t}", [t, t], wide, arr(a, t), arr(b, t))
    assert got.tolist() == [x * y for x, y in zip(a, b)]
    got = run_op(f"mad.wide.{t}", [t, t, wide], wide, arr(a, t), arr(b, t), arr(c, wide))
    assert got.tolist() == [wrap(x * y + z, wide) for x, y, z in zip(a, b, c)]
    cc = data.draw(ints(t))
    got = run_op(f"mad.hi.{t}", [t, t, t], t, arr(a, t), arr(b, t), arr(cc, t))
    assert got.tolist() == [wrap(((x * y) >> INT_TYPES[t][0]) + z, t) for x, y, z in zip(a, b, cc)]


@SETTINGS
@given(a=ints("s32"), b=ints("s32"))
def test_saturating_add_sub(a, b):
    clamp = lambda v: max(-2 ** 31, min(2 ** 31 - 1, v))  # noqa: E731
    got = run_op("add.sat.s32", ["s32", "s32"], "s32", arr(a, "s32"), arr(b, "s32"))
    assert got.tolist() == [clamp(x + y) for x, y in zip(a, b)]
    got = run_op("sub.sat.s32", ["s32", "s32"], "s32", arr(a, "s32"), arr(b, "s32"))
    assert got.tolist() == [clamp(x - y) for x, y in zip(a, b)]


@pytest.mark.parametrize("t", ["s16", "s32", "s64"])
@SETTINGS
@given(data=st.data())
def test_abs_neg_wrap(t, data):
    a = data.draw(ints(t))
    assert run_op(f"abs.{t}", [t], t, arr(a, t)).tolist() == [wrap(abs(x), t) for x in a]
    assert run_op(f"neg.{t}", [t], t, arr(a, t)).tolist() == [wrap(-x, t) for x in a]


@pytest.mark.parametrize("t", ["b32", "b64"])
@SETTINGS
@given(data=st.data())
def test_shifts_clamp(t, data):
    w = int(t[1:])
    ut, stype = f"u{w}", f"s{w}"
    a = data.draw(ints(ut))
    s = data.draw(st.lists(st.integers(0, 2 ** 32 - 1) | st.integers(0, w + 2), min_size=N,
                           max_size=N))
    sh = np.array(s, np.uint32)
    got = run_op(f"shl.{t}", [ut, "u32"], ut, arr(a, ut), sh)
    assert got.tolist() == [(x << y) & ((1 << w) - 1) if y < w else 0 for x, y in zip(a, s)]
    got = run_op(f"shr.{ut}", [ut, "u32"], ut, arr(a, ut), sh)
    assert got.tolist() == [x >> y if y < w else 0 for x, y in zip(a, s)]
    sa = [wrap(x, stype) for x in a]
    got = run_op(f"shr.{stype}", [stype, "u32"], stype, arr(sa, stype), sh)
    assert got.tolist() == [x >> min(y, w - 1) for x, y in zip(sa, s)]


def ref_bfe(a, pos, ln, w, signed):
    # 32-bit forms read the low 8 bits of pos/len (PTX ISA); the 64-bit forms the whole
    # u32, as the H100 edge sweep measured (see interp/semantics/intops.py)
    if w == 32:
        pos &= 0xFF
        ln &= 0xFF
    msb = w - 1
    sbit = 0 if not signed or ln == 0 else (a >> min(pos + ln - 1, msb)) & 1
    out = 0
    for i in range(w):
        bit = (a >> (pos + i)) & 1 if (i < ln and pos + i <= msb) else sbit
        out |= bit << i
    return out


def ref_bfi(a, b, pos, ln, w):
    # 32-bit forms read the low 8 bits of pos/len (PTX ISA); the 64-bit forms the whole
    # u32, as the H100 edge sweep measured (see interp/semantics/intops.py)
    if w == 32:
        pos &= 0xFF
        ln &= 0xFF
    f = b
    for i in range(ln):
        if pos + i > w - 1:
            break
        f = (f & ~(1 << (pos + i))) | (((a >> i) & 1) << (pos + i))
    return f


@pytest.mark.parametrize("w", [32, 64])
@SETTINGS
@given(data=st.data())
def test_bit_field_ops(w, data):
    ut = f"u{w}"
    a, b = data.draw(ints(ut)), data.draw(ints(ut))
    pos = data.draw(st.lists(st.integers(0, 300), min_size=N, max_size=N))
    ln = data.draw(st.lists(st.integers(0, 300), min_size=N, max_size=N))
    p32, l32 = np.array(pos, np.uint32), np.array(ln, np.uint32)
    got = run_op(f"bfe.u{w}", [ut, "u32", "u32"], ut, arr(a, ut), p32, l32)
    assert got.tolist() == [ref_bfe(x, p, n, w, False) for x, p, n in zip(a, pos, ln)]
    st_ = f"s{w}"
    got = run_op(f"bfe.s{w}", [st_, "u32", "u32"], st_, arr([wrap(x, st_) for x in a], st_),
                 p32, l32)
    assert got.tolist() == [wrap(ref_bfe(x, p, n, w, True), st_) for x, p, n in zip(a, pos, ln)]
    bt = f"b{w}"
    got = run_op(f"bfi.{bt}", [ut, ut, "u32", "u32"], ut, arr(a, ut), arr(b, ut), p32, l32)
    assert got.tolist() == [ref_bfi(x, y, p, n, w) for x, y, p, n in zip(a, b, pos, ln)]
    assert run_op(f"popc.{bt}", [ut], "u32", arr(a, ut)).tolist() == [bin(x).count("1")
                                                                      for x in a]
    assert run_op(f"clz.{bt}", [ut], "u32", arr(a, ut)).tolist() == [w - x.bit_length()
                                                                     for x in a]
    got = run_op(f"brev.{bt}", [ut], ut, arr(a, ut))
    assert got.tolist() == [int(f"{x:0{w}b}"[::-1], 2) for x in a]


PRMT_MODES_REF = {  # d.b3 d.b2 d.b1 d.b0 per c[1:0], as tabled in the PTX ISA
    "f4e": ["3210", "4321", "5432", "6543"], "b4e": ["5670", "6701", "7012", "0123"],
    "rc8": ["0000", "1111", "2222", "3333"], "ecl": ["3210", "3211", "3222", "3333"],
    "ecr": ["0000", "1110", "2210", "3210"], "rc16": ["1010", "3232", "1010", "3232"],
}


@pytest.mark.parametrize("mode", [None, *PRMT_MODES_REF])
@SETTINGS
@given(data=st.data())
def test_prmt(mode, data):
    a, b, c = (data.draw(ints("u32")) for _ in range(3))
    chain = "prmt" + (f".{mode}" if mode else "") + ".b32"
    got = run_op(chain, ["u32", "u32", "u32"], "u32", arr(a, "u32"), arr(b, "u32"),
                 arr(c, "u32"))
    want = []
    for x, y, z in zip(a, b, c):
        src = (y << 32) | x
        out = 0
        for i in range(4):
            if mode is None:
                ctl = (z >> (4 * i)) & 0xF
                byte = (src >> (8 * (ctl & 7))) & 0xFF
                if ctl & 8:
                    byte = 0xFF if byte & 0x80 else 0
            else:
                sel = int(PRMT_MODES_REF[mode][z & 3][3 - i])
                byte = (src >> (8 * sel)) & 0xFF
            out |= byte << (8 * i)
        want.append(out)
    assert got.tolist() == want


@pytest.mark.parametrize("cmp", ["eq", "ne", "lt", "le", "gt", "ge", "lo", "ls", "hi", "hs"])
@SETTINGS
@given(data=st.data())
def test_setp_integers(cmp, data):
    t = "u32" if cmp in ("lo", "ls", "hi", "hs") else data.draw(st.sampled_from(["s32", "u64",
                                                                                "s16"]))
    a, b = data.draw(ints(t)), data.draw(ints(t))
    b = [y if i % 3 else x for i, (x, y) in enumerate(zip(a, b))]
    got = run_op(f"setp.{cmp}.{t}", [t, t], "pred", arr(a, t), arr(b, t))
    op = {"eq": "__eq__", "ne": "__ne__", "lt": "__lt__", "le": "__le__", "gt": "__gt__",
          "ge": "__ge__", "lo": "__lt__", "ls": "__le__", "hi": "__gt__", "hs": "__ge__"}[cmp]
    assert got.tolist() == [int(getattr(x, op)(y)) for x, y in zip(a, b)]


# ---------------------------------------------------------------------- floats
def floats(fmt, n=N):
    if fmt == "f64":
        el = st.floats(width=64, allow_nan=True, allow_infinity=True)
        special = st.sampled_from([5e-324, -5e-324, 2.2250738585072014e-308, 1.7976931348623157e308,
                                   -0.0, 1.0, 3.0])
    elif fmt == "f16":  # every bit pattern: NaNs, infinities, subnormals included
        return st.lists(st.integers(0, 0xFFFF).map(
            lambda b: float(np.array(b, np.uint16).view(np.float16))), min_size=n, max_size=n)
    else:
        el = st.floats(width=32, allow_nan=True, allow_infinity=True)
        special = st.sampled_from([1e-45, -1e-45, 1.1754943508222875e-38, 3.4028234663852886e38,
                                   -0.0, 1.0, 3.0, 6e-8, 65504.0])
    return st.lists(st.one_of(el, special), min_size=n, max_size=n)


def as_fmt(vals, fmt):
    """Python floats -> (bit array, exact f64 values) in ``fmt`` (values rounded to nearest)."""
    if fmt == "bf16":
        from ptxdsl.core.types import f32_to_bf16_bits
        bits = f32_to_bf16_bits(np.array(vals, np.float32))
    else:
        dt = {"f16": np.float16, "f32": np.float32, "f64": np.float64}[fmt]
        with np.errstate(all="ignore"):
            bits = np.array(vals, dt).view(FORMATS[fmt][3])
    return bits, values_of(bits, fmt)


def exact_ref(op, xs, mode, fmt):
    """Reference result (float) of op on exact inputs, with IEEE special cases."""
    if any(math.isnan(x) for x in xs):
        return math.nan
    with np.errstate(all="ignore"):
        fx = [np.float64(x) for x in xs]
        naive = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b,
                 "mul": lambda a, b: a * b, "div": lambda a, b: a / b,
                 "fma": lambda a, b, c: a * b + c, "sqrt": lambda a: np.sqrt(a),
                 "rcp": lambda a: 1.0 / a}[op](*fx)
    if any(math.isinf(x) for x in xs) or (op in ("div", "rcp") and xs[-1] == 0) or (
            op == "sqrt" and xs[0] < 0):
        if op == "fma" and not any(math.isinf(x) for x in xs):
            pass
        elif op == "fma" and math.isinf(xs[2]) and all(math.isfinite(x) for x in xs[:2]):
            return xs[2]  # the exact product of finite factors is finite, even past f64
        else:
            return float(naive)
    F = [to_fraction(x) for x in xs]
    if op == "sqrt":
        if xs[0] == 0:
            return xs[0]
        r = ref_round_sqrt(F[0], mode, fmt)
        return r
    exact = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
             "div": lambda a, b: a / b, "fma": lambda a, b, c: a * b + c,
             "rcp": lambda a: 1 / a}[op](*F)
    if exact == 0:
        terms = {"add": lambda: (xs[0], xs[1]), "sub": lambda: (xs[0], -xs[1]),
                 "fma": lambda: (xs[0] * xs[1], xs[2])}
        if op in terms:
            p, q = terms[op]()
            neg = (math.copysign(1, p) < 0 and math.copysign(1, q) < 0 and p == 0 and q == 0) \
                or (mode == "rm" and not (p == 0 and q == 0 and math.copysign(1, p) > 0
                                          and math.copysign(1, q) > 0))
            return -0.0 if neg else 0.0
        sign = math.copysign(1, xs[0]) * (math.copysign(1, xs[1]) if len(xs) > 1 else 1)
        return math.copysign(0.0, sign)
    return ref_round(exact, mode, fmt)


def ref_round_sqrt(a: Fraction, mode, fmt):
    """sqrt by bisection on the candidates ref_round brackets (exact squares compared)."""
    approx = math.sqrt(float(a))
    r = ref_round(Fraction(approx), "rz", fmt)
    cands = sorted({r, float(np.nextafter(r, math.inf)), float(np.nextafter(r, -math.inf))})
    # pick floor/ceil of the true root among neighbours in the target format
    cands = [c for c in _neighbours(r, fmt)]
    below = max(c for c in cands if Fraction(c) ** 2 <= a)
    above = min(c for c in cands if Fraction(c) ** 2 >= a)
    if below == above:
        return below
    if mode in ("rz", "rm"):
        return below
    if mode == "rp":
        return above
    mid = (Fraction(below) + Fraction(above)) / 2
    if mid ** 2 < a:
        return above
    if mid ** 2 > a:
        return below
    return below if bits_of(below, fmt) % 2 == 0 else above


def _neighbours(r, fmt):
    out = [r]
    for direction in (math.inf, -math.inf):
        v = r
        for _ in range(2):
            v = _next(v, direction, fmt)
            out.append(v)
    return out


def _next(v, direction, fmt):
    if fmt == "f64":
        return math.nextafter(v, direction)
    if fmt == "f32":
        return float(np.nextafter(np.float32(v), np.float32(direction)))
    if fmt == "f16":
        return float(np.nextafter(np.float16(v), np.float16(direction)))
    b = bits_of(v, "bf16")
    b = b + 1 if (direction > 0) == (v >= 0) else b - 1
    return float(values_of(np.array([b], np.uint16), "bf16")[0])


def same_float(got, want):
    if math.isnan(want):
        return math.isnan(got)
    return got == want and math.copysign(1, got) == math.copysign(1, want)


MODES = ["rn", "rz", "rm", "rp"]


@pytest.mark.parametrize("fmt", ["f32", "f64"])
@pytest.mark.parametrize("op", ["add", "sub", "mul", "fma", "div", "sqrt", "rcp"])
@pytest.mark.parametrize("mode", MODES)
@SETTINGS
@given(data=st.data())
def test_float_rounding_modes(op, mode, fmt, data):
    nargs = {"fma": 3, "sqrt": 1, "rcp": 1}.get(op, 2)
    cols = [data.draw(floats(fmt)) for _ in range(nargs)]
    if op == "fma":  # make cancellation and ties likely: c close to -a*b
        cols[2] = [(-a * b if i % 3 == 0 and math.isfinite(a * b) else c)
                   for i, (a, b, c) in enumerate(zip(*cols))]
    bits, vals = zip(*[as_fmt(c, fmt) for c in cols])
    chain = f"{op}.{mode}.{fmt}"
    got = run_op(chain, [fmt] * nargs, fmt, *bits)
    got_vals = values_of(np.asarray(got).view(FORMATS[fmt][3]), fmt)
    for i in range(N):
        xs = [float(v[i]) for v in vals]
        want = exact_ref(op, xs, mode, fmt)
        assert same_float(float(got_vals[i]), want), (op, mode, fmt, xs, float(got_vals[i]), want)


@pytest.mark.parametrize("fmt", ["f16", "bf16"])
@pytest.mark.parametrize("op", ["add", "sub", "mul", "fma"])
@SETTINGS
@given(data=st.data())
def test_half_precision_arithmetic(op, fmt, data):
    nargs = 3 if op == "fma" else 2
    cols = [data.draw(floats("f32" if fmt == "bf16" else "f16")) for _ in range(nargs)]
    bits, vals = zip(*[as_fmt(c, fmt) for c in cols])
    chain = f"{op}.rn.{fmt}"
    got = run_op(chain, [fmt] * nargs, fmt, *bits)
    got_vals = values_of(np.asarray(got).view(np.uint16), fmt)
    for i in range(N):
        xs = [float(v[i]) for v in vals]
        want = exact_ref(op, xs, "rn", fmt)
        assert same_float(float(got_vals[i]), want), (op, fmt, xs, float(got_vals[i]), want)
    # the packed form does the same per half
    packed = [np.asarray(b).astype(np.uint32) | (np.roll(b, 1).astype(np.uint32) << 16)
              for b in bits]
    got2 = run_op(f"{op}.rn.{fmt}x2", [f"{fmt}x2"] * nargs, f"{fmt}x2", *packed)
    lo = (np.asarray(got2) & 0xFFFF).astype(np.uint16)
    hi = (np.asarray(got2) >> 16).astype(np.uint16)
    np.testing.assert_array_equal(lo, np.asarray(got).view(np.uint16))
    np.testing.assert_array_equal(hi, np.roll(np.asarray(got).view(np.uint16), 1))


@SETTINGS
@given(a=floats("f32"), b=floats("f32"))
def test_ftz_and_sat(a, b):
    ba, va = as_fmt(a, "f32")
    bb, vb = as_fmt(b, "f32")
    got = run_op("add.rn.ftz.sat.f32", ["f32", "f32"], "f32", ba, bb)
    tiny = 2.0 ** -126
    for i in range(N):
        x = 0.0 if abs(va[i]) < tiny else float(va[i])
        y = 0.0 if abs(vb[i]) < tiny else float(vb[i])
        r = exact_ref("add", [math.copysign(x, va[i]), math.copysign(y, vb[i])], "rn", "f32")
        r = 0.0 if abs(r) < tiny else r
        r = 0.0 if math.isnan(r) else min(max(r, 0.0), 1.0)
        assert same_float(float(got[i]), r) or (r == 0 and got[i] == 0), (x, y, got[i], r)


@pytest.mark.parametrize("op", ["min", "max"])
@SETTINGS
@given(a=floats("f32"), b=floats("f32"))
def test_float_min_max_nan_rules(op, a, b):
    ba, va = as_fmt(a, "f32")
    bb, vb = as_fmt(b, "f32")
    got = run_op(f"{op}.f32", ["f32", "f32"], "f32", ba, bb)
    got_nan = run_op(f"{op}.NaN.f32", ["f32", "f32"], "f32", ba, bb)
    for i in range(N):
        x, y = float(va[i]), float(vb[i])
        if math.isnan(x) and math.isnan(y):
            want = math.nan
        elif math.isnan(x) or math.isnan(y):
            want = y if math.isnan(x) else x
        elif x == y == 0:
            want = (x if math.copysign(1, x) < 0 else y) if op == "min" else \
                (x if math.copysign(1, x) > 0 else y)
        else:
            want = min(x, y) if op == "min" else max(x, y)
        assert same_float(float(got[i]), want)
        if math.isnan(x) or math.isnan(y):
            assert math.isnan(got_nan[i])
            assert np.asarray(got_nan).view(np.uint32)[i] == 0x7FFFFFFF


@pytest.mark.parametrize("cmp", ["eq", "ne", "lt", "le", "gt", "ge", "equ", "neu", "ltu", "leu",
                                 "gtu", "geu", "num", "nan"])
@SETTINGS
@given(a=floats("f32"), b=floats("f32"))
def test_setp_float_nan_semantics(cmp, a, b):
    b = [x if i % 4 == 0 else y for i, (x, y) in enumerate(zip(a, b))]
    ba, va = as_fmt(a, "f32")
    bb, vb = as_fmt(b, "f32")
    got = run_op(f"setp.{cmp}.f32", ["f32", "f32"], "pred", ba, bb)
    for i in range(N):
        x, y = float(va[i]), float(vb[i])
        nan = math.isnan(x) or math.isnan(y)
        base = {"eq": x == y, "ne": x != y, "lt": x < y, "le": x <= y, "gt": x > y,
                "ge": x >= y}
        if cmp == "num":
            want = not nan
        elif cmp == "nan":
            want = nan
        elif cmp.endswith("u"):
            want = nan or base[cmp[:-1]]
        else:
            want = not nan and base[cmp]
        assert bool(got[i]) == want, (cmp, x, y)


# ---------------------------------------------------------------------- conversions
@pytest.mark.parametrize("dst", ["f16", "bf16"])
@pytest.mark.parametrize("mode", MODES)
@SETTINGS
@given(a=floats("f32"))
def test_cvt_narrowing_float(dst, mode, a):
    if dst == "bf16" and mode in ("rm", "rp"):
        mode = "rn"  # the table allows every mode; keep the sm_90 forms the hardware has
    ba, va = as_fmt(a, "f32")
    got = run_op(f"cvt.{mode}.{dst}.f32", ["f32"], dst, ba)
    gv = values_of(np.asarray(got).view(np.uint16), dst)
    for i in range(N):
        x = float(va[i])
        want = x if not math.isfinite(x) or x == 0 else ref_round(to_fraction(x), mode, dst)
        assert same_float(float(gv[i]), want), (mode, dst, x, float(gv[i]), want)


@pytest.mark.parametrize("dst", ["s32", "u32", "s64", "u64", "s16", "u8", "s8"])
@pytest.mark.parametrize("irnd", ["rni", "rzi", "rmi", "rpi"])
@SETTINGS
@given(a=floats("f32"))
def test_cvt_float_to_int_saturates(dst, irnd, a):
    ba, va = as_fmt(a, "f32")
    from ptxdsl.core.types import by_name, int_range
    t = by_name(dst)
    lo, hi = int_range(t)
    out_t = {"u8": "u16", "s8": "s16"}.get(dst, dst)
    got = run_op(f"cvt.{irnd}.{dst}.f32", ["f32"], out_t, ba)
    fn = {"rni": round, "rzi": math.trunc, "rmi": math.floor, "rpi": math.ceil}[irnd]
    for i in range(N):
        x = float(va[i])
        if math.isnan(x):  # 0 into <= 32 bits, the integer indefinite into 64 (H100)
            want = 0 if t.bits <= 32 else lo if t.kind == "s" else 1 << 63
        elif math.isinf(x):
            want = hi if x > 0 else lo
        else:
            want = min(max(fn(Fraction(x)), lo), hi)
        g = int(got[i])
        if dst in ("u8", "s8"):
            g = wrap(g, "s16") if dst == "s8" else g
        assert g == want, (irnd, dst, x, g, want)


@pytest.mark.parametrize("src", ["s32", "u32", "s64", "u64"])
@pytest.mark.parametrize("mode", MODES)
@SETTINGS
@given(data=st.data())
def test_cvt_int_to_float(src, mode, data):
    a = data.draw(ints(src))
    for dst in ("f32", "f64"):
        got = run_op(f"cvt.{mode}.{dst}.{src}", [src], dst, arr(a, src))
        for i in range(N):
            want = ref_round(Fraction(a[i]), mode, dst) if a[i] else 0.0
            assert float(got[i]) == want, (src, dst, mode, a[i])


@SETTINGS
@given(a=floats("f32"))
def test_cvt_f32_to_tf32_rounds_half_away(a):
    ba, va = as_fmt(a, "f32")
    got = np.asarray(run_op("cvt.rna.tf32.f32", ["f32"], "b32", ba)).view(np.uint32)
    for i in range(N):
        x = float(va[i])
        if math.isnan(x):  # the bits truncated, as an H200 does (a NaN may become inf)
            assert got[i] == int(ba[i]) & 0xFFFFE000
            continue
        if not math.isfinite(x):
            assert np.uint32(got[i]).view(np.float32) == np.float32(x)
            continue
        q = Fraction(2) ** (max(math.frexp(abs(x))[1] - 1, -126) - 10) if x else Fraction(1)
        n = abs(to_fraction(x)) / q
        k = math.floor(n) + (1 if n - math.floor(n) >= Fraction(1, 2) else 0)
        want = math.copysign(float(k * q), x) if math.isfinite(x) else x
        assert np.uint32(got[i]).view(np.float32) == np.float32(want), (x,)


# ---------------------------------------------------------------------- .approx functions
APPROX = {  # chain: (numpy reference, bound kind, bound) from the floatops docstring
    "ex2.approx.f32": (np.exp2, "rel", 2.0 ** -22.5),
    "lg2.approx.f32": (np.log2, "abs-or-rel", 2.0 ** -22),
    "rsqrt.approx.f32": (lambda x: 1 / np.sqrt(x), "rel", 2.0 ** -22.9),
    "rcp.approx.f32": (lambda x: 1 / x, "rel", 2.0 ** -23),
    "sqrt.approx.f32": (np.sqrt, "rel", 2.0 ** -23),
    "sin.approx.f32": (np.sin, "abs", 2.0 ** -20.9),
    "cos.approx.f32": (np.cos, "abs", 2.0 ** -20.9),
    "tanh.approx.f32": (np.tanh, "rel", 2.0 ** -11),
}


@pytest.mark.parametrize("chain", sorted(APPROX))
@SETTINGS
@given(a=st.lists(st.floats(-100, 100, width=32)
                  | st.floats(float(np.float32(1e-30)), float(np.float32(1e30)), width=32),
                  min_size=N, max_size=N))
def test_approx_functions_within_documented_bounds(chain, a):
    fn, kind, bound = APPROX[chain]
    x = np.array(a, np.float32)
    if chain.startswith(("sin", "cos")):
        x = np.clip(x, -np.pi, np.pi).astype(np.float32)
    if chain.startswith(("lg2", "rsqrt", "sqrt")):
        x = np.abs(x) + np.float32(1e-30)
    got = run_op(chain, ["f32"], "f32", x).astype(np.float64)
    want = fn(x.astype(np.float64))
    scale = {"rel": np.abs(want), "abs": 1.0, "abs-or-rel": np.maximum(np.abs(want), 1.0)}[kind]
    err = np.abs(got - want) / scale
    finite = np.isfinite(want) & (np.abs(want) < 3e38) & (np.abs(want) > 1.2e-38)
    assert np.all(err[finite] <= bound), (chain, x[finite][np.argmax(err[finite])])


def test_approx_special_values():
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -1.0], np.float32)
    r = run_op("rsqrt.approx.f32", ["f32"], "f32", x)
    assert np.isinf(r[0]) and r[0] > 0 and np.isinf(r[1]) and r[1] < 0
    assert r[2] == 0 and np.isnan(r[3]) and np.isnan(r[4]) and np.isnan(r[5])
    r = run_op("lg2.approx.f32", ["f32"], "f32", x)
    assert r[0] == -np.inf and r[2] == np.inf and np.isnan(r[5])
    r = run_op("ex2.approx.f32", ["f32"], "f32", x)
    assert r[0] == 1 and r[2] == np.inf and r[3] == 0


# ---------------------------------------------------------------------- selection / moves
@SETTINGS
@given(a=ints("u32"), b=ints("u32"), p=st.lists(st.integers(0, 1), min_size=N, max_size=N))
def test_selp_and_logic(a, b, p):
    pv = np.array(p, np.uint32)
    got = run_op("selp.u32", ["u32", "u32", "pred"], "u32", arr(a, "u32"), arr(b, "u32"), pv)
    assert got.tolist() == [x if c else y for x, y, c in zip(a, b, p)]
    for op, fn in (("and", lambda x, y: x & y), ("or", lambda x, y: x | y),
                   ("xor", lambda x, y: x ^ y)):
        got = run_op(f"{op}.b32", ["u32", "u32"], "u32", arr(a, "u32"), arr(b, "u32"))
        assert got.tolist() == [fn(x, y) for x, y in zip(a, b)]
    got = run_op("not.b32", ["u32"], "u32", arr(a, "u32"))
    assert got.tolist() == [x ^ 0xFFFFFFFF for x in a]


@SETTINGS
@given(a=floats("f32"), b=floats("f32"))
def test_copysign_abs_neg_are_bit_operations(a, b):
    ba, _ = as_fmt(a, "f32")
    bb, _ = as_fmt(b, "f32")
    ua, ub = ba.view(np.uint32), bb.view(np.uint32)
    got = np.asarray(run_op("copysign.f32", ["f32", "f32"], "f32", ba, bb)).view(np.uint32)
    np.testing.assert_array_equal(got, (ub & 0x7FFFFFFF) | (ua & 0x80000000))
    got = np.asarray(run_op("abs.f32", ["f32"], "f32", ba)).view(np.uint32)
    np.testing.assert_array_equal(got, ua & 0x7FFFFFFF)
    got = np.asarray(run_op("neg.f32", ["f32"], "f32", ba)).view(np.uint32)
    np.testing.assert_array_equal(got, ua ^ 0x80000000)
