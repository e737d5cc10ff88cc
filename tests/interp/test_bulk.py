"""Bulk copies on the interpreter (ptxdsl/interp/bulk.py, groups.py, tma.py reductions):
1-D cp.async.bulk both ways against numpy, bulk groups' wait_group.read guarding the
source, cp.reduce.async.bulk.tensor for each operation, 1-D cp.reduce.async.bulk; misuse
refused at the user's line."""
from __future__ import annotations

import os
import re

import numpy as np
import pytest

from ptxdsl.core.errors import IsaError
from ptxdsl.core.types import bf16, f16, f32, s32, u32
import bulk_kernels
import located
from bulk_kernels import N, bulk_load, bulk_reduce, bulk_store, tma_reduce

# the kernels, and the lines their errors name, are in tests/helpers/bulk_kernels.py
HERE = os.path.basename(bulk_kernels.__file__)
line_of, raises_at = located.for_file(bulk_kernels.__file__)


def test_bulk_load_into_shared_memory():
    x = np.arange(N, dtype=np.uint32) * 3 + 1
    np.testing.assert_array_equal(bulk_load().interpret(x), x)


def test_bulk_size_not_a_multiple_of_16():
    with raises_at("bulk-load", "positive multiple of 16 bytes, got 500"):
        bulk_load(500).interpret(np.zeros(N, np.uint32))


def test_bulk_store_from_shared_memory():
    y, z = bulk_store().interpret()
    np.testing.assert_array_equal(y, np.arange(N) * 5)
    np.testing.assert_array_equal(z, np.arange(N))


def test_reusing_the_source_before_wait_group_read_is_refused():
    with raises_at("reuse", "may still be reading", f"{HERE}:{line_of('bulk-store')}",
                   r"wait_group\.read"):
        bulk_store(wait_read=False).interpret()


def test_bulk_store_of_unfenced_stores_is_refused():
    with raises_at("bulk-store", "through the async proxy", "no fence.proxy.async"):
        bulk_store(fence=False).interpret()


_INT_REF = {
    "add": lambda c, x: c + x, "min": np.minimum, "max": np.maximum,
    "inc": lambda c, x: np.where(c >= x, 0, c + 1), "dec":
        lambda c, x: np.where((c == 0) | (c > x), x, c - 1),
    "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}


@pytest.mark.parametrize("op", sorted(_INT_REF))
def test_tma_reduce_u32_each_operation(op):
    rng = np.random.default_rng(len(op))
    c0 = rng.integers(0, 20, (12, 16)).astype(np.uint32)      # rows 8..11 untouched
    x = rng.integers(0, 20, 128).astype(np.uint32)
    c = tma_reduce(op, u32).interpret(x, c0.copy())
    want = c0.copy()
    want[:8] = _INT_REF[op](c0[:8], x.reshape(8, 16)).astype(np.uint32)
    np.testing.assert_array_equal(c, want)


def test_tma_reduce_add_f32_and_rows_past_the_tensor_are_clipped():
    rng = np.random.default_rng(1)
    c0 = rng.standard_normal((10, 16)).astype(np.float32)
    x = rng.standard_normal(128).astype(np.float32)
    c = tma_reduce("add", f32, store_row=4).interpret(x, c0.copy())  # rows 4..11: 4..9 in
    want = c0.copy()
    want[4:] = c0[4:] + x.reshape(8, 16)[:6]
    np.testing.assert_array_equal(c, want)


def test_tma_reduce_add_nan_is_the_all_ones_nan():
    """A NaN sum lands as 0x7fffffff (f32) / 0x7fff (f16), as an H100 writes it, not the
    canonical 0x7fc00000 of add.f32 (tests/gpu/test_bulk_interp_gpu.py)."""
    c0 = np.ones((8, 16), np.float32)
    c0[0, 0], c0[1, 1] = np.nan, np.inf
    x = np.ones(128, np.float32)
    x[17] = -np.inf                                       # inf + -inf: NaN
    c = tma_reduce("add", f32).interpret(x, c0.copy()).view(np.uint32)
    assert c[0, 0] == c[1, 1] == 0x7FFFFFFF and c[2, 2] == 0x40000000
    h = tma_reduce("add", f16).interpret(x.astype(np.float16), c0.astype(np.float16))
    assert h.view(np.uint16)[0, 0] == 0x7FFF


@pytest.mark.parametrize("dtype", [bf16, f16])
def test_tma_reduce_add_half_precision_rounds_once(dtype):
    from ptxdsl.core.types import bf16_bits_to_f32, f32_to_bf16_bits
    rng = np.random.default_rng(2)
    if dtype == bf16:
        enc = lambda a: f32_to_bf16_bits(a.astype(np.float32))          # noqa: E731
        dec = lambda b: bf16_bits_to_f32(b).astype(np.float64)          # noqa: E731
    else:
        enc = lambda a: a.astype(np.float16)                            # noqa: E731
        dec = lambda b: b.astype(np.float64)                            # noqa: E731
    c0 = enc(rng.standard_normal((8, 16)))
    x = enc(rng.standard_normal(128) * 1e-2)
    c = tma_reduce("add", dtype).interpret(x, c0.copy())
    exact = dec(c0) + dec(x).reshape(8, 16)               # exact in float64
    if dtype == f16:      # numpy rounds float64 -> float16 once, to nearest even
        np.testing.assert_array_equal(c, exact.astype(np.float16))
    lo, hi = np.minimum(dec(c), exact), np.maximum(dec(c), exact)
    # correctly rounded: no representable value strictly between result and exact sum
    step = np.abs(dec(c)) * (2.0 ** -7 if dtype == bf16 else 2.0 ** -10)
    assert np.all(hi - lo <= step / 2 + 1e-30)


def test_tma_reduce_type_the_operation_does_not_take():
    with raises_at("reduce", r"\.inc tensor reduction of \.f32", r"\.inc takes \.u32"):
        tma_reduce("inc", f32).interpret(np.zeros(128, np.float32), np.zeros((8, 16), np.float32))


@pytest.mark.parametrize("op", ["add", "min", "max", "inc", "dec"])
def test_bulk_reduce_u32_each_operation(op):
    """1-D cp.reduce.async.bulk: every word of C combined with X's (512 bytes)."""
    rng = np.random.default_rng(len(op) + 7)
    c0 = rng.integers(0, 20, N).astype(np.uint32)
    x = rng.integers(0, 20, N).astype(np.uint32)
    c = bulk_reduce(op, "u32").interpret(x, c0.copy())
    np.testing.assert_array_equal(c, _INT_REF[op](c0, x).astype(np.uint32))


def test_bulk_reduce_add_f32_rounds_each_sum_once():
    """f32 words added as FlashAttention-4's backward adds dQ, against numpy's f32 sum."""
    rng = np.random.default_rng(3)
    c0, x = (rng.standard_normal(N).astype(np.float32) for _ in range(2))
    c = bulk_reduce("add", "f32").interpret(x.view(np.uint32), c0.view(np.uint32).copy())
    np.testing.assert_array_equal(c.view(np.float32), c0 + x)


@pytest.mark.parametrize("kw,words", [
    (dict(size=500), "positive multiple of 16 bytes, got 500"),
    (dict(type_="b32"), r"\.add takes \.u32, \.s32, \.u64, \.f32, \.f64, not \.b32")])
def test_bulk_reduce_size_and_type_are_refused_at_the_line(kw, words):
    with pytest.raises(IsaError) as e:
        bulk_reduce(**{"op": "add", "type_": "u32", **kw}).ptx()
    assert f"{HERE}:{line_of('bulk-reduce')}:" in str(e.value) and re.search(words, str(e.value))
