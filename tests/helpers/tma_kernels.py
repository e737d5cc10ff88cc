"""A TMA box copy kernel (sm_90a), shared by the interpreter tests
(tests/interp/test_tma.py) and the GPU differential tests (tests/gpu/test_tma_interp_gpu.py)."""
from __future__ import annotations

from ptxdsl import Tile, kernel, ptx, reg, smem
from ptxdsl.core.tensormap import TMA
from ptxdsl.core.types import b64, f32, u16, u32


def build_copy(box, swizzle, dtype=f32, dump=True, store_shift=0, multicast=False,
               expect=None):
    """Per CTA one box: TMA load at (ctaid.y*BR, ctaid.x*BC) into swizzled shared memory,
    then every shared byte dumped raw to D[cta] (128 threads, plain ld.shared) and the box
    stored back through C's tensor map at the same coordinates (+ store_shift rows)."""
    br, bc = box
    t = TMA(box=box, swizzle=swizzle)
    e = dtype.bytes
    nbytes = br * bc * e
    cols = max(bc, swizzle // e)       # a narrower box row still takes the whole span
    words = br * cols * e // 4

    @kernel(in_specs=(Tile("M", "N", dtype, tma=t),),
            out_specs=(Tile("M", "N", dtype, tma=t), Tile("G", words, u32)),
            grid=lambda M, N: (-(-N // bc), -(-M // br), 1), block=(128, 1, 1), arch="sm_90a")
    def copy(A, C, D):
        a_desc, c_desc = A.tma_desc(), C.tma_desc()
        tile = smem.alloc(dtype, (br, cols), swizzle=swizzle, align=128)
        bars = smem.alloc(b64, (1,), align=8)
        tid, cx, cy, nx = (reg.scalar(u32) for _ in range(4))
        ptx.inst.mov.u32(tid, ptx.special.tid.x())
        if cols != bc:   # the padding TMA leaves alone: zero it (generic proxy, then fence)
            for j in range(0, words, 128):
                with ptx.if_(tid + j < words):
                    ptx.inst.st.shared.u32(ptx.addr(tile.base + (tid + j) * 4), 0)
            ptx.inst.fence.proxy.async_.shared__cta()
            ptx.bar.sync(0)
        ptx.inst.mov.u32(cx, ptx.special.ctaid.x())
        ptx.inst.mov.u32(cy, ptx.special.ctaid.y())
        ptx.inst.mov.u32(nx, ptx.special.nctaid.x())
        col, row = cx * bc, cy * br
        with ptx.if_(tid == 0):
            ptx.inst.mbarrier.init.shared__cta.b64(ptx.addr(bars.base), 1)
            ptx.inst.mbarrier.arrive.expect_tx.shared__cta.b64(ptx.sink, ptx.addr(bars.base),
                                                               expect or nbytes)
            ptx.tma.load(tile.base, a_desc, (col, row), bars.base,
                         multicast=(reg.scalar(u16, init=3) if multicast else None))
        ptx.bar.sync(0)
        # loop: on the GPU one try_wait may give up before the copy lands
        ptx.mbarrier.wait(ptx.addr(bars.base), 0)
        if dump:
            (pd,) = ptx.global_ptrs(D)
            cta = cy * nx + cx
            for j in range(0, words, 128):
                with ptx.if_(tid + j < words):
                    v = reg.scalar(u32)
                    ptx.inst.ld.shared.u32(v, ptx.addr(tile.base + (tid + j) * 4))
                    ptx.inst.st.global_.u32(ptx.addr(pd + (cta * words + tid + j) * 4), v)
        with ptx.if_(tid == 0):
            ptx.tma.store(c_desc, (col, row + store_shift), tile.base)
            ptx.tma.commit()
            ptx.tma.wait(0, read=True)
            ptx.tma.wait(0)
    return copy
