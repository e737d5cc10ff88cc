from ptxdsl import kernel, reg, ptx, Tile
from ptxdsl.core.types import pred, u32


@kernel(in_specs=(Tile(32, u32),), out_specs=(Tile(32, u32),),
        grid=(1, 1, 1), block=(32, 1, 1), arch="sm_80")
def leader(X, Y):
    py = ptx.global_ptrs(Y)[0]
    lane = reg.scalar(u32)
    is_leader = reg.scalar(pred)
    ptx.inst.elect.sync(lane, is_leader, 0xFFFFFFFF)   # a Hopper instruction
    with ptx.if_(is_leader):
        ptx.inst.st.global_.u32(ptx.addr(py), lane)
