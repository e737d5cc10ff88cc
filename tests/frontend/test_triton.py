"""Triton's PTX on ptxdsl's interpreter: kernels compiled here by Triton (no GPU needed)
are imported with ``ptxdsl.from_ptx`` and run against numpy, and a removed barrier is
reported as a race. Triton is an optional third-party package: these tests skip without it.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

import ptxdsl
from ptxdsl.core.errors import InterpreterError

os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")   # Triton's own default, unwarned
triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402


@triton.jit
def add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m),
             mask=m)


@triton.jit
def row_sum(x_ptr, out_ptr, N: tl.constexpr):
    row = tl.program_id(0)
    x = tl.load(x_ptr + row * N + tl.arange(0, N))
    tl.store(out_ptr + row, tl.sum(x, axis=0))


@triton.jit
def atomic_sum(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0)
    tl.atomic_add(out_ptr, tl.sum(x, axis=0), sem="relaxed", scope="gpu")


@triton.jit
def matmul(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :])
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)


@triton.jit
def softmax(x_ptr, out_ptr, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    m = tl.full((), float("-inf"), tl.float32)
    s = tl.zeros((), tl.float32)
    for start in range(0, N, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * N + offs, mask=offs < N, other=float("-inf"))
        m_new = tl.maximum(m, tl.max(x, axis=0))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
        m = m_new
    for start in range(0, N, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * N + offs, mask=offs < N)
        tl.store(out_ptr + row * N + offs, tl.exp(x - m) / s, mask=offs < N)


def compiled(fn, signature, constexprs, cc=90):
    """(PTX text, dynamic shared bytes, threads per CTA) of ``fn`` compiled by Triton."""
    k = triton.compile(ASTSource(fn, signature, constexprs),
                       target=GPUTarget("cuda", cc, 32), options={"num_warps": 4})
    return k.asm["ptx"], k.metadata.shared, 32 * k.metadata.num_warps


def scratch(kernel):
    """Triton 3.x appends two scratch-pointer parameters (global and profile scratch):
    null for kernels that use neither."""
    assert [p.type for p in kernel.params[-2:]] == ["u64", "u64"]
    return [None, None]


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
    assert "test_triton.py" in str(e.value)   # the .loc line of the kernel's source


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
