"""Warp specialization on the interpreter: warpgroup 0 produces tiles into a 4-stage ring in
shared memory, warpgroup 1 consumes them; full[s] / empty[s] mbarriers hand each stage over."""
import numpy as np

from ptxdsl import Tile, kernel, ptx, reg, smem
from ptxdsl.core.types import pred, u32, u64

STAGES, ITERS = 4, 64


def wait(bar, parity, name):
    """Spin until the phase of ``bar`` with this parity has completed (try_wait loop)."""
    top = ptx.label(name)
    done = reg.scalar(pred)
    ptx.inst.mbarrier.try_wait.parity.shared.b64(done, bar, parity)
    ptx.bra(top, pred=~done)


def build_ring(consumer_first=False):
    @kernel(in_specs=(), out_specs=(Tile(128, u32),), block=(256, 1, 1), arch="sm_90a")
    def ring(Y):
        (py,) = ptx.global_ptrs(Y)
        buf = smem.alloc(u32, (STAGES * 128,))
        full = smem.alloc(u64, (STAGES,))
        empty = smem.alloc(u64, (STAGES,))
        tid = reg.scalar(u32)
        ptx.inst.mov.u32(tid, ptx.special.tid.x())
        with ptx.if_(tid == 0):
            for s in range(STAGES):
                ptx.inst.mbarrier.init.shared.b64(full.addr(s), 128)
                ptx.inst.mbarrier.init.shared.b64(empty.addr(s), 128)
        ptx.bar.sync(0)

        def producer():                       # warpgroup 0: threads 0..127
            for i in ptx.range_(ITERS):
                s, phase = i & (STAGES - 1), (i >> 2) & 1
                wait(empty.addr(s), phase ^ 1, "wait_empty")   # the stage is free
                buf[s * 128 + tid] = i * 1000 + tid
                tok = reg.scalar(u64)
                ptx.inst.mbarrier.arrive.shared.b64(tok, full.addr(s))   # release

        def consumer():                       # warpgroup 1: threads 128..255
            me, acc = tid - 128, reg.scalar(u32, init=0)
            for i in ptx.range_(ITERS):
                s, phase = i & (STAGES - 1), (i >> 2) & 1
                wait(full.addr(s), phase, "wait_full")         # acquire the tile
                acc += buf[s * 128 + me]
                tok = reg.scalar(u64)
                ptx.inst.mbarrier.arrive.shared.b64(tok, empty.addr(s))
            ptx.inst.st.global_.u32(ptx.addr(py + me * 4), acc)

        first, second = (consumer, producer) if consumer_first else (producer, consumer)
        with ptx.if_((tid >> 7) == (1 if consumer_first else 0)):   # warpgroup-uniform
            first()
        with ptx.else_():
            second()
    return ring


def main():
    want = 1000 * ITERS * (ITERS - 1) // 2 + ITERS * np.arange(128)
    for consumer_first in (False, True):
        y = build_ring(consumer_first).interpret()
        np.testing.assert_array_equal(y, want)
    print("ring: both branch orders give", y[:3], "...")


if __name__ == "__main__":
    main()
