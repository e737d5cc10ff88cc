"""A register written on one side of a branch only: threads with x <= 0 store garbage."""
import numpy as np

from ptxdsl import kernel, reg, ptx, Tile
from ptxdsl.core.types import f32, u32


@kernel(in_specs=(Tile(64, f32),), out_specs=(Tile(64, f32),), block=(64, 1, 1))
def relu(X, Y):
    px, py = ptx.global_ptrs(X, Y)
    tid = reg.scalar(u32); ptx.inst.mov.u32(tid, ptx.special.tid.x())
    x = reg.scalar(f32); ptx.inst.ld.global_.f32(x, ptx.addr(px + tid * 4))
    y = reg.scalar(f32)
    with ptx.if_(x > 0.0):
        ptx.inst.mov.f32(y, x)
    # the else branch (y = 0) is missing
    ptx.inst.st.global_.f32(ptx.addr(py + tid * 4), y)


def main():
    relu.interpret(np.linspace(-1, 1, 64).astype(np.float32))
