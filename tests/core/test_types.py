"""ptxdsl.types: names, widths, literals, rounding to half precision, operand compatibility."""
from __future__ import annotations

import math

import numpy as np
import pytest

from ptxdsl import types as T
from ptxdsl.core.types import GENERATED_NAME


def test_every_type_is_registered_once():
    assert set(T.ALL_TYPES) == {
        "pred", "b8", "b16", "b32", "b64", "b128", "u8", "u16", "u32", "u64", "s8", "s16", "s32",
        "s64", "f16", "bf16", "f16x2", "bf16x2", "tf32", "f32", "f64", "e4m3", "e5m2", "e4m3x2",
        "e5m2x2", "s4", "u4", "b1"}
    for name, t in T.ALL_TYPES.items():
        assert t.name == name and t.ptx == "." + name and str(t) == repr(t) == name
        assert getattr(T, name) is t


@pytest.mark.parametrize("name,bits,kind,nbytes", [
    ("pred", 1, "pred", 1), ("u8", 8, "u", 1), ("s16", 16, "s", 2), ("b64", 64, "b", 8),
    ("f16x2", 32, "f", 4), ("bf16", 16, "f", 2), ("f64", 64, "f", 8)])
def test_widths_and_kinds(name, bits, kind, nbytes):
    t = T.by_name(name)
    assert (t.bits, t.kind, t.bytes) == (bits, kind, nbytes)
    assert t.is_float == (kind == "f") and t.is_pred == (kind == "pred")
    assert t.is_int == (kind in "usb") and t.is_signed == (kind == "s")


def test_lanes():
    assert T.f16x2.lanes == T.bf16x2.lanes == 2 and T.f32.lanes == 1


def test_numpy_dtypes():
    assert T.f32.np_dtype == np.float32 and T.s64.np_dtype == np.int64
    assert T.bf16.np_dtype == np.uint16  # bit patterns: numpy has no bf16
    with pytest.raises(TypeError):
        T.b128.np_dtype


def test_by_name_and_from_numpy():
    assert T.by_name(".f32") is T.f32 and T.by_name("u64") is T.u64
    with pytest.raises(ValueError, match="unknown PTX type 'f8'; known types: b1, b128, b16"):
        T.by_name("f8")
    assert T.from_numpy(np.float16) is T.f16 and T.from_numpy("int32") is T.s32
    with pytest.raises(ValueError, match="no PTX type for numpy dtype complex64"):
        T.from_numpy(np.complex64)


# ---------------------------------------------------------------- literals
@pytest.mark.parametrize("t,value,text", [
    (T.f32, 1.0, "0f3F800000"), (T.f32, -0.0, "0f80000000"), (T.f32, 0.1, "0f3DCCCCCD"),
    (T.f32, math.inf, "0f7F800000"), (T.f64, 1.0, "0d3FF0000000000000"),
    (T.f64, -2.5, "0dC004000000000000"), (T.u32, 7, "7"), (T.s32, -7, "-7"),
    (T.u64, 2**64 - 1, str(2**64 - 1)), (T.b32, -1, "-1"), (T.u8, np.uint8(3), "3")])
def test_literal(t, value, text):
    assert t.literal(value) == text


def test_nan_literal_is_a_nan():
    text = T.f32.literal(float("nan"))
    bits = int(text[2:], 16)
    assert bits & 0x7F800000 == 0x7F800000 and bits & 0x7FFFFF


@pytest.mark.parametrize("t,value,exc,msg", [
    (T.f16, 1.0, TypeError, r"PTX has no f16 literal; use bits_of"),
    (T.u32, -1, ValueError, r"-1 does not fit in u32 \(range 0\.\.4294967295\)"),
    (T.s8, 128, ValueError, r"range -128\.\.127"),
    (T.u32, 1.5, TypeError, r"u32 immediate must be an int"),
    (T.u32, True, TypeError, r"must be an int"),
])
def test_literal_refusals(t, value, exc, msg):
    with pytest.raises(exc, match=msg):
        t.literal(value)


@pytest.mark.parametrize("t,lo,hi", [
    (T.u8, 0, 255), (T.s8, -128, 127), (T.b8, -128, 255), (T.u32, 0, 2**32 - 1),
    (T.b64, -(2**63), 2**64 - 1)])
def test_int_range(t, lo, hi):
    assert T.int_range(t) == (lo, hi)


# ---------------------------------------------------------------- half precision
@pytest.mark.parametrize("t,value,bits", [
    (T.f16, 1.0, 0x3C00), (T.f16, -2.0, 0xC000), (T.f16, 65504.0, 0x7BFF),
    (T.f16, 1e6, 0x7C00),                        # overflow rounds to inf
    (T.bf16, 1.0, 0x3F80), (T.bf16, -0.5, 0xBF00), (T.bf16, 3.0e38, 0x7F62),
    (T.f32, 1.0, 0x3F800000), (T.f64, 1.0, 0x3FF0000000000000)])
def test_float_bits(t, value, bits):
    assert T.float_bits(t, value) == bits


def test_bf16_rounds_to_nearest_even():
    # 1 + 2^-8 is halfway between bf16 neighbours 1.0 and 1 + 2^-7: ties go to even (1.0)
    assert T.float_bits(T.bf16, 1.0 + 2 ** -8) == 0x3F80
    # 1 + 3 * 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even)
    assert T.float_bits(T.bf16, 1.0 + 3 * 2 ** -8) == 0x3F82
    assert T.float_bits(T.bf16, 1.0 + 2 ** -8 + 2 ** -20) == 0x3F81


def test_bf16_nan_stays_nan_and_roundtrip():
    assert int(T.f32_to_bf16_bits(np.float32("nan"))) == 0x7FC0
    vals = np.array([0.0, -1.0, 0.15625, 3.0e38, -1e-30], np.float32)
    bits = T.f32_to_bf16_bits(vals)
    back = T.bf16_bits_to_f32(bits)
    assert np.array_equal(T.f32_to_bf16_bits(back), bits)  # idempotent
    assert np.all(np.abs(back - vals) <= np.abs(vals) * 2 ** -8)


def test_float_bits_refuses_packed():
    with pytest.raises(TypeError, match="not a scalar float type"):
        T.float_bits(T.f16x2, 1.0)


# ---------------------------------------------------------------- operand compatibility
@pytest.mark.parametrize("reg,inst,ok", [
    ("u32", "u32", True), ("s32", "u32", True),   # .u and .s of one size fit each other
    ("b32", "f32", True), ("f32", "b32", True),   # .b fits any type of its size
    ("f32", "u32", False), ("u32", "f32", False),  # floats take float registers only
    ("u64", "u32", False), ("u16", "u32", False),  # sizes must agree
    ("f16", "b16", True), ("f16x2", "b32", True), ("bf16", "f16", False),
    ("pred", "pred", True), ("pred", "b32", False), ("u32", "pred", False)])
def test_compatible(reg, inst, ok):
    assert T.compatible(T.by_name(reg), T.by_name(inst)) is ok


@pytest.mark.parametrize("t,moved", [
    ("f16", "b16"), ("bf16", "b16"), ("f16x2", "b32"), ("bf16x2", "b32"), ("tf32", "b32"),
    ("f32", "f32"), ("u16", "u16"), ("pred", "pred")])
def test_move_type(t, moved):
    assert T.move_type(T.by_name(t)).name == moved


def test_register_prefixes_are_distinct_and_generated_names_match():
    from ptxdsl.core.emit import decl_type
    by_prefix = {}
    for name, prefix in T.REG_PREFIX.items():
        # types that share a prefix share one declaration (.reg .b32 %r<N> holds u32 and s32)
        by_prefix.setdefault(prefix, set()).add(decl_type(T.by_name(name)))
    assert all(len(v) == 1 for v in by_prefix.values()), by_prefix
    for name, prefix in T.REG_PREFIX.items():
        m = GENERATED_NAME.match(f"{prefix}12")
        assert m and m.group(1) == prefix, (name, prefix)
    assert "u8" not in T.REG_PREFIX  # PTX has no 8-bit registers
