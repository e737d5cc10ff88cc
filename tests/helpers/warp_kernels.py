"""A two-warp kernel around a per-lane body, shared by tests/dsl/test_warp.py and the
GPU differential tests (tests/gpu/test_interp_vs_gpu.py)."""
from __future__ import annotations

from ptxdsl import Tile, kernel, ptx, reg
from ptxdsl.core.types import u32

N = 64


def lane_kernel(body, arch="sm_90a"):
    """Two warps; ``body(tid) -> list of u32 registers``, stored to out[k][tid]."""
    @kernel(out_specs=(Tile(N, u32), Tile(N, u32)), grid=1, block=(N, 1, 1), arch=arch)
    def k(A, B):
        tid = reg.scalar(u32, init=ptx.special.tid.x())
        pa, pb = ptx.global_ptrs(A, B)
        a, b = body(tid)
        ptx.inst.st.global_.u32(ptx.addr(pa + tid * 4), a)
        ptx.inst.st.global_.u32(ptx.addr(pb + tid * 4), b)
    return k


def pred_to_u32(p):
    r = reg.scalar(u32)
    ptx.inst.selp.u32(r, 1, 0, p)
    return r
