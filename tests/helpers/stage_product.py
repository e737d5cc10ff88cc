"""A one-CTA kernel built from the Hopper GEMM's operand pieces (ptxdsl/ops/matmul/operands.py):
TMA loads of each major into a stage, then wgmma from the stage's descriptors; used by
tests/ops/matmul/test_operands.py on the interpreter and tests/gpu on a GPU."""
from __future__ import annotations

import numpy as np

from ptxdsl import Tile, kernel, ptx, reg, smem
from ptxdsl.core.types import b64, bf16, f32, f32_to_bf16_bits, pred, u8, u32
from ptxdsl.ops.matmul.operands import Operand


def build_stage_product(a_major: str, b_major: str, n: int, stages: int = 2,
                        cluster: int = 1):
    """One CTA, one warpgroup: for each of ``stages`` K blocks of 64, TMA-load A (64 rows)
    and B (n rows) through :class:`Operand`, then 4 wgmma k16 steps from the operands'
    descriptors; the 64 x n f32 accumulator is stored with plain st.global (row < M,
    col < N). ``cluster`` > 1: that many CTAs launched as one cluster, rank r computing
    rows 64 r .. 64 r + 63 on its own (its shared addresses carry its rank)."""
    a = Operand("A", a_major, 64, 64, 64, 64, bf16)
    b = Operand("B", b_major, n, n, n // 2, 64, bf16)
    sa_bytes, sb_bytes = a.stage_bytes, b.stage_bytes
    total = stages * (sa_bytes + sb_bytes) + 8 * stages

    @kernel(in_specs=(a.tile("sa"), b.tile("sb")), out_specs=(Tile("M", "N", f32),),
            arg_names=(a.arg_name, b.arg_name, "C"), grid=(cluster, 1, 1), block=(128, 1, 1),
            arch="sm_90a", cluster=(cluster, 1, 1) if cluster > 1 else None,
            name=f"stage_product_{a_major}{b_major}{n}_c{cluster}")
    def stage_product(A, B, C):
        tma_a, tma_b = A.tma_desc(), B.tma_desc()
        (pc,) = ptx.global_ptrs(C)
        m, nn = ptx.dim("M"), ptx.dim("N")
        tid = reg.scalar(u32); ptx.inst.mov.u32(tid, ptx.special.tid.x())
        m0 = 0
        if cluster > 1:
            rank = reg.scalar(u32); ptx.inst.mov.u32(rank, ptx.special.cluster_ctarank())
            m0 = rank * 64
        base = smem.alloc(u8, (total,), align=1024, dynamic=True).base
        bars = base + stages * (sa_bytes + sb_bytes)
        with ptx.if_(tid == 0):
            for s in range(stages):
                bar = bars + 8 * s
                ptx.inst("mbarrier.init.shared::cta.b64", ptx.addr(bar), 1)
                ptx.inst("mbarrier.arrive.expect_tx.shared::cta.b64", ptx.sink, ptx.addr(bar),
                         sa_bytes + sb_bytes)
                a.load(tma_a, base + s * sa_bytes, m0, 64 * s, bar)
                b.load(tma_b, base + stages * sa_bytes + s * sb_bytes, 0, 64 * s, bar)
        ptx.inst("bar.sync", 0)
        acc = reg.array(f32, n // 2)
        for s in range(stages):
            done = reg.scalar(pred)
            top = ptx.new_label(f"w{s}")
            ptx.place(top)
            ptx.inst("mbarrier.try_wait.parity.shared::cta.b64", done, ptx.addr(bars + 8 * s),
                     0)
            ptx.bra(top, pred=~done)
            da = a.descriptor(base + s * sa_bytes)
            db = b.descriptor(base + stages * sa_bytes + s * sb_bytes)
            ptx.inst("wgmma.fence.sync.aligned")
            for ks in range(4):
                ptx.inst(f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.bf16.bf16", list(acc),
                         da if ks == 0 else da + ks * a.k_step,
                         db if ks == 0 else db + ks * b.k_step, 0 if s == ks == 0 else 1,
                         1, 1, a.transpose, b.transpose)
            ptx.inst("wgmma.commit_group.sync.aligned")
            ptx.inst("wgmma.wait_group.sync.aligned", 0)
        warp, lw = tid >> 5, tid & 31
        row0 = warp * 16 + (lw >> 2) + m0
        col0 = (lw & 3) * 2
        for i in range(n // 2):
            dr, dc = 8 * ((i // 2) % 2), i % 2 + 8 * (i // 4)
            r, c = row0 + dr, col0 + dc
            with ptx.if_((r < m) & (c < nn)):
                ptx.inst.st.global_.f32(ptx.addr(pc + (r * nn + c) * 4), acc[i])

    return stage_product


def bf16_bits(x):
    """The bf16 bit patterns of ``x`` (rounded from f32), as the kernel's inputs."""
    return f32_to_bf16_bits(x.astype(np.float32))
