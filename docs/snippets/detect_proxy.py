"""A missing proxy fence: 128 threads stage a tile with st.shared, and thread 0 stores it
with TMA, but the stores go through the generic proxy and TMA reads through the async
proxy: fence.proxy.async.shared::cta belongs after the stores, before the barrier."""
import numpy as np

from ptxdsl import Tile, kernel, ptx, reg, smem
from ptxdsl.core.tensormap import TMA
from ptxdsl.core.types import f32, u32


@kernel(in_specs=(), out_specs=(Tile(8, 16, f32, tma=TMA(box=(8, 16))),), block=(128, 1, 1),
        arch="sm_90a")
def staged_store(C):
    c_desc = C.tma_desc()
    tile = smem.alloc(f32, (8, 16), align=128)
    tid = reg.scalar(u32); ptx.inst.mov.u32(tid, ptx.special.tid.x())
    v = reg.scalar(f32); ptx.inst.cvt.rn.f32.u32(v, tid)
    ptx.inst.st.shared.f32(ptx.addr(tile.base + tid * 4), v)
    # ptx.inst.fence.proxy.async_.shared__cta() belongs here
    ptx.bar.sync(0)
    with ptx.if_(tid == 0):
        ptx.tma.store(c_desc, (0, 0), tile.base)
        ptx.tma.commit()
        ptx.tma.wait(0)


def main():
    staged_store.interpret()
    return np.zeros(1)
