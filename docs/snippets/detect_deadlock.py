"""An mbarrier initialised for 64 arrivals where only the producer warp's 32 arrive: its
phase never completes, and the consumer warp waits for it forever."""
from ptxdsl import Tile, kernel, ptx, reg, smem
from ptxdsl.core.types import pred, u32, u64


@kernel(in_specs=(), out_specs=(Tile(64, u32),), block=(64, 1, 1), arch="sm_90a")
def handoff(Y):
    (py,) = ptx.global_ptrs(Y)
    full = smem.alloc(u64, (1,))
    data = smem.alloc(u32, (32,))
    tid = reg.scalar(u32); ptx.inst.mov.u32(tid, ptx.special.tid.x())
    with ptx.if_(tid == 0):
        ptx.inst.mbarrier.init.shared.b64(full.addr(0), 64)   # should be 32
    ptx.bar.sync(0)
    with ptx.if_(tid >= 32):                    # warp 1 consumes
        top = ptx.label("wait")
        done = reg.scalar(pred)
        ptx.inst.mbarrier.try_wait.parity.shared.b64(done, full.addr(0), 0)
        ptx.bra(top, pred=~done)
        ptx.inst.st.global_.u32(ptx.addr(py + tid * 4), data[tid - 32])
    with ptx.else_():                           # warp 0 produces
        data[tid] = tid
        tok = reg.scalar(u64)
        ptx.inst.mbarrier.arrive.shared.b64(tok, full.addr(0))


def main():
    handoff.interpret()
