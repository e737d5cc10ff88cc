"""In a ``style="pyptx"`` kernel a 32-bit product used as a 64-bit offset is ``mul.lo`` +
``cvt`` (pyptx's form) where the trace proves it fits in 32 bits (ptxdsl.dsl.ranges),
``mul.wide`` wherever it might not; plain ptxdsl kernels keep ``mul.wide``."""
from __future__ import annotations

import numpy as np
import pytest

from ptxdsl import Tile, kernel, ptx, reg
from ptxdsl.types import f32, s32, u32


def _copy(offset, *, block=(128, 1, 1), grid=(4, 1, 1), style="pyptx"):
    """y[off] = x[off] for the byte offset ``offset()`` computes (traced in the body)."""
    @kernel(in_specs=(Tile("N", f32),), out_specs=(Tile("N", f32),), block=block, grid=grid,
            style=style)
    def k(X, Y):
        px, py = ptx.global_ptrs(X, Y)
        off = offset()
        v = reg.scalar(f32)
        ptx.inst.ld.global_.f32(v, ptx.addr(px + off))
        ptx.inst.st.global_.f32(ptx.addr(py + off), v)
    return k


def _tid():
    t = reg.scalar(u32)
    ptx.inst.mov.u32(t, ptx.special.tid.x())
    return t


def _narrow(text: str) -> bool:
    assert ("mul.wide" in text) != ("cvt.u64.u32" in text or "cvt.s64.s32" in text), text
    return "mul.wide" not in text


@pytest.mark.parametrize("offset, narrow", [
    (lambda: ((_tid() << 2) + 512) * 4, True),              # < 128 * 4 + 512, times 4
    (lambda: (_tid() & 0xffff) * 4, True),                   # a mask bounds anything
    (lambda: (_tid() >> 1) * 65536, True),
    (lambda: _tid() * (1 << 25), True),                      # 127 * 2**25 < 2**32
    (lambda: _tid() * (1 << 26), False),                     # 127 * 2**26 may not fit
    (lambda: reg.scalar(u32, init=ptx.special.ctaid.x()) * 4, True),   # grid (4, 1, 1)
    (lambda: ptx.param(u32, "N") * 4, False),                # a parameter: unbounded
])
def test_products_that_fit_in_32_bits_widen_after_mul_lo(offset, narrow):
    assert _narrow(_copy(offset).ptx()) is narrow


def test_plain_ptxdsl_kernels_keep_mul_wide():
    assert not _narrow(_copy(lambda: _tid() * 4, style="ptxdsl").ptx())


def test_a_grid_computed_per_launch_leaves_ctaid_unbounded():
    k = _copy(lambda: reg.scalar(u32, init=ptx.special.ctaid.x()) * 4,
              grid=lambda N: (N // 128, 1, 1))
    assert not _narrow(k.ptx())


def test_top_level_writes_in_place_are_followed_in_order():
    def offset(k):
        def f():
            t = _tid()
            ptx.inst.shl.b32(t, t, k)      # in place: the second write sees the first's value
            return t * 4
        return f
    assert _narrow(_copy(offset(2)).ptx())               # 127 << 2, times 4
    assert not _narrow(_copy(offset(24)).ptx())          # 127 << 24 times 4 may not fit


def test_a_register_also_written_inside_a_branch_is_unbounded():
    def offset():
        t = _tid()
        with ptx.if_(ptx.special.tid.x() == 0):
            ptx.inst.shl.b32(t, t, 2)
        return t * 4
    assert not _narrow(_copy(offset).ptx())


def test_a_loop_variable_is_unbounded():
    @kernel(in_specs=(Tile("N", f32),), out_specs=(Tile("N", f32),), block=(32, 1, 1),
            style="pyptx")
    def k(X, Y):
        px, py = ptx.global_ptrs(X, Y)
        for i in ptx.range_(0, 4):
            v = reg.scalar(f32)
            off = i * 4
            ptx.inst.ld.global_.f32(v, ptx.addr(px + off))
            ptx.inst.st.global_.f32(ptx.addr(py + off), v)
    assert "mul.wide.u32" in k.ptx()


def test_signed_products_widen_with_sign_and_run_the_same():
    def offset():
        t = reg.scalar(s32)
        ptx.inst.mov.s32(t, _tid())
        return (t + 3) * 4
    k = _copy(offset, block=(8, 1, 1), grid=(1, 1, 1))
    text = k.ptx()
    assert "mul.lo.s32" in text and "cvt.s64.s32" in text and _narrow(text)
    x = np.arange(16, dtype=np.float32)
    y = k.interpret(x, np.zeros(16, np.float32))
    np.testing.assert_array_equal(y[3:11], x[3:11])


def test_a_label_between_the_writes_leaves_the_register_unbounded():
    def offset():
        t = _tid()
        ptx.label("again")                 # a branch back here would see the shifted value
        ptx.inst.shl.b32(t, t, 2)
        return t * 4
    assert not _narrow(_copy(offset).ptx())
