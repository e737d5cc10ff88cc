"""A discard.global.L2 kernel, shared by the interpreter tests
(tests/interp/test_control.py) and the GPU differential tests
(tests/gpu/test_interp_vs_gpu.py)."""
from __future__ import annotations

from ptxdsl import Tile, kernel, ptx, reg
from ptxdsl.core.types import f32, u32


def tid_reg():
    t = reg.scalar(u32)
    ptx.inst.mov.u32(t, ptx.special.tid.x())
    return t


def discard_kernel(offset, sync=True):
    """Each thread stores its float into W, reads it back into Y, then lane 0 drops W's
    line at ``offset`` from the L2 (after ``bar.warp.sync`` where ``sync``); Z is W read
    after that."""
    @kernel(in_specs=(Tile(64, f32),), out_specs=(Tile(32, f32), Tile(32, f32)), grid=1,
            block=(32, 1, 1), arch="sm_90a")
    def k(W, Y, Z):
        pw, py, pz = ptx.global_ptrs(W, Y, Z)
        tid = tid_reg()
        v = reg.scalar(f32)
        ptx.inst.cvt.rn.f32.u32(v, tid)
        ptx.inst.st.global_.f32(ptx.addr(pw + tid * 4), v)
        back = reg.scalar(f32)
        ptx.inst.ld.global_.f32(back, ptx.addr(pw + tid * 4))
        ptx.inst.st.global_.f32(ptx.addr(py + tid * 4), back)
        if sync:
            ptx.inst.bar.warp.sync(0xFFFFFFFF)   # every lane's read before the discard
        with ptx.if_(tid == 0):
            ptx.inst.discard.global_.L2(ptx.addr(pw, offset), 128)
        ptx.inst.bar.warp.sync(0xFFFFFFFF)
        after = reg.scalar(f32)
        ptx.inst.ld.global_.f32(after, ptx.addr(pw + tid * 4))
        ptx.inst.st.global_.f32(ptx.addr(pz + tid * 4), after)
    return k
