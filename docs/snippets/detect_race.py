"""A missing barrier: thread t reads the slot thread 255 - t wrote, with no bar.sync between."""
import numpy as np

from ptxdsl import kernel, reg, ptx, smem, Tile
from ptxdsl.core.types import f32, u32


@kernel(in_specs=(Tile(256, f32),), out_specs=(Tile(256, f32),), block=(256, 1, 1))
def reverse(X, Y):
    buf = smem.alloc(f32, (256,))
    px, py = ptx.global_ptrs(X, Y)
    tid = reg.scalar(u32); ptx.inst.mov.u32(tid, ptx.special.tid.x())
    x = reg.scalar(f32); ptx.inst.ld.global_.f32(x, ptx.addr(px + tid * 4))
    buf[tid] = x
    # ptx.bar.sync(0) belongs here
    y = buf[255 - tid]
    ptx.inst.st.global_.f32(ptx.addr(py + tid * 4), y)


def main():
    reverse.interpret(np.arange(256, dtype=np.float32))
