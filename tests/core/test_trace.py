"""The tracer: one builder per trace (never process-global), register naming, finishing."""
from __future__ import annotations

import threading

import pytest

from ptxdsl.core import ir
from ptxdsl import kernel, ptx, reg
from ptxdsl.core.errors import IsaError, TraceError
from ptxdsl.core.trace import Builder, current
from ptxdsl.core.types import f32, pred, u16, u32, u64, u8


def test_no_builder_outside_a_trace():
    with pytest.raises(TraceError, match="must run inside a @kernel body"):
        current("this")


def test_builder_is_active_only_inside_its_context():
    b = Builder("k", "sm_80")
    with b.active():
        assert current() is b
        inner = Builder("j", "sm_80")
        with inner.active():
            assert current() is inner
        assert current() is b
    with pytest.raises(TraceError):
        current()


def test_tracing_a_kernel_inside_another_trace_keeps_them_apart():
    @kernel()
    def inner():
        reg.scalar(u32, init=1)

    seen = []

    @kernel()
    def outer():
        a = reg.scalar(u32, init=2)
        seen.append(inner.ptx())   # a nested trace with its own builder and counters
        ptx.inst.add.u32(a, a, 1)  # still recorded into outer
    text = outer.ptx()
    assert "mov.u32 %r0, 1;" in seen[0] and "add.u32" not in seen[0]
    assert "mov.u32 %r0, 2;" in text and "add.u32 %r0, %r0, 1;" in text


def test_counters_start_over_in_every_trace():
    def body():
        reg.scalar(f32, init=0.0)
    a, b = kernel()(body), kernel(arch="sm_80")(body)
    assert "mov.f32 %f0, 0f00000000;" in a.ptx() and "mov.f32 %f0, 0f00000000;" in b.ptx()


def test_traces_in_threads_do_not_interfere():
    def body():
        acc = reg.scalar(u32, init=0)
        for i in range(50):
            acc += i
    want = kernel()(body).ptx()
    out, errors = [], []

    def work():
        try:
            out.append(kernel()(body).ptx())
        except Exception as e:  # pragma: no cover
            errors.append(e)
    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and out == [want] * 8


def test_registers_have_no_8_bit_form():
    b = Builder("k", "sm_80")
    with b.active(), pytest.raises(TraceError, match="PTX has no 8-bit registers"):
        b.new_reg(u8)


def test_inst_validates_and_counts_writes():
    b = Builder("k", "sm_80")
    with b.active():
        a = b.new_reg(u32)
        instr = b.inst(["add", "u32"], (a, 1, 2))
        assert instr.opcode == "add.u32" and b.writes[a] == 1
        assert b.body == [instr]
        with pytest.raises(IsaError, match="takes 3 operands"):
            b.inst(["add", "u32"], (a, 1))
        assert b.body == [instr]  # a refused instruction is not recorded


def test_build_does_not_record():
    b = Builder("k", "sm_80")
    with b.active():
        a = b.new_reg(u32)
        b.build(["mov", "u32"], (a, 3))
        assert b.body == [] and not b.writes


def test_guard_must_be_a_predicate():
    b = Builder("k", "sm_80")
    with b.active():
        a = b.new_reg(u32)
        with pytest.raises(IsaError, match="pred= must be a predicate register"):
            b.inst(["mov", "u32"], (a, 3), guard=a)


def test_finish_drops_unmentioned_registers_and_numbers_densely():
    b = Builder("k", "sm_80")
    with b.active():
        unused = b.new_reg(u32)
        x = b.new_reg(u32)
        named = b.new_reg(u32, "count")
        y = b.new_reg(u64)
        b.inst(["mov", "u32"], (x, 1))
        b.inst(["mov", "u32"], (named, 2))
        b.inst(["cvt", "u64", "u32"], (y, x))
    prog = b.finish()
    assert [r.name for r in prog.regs] == ["r0", "count", "rd0"]
    assert prog.regs == [x, named, y]  # outside a trace, == on registers is identity
    assert (x.name, named.name, y.name) == ("r0", "count", "rd0")
    assert unused not in prog.regs


def test_finish_resolves_deferred_instructions_by_use():
    b = Builder("k", "sm_80")
    with b.active():
        a = b.new_reg(u32)
        b.inst(["mov", "u32"], (a, 1))
        m = ir.Instr  # noqa: F841 - the deferred node below decides at finish()
        calls = []

        def resolve(used):
            calls.append(a in used)
            return []
        node = ir.Deferred(resolve)
        b.append(node)
        b.inst(["add", "u32"], (a, a, 1))
    prog = b.finish()
    assert calls == [True]
    assert [i.opcode for i in prog.walk()] == ["mov.u32", "add.u32"]


def test_finish_sets_version_from_the_features_used():
    b = Builder("k", "sm_80")
    with b.active():
        a = b.new_reg(u32)
        b.inst(["ld", "shared::cta", "u32"], (a, ir.Addr(a)))
    assert b.finish().ptx_version == (7, 8)


def test_region_stack():
    b = Builder("k", "sm_80")
    with b.active():
        p = b.new_reg(pred)
        node = ir.If(p)
        b.append(node)
        with b.region(node.then_body):
            x = b.new_reg(u16)
            b.inst(["mov", "u16"], (x, 1))
        assert b.last_node is node and len(node.then_body) == 1
