"""ptxdsl.kernel: how a kernel call picks the GPU or the CPU interpreter."""
from __future__ import annotations

import numpy as np
import pytest

import ptxdsl
from ptxdsl import Tile, kernel, ptx, reg
from ptxdsl.core.types import f32, u32


@kernel(in_specs=(Tile(32, f32),), out_specs=(Tile(32, f32),), block=(32, 1, 1))
def twice(X, Y):
    px, py = ptx.global_ptrs(X, Y)
    t = reg.scalar(u32)
    ptx.inst.mov.u32(t, ptx.special.tid.x())
    a = reg.scalar(f32)
    ptx.inst.ld.global_.f32(a, ptx.addr(px + t * 4))
    ptx.inst.st.global_.f32(ptx.addr(py + t * 4), a + a)


def test_interpret_set_after_the_kernel_is_defined_is_honoured(monkeypatch):
    # The kernel above was defined at import, before this variable existed.
    monkeypatch.setenv("PTXDSL_INTERPRET", "1")
    x = np.arange(32, dtype=np.float32)
    np.testing.assert_array_equal(twice(x), 2 * x)


def test_interpret_wins_over_a_prepared_launcher(monkeypatch):
    calls = []
    monkeypatch.setitem(twice.runtime_cache, "launcher", lambda *a, **k: calls.append(a))
    monkeypatch.setenv("PTXDSL_INTERPRET", "1")
    x = np.ones(32, np.float32)
    np.testing.assert_array_equal(twice(x), 2 * x)
    assert calls == []
    monkeypatch.setenv("PTXDSL_INTERPRET", "0")
    twice(x)
    assert len(calls) == 1


@pytest.mark.parametrize("value,expect", [("1", True), ("yes", True), ("0", False),
                                          ("", False), ("off", False), ("false", False)])
def test_interpret_requested_reads_the_environment_each_time(monkeypatch, value, expect):
    monkeypatch.setenv("PTXDSL_INTERPRET", value)
    assert ptxdsl.interpret_requested() is expect
