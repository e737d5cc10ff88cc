"""The async-proxy detector (ptxdsl/interp/proxy.py): bytes written with st.shared and
read by a TMA store or a wgmma need a fence.proxy.async between them, ordered before
the read; correct kernels (the fence in the writers before the barrier, or in the
reading thread after it) run silently."""
from __future__ import annotations


import numpy as np
import pytest

from ptxdsl import Tile, kernel, ptx, reg, smem
from ptxdsl.core.tensormap import TMA
from ptxdsl.core.types import bf16, f32, u32
import located



line_of, raises_at = located.for_file(__file__)


def staged_store(fence: str):
    """128 threads write an 8 x 16 f32 box with st.shared, meet at bar.sync, and thread 0
    stores it through TMA. ``fence``: "none", "writers" (every thread before the
    barrier), "issuer" (thread 0 after the barrier), "others" (warps 1-3 after the
    barrier: not ordered before thread 0's store), "global" (fence.proxy.async.global
    before the barrier: does not cover shared memory)."""
    t = TMA(box=(8, 16), swizzle=0)

    @kernel(in_specs=(), out_specs=(Tile(8, 16, f32, tma=t),), grid=1, block=(128, 1, 1),
            arch="sm_90a")
    def k(C):
        c_desc = C.tma_desc()
        tile = smem.alloc(f32, (8, 16), align=128)
        tid = reg.scalar(u32)
        ptx.inst.mov.u32(tid, ptx.special.tid.x())
        v = reg.scalar(f32)
        ptx.inst.cvt.rn.f32.u32(v, tid)
        ptx.inst.st.shared.f32(ptx.addr(tile.base + tid * 4), v)
        if fence == "writers":
            ptx.inst.fence.proxy.async_.shared__cta()
        if fence == "global":
            ptx.inst.fence.proxy.async_.global_()
        ptx.bar.sync(0)
        if fence == "others":
            with ptx.if_(tid >= 32):
                ptx.inst.fence.proxy.async_.shared__cta()
        with ptx.if_(tid == 0):
            if fence == "issuer":
                ptx.inst.fence.proxy.async_.shared__cta()
            ptx.tma.store(c_desc, (0, 0), tile.base)  # tma-store
            ptx.tma.commit()
            ptx.tma.wait(0)
    return k


@pytest.mark.parametrize("fence", ["writers", "issuer"])
def test_fenced_staging_then_tma_store_runs(fence):
    c = staged_store(fence).interpret()
    np.testing.assert_array_equal(c, np.arange(128, dtype=np.float32).reshape(8, 16))


def test_tma_store_of_unfenced_stores_is_refused():
    with raises_at("tma-store", "through the async proxy", r"thread \(\d+, 0, 0\) wrote it",
                   "no fence.proxy.async lies between",
                   r"fence\.proxy\.async\.shared::cta after the stores"):
        staged_store("none").interpret()


def test_fence_after_the_handover_in_other_warps_is_not_ordered():
    with raises_at("tma-store", "is not ordered before this read"):
        staged_store("others").interpret()


def test_a_global_proxy_fence_does_not_cover_shared_memory():
    with raises_at("tma-store", "no fence.proxy.async lies between"):
        staged_store("global").interpret()


def wgmma_from_stores(fence: bool):
    """A warpgroup zero-fills its operand tiles with st.shared, then one wgmma reads them."""
    @kernel(in_specs=(), out_specs=(Tile(128, f32),), block=(128, 1, 1), arch="sm_90a")
    def k(D):
        (pd,) = ptx.global_ptrs(D)
        s = smem.alloc(bf16, (64, 64), swizzle=128)
        tid = reg.scalar(u32)
        ptx.inst.mov.u32(tid, ptx.special.tid.x())
        for i in ptx.range_(tid, 64 * 64 // 2, 128):
            ptx.inst.st.shared.u32(ptx.addr(s.base + i * 4), 0)
        if fence:
            ptx.inst.fence.proxy.async_.shared__cta()
        ptx.bar.sync(0)
        acc = ptx.wgmma.accumulator(8, f32, init=1.0)
        d = ptx.wgmma.descriptor(s)
        ptx.wgmma.fence()
        ptx.wgmma.mma(acc, d, d, ab_type=bf16)  # wgmma-read
        ptx.wgmma.commit()
        ptx.wgmma.wait(0)
        ptx.inst.st.global_.f32(ptx.addr(pd + tid * 4), acc[0])
    return k


def test_wgmma_of_fenced_stores_runs():
    np.testing.assert_array_equal(wgmma_from_stores(True).interpret(), np.ones(128))


def test_wgmma_of_unfenced_stores_is_refused():
    with raises_at("wgmma-read", "wgmma.mma_async", "through the async proxy",
                   "no fence.proxy.async lies between"):
        wgmma_from_stores(False).interpret()
