"""The first kernel of the docs: C = A + B over 1024 floats, one element per thread."""
from ptxdsl import kernel, reg, ptx, Tile
from ptxdsl.core.types import f32, u32


@kernel(in_specs=(Tile(1024, f32), Tile(1024, f32)), out_specs=(Tile(1024, f32),),
        grid=(4, 1, 1), block=(256, 1, 1), arch="sm_90a")
def vector_add(A, B, C):
    pa, pb, pc = ptx.global_ptrs(A, B, C)
    i = reg.scalar(u32); ptx.inst.mov.u32(i, ptx.special.ctaid.x())
    tid = reg.scalar(u32); ptx.inst.mov.u32(tid, ptx.special.tid.x())
    off = (i * 256 + tid) * 4            # mul.wide.u32 where it meets a pointer
    a = reg.scalar(f32); ptx.inst.ld.global_.f32(a, ptx.addr(pa + off))
    b = reg.scalar(f32); ptx.inst.ld.global_.f32(b, ptx.addr(pb + off))
    ptx.inst.st.global_.f32(ptx.addr(pc + off), a + b)
