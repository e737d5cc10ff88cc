"""Bulk copies on the interpreter (ptxdsl/interp/bulk.py, groups.py, tma.py reductions):
1-D cp.async.bulk both ways against numpy, bulk groups' wait_group.read guarding the
source, cp.reduce.async.bulk.tensor for each operation; misuse refused at the user's line."""
from __future__ import annotations

import os

import numpy as np
import pytest

from ptxdsl import Tile, kernel, ptx, reg, smem
from ptxdsl.core.tensormap import TMA
from ptxdsl.core.types import b64, bf16, f16, f32, pred, s32, u32
import located

N = 128                      # words per copy (512 bytes)


HERE = os.path.basename(__file__)
line_of, raises_at = located.for_file(__file__)


def _tid():
    t = reg.scalar(u32)
    ptx.inst.mov.u32(t, ptx.special.tid.x())
    return t


def _wait(bar):
    done = reg.scalar(pred)
    top = ptx.new_label("w")
    ptx.place(top)
    ptx.inst.mbarrier.try_wait.parity.shared__cta.b64(done, ptx.addr(bar), 0)
    ptx.bra(top, pred=~done)


def bulk_load(size=N * 4):
    """Thread 0 copies X into shared memory with one 1-D bulk copy completing on an
    mbarrier; every thread waits and copies its word to Y."""
    @kernel(in_specs=(Tile(N, u32),), out_specs=(Tile(N, u32),), block=(N, 1, 1),
            arch="sm_90a")
    def k(X, Y):
        px, py = ptx.global_ptrs(X, Y)
        buf = smem.alloc(u32, (N,), align=128)
        bar = smem.alloc(b64, (1,), align=8)
        tid = _tid()
        with ptx.if_(tid == 0):
            ptx.inst.mbarrier.init.shared__cta.b64(ptx.addr(bar.base), 1)
            n = reg.scalar(u32, init=size)
            ptx.inst.mbarrier.arrive.expect_tx.shared__cta.b64(ptx.sink, ptx.addr(bar.base),
                                                               N * 4)
            op = "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
            ptx.inst(op, ptx.addr(buf.base), ptx.addr(px), n, ptx.addr(bar.base))  # bulk-load
        ptx.bar.sync(0)
        _wait(bar.base)
        ptx.inst.st.global_.u32(ptx.addr(py + tid * 4), buf[tid])
    return k


def test_bulk_load_into_shared_memory():
    x = np.arange(N, dtype=np.uint32) * 3 + 1
    np.testing.assert_array_equal(bulk_load().interpret(x), x)


def test_bulk_size_not_a_multiple_of_16():
    with raises_at("bulk-load", "positive multiple of 16 bytes, got 500"):
        bulk_load(500).interpret(np.zeros(N, np.uint32))


def bulk_store(wait_read=True, fence=True):
    """Every thread writes its word to shared memory, thread 0 stores the buffer with a
    1-D bulk copy (bulk group), then the buffer is written again: after wait_group.read
    and a barrier, or (``wait_read=False``) after the barrier only."""
    @kernel(in_specs=(), out_specs=(Tile(N, u32), Tile(N, u32)), block=(N, 1, 1),
            arch="sm_90a")
    def k(Y, Z):
        py, pz = ptx.global_ptrs(Y, Z)
        buf = smem.alloc(u32, (N,), align=128)
        tid = _tid()
        buf[tid] = tid * 5
        if fence:
            ptx.inst.fence.proxy.async_.shared__cta()
        ptx.bar.sync(0)
        with ptx.if_(tid == 0):
            op = "cp.async.bulk.global.shared::cta.bulk_group"
            ptx.inst(op, ptx.addr(py), ptx.addr(buf.base), N * 4)  # bulk-store
            ptx.inst.cp.async_.bulk.commit_group()
            if wait_read:
                ptx.inst.cp.async_.bulk.wait_group.read(0)
        ptx.bar.sync(0)
        buf[tid] = tid  # reuse
        ptx.inst.st.global_.u32(ptx.addr(pz + tid * 4), buf[tid])
        with ptx.if_(tid == 0):
            ptx.inst.cp.async_.bulk.wait_group(0)
    return k


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


# ---------------------------------------------------------------- TMA reductions
def tma_reduce(op: str, dtype, box=(8, 16), store_row=0):
    """C (through its tensor map) op= the 8x16 box of X, staged in shared memory by 128
    threads (one element each) and reduced by thread 0 at row ``store_row``."""
    t = TMA(box=box, swizzle=0)

    @kernel(in_specs=(Tile(box[0] * box[1], dtype),),
            out_specs=(Tile("M", "N", dtype, tma=t),), block=(128, 1, 1), arch="sm_90a")
    def k(X, C):
        c_desc = C.tma_desc()
        (px,) = ptx.global_ptrs(X)
        tile = smem.alloc(dtype, box, align=128)
        tid = _tid()
        e = dtype.bytes
        v = reg.scalar({1: u32, 2: u32, 4: u32, 8: b64}[e] if e != 2 else
                       __import__("ptxdsl.types", fromlist=["u16"]).u16)
        kind = {2: "b16", 4: "b32", 8: "b64"}[e]
        getattr(ptx.inst.ld.global_, kind)(v, ptx.addr(px + tid * e))
        getattr(ptx.inst.st.shared, kind)(ptx.addr(tile.base + tid * e), v)
        ptx.inst.fence.proxy.async_.shared__cta()
        ptx.bar.sync(0)
        with ptx.if_(tid == 0):
            red = f"cp.reduce.async.bulk.tensor.2d.global.shared::cta.{op}.tile.bulk_group"
            ptx.inst(red, ptx.addr(c_desc, coords=[0, store_row]), ptx.addr(tile.base))  # reduce
            ptx.inst.cp.async_.bulk.commit_group()
            ptx.inst.cp.async_.bulk.wait_group(0)
    return k


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
