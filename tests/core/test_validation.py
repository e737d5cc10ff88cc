"""Trace-time validation: one test per error the core issue lists.

Each test writes the mistake in a tiny kernel and asserts that the error
(a) is a PtxdslError (TypeError for truth-testing a register, which is both),
(b) names this file and the line of the offending DSL call, and
(c) says what would be right.

The offending lines carry a ``# <- name`` marker; ``line_of`` finds them, so the
tests do not depend on line numbers.
"""
from __future__ import annotations

import os
import re

import pytest

import located
from ptxdsl import PtxdslError, Tile, kernel, ptx, reg, smem
from ptxdsl.core.errors import ArchError, IsaError, OperandTypeError, TraceError
from ptxdsl.core.types import bf16, f32, pred, u32

HERE = os.path.abspath(__file__)


line_of = located.marked_lines(HERE, "# <- ")


def raises_at(kern, exc, marker: str, *must_say: str, arch: str | None = None):
    """Trace ``kern`` and check the error type, its file:line and its advice."""
    with pytest.raises(exc) as info:
        kern.ptx(arch)
    err = info.value
    text = str(err)
    line = line_of(marker)
    assert f"{HERE}:{line}:" in text, f"expected {HERE}:{line} in: {text}"
    if isinstance(err, PtxdslError):
        assert err.loc is not None and os.path.abspath(err.loc.file) == HERE
        assert err.loc.line == line
    for phrase in must_say:
        assert re.search(phrase, text), f"{phrase!r} not in: {text}"
    return err


def k1(fn, arch="sm_90a"):
    """A one-thread kernel around ``fn`` (no tensors)."""
    return kernel(arch=arch)(fn)


# ---------------------------------------------------------------- opcode and modifiers
def test_unknown_opcode():
    def body():
        a = reg.scalar(f32, init=1.0)
        ptx.inst.fmaa.rn.f32(a, a, a, a)  # <- unknown-opcode
    raises_at(k1(body), IsaError, "unknown-opcode", r"unknown PTX instruction 'fmaa'",
              r"did you mean fma")


def test_unknown_modifier():
    def body():
        a = reg.scalar(f32)
        p = reg.scalar(u32, init=0)
        ptx.inst.ld.glbal.f32(a, ptx.addr(p))  # <- unknown-modifier
    raises_at(k1(body), IsaError, "unknown-modifier", r"unknown modifier \.glbal",
              r"did you mean \.global", r"ld accepts")


def test_modifier_in_wrong_order():
    def body():
        a = reg.array(f32, 4)
        p = reg.scalar(u32, init=0)
        ptx.inst.ld.v4.global_.f32(list(a), ptx.addr(p))  # <- wrong-order
    raises_at(k1(body), IsaError, "wrong-order",
              r"\.global \(space\) must come before \.v4 \(vec\)", r"PTX order for ld is")


def test_two_modifiers_of_one_group():
    def body():
        a = reg.scalar(f32, init=1.0)
        ptx.inst.add.rn.rz.f32(a, a, a)  # <- same-group
    raises_at(k1(body), IsaError, "same-group", r"\.rn and \.rz are both rounding modifiers",
              r"at most one of \.rn, \.rz, \.rm, \.rp")


def test_modifier_that_needs_another():
    def body():
        a = reg.scalar(u32)
        p = reg.scalar(u32, init=0)
        ptx.inst.ld.relaxed.global_.u32(a, ptx.addr(p))  # <- needs-scope
    raises_at(k1(body), IsaError, "needs-scope", r"\.relaxed needs a scope")


def test_type_the_instruction_does_not_take():
    def body():
        h = reg.scalar(u32)
        p = reg.scalar(u32, init=0)
        ptx.inst.ld.shared.f16(h, ptx.addr(p))  # <- half-load
    raises_at(k1(body), IsaError, "half-load", r"\.f16 is not a type ld takes",
              r"write ld\.shared\.b16")


# ---------------------------------------------------------------- operands
def test_wrong_operand_count():
    def body():
        a = reg.scalar(f32, init=1.0)
        ptx.inst.add.f32(a, a)  # <- operand-count
    raises_at(k1(body), IsaError, "operand-count",
              r"add\.f32 takes 3 operands \(dest \.f32, src \.f32, src \.f32\), got 2")


def test_operand_type_mismatch():
    def body():
        a = reg.scalar(f32, init=1.0)
        i = reg.scalar(u32, init=3)
        ptx.inst.add.f32(a, a, i)  # <- type-mismatch
    err = raises_at(k1(body), OperandTypeError, "type-mismatch",
                    r"operand 2 of add\.f32: register %r0 is \.u32 but add\.f32 needs \.f32",
                    r"convert it with cvt \(ptx\.cvt\(f32, x\)\)")
    assert isinstance(err, TypeError) and isinstance(err, PtxdslError)


def test_64_bit_operand_from_a_32_bit_register():
    def body():
        i = reg.scalar(u32, init=3)
        d = reg.scalar(f32)
        ptx.inst.ld.shared.f32(d, ptx.addr(i))
        w = reg.scalar(u32)
        ptx.inst.add.u64(w, i, i)  # <- narrow-64
    raises_at(k1(body), OperandTypeError, "narrow-64", r"needs \.u64", r"widen it first")


def test_immediate_out_of_range():
    def body():
        a = reg.scalar(u32, init=1)
        ptx.inst.add.u32(a, a, 1 << 40)  # <- imm-range
    raises_at(k1(body), OperandTypeError, "imm-range", r"does not fit in \.u32 \(0\.\.4294967295\)")


def test_vector_width_vs_register_list():
    def body():
        a = reg.array(f32, 3)
        p = reg.scalar(u32, init=0)
        ptx.inst.ld.global_.v4.f32(list(a), ptx.addr(p))  # <- vec-len
    raises_at(k1(body), IsaError, "vec-len",
              r"ld\.global\.v4\.f32 moves 4 values but the register list has 3; pass exactly 4")


def test_register_list_without_vector_modifier():
    def body():
        a = reg.array(f32, 2)
        p = reg.scalar(u32, init=0)
        ptx.inst.ld.global_.f32(list(a), ptx.addr(p))  # <- list-no-vec
    raises_at(k1(body), IsaError, "list-no-vec", r"needs a vector form such as \.v2")


# ---------------------------------------------------------------- targets
def test_instruction_needs_newer_sm():
    def body():
        d = reg.scalar(u32)
        p = reg.scalar(pred)
        ptx.inst.elect.sync(d, p, 0xFFFFFFFF)  # <- too-new
    raises_at(k1(body, arch="sm_80"), ArchError, "too-new",
              r"elect\.sync needs sm_90 or newer, but the kernel targets sm_80",
              r"pass arch='sm_90' \(or newer\) to @kernel")


def test_type_needs_newer_sm():
    def body():
        a = reg.scalar(bf16, init=1.0)
        ptx.inst.add.bf16(a, a, a)  # <- bf16-add
    raises_at(k1(body, arch="sm_80"), ArchError, "bf16-add", r"add\.bf16 needs sm_90")


def test_modifier_needs_newer_sm():
    def body():
        a = reg.scalar(f32, init=1.0)
        ptx.inst.min.NaN.f32(a, a, a)  # <- nan-min
    raises_at(k1(body, arch="sm_75"), ArchError, "nan-min", r"min\.NaN\.f32 needs sm_80")


# ---------------------------------------------------------------- registers and kernels
def test_register_outside_a_kernel():
    with pytest.raises(TraceError) as info:
        reg.scalar(f32)  # <- outside
    assert f"{HERE}:{line_of('outside')}:" in str(info.value)
    assert "must run inside a @kernel body" in str(info.value)


def test_instruction_outside_a_kernel():
    with pytest.raises(TraceError) as info:
        ptx.bar.sync(0)  # <- outside-inst
    assert f"{HERE}:{line_of('outside-inst')}:" in str(info.value)
    assert "ptx.bar.sync records a PTX instruction" in str(info.value)


def test_operator_on_a_register_after_its_trace():
    kept = []

    def body():
        kept.append(reg.scalar(u32, init=1))
    k1(body).ptx()
    with pytest.raises(TraceError) as info:
        kept[0] + 1  # <- stale
    assert f"{HERE}:{line_of('stale')}:" in str(info.value)
    assert "inside a @kernel body" in str(info.value)


def test_register_of_another_kernel():
    kept = []

    def first():
        kept.append(reg.scalar(u32, init=1))

    def second():
        a = reg.scalar(u32, init=2)
        ptx.inst.add.u32(a, a, kept[0])  # <- cross-kernel
    k1(first).ptx()
    raises_at(kernel(name="second")(second), TraceError, "cross-kernel",
              r"belongs to kernel 'first', not to 'second'", r"create it inside this kernel")


def test_shared_array_of_another_kernel():
    kept = []

    def first():
        kept.append(smem.alloc(f32, 4))

    def second():
        i = reg.scalar(u32, init=0)
        kept[0][i] = reg.scalar(f32, init=1.0)  # <- cross-smem
    k1(first).ptx()
    raises_at(k1(second), TraceError, "cross-smem", r"belongs to kernel 'first'")


# ---------------------------------------------------------------- Python truth values
def test_if_on_a_register():
    def body():
        tid = reg.scalar(u32)
        ptx.inst.mov.u32(tid, ptx.special.tid.x())
        if tid < 4:  # <- if-reg
            pass
    err = raises_at(k1(body), TypeError, "if-reg", r"no Python truth value",
                    r"with ptx\.if_\(pred\):")
    assert isinstance(err, PtxdslError)


def test_bool_of_a_predicate():
    def body():
        a = reg.scalar(u32, init=1)
        p = a == 1
        bool(p)  # <- bool-pred
    raises_at(k1(body), TypeError, "bool-pred", r"%p0 has no Python truth value",
              r"ptx\.if_")


def test_register_as_python_int():
    def body():
        a = reg.scalar(u32, init=1)
        for _ in range(a):  # <- range-reg
            pass
    raises_at(k1(body), TypeError, "range-reg", r"ptx\.range_")


def test_python_bool_to_if():
    def body():
        with ptx.if_(3 > 2):  # <- py-bool
            pass
    raises_at(k1(body), TraceError, "py-bool", r"use a plain Python `if`")


# ---------------------------------------------------------------- the messages are errors users can catch
def test_every_error_is_a_ptxdsl_error():
    for cls in (IsaError, OperandTypeError, ArchError, TraceError):
        assert issubclass(cls, PtxdslError)


def test_tile_spec_error_names_the_line():
    with pytest.raises(TraceError) as info:
        Tile(4, 4)  # <- tile
    assert f"{HERE}:{line_of('tile')}:" in str(info.value)


def test_too_much_shared_memory_names_the_alloc_line():
    """ptxas reports shared-memory overflow with no PTX line: check() names the smem.alloc."""
    from ptxdsl.core.errors import ToolchainError
    from ptxdsl.toolchain import find_ptxas
    if find_ptxas() is None:
        pytest.skip("no ptxas found")

    @kernel(in_specs=(Tile(4, f32),), block=(32, 1, 1))
    def big(X):
        buf = smem.alloc(f32, (80000,))  # 320 KB: more than any SM has
        buf[0] = buf[1]

    with pytest.raises(ToolchainError, match="too much shared data") as info:
        big.check()
    src = open(__file__).read().splitlines()
    want = next(i + 1 for i, t in enumerate(src) if "smem.alloc(f32, (80000,))" in t
                and "320 KB" in t)
    assert info.value.loc is not None and info.value.loc.line == want
    assert os.path.samefile(info.value.loc.file, __file__)
