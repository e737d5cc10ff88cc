from ptxdsl import kernel, reg, ptx, Tile
from ptxdsl.core.types import f32, u32


@kernel(in_specs=(Tile(1024, f32),), out_specs=(Tile(1024, f32),),
        grid=(4, 1, 1), block=(256, 1, 1))
def scale(X, Y):
    px, py = ptx.global_ptrs(X, Y)
    tid = reg.scalar(u32); ptx.inst.mov.u32(tid, ptx.special.tid.x())
    x = reg.scalar(f32); ptx.inst.ld.global_.f32(x, ptx.addr(px + tid * 4))
    y = reg.scalar(f32)
    ptx.inst.mul.f32(y, x, tid)          # tid is a .u32 register
    ptx.inst.st.global_.f32(ptx.addr(py + tid * 4), y)
