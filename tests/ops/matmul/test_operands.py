"""The Hopper GEMM's operand pieces (ptxdsl/ops/matmul/operands.py) on the interpreter: TMA
boxes of either major into a stage, the stage's wgmma descriptors, k16 steps and transpose
bits, checked by one warpgroup's m64nN product against numpy (integer inputs, bit-exact f32),
at ragged M, N, K; and the kernel's argument specs per major."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from ptxdsl import kernel, ptx, reg, smem, Tile
from ptxdsl.ops.matmul.operands import Operand, operands
from ptxdsl.ops.matmul.plan import choose
from ptxdsl.core.types import b64, bf16, f32, f32_to_bf16_bits, pred, u8, u32

pytest.importorskip("ptxdsl.interp")


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


def _bits(x):
    return f32_to_bf16_bits(x.astype(np.float32))


@pytest.mark.parametrize("a_major,b_major,n,m,nn,k", [
    ("K", "MN", 128, 64, 128, 128),     # full tiles, two stages
    ("K", "MN", 128, 37, 104, 72),      # ragged M, N, K: OOB zero fill in both majors
    ("MN", "K", 64, 56, 61, 128),       # (an MN-major row is M or N: 16-byte multiples)
    ("MN", "MN", 128, 64, 72, 120),
    ("K", "K", 64, 64, 64, 128),        # the shipped layout, as a control
])
def test_stage_product_of_each_major(a_major, b_major, n, m, nn, k):
    rng = np.random.default_rng(m * nn + k)
    a = rng.integers(-4, 5, (m, k)).astype(np.float32)
    b = rng.integers(-4, 5, (k, nn)).astype(np.float32)
    ka = _bits(a) if a_major == "K" else np.ascontiguousarray(_bits(a).T)
    kb = np.ascontiguousarray(_bits(b).T) if b_major == "K" else _bits(b)
    kern = build_stage_product(a_major, b_major, n)
    c = kern.interpret(ka, kb, np.full((m, nn), np.nan, np.float32))
    np.testing.assert_array_equal(c, a.astype(np.float64) @ b.astype(np.float64))


@pytest.mark.parametrize("a_major,b_major,n", [("K", "MN", 128), ("MN", "MN", 256),
                                               ("MN", "K", 64)])
def test_stage_product_in_cluster_rank_one(a_major, b_major, n):
    """Two CTAs in a cluster: rank 1's shared addresses carry its rank at bit 24 (as on an
    H100), so a descriptor that does not mask them gets a wrong LBO. This failed before
    the descriptors masked the start address: rank 1 read an MN-major B's later atoms two K
    rows on (LBO 8448 for 8192: the GPU bug of commit 76d4431). An MN-major A of one m64
    atom never reads LBO: that case is a control."""
    m, nn, k = 128, n, 128
    rng = np.random.default_rng(n)
    a = rng.integers(-4, 5, (m, k)).astype(np.float32)
    b = rng.integers(-4, 5, (k, nn)).astype(np.float32)
    ka = _bits(a) if a_major == "K" else np.ascontiguousarray(_bits(a).T)
    kb = np.ascontiguousarray(_bits(b).T) if b_major == "K" else _bits(b)
    kern = build_stage_product(a_major, b_major, n, cluster=2)
    c = kern.interpret(ka, kb, np.full((m, nn), np.nan, np.float32))
    np.testing.assert_array_equal(c, a.astype(np.float64) @ b.astype(np.float64))


def test_operand_geometry():
    p = choose(4096, 4096, 4096, bf16)
    a, b = operands(p, bf16, "K", "MN")
    assert (a.arg_name, b.arg_name) == ("A", "B")
    assert operands(p, bf16, "MN", "K")[0].arg_name == "At"
    assert operands(p, bf16)[1].arg_name == "Bt"
    # MN-major: 64-wide atoms of 64 K rows (8 KiB), 8-K-row groups 1 KiB apart, 2 KiB a k16 step
    assert b.fields.leading == 8192 and b.fields.stride == 1024 and b.k_step == 2048 >> 4
    assert b.transpose == 1 and a.transpose == 0 and a.k_step == 2
    assert b.tile("sb").dims == ("K", "N") and b.tile("sb").tma.box == (64, 64)
    assert a.tile("sa").dims == ("M", "K") and a.tile("sa").tma.box == (128, 64)
    assert a.stage_bytes + b.stage_bytes == p.stage_bytes(bf16)
    with pytest.raises(ValueError, match="major"):
        Operand("B", "N", 128, 128, 64, 64, bf16)


@pytest.mark.parametrize("a_major,b_major", list(itertools.product(("K", "MN"), repeat=2)))
def test_kernel_ptx_per_major(a_major, b_major):
    from ptxdsl.ops.matmul.hopper import build_hopper
    k = build_hopper(choose(4096, 4096, 4096, bf16), bf16, bf16, a_major=a_major,
                     b_major=b_major)
    text = k.ptx()
    ta, tb = int(a_major == "MN"), int(b_major == "MN")
    assert f"1, 1, {ta}, {tb};" in text
    # one box per 64 MN-major columns a CTA loads: A 2 (128 rows), B 2 (half of 256)
    loads = text.count("cp.async.bulk.tensor.2d.shared::cluster.global")
    assert loads == (2 if ta else 1) + (2 if tb else 1)
    assert text.count("wgmma.mma_async") == 8
