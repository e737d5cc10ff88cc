"""A small warp-specialised TMA kernel written in pyptx's Hopper API style, shared by the
CPU tests (trace, print, assemble) and tests/gpu (run and compare).

``build_tma_copy()`` copies a bf16 matrix C = A tile by tile: per CTA one 64-column
strip, a producer thread (warpgroup 0, ``setmaxnreg.dec``) loads 64x64 boxes through TMA
(128-byte swizzle) into a ring of stages guarded by full/empty mbarriers, and a consumer
thread (warpgroup 1, ``setmaxnreg.inc``) stores each box back through C's tensor map
(the same swizzle, so the copy is exact) and frees the stage. CTAs run in clusters of 2
that meet at a cluster barrier after the barriers are initialised. Rows beyond M are
zero-filled by the loads and clipped by the stores, so any M works; N must be a multiple
of 128 (64 columns per CTA, an even number of CTAs).
"""
from __future__ import annotations

from ptxdsl import kernel, ptx, reg
from ptxdsl.specs import Tile
from ptxdsl.core.tensormap import TMA
from ptxdsl.core.types import bf16, u32

BM = BN = 64
STAGES = 2
TILE_BYTES = BM * BN * 2
SMEM_FULL = STAGES * TILE_BYTES
SMEM_EMPTY = SMEM_FULL + 8 * STAGES
SMEM_BYTES = SMEM_EMPTY + 8 * STAGES + 1024  # + the slack to 1024-align the tiles


def build_tma_copy(name: str = "tma_copy", cluster: int = 2):
    box = TMA(box=(BM, BN), swizzle=128)

    @kernel(in_specs=(Tile("M", "N", bf16, tma=box),), out_specs=(Tile("M", "N", bf16, tma=box),),
            grid=lambda N: (N // BN, 1, 1), block=(256, 1, 1), cluster=(cluster, 1, 1),
            arch="sm_90a", version=(8, 0), extern_smem="smem", smem=SMEM_BYTES, name=name,
            raw_directives=[("maxntid", (256, 1, 1))])
    def tma_copy(A, C):
        a_desc, c_desc = A.tma_desc(), C.tma_desc()
        M = ptx.param(u32, "M")
        raw = reg.scalar(u32)
        ptx.inst.mov.u32(raw, "smem")
        base = (raw + 1023) & 0xFFFFFC00        # swizzled boxes want 1024-byte alignment
        full = ptx.mbarrier.array(base, SMEM_FULL, STAGES)
        empty = ptx.mbarrier.array(base, SMEM_EMPTY, STAGES)
        tid = reg.scalar(u32)
        ptx.inst.mov.u32(tid, ptx.special.tid.x())
        wg = tid >> 7
        col = reg.scalar(u32)
        ptx.inst.mov.u32(col, ptx.special.ctaid.x())
        col = col << 6
        ntiles = (M + (BM - 1)) >> 6
        with ptx.if_(tid == 0):
            full.init_all(1)
            empty.init_all(1)
            ptx.fence.mbarrier_init()
        ptx.cluster.sync()

        with ptx.if_(wg == 0):
            ptx.setmaxnreg(40, inc=False)
            with ptx.if_(tid == 0):
                pipe = ptx.pipeline(STAGES)
                row = reg.scalar(u32, init=0)

                def produce():
                    stage, phase = pipe.advance()
                    empty.at(stage).wait(phase)
                    slot = full.at(stage)
                    slot.arrive_expect_tx(TILE_BYTES)
                    ptx.tma.load(base + (stage << 13), a_desc, (col, row), slot)
                    ptx.inst.add.u32(row, row, BM)

                ptx.kloop(ntiles, unroll=2, body=produce, loop_label="produce_loop")
        with ptx.else_():
            ptx.setmaxnreg(232, inc=True)
            with ptx.if_(tid == 128):
                for i in range(STAGES):      # every stage starts out free
                    empty[i].arrive()
                pipe = ptx.pipeline(STAGES)
                row = reg.scalar(u32, init=0)

                def consume():
                    stage, phase = pipe.advance()
                    full.at(stage).wait(phase)
                    ptx.tma.store(c_desc, (col, row), base + (stage << 13))
                    ptx.tma.commit()
                    ptx.tma.wait(0, read=True)
                    empty.at(stage).arrive()
                    ptx.inst.add.u32(row, row, BM)

                ptx.kloop(ntiles, unroll=2, body=consume, loop_label="consume_loop")
                ptx.tma.wait(0)
            ptx.named_barrier(1, count=128).sync()

    return tma_copy
