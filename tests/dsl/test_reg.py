"""Register operators: each emits exactly the instruction(s) the table in reg.py's docstring
states, and nothing else.
"""
from __future__ import annotations

import pytest

from ptx_lines import after, body_lines
from ptxdsl import Tile, kernel, ptx, reg
from ptxdsl.core.errors import OperandTypeError, TraceError
from ptxdsl.core.types import bf16, f16, f32, f64, pred, s32, s64, u16, u32, u64


def tid_reg():
    t = reg.scalar(u32)
    ptx.inst.mov.u32(t, ptx.special.tid.x())
    return t


# ---------------------------------------------------------------- integer products
def test_u32_times_int_used_as_pointer_offset_is_mul_wide():
    def body(X):
        (px,) = ptx.global_ptrs(X)
        t = tid_reg()
        off = t * 4
        v = reg.scalar(f32)
        ptx.inst.ld.global_.f32(v, ptx.addr(px + off))
    lines = after(body_lines(body, tiles=(Tile(64, f32),)), "mov.u32 %r0, %tid.x")
    assert lines[1:4] == ["mul.wide.u32 %rd2, %r0, 4;", "add.u64 %rd3, %rd1, %rd2;",
                          "ld.global.f32 %f0, [%rd3];"]
    assert not any(x.startswith("mul.lo") for x in lines)


def test_u32_times_int_used_as_32_bit_is_mul_lo():
    def body():
        t = tid_reg()
        x = t * 12
        y = x + 1
        ptx.inst.add.u32(y, y, x)
    lines = after(body_lines(body), "mov.u32 %r0, %tid.x")
    assert lines[1:3] == ["mul.lo.u32 %r1, %r0, 12;", "add.u32 %r2, %r1, 1;"]
    assert not any("mul.wide" in x for x in lines)


def test_u32_product_used_both_ways_emits_both():
    def body(X):
        (px,) = ptx.global_ptrs(X)
        t = tid_reg()
        off = t * 4
        lane = off + 1
        ptx.inst.st.global_.u32(ptx.addr(px + off), lane)
    lines = after(body_lines(body, tiles=(Tile(64, u32),)), "mov.u32 %r0, %tid.x")
    assert lines[1:3] == ["mul.lo.u32 %r1, %r0, 4;", "mul.wide.u32 %rd2, %r0, 4;"]


def test_unused_product_emits_nothing():
    def body():
        t = tid_reg()
        t * 4
    assert not any(x.startswith("mul") for x in body_lines(body))


def test_signed_product_is_mul_wide_s32_for_pointers():
    def body(X):
        (px,) = ptx.global_ptrs(X)
        i = reg.scalar(s32, init=-2)
        v = reg.scalar(f32)
        ptx.inst.ld.global_.f32(v, ptx.addr(px + i * 4))
    assert "mul.wide.s32 %rd2, %r0, 4;" in body_lines(body, tiles=(Tile(64, f32),))


def test_register_times_register_and_reflected_int():
    def body():
        a, b = reg.scalar(u32, init=3), reg.scalar(u32, init=5)
        c = a * b
        d = 7 * a
        ptx.inst.add.u32(c, c, d)
    lines = body_lines(body)
    assert "mul.lo.u32 %r2, %r0, %r1;" in lines
    assert "mul.lo.u32 %r3, %r0, 7;" in lines


def test_64_bit_product_is_mul_lo_u64():
    def body():
        a = reg.scalar(u64, init=3)
        b = a * 8
        ptx.inst.add.u64(b, b, 1)
    assert "mul.lo.u64 %rd1, %rd0, 8;" in body_lines(body)


def test_in_place_multiply_is_mul_lo():
    def body():
        a = reg.scalar(u32, init=3)
        a *= 8
    assert body_lines(body)[-1] == "mul.lo.u32 %r0, %r0, 8;"


def test_product_overwritten_before_pointer_use_is_widened_with_cvt():
    """After ``off += 1`` the wide product no longer equals ``off``: widen the new value."""
    def body(X):
        (px,) = ptx.global_ptrs(X)
        t = tid_reg()
        off = t * 4
        off += 4
        v = reg.scalar(f32)
        ptx.inst.ld.global_.f32(v, ptx.addr(px + off))
    lines = after(body_lines(body, tiles=(Tile(64, f32),)), "mov.u32 %r0, %tid.x")
    assert lines[1:5] == ["mul.lo.u32 %r1, %r0, 4;", "add.u32 %r1, %r1, 4;",
                          "cvt.u64.u32 %rd2, %r1;", "add.u64 %rd3, %rd1, %rd2;"]


# ---------------------------------------------------------------- mixed widths
def test_u64_plus_u32_widens_with_cvt():
    def body():
        a = reg.scalar(u64, init=1)
        b = reg.scalar(u32, init=2)
        a + b
    assert body_lines(body)[-2:] == ["cvt.u64.u32 %rd1, %r0;", "add.u64 %rd2, %rd0, %rd1;"]


def test_s64_plus_s32_widens_signed():
    def body():
        a = reg.scalar(s64, init=1)
        b = reg.scalar(s32, init=-2)
        b + a
    assert body_lines(body)[-2:] == ["cvt.s64.s32 %rd1, %r0;", "add.s64 %rd2, %rd1, %rd0;"]


def test_pointer_in_place_add():
    def body(X):
        (px,) = ptx.global_ptrs(X)
        px += 16
        t = tid_reg()
        px += t
    lines = body_lines(body, tiles=(Tile(64, f32),))
    assert "add.u64 %rd1, %rd1, 16;" in lines
    assert lines[-2:] == ["cvt.u64.u32 %rd2, %r0;", "add.u64 %rd1, %rd1, %rd2;"]


def test_in_place_cannot_narrow():
    def body():
        a = reg.scalar(u32, init=1)
        b = reg.scalar(u64, init=2)
        a += b
    with pytest.raises(OperandTypeError, match=r"cannot write a 64-bit result into %r0"):
        kernel()(body).ptx()


# ---------------------------------------------------------------- the arithmetic table
@pytest.mark.parametrize("expr,want", [
    (lambda a, b: a + b, "add.u32 %r2, %r0, %r1;"),
    (lambda a, b: a - b, "sub.u32 %r2, %r0, %r1;"),
    (lambda a, b: a // b, "div.u32 %r2, %r0, %r1;"),
    (lambda a, b: a % b, "rem.u32 %r2, %r0, %r1;"),
    (lambda a, b: a & b, "and.b32 %r2, %r0, %r1;"),
    (lambda a, b: a | b, "or.b32 %r2, %r0, %r1;"),
    (lambda a, b: a ^ b, "xor.b32 %r2, %r0, %r1;"),
    (lambda a, b: a << b, "shl.b32 %r2, %r0, %r1;"),
    (lambda a, b: a >> b, "shr.u32 %r2, %r0, %r1;"),
    (lambda a, b: a < b, "setp.lt.u32 %p0, %r0, %r1;"),
    (lambda a, b: a <= b, "setp.le.u32 %p0, %r0, %r1;"),
    (lambda a, b: a > b, "setp.gt.u32 %p0, %r0, %r1;"),
    (lambda a, b: a >= b, "setp.ge.u32 %p0, %r0, %r1;"),
    (lambda a, b: a == b, "setp.eq.b32 %p0, %r0, %r1;"),
    (lambda a, b: a != b, "setp.ne.b32 %p0, %r0, %r1;"),
    (lambda a, b: 5 - a, "sub.u32 %r2, 5, %r0;"),
    (lambda a, b: ~a, "not.b32 %r2, %r0;"),
])
def test_u32_operators(expr, want):
    def body():
        a, b = reg.scalar(u32, init=1), reg.scalar(u32, init=2)
        expr(a, b)
    assert body_lines(body)[-1] == want


@pytest.mark.parametrize("expr,want", [
    (lambda a, b: a >> 3, "shr.s32 %r2, %r0, 3;"),
    (lambda a, b: a < b, "setp.lt.s32 %p0, %r0, %r1;"),
    (lambda a, b: -a, "neg.s32 %r2, %r0;"),
    (lambda a, b: abs(a), "abs.s32 %r2, %r0;"),
    (lambda a, b: a // b, "div.s32 %r2, %r0, %r1;"),
])
def test_s32_operators(expr, want):
    def body():
        a, b = reg.scalar(s32, init=-1), reg.scalar(s32, init=2)
        expr(a, b)
    assert body_lines(body)[-1] == want


@pytest.mark.parametrize("dtype,lit", [(f32, "0f3FC00000"), (f64, "0d3FF8000000000000")])
@pytest.mark.parametrize("expr,want", [
    (lambda a, b: a + b, "add.{t} %{p}2, %{p}0, %{p}1;"),
    (lambda a, b: a - b, "sub.{t} %{p}2, %{p}0, %{p}1;"),
    (lambda a, b: a * b, "mul.{t} %{p}2, %{p}0, %{p}1;"),
    (lambda a, b: a / b, "div.rn.{t} %{p}2, %{p}0, %{p}1;"),
    (lambda a, b: a * 1.5, "mul.{t} %{p}2, %{p}0, {lit};"),
    (lambda a, b: -a, "neg.{t} %{p}2, %{p}0;"),
    (lambda a, b: abs(a), "abs.{t} %{p}2, %{p}0;"),
    (lambda a, b: a < b, "setp.lt.{t} %p0, %{p}0, %{p}1;"),
    (lambda a, b: a == b, "setp.eq.{t} %p0, %{p}0, %{p}1;"),
    (lambda a, b: a != b, "setp.neu.{t} %p0, %{p}0, %{p}1;"),
    (lambda a, b: a != 1.5, "setp.neu.{t} %p0, %{p}0, {lit};"),
])
def test_float_operators(expr, want, dtype, lit):
    def body():
        a, b = reg.scalar(dtype, init=1.0), reg.scalar(dtype, init=2.0)
        expr(a, b)
    p = "f" if dtype is f32 else "fd"
    assert body_lines(body)[-1] == want.format(t=dtype.name, p=p, lit=lit)


def test_in_place_float_ops():
    def body():
        a, b = reg.scalar(f32, init=1.0), reg.scalar(f32, init=2.0)
        a += b
        a *= b
        a -= 1.0
        a /= b
    assert body_lines(body)[-4:] == ["add.f32 %f0, %f0, %f1;", "mul.f32 %f0, %f0, %f1;",
                                     "sub.f32 %f0, %f0, 0f3F800000;", "div.rn.f32 %f0, %f0, %f1;"]


def test_half_precision_operators():
    def body():
        a, b = reg.scalar(f16, init=1.0), reg.scalar(f16, init=2.0)
        a + b
        c, d = reg.scalar(bf16, init=1.0), reg.scalar(bf16, init=0.5)
        c * d
    lines = body_lines(body)
    assert lines[:2] == ["mov.b16 %h0, 0x3c00;", "mov.b16 %h1, 0x4000;"]
    assert "add.f16 %h2, %h0, %h1;" in lines
    assert lines[-3:] == ["mov.b16 %hb0, 0x3f80;", "mov.b16 %hb1, 0x3f00;",
                          "mul.bf16 %hb2, %hb0, %hb1;"]


def test_predicate_logic():
    def body():
        a = reg.scalar(u32, init=1)
        p, q = a < 3, a > 0
        p & q
        p | q
        p ^ q
        ~p
    assert body_lines(body)[-4:] == ["and.pred %p2, %p0, %p1;", "or.pred %p3, %p0, %p1;",
                                     "xor.pred %p4, %p0, %p1;", "not.pred %p5, %p0;"]


def test_special_registers_are_read_once_per_use():
    def body():
        t = ptx.special.tid.x() + 1
        ptx.inst.add.u32(t, t, 1)
    assert body_lines(body)[:2] == ["mov.u32 %r0, %tid.x;", "add.u32 %r1, %r0, 1;"]


# ---------------------------------------------------------------- refusals
@pytest.mark.parametrize("expr,msg", [
    (lambda a, f: a / 2, r"'/' on integer registers is ambiguous: use '//'"),
    (lambda a, f: a + f, r"cannot add \.u32 and \.f32 registers; convert one with ptx\.cvt"),
    (lambda a, f: f & f, r"cannot and float registers"),
    (lambda a, f: a + 1.5, r"cannot add integer register %r0 and float 1\.5"),
    (lambda a, f: a << -1, r"negative shift amount"),
    (lambda a, f: a + "x", r"cannot add a register and str"),
    (lambda a, f: (a < 1) + (a < 2), r"cannot add predicates"),
])
def test_operator_refusals(expr, msg):
    def body():
        a, f = reg.scalar(u32, init=1), reg.scalar(f32, init=1.0)
        expr(a, f)
    with pytest.raises(OperandTypeError, match=msg):
        kernel()(body).ptx()


def test_half_registers_take_no_python_constants():
    def body():
        h = reg.scalar(f16, init=1.0)
        h + 1.0
    with pytest.raises(OperandTypeError, match=r"PTX has no \.f16 immediates"):
        kernel()(body).ptx()


# ---------------------------------------------------------------- reg.scalar / reg.array
def test_scalar_init_forms():
    def body():
        reg.scalar(u32, init=7)
        reg.scalar(f32, init=0.5)
        reg.scalar(u16, init=3)
        a = reg.scalar(u32, init=1)
        reg.scalar(u64, init=a)       # widened with cvt, then moved
        reg.scalar(u32, init=ptx.special.laneid())
    assert body_lines(body) == ["mov.u32 %r0, 7;", "mov.f32 %f0, 0f3F000000;",
                                "mov.u16 %rs0, 3;", "mov.u32 %r1, 1;", "cvt.u64.u32 %rd0, %r1;",
                                "mov.u64 %rd1, %rd0;", "mov.u32 %r2, %laneid;"]


def test_array_is_declared_together_and_indexed_by_ints():
    def body():
        xs = reg.array(f32, 4)
        for i in range(4):
            xs[i] = float(i)
        assert len(xs) == 4 and xs.dtype is f32
    lines = body_lines(body)
    assert lines == [f"mov.f32 %f{i}, {f32.literal(float(i))};" for i in range(4)]
    text = kernel()(body).ptx()
    assert ".reg .f32 %f<4>;" in text


def test_array_refuses_register_index():
    def body():
        xs = reg.array(f32, 4)
        i = reg.scalar(u32, init=0)
        xs[i]
    with pytest.raises(TraceError, match="indexed by Python ints at trace time"):
        kernel()(body).ptx()


def test_named_registers():
    def body():
        acc = reg.scalar(f32, init=0.0, name="acc")
        acc2 = reg.scalar(f32, init=1.0, name="acc")
        acc + acc2
    text = kernel()(body).ptx()
    assert ".reg .f32 %acc;" in text and ".reg .f32 %acc_1;" in text
    assert "add.f32 %f0, %acc, %acc_1;" in text


@pytest.mark.parametrize("name", ["r3", "f0", "9lives", "a-b", ""])
def test_bad_register_names(name):
    def body():
        reg.scalar(u32, name=name)
    with pytest.raises(TraceError, match="must be a PTX identifier"):
        kernel()(body).ptx()


def test_predicate_cannot_be_initialised_from_a_number():
    def body():
        reg.scalar(pred, init=1)
    with pytest.raises(TraceError, match=r"write a comparison"):
        kernel()(body).ptx()


def test_packed_half_init_splats_the_value():
    from ptxdsl.core.types import bf16x2, f16x2

    def body():
        reg.scalar(f16x2, init=1.0)
        reg.scalar(bf16x2, init=-2.0)
    assert body_lines(body) == ["mov.b32 %hh0, 0x3c003c00;", "mov.b32 %hhb0, 0xc000c000;"]


def test_packed_fp8_init_splats_the_rounded_code():
    """e4m3x2 / e5m2x2 registers (.b16, two codes) take a float initialiser rounded to the
    format and saturated to its finite range, in both bytes (a float initialiser was once
    encoded as bf16 bits and refused as too wide for .b16: hypothesis found it)."""
    from ptxdsl.core.fp8 import fp8_decode
    from ptxdsl.core.types import e4m3x2, e5m2x2

    def body():
        reg.scalar(e4m3x2, init=1.0)
        reg.scalar(e5m2x2, init=-2.0)
        reg.scalar(e4m3x2, init=1000.0)     # past 448: the largest finite code
        reg.scalar(e4m3x2, init=0.3)
    lines = body_lines(body)
    assert lines[:3] == ["mov.b16 %rs0, 0x3838;", "mov.b16 %rs1, 0xc0c0;",
                         "mov.b16 %rs2, 0x7e7e;"]
    code = int(lines[3].split(", ")[1].rstrip(";"), 16)
    assert code >> 8 == code & 0xFF and fp8_decode(code & 0xFF, "e4m3") == 0.3125


def test_tf32_init_is_refused():
    from ptxdsl.core.types import tf32

    def body():
        reg.scalar(tf32, init=1.0)
    with pytest.raises(TraceError, match=r"cvt\.rna\.tf32\.f32"):
        kernel()(body).ptx()
