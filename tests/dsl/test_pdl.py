"""Programmatic dependent launch on the CPU: ``kernel(pdl=True)``, its griddepcontrol
instructions, the trace's check that such a kernel waits somewhere, and the
interpreter's check that every thread waits before it touches global memory."""
from __future__ import annotations

import numpy as np
import pytest

import located
from ptxdsl import Tile, kernel, ptx, reg
from ptxdsl.core.errors import TraceError
from ptxdsl.isa import lookup
from ptxdsl.core.types import f32, u32
from runtime_kernels import build_pdl_vadd

line_of, raises_at = located.for_file(__file__)


def test_the_wait_and_the_trigger_are_emitted_and_run():
    k = build_pdl_vadd("pdl_emit")
    text = k.compile().ptx
    assert text.index("griddepcontrol.wait;") < text.index("ld.global.f32")
    assert "griddepcontrol.launch_dependents;" in text
    a, b = np.arange(300, dtype=np.float32), np.full(300, 0.5, np.float32)
    np.testing.assert_array_equal(k.interpret(a, b), a + b)


def test_the_table_says_which_one_waits():
    assert "grid_wait" in lookup("griddepcontrol.wait").effects
    assert "grid_wait" not in lookup("griddepcontrol.launch_dependents").effects


def test_a_pdl_kernel_that_never_waits_is_refused():
    with pytest.raises(TraceError, match=r"pdl=True .* never executes griddepcontrol.wait"):
        build_pdl_vadd("pdl_none", wait="none").compile()


def test_pdl_needs_hopper_and_a_bool():
    with pytest.raises(TraceError, match="pdl=True needs sm_90"):
        kernel(block=(32, 1, 1), arch="sm_80", pdl=True)(lambda: None)
    with pytest.raises(TraceError, match="pdl is True or False"):
        kernel(block=(32, 1, 1), pdl=1)(lambda: None)


def test_a_read_before_the_wait_is_an_interpreter_error():
    a = np.ones(64, np.float32)
    with pytest.raises(Exception, match=r"global memory read before griddepcontrol.wait"):
        build_pdl_vadd("pdl_late", wait="after_load").interpret(a, a)


def _store_then_wait(wait_first: bool):
    @kernel(out_specs=(Tile(32, f32),), block=(32, 1, 1), arch="sm_90a", pdl=True)
    def store(Y):
        (py,) = ptx.global_ptrs(Y)
        tid = reg.scalar(u32)
        ptx.inst.mov.u32(tid, ptx.special.tid.x())
        if wait_first:
            ptx.inst.griddepcontrol.wait()
        ptx.inst.st.global_.f32(ptx.addr(py + tid * 4), reg.scalar(f32, init=1.0))  # early st
        ptx.inst.griddepcontrol.wait()
    return store


def test_a_write_before_the_wait_names_the_users_line():
    np.testing.assert_array_equal(_store_then_wait(True).interpret(), np.ones(32, np.float32))
    with raises_at("early st", r"global memory write before griddepcontrol.wait",
                   r"pdl=True"):
        _store_then_wait(False).interpret()


def test_a_kernel_without_pdl_may_wait_anywhere():
    """griddepcontrol.wait in a plainly launched kernel waits for nothing: no check."""
    @kernel(out_specs=(Tile(32, f32),), block=(32, 1, 1), arch="sm_90a")
    def plain(Y):
        (py,) = ptx.global_ptrs(Y)
        tid = reg.scalar(u32)
        ptx.inst.mov.u32(tid, ptx.special.tid.x())
        ptx.inst.st.global_.f32(ptx.addr(py + tid * 4), reg.scalar(f32, init=2.0))
        ptx.inst.griddepcontrol.wait()
    np.testing.assert_array_equal(plain.interpret(), np.full(32, 2.0, np.float32))


def test_raw_lines_are_not_looked_into():
    """The escape hatch: a kernel whose wait is a ptx.raw line traces (its threads are
    then checked by nothing the interpreter could see)."""
    @kernel(block=(32, 1, 1), arch="sm_90a", pdl=True)
    def raw():
        ptx.raw("griddepcontrol.wait;")
    assert "griddepcontrol.wait;" in raw.compile().ptx
