"""Property-based tests of kernels on the CPU interpreter (the recipes of docs/testing.md).

Run with pytest; no GPU is needed. tests/docs/test_docs.py runs these too, so they stay true.
"""
import os
import sys

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ptxdsl import Tile, kernel, ptx, reg
from ptxdsl.core.types import f32, u32

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples", "hopper"))
from softmax import build_softmax, reference  # noqa: E402

N = 1024
SOFTMAX = build_softmax(N)       # traced once; every batch size reuses it


# --8<-- [start:reference]
# Recipe 1: any batch size, any values, against the float64 reference.
rows = hnp.arrays(np.float32, st.tuples(st.integers(1, 8), st.just(N)),
                  elements=st.floats(-60, 60, width=32))


@settings(max_examples=30, deadline=None)
@given(x=rows)
def test_softmax_matches_float64(x):
    y = SOFTMAX.interpret(x)
    ref = reference(x)
    np.testing.assert_allclose(y, ref, rtol=2e-5, atol=1e-7 * ref.max())
# --8<-- [end:reference]


# --8<-- [start:invariants]
# Recipe 2: invariants that need no reference: rows sum to 1, shifting a row changes
# nothing (softmax(x + c) == softmax(x)), and the output is a probability.
@settings(max_examples=30, deadline=None)
@given(x=rows, c=st.floats(-20, 20, width=32))
def test_softmax_invariants(x, c):
    y = SOFTMAX.interpret(x)
    assert np.all(y >= 0) and np.all(y <= 1)
    np.testing.assert_allclose(y.sum(axis=-1), 1.0, rtol=1e-5)
    shifted = SOFTMAX.interpret((x + np.float32(c)).astype(np.float32))
    np.testing.assert_allclose(shifted, y, rtol=1e-4, atol=1e-7)
# --8<-- [end:invariants]


# --8<-- [start:instruction]
# Recipe 3: one instruction's accuracy, through a one-instruction kernel.
@kernel(in_specs=(Tile("N", f32),), out_specs=(Tile("N", f32),),
        grid=lambda N: ((N + 127) // 128, 1, 1), block=(128, 1, 1))
def exp2_approx(X, Y):
    px, py = ptx.global_ptrs(X, Y)
    n = ptx.dim("N")
    cta = reg.scalar(u32); ptx.inst.mov.u32(cta, ptx.special.ctaid.x())
    tid = reg.scalar(u32); ptx.inst.mov.u32(tid, ptx.special.tid.x())
    i = cta * 128 + tid
    with ptx.if_(i < n):
        x = reg.scalar(f32); ptx.inst.ld.global_.f32(x, ptx.addr(px + i * 4))
        y = reg.scalar(f32); ptx.inst.ex2.approx.ftz.f32(y, x)
        ptx.inst.st.global_.f32(ptx.addr(py + i * 4), y)


@settings(max_examples=30, deadline=None)
@given(x=hnp.arrays(np.float32, st.integers(1, 300), elements=st.floats(-100, 100, width=32)))
def test_ex2_approx_relative_error(x):
    y = exp2_approx.interpret(x).astype(np.float64)
    ref = np.exp2(x.astype(np.float64))
    normal = ref > np.finfo(np.float32).tiny          # .ftz flushes subnormal results
    assert np.all(np.abs(y[normal] - ref[normal]) <= 2.0 ** -22 * ref[normal])
# --8<-- [end:instruction]
