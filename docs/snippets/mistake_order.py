from ptxdsl import kernel, reg, ptx, Tile
from ptxdsl.core.types import f32, u32


@kernel(in_specs=(Tile(1024, f32),), out_specs=(Tile(1024, f32),),
        grid=(1, 1, 1), block=(256, 1, 1))
def copy4(X, Y):
    px, py = ptx.global_ptrs(X, Y)
    tid = reg.scalar(u32); ptx.inst.mov.u32(tid, ptx.special.tid.x())
    v = reg.array(f32, 4)
    ptx.inst.ld.v4.global_.f32(list(v), ptx.addr(px + tid * 16))   # .v4 before .global
    ptx.inst.st.global_.v4.f32(ptx.addr(py + tid * 16), list(v))
