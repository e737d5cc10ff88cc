"""Triton's PTX on ptxdsl's interpreter: kernels compiled here by Triton (no GPU needed)
are imported with ``ptxdsl.from_ptx`` and run against numpy, and a removed barrier is
reported as a race. Triton is an optional third-party package: these tests skip without it.
"""
from __future__ import annotations


import numpy as np
import pytest

import ptxdsl
from ptxdsl.core.errors import InterpreterError

triton = pytest.importorskip("triton")

from triton_kernels import (  # noqa: E402
    add, atomic_sum, compiled, matmul, row_sum, scratch, softmax)


def test_elementwise_with_masked_vector_loads():
    text, smem, threads = compiled(add, {"x_ptr": "*fp32", "y_ptr": "*fp32",
                                         "out_ptr": "*fp32", "n": "i32",
                                         "BLOCK": "constexpr"}, {"BLOCK": 256})
    k = ptxdsl.from_ptx(text)
    assert [p.type for p in k.params][:4] == ["u64", "u64", "u64", "u32"]
    n = 1000
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    out = np.zeros(n, np.float32)
    k.interpret(x, y, out, n, *scratch(k), grid=-(-n // 256), block=threads, shared=smem)
    np.testing.assert_array_equal(out, x + y)


def _row_sum():
    return compiled(row_sum, {"x_ptr": "*fp32", "out_ptr": "*fp32", "N": "constexpr"},
                    {"N": 256})


def test_reduction_through_shared_memory():
    text, smem, threads = _row_sum()
    k = ptxdsl.from_ptx(text)
    x = np.random.default_rng(1).random((4, 256)).astype(np.float32)
    out = np.zeros(4, np.float32)
    k.interpret(x, out, *scratch(k), grid=4, block=threads, shared=smem)
    np.testing.assert_allclose(out, x.sum(1), rtol=1e-5)


def test_reduction_without_its_barrier_is_a_race_named_at_the_triton_line():
    text, smem, threads = _row_sum()
    assert text.count("bar.sync") == 1
    k = ptxdsl.from_ptx(text.replace("bar.sync", "// bar.sync"))
    x = np.random.default_rng(1).random((4, 256)).astype(np.float32)
    with pytest.raises(InterpreterError, match="data race") as e:
        k.interpret(x, np.zeros(4, np.float32), *scratch(k), grid=4, block=threads,
                    shared=smem)
    assert "triton_kernels.py" in str(e.value)   # the .loc line of the kernel's source


def test_atomic_add_with_scope():
    text, smem, threads = compiled(atomic_sum, {"x_ptr": "*fp32", "out_ptr": "*fp32",
                                                "n": "i32", "BLOCK": "constexpr"},
                                   {"BLOCK": 128})
    assert "atom.global" in text or "red.global" in text
    k = ptxdsl.from_ptx(text)
    x = np.arange(300, dtype=np.float32)
    out = np.zeros(1, np.float32)
    k.interpret(x, out, 300, *scratch(k), grid=3, block=threads, shared=smem)
    assert out[0] == x.sum()


@pytest.mark.parametrize("cc,marker", [(80, "mma.sync"), (90, "wgmma")])
def test_dot_product_loop(cc, marker):
    text, smem, threads = compiled(
        matmul, {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp32", "M": "i32", "N": "i32",
                 "K": "i32", "BM": "constexpr", "BN": "constexpr", "BK": "constexpr"},
        {"BM": 64, "BN": 64, "BK": 32}, cc=cc)
    assert marker in text
    k = ptxdsl.from_ptx(text)
    rng = np.random.default_rng(cc)
    M, N, K = 64, 128, 64
    a = rng.integers(-4, 5, (M, K)).astype(np.float16)
    b = rng.integers(-4, 5, (K, N)).astype(np.float16)
    c = np.zeros((M, N), np.float32)
    k.interpret(a, b, c, M, N, K, *scratch(k), grid=(M // 64, N // 64), block=threads,
                shared=smem)
    np.testing.assert_array_equal(c, a.astype(np.float32) @ b.astype(np.float32))


def test_online_softmax_loop():
    text, smem, threads = compiled(softmax, {"x_ptr": "*fp32", "out_ptr": "*fp32",
                                             "N": "i32", "BLOCK": "constexpr"}, {"BLOCK": 128})
    k = ptxdsl.from_ptx(text)
    x = np.random.default_rng(2).standard_normal((3, 300)).astype(np.float32)
    out = np.zeros_like(x)
    k.interpret(x, out, 300, *scratch(k), grid=3, block=threads, shared=smem)
    e = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
    np.testing.assert_allclose(out, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_triton_ptx_is_a_fixed_point_of_canonical_emission():
    text, _, _ = _row_sum()
    once = ptxdsl.parse_ptx(text).emit()
    assert ptxdsl.parse_ptx(once).emit() == once
