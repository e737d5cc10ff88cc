"""bar.red / barrier.red kernels, shared by the interpreter tests
(tests/interp/test_barriers.py) and the GPU differential tests
(tests/gpu/test_interp_vs_gpu.py)."""
from __future__ import annotations

from ptxdsl import Tile, kernel, ptx, reg
from ptxdsl.core.types import pred, u32


def tid_reg():
    t = reg.scalar(u32)
    ptx.inst.mov.u32(t, ptx.special.tid.x())
    return t


def bar_red_kernel(count=None):
    @kernel(in_specs=(Tile(128, u32),), out_specs=(Tile(128, u32),), grid=1,
            block=(128, 1, 1))
    def k(X, Y):
        px, py = ptx.global_ptrs(X, Y)
        tid = tid_reg()
        x = reg.scalar(u32)
        ptx.inst.ld.global_.u32(x, ptx.addr(px + tid * 4))
        p = x != 0
        cnt, q_and, q_or = reg.scalar(u32), reg.scalar(pred), reg.scalar(pred)
        extra = () if count is None else (count,)
        ptx.inst.bar.red.popc.u32(cnt, 1, *extra, p)
        ptx.inst.bar.red.and_.pred(q_and, 2, *extra, p)
        ptx.inst.bar.red.or_.pred(q_or, 3, *extra, p)
        a, o = reg.scalar(u32), reg.scalar(u32)
        ptx.inst.selp.u32(a, 1000, 0, q_and)
        ptx.inst.selp.u32(o, 100000, 0, q_or)
        ptx.inst.st.global_.u32(ptx.addr(py + tid * 4), cnt + a + o)
    return k


def barrier_red_kernel():
    """bar_red_kernel's reductions in the barrier{.cta}.red spellings."""
    @kernel(in_specs=(Tile(128, u32),), out_specs=(Tile(128, u32),), grid=1,
            block=(128, 1, 1))
    def k(X, Y):
        px, py = ptx.global_ptrs(X, Y)
        tid = tid_reg()
        x = reg.scalar(u32)
        ptx.inst.ld.global_.u32(x, ptx.addr(px + tid * 4))
        p = x != 0
        cnt, q_and, q_or = reg.scalar(u32), reg.scalar(pred), reg.scalar(pred)
        ptx.inst.barrier.cta.red.popc.aligned.u32(cnt, 1, p)
        ptx.inst.barrier.red.and_.pred(q_and, 2, p)
        ptx.inst.barrier.cta.red.or_.pred(q_or, 3, p)
        a, o = reg.scalar(u32), reg.scalar(u32)
        ptx.inst.selp.u32(a, 1000, 0, q_and)
        ptx.inst.selp.u32(o, 100000, 0, q_or)
        ptx.inst.st.global_.u32(ptx.addr(py + tid * 4), cnt + a + o)
    return k


def divergent_barrier_red_kernel():
    """barrier.cta.red without .aligned, the halves of each warp at different
    instructions; threads below 40 count."""
    @kernel(in_specs=(), out_specs=(Tile(64, u32),), grid=1, block=(64, 1, 1))
    def k(Y):
        (py,) = ptx.global_ptrs(Y)
        tid = tid_reg()
        cnt = reg.scalar(u32)
        with ptx.if_((tid & 31) < 16):
            ptx.inst.barrier.cta.red.popc.u32(cnt, 0, tid < 40)
        with ptx.else_():
            ptx.inst.barrier.cta.red.popc.u32(cnt, 0, tid < 40)
        ptx.inst.st.global_.u32(ptx.addr(py + tid * 4), cnt)
    return k
