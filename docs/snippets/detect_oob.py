"""An off-by-one the GPU would not report: the last CTA reads past the end of X."""
import numpy as np

from ptxdsl import kernel, reg, ptx, Tile
from ptxdsl.core.types import f32, u32


@kernel(in_specs=(Tile(1000, f32),), out_specs=(Tile(1000, f32),),
        grid=(4, 1, 1), block=(256, 1, 1))
def double(X, Y):
    px, py = ptx.global_ptrs(X, Y)
    cta = reg.scalar(u32); ptx.inst.mov.u32(cta, ptx.special.ctaid.x())
    tid = reg.scalar(u32); ptx.inst.mov.u32(tid, ptx.special.tid.x())
    i = cta * 256 + tid                       # 1024 threads for 1000 elements, no guard
    x = reg.scalar(f32); ptx.inst.ld.global_.f32(x, ptx.addr(px + i * 4))
    ptx.inst.st.global_.f32(ptx.addr(py + i * 4), x + x)


def main():
    double.interpret(np.ones(1000, np.float32))
