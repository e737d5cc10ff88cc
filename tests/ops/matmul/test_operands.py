"""The Hopper GEMM's operand pieces (ptxdsl/ops/matmul/operands.py) on the interpreter: TMA
boxes of either major into a stage, the stage's wgmma descriptors, k16 steps and transpose
bits, checked by one warpgroup's m64nN product against numpy (integer inputs, bit-exact f32),
at ragged M, N, K; and the kernel's argument specs per major."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import ptxdsl.interp  # noqa: F401  (the kernels run on it: a broken one fails here)
from ptxdsl import kernel, ptx, reg, smem, Tile
from ptxdsl.ops.matmul.operands import Operand, operands
from stage_product import bf16_bits, build_stage_product
from ptxdsl.ops.matmul.plan import choose
from ptxdsl.core.types import b64, bf16, f32, f32_to_bf16_bits, pred, u8, u32

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
    ka = bf16_bits(a) if a_major == "K" else np.ascontiguousarray(bf16_bits(a).T)
    kb = np.ascontiguousarray(bf16_bits(b).T) if b_major == "K" else bf16_bits(b)
    kern = build_stage_product(a_major, b_major, n)
    c = kern.interpret(ka, kb, np.full((m, nn), np.nan, np.float32))
    np.testing.assert_array_equal(c, a.astype(np.float64) @ b.astype(np.float64))


@pytest.mark.parametrize("a_major,b_major,n", [
    ("K", "MN", 128), pytest.param("MN", "MN", 256, marks=pytest.mark.long), ("MN", "K", 64)])
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
    ka = bf16_bits(a) if a_major == "K" else np.ascontiguousarray(bf16_bits(a).T)
    kb = np.ascontiguousarray(bf16_bits(b).T) if b_major == "K" else bf16_bits(b)
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
