"""bar.warp.sync, activemask, shfl.sync's d|p output, and the ptx.raw escape hatch."""
from __future__ import annotations

import os

import numpy as np
import pytest

from ptxdsl import Tile, kernel, ptx, reg, toolchain
from ptxdsl.core.errors import InterpreterError, TraceError
from ptxdsl.core.types import pred, u32
from warp_kernels import N, lane_kernel, pred_to_u32

HERE = os.path.abspath(__file__)
PTXAS = toolchain.find_ptxas()


def test_shfl_pipe_pred_prints_and_runs():
    def body(tid):
        v = reg.scalar(u32)
        ok = reg.scalar(pred)
        ptx.inst.shfl.sync.down.b32(v, ok, tid, 4, 0x1F, 0xFFFFFFFF)
        return v, ptx.select(ok, 1, 0) if False else pred_to_u32(ok)
    k = lane_kernel(body)
    assert "shfl.sync.down.b32 %r" in k.ptx() and "|%p" in k.ptx()
    v, ok = k.interpret()
    lane = np.arange(N) % 32
    want_ok = lane + 4 <= 31
    np.testing.assert_array_equal(ok, want_ok.astype(np.uint32))
    np.testing.assert_array_equal(v, np.where(want_ok, np.arange(N) + 4, np.arange(N)))
    if PTXAS:
        k.check()


def test_shfl_without_pred_still_plain():
    def body(tid):
        v = reg.scalar(u32)
        ptx.inst.shfl.sync.bfly.b32(v, tid, 1, 31, -1)
        return v, v
    k = lane_kernel(body)
    assert "|" not in [ln for ln in k.ptx().splitlines() if "shfl" in ln][0]
    v, _ = k.interpret()
    np.testing.assert_array_equal(v, np.arange(N) ^ 1)


def test_activemask_and_bar_warp_sync():
    def body(tid):
        m = reg.scalar(u32, init=0)
        with ptx.if_(tid < 40):   # warp 1: lanes 0..7 active
            ptx.inst.activemask.b32(m)
        full = reg.scalar(u32)
        ptx.inst.bar.warp.sync(-1)
        ptx.inst.activemask.b32(full)
        return m, full
    k = lane_kernel(body)
    text = k.ptx()
    assert "activemask.b32" in text and "bar.warp.sync 0xffffffff;" in text
    m, full = k.interpret()
    want = np.where(np.arange(N) < 32, 0xFFFFFFFF, np.where(np.arange(N) < 40, 0xFF, 0))
    np.testing.assert_array_equal(m, want)
    np.testing.assert_array_equal(full, np.full(N, 0xFFFFFFFF))
    if PTXAS:
        k.check()


def test_bar_warp_sync_missing_lanes_is_an_interpreter_error():
    def body(tid):
        with ptx.if_(tid < 16):
            ptx.inst.bar.warp.sync(0xFFFFFFFF)
        return tid, tid
    with pytest.raises(InterpreterError, match="membermask"):
        lane_kernel(body).interpret()


# ---------------------------------------------------------------- ptx.raw
def _raw_kernel():
    @kernel(out_specs=(Tile(1, u32),), arch="sm_90a")
    def k(Y):
        (py,) = ptx.global_ptrs(Y)
        r = reg.scalar(u32)
        ptx.raw("activemask.b32 {};", r)
        ptx.raw("prefetch.global.L2 [{}]", py)  # <- raw-line
        ptx.inst.st.global_.u32(ptx.addr(py), r)
    return k


def test_raw_is_printed_verbatim_and_marked():
    text = _raw_kernel().ptx()
    assert "\tactivemask.b32 %r0;  // unchecked (ptx.raw)" in text
    assert "prefetch.global.L2 [%rd1];" in text


def test_raw_is_listed_by_check():
    if PTXAS is None:
        pytest.skip("no ptxas")
    res = _raw_kernel().check()
    assert len(res.unchecked) == 2
    line = next(n for n, t in enumerate(open(HERE), 1) if t.rstrip().endswith("# <- raw-line"))
    assert res.unchecked[1] == f"{HERE}:{line}: prefetch.global.L2 [{{}}]"


def test_raw_refused_by_the_interpreter():
    with pytest.raises(InterpreterError, match=r"ptx\.raw line .* unchecked PTX.*GPU") as info:
        _raw_kernel().interpret()
    assert info.value.loc is not None and info.value.loc.file == HERE


def test_raw_rejects_bad_calls():
    def k(fn):
        return kernel(arch="sm_90a")(fn)

    with pytest.raises(TraceError, match="placeholder"):
        k(lambda: ptx.raw("nanosleep.u32 100;", reg.scalar(u32, init=1))).ptx()
    with pytest.raises(TraceError, match="one instruction line"):
        k(lambda: ptx.raw("nop;\nnop;")).ptx()
    with pytest.raises(TraceError, match="operands are registers"):
        k(lambda: ptx.raw("nanosleep.u32 {};", 1.5)).ptx()


def test_raw_braces_without_operands_stay_verbatim():
    text = kernel(arch="sm_90a")(lambda: ptx.raw("// {not a placeholder}")).ptx()
    assert "// {not a placeholder};" in text
