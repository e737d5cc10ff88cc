"""A barrier inside a branch on the thread's data: part of the CTA would never arrive."""
from ptxdsl import kernel, reg, ptx, Tile
from ptxdsl.core.types import f32, u32


@kernel(in_specs=(Tile(64, f32),), out_specs=(Tile(64, f32),), block=(64, 1, 1))
def clamp(X, Y):
    px, py = ptx.global_ptrs(X, Y)
    tid = reg.scalar(u32); ptx.inst.mov.u32(tid, ptx.special.tid.x())
    x = reg.scalar(f32); ptx.inst.ld.global_.f32(x, ptx.addr(px + tid * 4))
    with ptx.if_(x > 0.0):
        ptx.bar.sync(0)
    ptx.inst.st.global_.f32(ptx.addr(py + tid * 4), x)
