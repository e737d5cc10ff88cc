"""Validation that ptxas never contradicts: each root cause a random-program search found.

Refusals must name this file's marked line (``# <- name``) and say what would be
right; forms that ptxas accepts must trace and, where ptxas is installed, assemble.
"""
from __future__ import annotations

import os
import re

import pytest

import located
from ptxdsl import PtxdslError, kernel, ptx, reg, smem, toolchain
from ptxdsl.core.errors import OperandTypeError, TraceError
from ptxdsl.core.types import f32, f64, pred, u16, u32, u64

HERE = os.path.abspath(__file__)
PTXAS = toolchain.find_ptxas()
needs_ptxas = pytest.mark.skipif(PTXAS is None, reason="no ptxas found")


line_of = located.marked_lines(HERE, "# <- ")


def refused(body, exc, marker, *must_say, arch="sm_90a"):
    k = kernel(arch=arch)(body)
    with pytest.raises(exc) as info:
        k.ptx()
    err = info.value
    assert isinstance(err, PtxdslError)
    assert err.loc is not None and os.path.abspath(err.loc.file) == HERE, str(err)
    assert err.loc.line == line_of(marker), str(err)
    for phrase in must_say:
        assert re.search(phrase, str(err)), f"{phrase!r} not in: {err}"
    return err


def accepted(body, *lines, arch="sm_90a"):
    """Traces, prints ``lines`` and (with ptxas) assembles."""
    k = kernel(arch=arch)(body)
    text = k.ptx()
    for line in lines:
        assert line in text, f"{line!r} not in:\n{text}"
    if PTXAS is not None:
        k.check()
    return text


# ---------------------------------------------------------------- special registers
def test_special_register_only_as_movs_source():
    def body():
        r = reg.scalar(u32)
        ptx.inst.add.u32(r, ptx.special.tid.x(), 1)  # <- special-add
    refused(body, OperandTypeError, "special-add", r"%tid\.x can only be read by mov",
            r"reg\.scalar\(u32, init=ptx\.special\.tid\.x\(\)\)")

    def body2():
        r = reg.scalar(u32)
        ptx.inst.shfl.sync.idx.b32(r, ptx.special.laneid(), 0, 31, -1)  # <- special-shfl
    refused(body2, OperandTypeError, "special-shfl", "only be read by mov")

    def fine():
        r = reg.scalar(u32, init=ptx.special.tid.x())
        t = ptx.special.tid.x() + 1   # the operator moves it into a register first
        ptx.inst.add.u32(r, r, t)
    accepted(fine, "mov.u32 %r0, %tid.x;")


def test_shared_symbol_only_as_movs_source():
    def body():
        buf = smem.alloc(u32, 4)
        r = reg.scalar(u32)
        ptx.inst.add.u32(r, buf.__ptx_addr__().base, 4)  # <- symbol-add
    refused(body, OperandTypeError, "symbol-add", "can only be taken by mov")


# ---------------------------------------------------------------- address widths and spaces
def test_32_bit_register_is_not_a_generic_or_global_address():
    def body():
        buf = smem.alloc(u64, 1)
        base = buf.base if hasattr(buf, "base") else reg.scalar(u32, init=0)
        ptx.inst.mbarrier.init.b64(ptx.addr(base), 32)  # <- generic-32
    refused(body, OperandTypeError, "generic-32", r"32-bit register",
            r"generic addresses are 64-bit", r"cvta\.shared\.u64")

    def body2():
        a = reg.scalar(u32, init=0)
        d = reg.scalar(f32)
        ptx.inst.ld.global_.f32(d, ptx.addr(a))  # <- global-32
    refused(body2, OperandTypeError, "global-32", r"\.global addresses are 64-bit")


def test_32_bit_shared_addresses_stay_allowed():
    def body():
        a = reg.scalar(u32, init=0)
        d = reg.scalar(f32)
        ptx.inst.ld.shared.f32(d, ptx.addr(a))
        ptx.inst.mbarrier.init.shared.b64(ptx.addr(a, 8), 32)
        wide = reg.scalar(u64, init=0)
        ptx.inst.cp.async_.ca.shared.global_(ptx.addr(a), ptx.addr(wide), 4)
    accepted(body, "ld.shared.f32", "mbarrier.init.shared.b64")


def test_param_symbol_is_not_an_mbarrier_address():
    from ptxdsl.core import ir

    def body():
        ptx.inst.mbarrier.init.shared.b64(ir.Addr(ir.Symbol("p_ptr", "param")), 1)  # <- param
    refused(body, OperandTypeError, "param", r"\.param symbol", "ld.param")


def test_shared_symbol_addresses_a_generic_mbarrier():
    def body():
        bar = smem.alloc(u64, 1)
        ptx.inst.mbarrier.init.b64(bar, 1)
    accepted(body, "mbarrier.init.b64 [")


# ---------------------------------------------------------------- cache hints
@pytest.mark.parametrize("space", ["local", "shared", "param"])
def test_l2_cache_hint_only_on_global(space):
    def body():
        pol = ptx.inst.createpolicy.fractional.L2__evict_last.b64(reg.scalar(u64))
        a = reg.scalar(u64, init=0)
        d = reg.scalar(u32)
        getattr(ptx.inst.ld, space).L2__cache_hint.u32(d, ptx.addr(a), pol)  # <- hint-space
    refused(body, TraceError, "hint-space", rf"\.L2::cache_hint applies to \.global.*not \.{space}")


def test_l2_cache_hint_not_with_volatile():
    def body():
        pol = ptx.inst.createpolicy.fractional.L2__evict_last.b64(reg.scalar(u64))
        a = reg.scalar(u64, init=0)
        d = reg.scalar(u32)
        ptx.inst.ld.volatile.global_.L2__cache_hint.u32(d, ptx.addr(a), pol)  # <- volatile
    refused(body, TraceError, "volatile", r"does not combine with \.volatile")


# ---------------------------------------------------------------- register classes
def test_vector_operand_of_mixed_widths():
    def body():
        a = reg.scalar(u64, init=0)
        lo, hi = reg.scalar(u16), reg.scalar(u32)
        ptx.inst.ld.global_.v2.u16([lo, hi], ptx.addr(a))  # <- mixed
    refused(body, OperandTypeError, "mixed", "must all have one width")


def test_sub_word_vector_into_32_bit_registers_is_fine():
    def body():
        a = reg.scalar(u64, init=0)
        x, y = reg.scalar(u32), reg.scalar(u32)
        ptx.inst.ld.global_.v2.u16([x, y], ptx.addr(a))
    accepted(body, "ld.global.v2.u16 {%r0, %r1}")


def test_float_register_in_a_fixed_b64_slot():
    def body():
        ptx.inst.createpolicy.fractional.L2__evict_last.b64(reg.scalar(f64))  # <- policy
    refused(body, OperandTypeError, "policy", r"\.f64", "integer register")

    def body2():
        bar = smem.alloc(u64, 1)
        state = reg.scalar(f64)
        ptx.inst.mbarrier.arrive.shared.b64(state, bar)  # <- state
    refused(body2, OperandTypeError, "state", "integer register")


# ---------------------------------------------------------------- immediates
def test_out_of_range_f32_immediate():
    def body():
        x = reg.scalar(f32, init=1.0)
        x * 1e39  # <- f32-imm
    refused(body, OperandTypeError, "f32-imm", r"out of the \.f32 range")

    def body2():
        reg.scalar(f32, init=1e39)  # <- f32-init
    refused(body2, OperandTypeError, "f32-init", r"out of the \.f32 range")

    def body3():
        x = reg.scalar(f64, init=1.0)
        x + 10 ** 400  # <- huge-int
    refused(body3, OperandTypeError, "huge-int", "too large")


def test_infinity_and_f32_max_are_fine():
    def body():
        x = reg.scalar(f32, init=float("inf"))
        x + 3.4028234663852886e38
    accepted(body, "0f7F800000", "0f7F7FFFFF")


def test_minus_one_on_unsigned_operands():
    def body():
        v = reg.scalar(u32, init=5)
        d = reg.scalar(u32)
        ptx.inst.shfl.sync.bfly.b32(d, v, 1, 31, -1)
        ptx.inst.add.u32(d, d, -1)
    accepted(body, "0xffffffff;", "add.u32 %r1, %r1, 0xffffffff;")


# ---------------------------------------------------------------- false refusals
def test_mad_hi_sat_s32():
    from ptxdsl.core.types import s32

    def body():
        a = reg.scalar(s32, init=3)
        ptx.inst.mad.hi.sat.s32(a, a, a, a)
    accepted(body, "mad.hi.sat.s32")


@pytest.mark.parametrize("src", ["u16", "u64", "s16", "s64", "b32", "f64", "f16"])
def test_set_with_other_source_types(src):
    from ptxdsl.core.types import ALL_TYPES
    t = ALL_TYPES[src]

    def body():
        a = reg.scalar(t, init=1)
        d = reg.scalar(u32)
        ptx.inst("set.eq.u32." + src, d, a, a)
    accepted(body, f"set.eq.u32.{src}")


def test_set_destination_stays_u32_s32_f32():
    def body():
        a = reg.scalar(u64, init=1)
        d = reg.scalar(u64)
        ptx.inst.set.eq.u64.u64(d, a, a)  # <- set-dst
    refused(body, TraceError, "set-dst", r"set writes \.u32, \.s32 or \.f32")


def test_try_wait_suspend_time_hint():
    def body():
        bar = smem.alloc(u64, 1)
        ok = reg.scalar(pred)
        ptx.inst.mbarrier.try_wait.parity.shared.b64(ok, bar, 0, 1000)
        state = reg.scalar(u64, init=0)
        ptx.inst.mbarrier.try_wait.shared.b64(ok, bar, state, 200)
        ptx.inst.selp.u32(reg.scalar(u32), 1, 0, ok)   # a poll's result must be read
    accepted(body, ", 0, 1000;", ", 200;")


def test_createpolicy_register_fraction():
    def body():
        frac = reg.scalar(f32, init=0.5)
        ptx.inst.createpolicy.fractional.L2__evict_last.b64(reg.scalar(u64), frac)
    accepted(body, "createpolicy.fractional.L2::evict_last.b64 %rd0, %f0;")


def test_createpolicy_constant_fraction_still_checked():
    def body():
        ptx.inst.createpolicy.fractional.L2__evict_last.b64(reg.scalar(u64), 1.5)  # <- frac
    refused(body, TraceError, "frac", r"out of range")


@pytest.mark.parametrize("frac", [5e-324, 1.0000002, 0.0, -0.5])
def test_createpolicy_fraction_judged_as_the_f32_it_becomes(frac):
    def body():
        ptx.inst.createpolicy.fractional.L2__evict_last.b64(reg.scalar(u64), frac)  # <- f32frac
    refused(body, TraceError, "f32frac", r"out of range")


def test_createpolicy_fraction_rounding_to_one_is_fine():
    def body():
        ptx.inst.createpolicy.fractional.L2__evict_last.b64(reg.scalar(u64), 1.00000001)
    accepted(body, "0f3F800000")


def test_fragment_lists_hold_registers_only():
    def body():
        a = reg.scalar(u64, init=0)
        ptx.inst.stmatrix.sync.aligned.m8n8.x1.shared.b16(ptx.addr(a), [8])  # <- frag-imm
    refused(body, OperandTypeError, "frag-imm", "must be a register")


def test_mbarrier_arrive_count_is_positive():
    def body():
        bar = smem.alloc(u64, 1)
        ptx.inst.mbarrier.arrive.shared.b64(reg.scalar(u64), bar, 0)  # <- count0
    refused(body, TraceError, "count0", r"arrive count is 1 to")
