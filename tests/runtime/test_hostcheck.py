"""Host inputs are checked as strictly as instructions: launch dimensions, grid functions,
outputs, options, empty calls, and the order of checks on a machine without a GPU."""
from __future__ import annotations

import os

import numpy as np
import pytest

from ptxdsl import Tile, kernel, ptx, reg
from ptxdsl.core.errors import LaunchError, PtxdslError, TraceError
from ptxdsl.runtime import driver as rdriver
from ptxdsl.core.types import f32, u32
from runtime_fakes import vadd_impl
from runtime_kernels import build_vadd

HERE = os.path.abspath(__file__)


def _trivial(**kw):
    def body():
        reg.scalar(u32, init=1)
    return kernel(**kw)(body)


# ---------------------------------------------------------------- launch dimensions
@pytest.mark.parametrize("what,value,hint", [
    ("block", "256", "a string"), ("grid", "128", "a string"),
    ("block", (32.7, 1, 1), "a float"), ("grid", 2.0, "a float"), ("block", True, ""),
    ("grid", (1, "2"), "a string"), ("block", 0, "positive")])
def test_dimensions_must_be_ints(what, value, hint):
    with pytest.raises(TraceError, match=f"{what} must be") as info:
        _trivial(**{what: value})
    assert hint in str(info.value)


def test_numpy_integers_are_dimensions():
    k = _trivial(block=np.int64(64), grid=(np.uint32(3), np.int16(2)))
    assert k.block == (64, 1, 1) and k.grid == (3, 2, 1)
    assert all(type(x) is int for x in k.block + k.grid)


def _vadd_grid(grid):
    @kernel(in_specs=(Tile("N", f32),), out_specs=(Tile("N", f32),), grid=grid,
            block=(32, 1, 1))
    def copy(X, Y):
        px, py = ptx.global_ptrs(X, Y)
        tid = reg.scalar(u32, init=ptx.special.tid.x())
        gid = reg.scalar(u32, init=ptx.special.ctaid.x()) * 32 + tid
        with ptx.if_(gid < ptx.dim("N")):
            v = reg.scalar(f32)
            ptx.inst.ld.global_.f32(v, ptx.addr(px + gid * 4))
            ptx.inst.st.global_.f32(ptx.addr(py + gid * 4), v)
    return copy


def test_grid_function_must_return_ints():
    k = _vadd_grid(lambda N: N / 32)  # true division: a float
    with pytest.raises(TraceError, match=r"must be an int.*integer division"):
        k.interpret(np.ones(64, np.float32))
    ok = _vadd_grid(lambda N: (N + 31) // 32)
    np.testing.assert_array_equal(ok.interpret(np.arange(70, dtype=np.float32)),
                                  np.arange(70, dtype=np.float32))


def test_empty_call_on_the_interpreter():
    k = _vadd_grid(lambda N: (N + 31) // 32)
    out = k.interpret(np.zeros(0, np.float32))
    assert out.shape == (0,)


def test_read_only_output_refused_by_the_interpreter():
    k = _vadd_grid(lambda N: (N + 31) // 32)
    x = np.ones(8, np.float32)
    ro = np.frombuffer(bytes(32), np.float32)  # a view of immutable bytes
    with pytest.raises(LaunchError, match="read-only") as info:
        k.interpret(x, ro)  # <- ro-interp
    assert info.value.loc is not None and info.value.loc.file == HERE


# ---------------------------------------------------------------- the GPU launcher (fake GPU)
def _vadd(gpu):
    k = build_vadd("vadd_host")
    gpu.cu.register(k, vadd_impl)
    return k


def test_read_only_output_refused_by_the_launcher(gpu):
    k = _vadd(gpu)
    a = np.ones(16, np.float32)
    ro = np.frombuffer(bytes(64), np.float32)
    with pytest.raises(LaunchError, match="output C .* read-only"):
        k(a, a, ro)
    assert not ro.any()


@pytest.mark.parametrize("value,msg", [(-5, ">= 0"), ("1024", "must be an int"),
                                       (1.5, "must be an int")])
def test_shared_mem_checked(gpu, value, msg):
    k = _vadd(gpu)
    a = np.ones(16, np.float32)
    with pytest.raises(LaunchError, match=f"shared_mem.*{msg}"):
        k(a, a, shared_mem=value)


def test_launch_errors_name_the_callers_line(gpu):
    k = _vadd(gpu)
    a = np.ones(16, np.float32)
    k(a, a)  # the launcher and its generated call exist now
    with pytest.raises(LaunchError) as info:
        k(a, np.ones(8, np.float32))  # <- mismatch
    line = next(n for n, t in enumerate(open(HERE), 1) if t.rstrip().endswith("# <- mismatch"))
    assert info.value.loc is not None, str(info.value)
    assert (info.value.loc.file, info.value.loc.line) == (HERE, line), str(info.value)
    assert "<ptxdsl" not in str(info.value)


# ---------------------------------------------------------------- no GPU at all
@pytest.fixture
def no_driver(monkeypatch):
    monkeypatch.delenv("PTXDSL_INTERPRET", raising=False)
    monkeypatch.setattr(rdriver, "_driver", None)
    monkeypatch.setattr(rdriver, "_driver_error", ImportError("No module named 'cuda'"))


@pytest.mark.parametrize("call,msg", [
    (lambda k, a: k(a), r"takes 2 input"),
    (lambda k, a: k(a, "x"), r"input B .* is a str, not an array"),
    (lambda k, a: k(a, np.ones(3, np.float64)), r"float32"),
    (lambda k, a: k(a, np.ones(5, np.float32)), r"N"),
    (lambda k, a: k(a, a, np.frombuffer(bytes(16), np.float32)), r"read-only"),
    (lambda k, a: k(a, a, shared_mem=-1), r"shared_mem"),
    (lambda k, a: k(a, a, colour=1), r"unknown keyword"),
])
def test_argument_errors_come_before_the_missing_driver(no_driver, call, msg):
    k = build_vadd("vadd_nodrv")
    with pytest.raises(LaunchError, match=msg):
        call(k, np.ones(4, np.float32))


def test_good_arguments_without_a_driver_report_the_driver(no_driver):
    k = build_vadd("vadd_nodrv2")
    a = np.ones(4, np.float32)
    with pytest.raises(PtxdslError, match="no usable CUDA driver"):
        k(a, a)
