"""Float8 scaling modes beyond per tensor (``torch._scaled_mm``'s conventions), on the CPU.

Row-wise (``scale_a`` (M, 1), ``scale_b`` (1, N)) and block-wise (``scale_a`` (M, ceil(K/128))
per 1 x 128 of a, ``scale_b`` (ceil(K/128), ceil(N/128)) per 128 x 128 of b): the Hopper
kernel on the interpreter (the epilogue's factors; the promotion of each 128-long k-block's
product), the public call on the SIMT kernel and, through a stand-in sm_90 device, on the
Hopper kernel, against a float64 reference; the errors. Integer operands in [-4, 4] and
power-of-two scales keep every product and sum exact in f32, so f32 outputs compare bit
for bit; random normal operands compare within bf16 output rounding.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import ml_dtypes
from ptxdsl.core.errors import LaunchError
from ptxdsl.core.types import bf16, e4m3, e5m2, f32
from ptxdsl.ops import matmul
from ptxdsl.ops.matmul.fp8 import scale_mode
from ptxdsl.ops.matmul.hopper import build_hopper
from ptxdsl.ops.matmul.layout import grid_for
from ptxdsl.ops.matmul.plan import choose, fitted, for_scaling, one_row

E4M3, E5M2 = ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2


def ints(rng, shape):
    return rng.integers(-4, 5, shape).astype(np.float32)


def pow2(rng, shape):
    return (2.0 ** rng.integers(-3, 3, shape)).astype(np.float32)


def reference(a, b, sa, sb, mode):
    """float64 ``a @ b`` (b (K, N)) under the scales of ``mode``, as the caller gives them."""
    a, b = a.astype(np.float64), b.astype(np.float64)
    if mode == "row":
        return (a @ b) * sa.astype(np.float64) * sb.astype(np.float64)
    k, n = b.shape
    out = np.zeros((a.shape[0], n))
    for kb in range(-(-k // 128)):
        ks = slice(128 * kb, 128 * kb + 128)
        cols = np.repeat(sb[kb].astype(np.float64), 128)[:n]
        out += (a[:, ks] @ b[ks]) * sa[:, kb:kb + 1] * cols
    return out


def scales_for(rng, mode, m, n, k):
    if mode == "row":
        return pow2(rng, (m, 1)), pow2(rng, (1, n))
    return pow2(rng, (m, -(-k // 128))), pow2(rng, (-(-k // 128), -(-n // 128)))


def test_scale_mode_reads_torchs_shapes():
    one = np.ones(1, np.float32)
    assert scale_mode(None, 2.0, 5, 7, 300) == "tensor"
    assert scale_mode(one, one.reshape(1, 1), 5, 7, 300) == "tensor"
    assert scale_mode(np.ones((5, 1)), np.ones((1, 7)), 5, 7, 300) == "row"
    assert scale_mode(np.ones((5, 3)), np.ones((3, 1)), 5, 7, 300) == "block"
    assert scale_mode(np.ones((5, 3)), np.ones((3, 2)), 5, 130, 257) == "block"
    assert scale_mode(np.ones((5, 1)), np.ones((1, 1)), 5, 7, 100) == "block"   # = row-wise
    assert scale_mode(np.ones((5, 1)), 2.0, 5, 7, 300) is None
    assert scale_mode(np.ones((5, 2)), np.ones((2, 1)), 5, 7, 300) is None


# ---------------------------------------------------------------- the Hopper kernel
@pytest.mark.parametrize("mode,m,n,k,cluster,split,waves,pairs,bn", [
    ("row", 70, 136, 160, 1, 1, 1, False, 0),  # ragged M, N, K: two k-blocks, one tile row
    pytest.param("block", 130, 200, 272, 2, 1, 1, False, 0, marks=pytest.mark.long),  # cluster
    pytest.param("block", 16, 136, 528, 1, 2, 1, False, 0, marks=pytest.mark.long),   # split-K
    # 256-row tiles (a lab option): rows in both halves of a tile and past M, a cluster
    pytest.param("block", 390, 136, 272, 2, 1, 2, False, 0, marks=pytest.mark.long),
    # k-blocks in pairs (a lab option): an odd count
    pytest.param("block", 70, 136, 272, 1, 1, 1, True, 0, marks=pytest.mark.long),
    # 256-column tiles in two halves: a tile whose second half lies past N (no scale_b
    # block there), a cluster
    pytest.param("block", 130, 300, 272, 2, 1, 1, False, 256, marks=pytest.mark.long),
    # row-wise scales in 224-column tiles (the H200 table's e4m3 rows at N = 28672 and
    # 8192 x 28672): a tile past N, a cluster
    pytest.param("row", 130, 300, 272, 2, 1, 1, False, 224, marks=pytest.mark.long),
])
def test_interpreter_runs_the_scaled_hopper_kernel(mode, m, n, k, cluster, split, waves,
                                                   pairs, bn):
    if split > 1:
        p = one_row(m, n, k, e4m3, f32, sms=2 * split, split=split)
    else:
        # 128-column tiles (for_scaling keeps a plan's 256 as two halves: the bn cases)
        p = dataclasses.replace(choose(m, n, k, e4m3, f32, sms=2), cluster=cluster, bn=128)
    p = for_scaling(p, mode, e4m3, f32)
    if waves > 1 or pairs:
        p = for_scaling(dataclasses.replace(p, m_waves=waves, kb_pairs=pairs), mode, e4m3, f32)
        assert p.bm == 128 * waves and p.stages >= 2
    assert p.split == split and (mode != "block" or p.bn == 128)
    if bn:      # 256 columns: the kernel takes them as two 128-column halves
        p = fitted(dataclasses.replace(p, bn=bn), e4m3, f32)
    kern = build_hopper(p, e4m3, f32, sms=2 * split, b_dtype=e5m2, scaled=mode)
    assert f"_{mode}scaled" in kern.name
    rng = np.random.default_rng(m + n + k)
    a, w = ints(rng, (m, k)), ints(rng, (n, k))
    sa, sb = scales_for(rng, mode, m, n, k)
    # the kernel's arguments: row-wise (M,) and (N,); block-wise scale_a as (KB, M)
    ka, kb = (sa.reshape(m), sb.reshape(n)) if mode == "row" else (np.ascontiguousarray(sa.T), sb)
    c = kern.interpret(a.astype(E4M3), w.astype(E5M2), ka, kb,
                       np.full((m, n), np.nan, np.float32))
    np.testing.assert_array_equal(c, reference(a, w.T, sa, sb, mode))


def _bitwise_block(kern, m, n, k) -> None:
    """The block-wise kernel (e4m3 A, e5m2 B, f32 out) on the interpreter against float64:
    integer operands and power-of-two scales, so bitwise."""
    rng = np.random.default_rng(m + n + k)
    a, w = ints(rng, (m, k)), ints(rng, (n, k))
    sa, sb = scales_for(rng, "block", m, n, k)
    c = kern.interpret(a.astype(E4M3), w.astype(E5M2), np.ascontiguousarray(sa.T), sb,
                       np.full((m, n), np.nan, np.float32))
    np.testing.assert_array_equal(c, reference(a, w.T, sa, sb, "block"))


@pytest.mark.parametrize("m,n,k,split,fields", [
    # two k-blocks a rolling iteration, five k-blocks: two iterations and one left over
    (70, 72, 592, 1, dict(bn=128, kb_roll=2)),
    # 256 columns in 64-column chunks, four k-blocks an iteration, seven k-blocks (three
    # left over); the second tile's last 128-column block lies past N
    pytest.param(70, 300, 800, 1, dict(bn=256, kb_roll=4), marks=pytest.mark.long),
    # split-K ranks of 3 and 2 k-blocks (one rolling iteration each, one left over)
    pytest.param(16, 136, 528, 2, dict(bn=128, kb_roll=2), marks=pytest.mark.long),
    # scale_a through the ring: a cluster's second tile past M (no bytes copied), a
    # tile's 4 rows before M; with rolling k-blocks and 256 columns (the shipped plan's)
    (68, 72, 272, 1, dict(bn=128, cluster=2, smem_scales=True)),
    pytest.param(132, 300, 800, 1, dict(bn=256, kb_roll=4, smem_scales=True),
                 marks=pytest.mark.long),
    # staggered consumers: the second (rows 64 .. 69) takes its first k-block as an
    # iteration of one, then one of two (the first consumer: one of two and one left)
    (70, 72, 336, 1, dict(bn=128, kb_roll=2, kb_stagger=True)),
    # eight k-blocks an iteration (a lab option): nine k-blocks (one left over)
    pytest.param(130, 72, 1168, 1, dict(bn=128, kb_roll=8), marks=pytest.mark.long),
    # staggered, a tile of one k-block (fewer than the lead: none)
    pytest.param(130, 72, 128, 1, dict(bn=128, kb_roll=4, kb_stagger=True),
                 marks=pytest.mark.long),
    # (160-column tiles: test_a_160_column_table_row_runs_block_wise_through_the_public_call,
    # rolling 80-column halves with scale_a through the ring at every place of a scale_b
    # block boundary in a tile.)
    # scale_b handed over through the ring by the producer (sb_ring, a lab option), several
    # tiles a CTA: each stage's slot written again after the consumers read it
    pytest.param(68, 300, 272, 1, dict(bn=128, smem_scales=True, sb_ring=True),
                 marks=pytest.mark.long),
])
def test_interpreter_runs_block_loop_variants(m, n, k, split, fields):
    """``Plan.kb_roll`` (k-blocks in turn through two temporaries, each promoted under the
    next one's wgmmas, then the k-blocks a whole iteration leaves one at a time) and
    ``Plan.smem_scales`` (``scale_a`` copied beside A into each ring stage)."""
    if split > 1:
        p = one_row(m, n, k, e4m3, f32, sms=2 * split, split=split)
    else:
        p = dataclasses.replace(choose(m, n, k, e4m3, f32, sms=2), cluster=1)
    p = fitted(dataclasses.replace(for_scaling(p, "block", e4m3, f32),
                                   **{"kb_roll": 0, "smem_scales": False, **fields}), e4m3, f32)
    assert p.split == split and p.smem_bytes(e4m3, f32) <= 227 * 1024
    kern = build_hopper(p, e4m3, f32, sms=2 * split, b_dtype=e5m2, scaled="block")
    assert kern.name.endswith(f"{'_r%d' % p.kb_roll if p.kb_roll else ''}"
                              f"{'_ss' if p.smem_scales else ''}_blockscaled")
    assert ("_stg_" in kern.name) == p.kb_stagger
    _bitwise_block(kern, m, n, k)


def test_staggered_and_eight_kblock_rolls_are_block_wise_plan_fields():
    """``Plan.kb_stagger`` needs rolling k-blocks (``kb_roll`` 2, 4 or 8); other scaling
    modes drop both; 160-column tiles take neither k-block pairs nor 256-row tiles."""
    p = for_scaling(choose(4096, 7168, 16384, e4m3, bf16), "block", e4m3, bf16)
    with pytest.raises(ValueError, match="kb_stagger .* needs kb_roll"):
        dataclasses.replace(p, kb_roll=0, kb_stagger=True)
    with pytest.raises(ValueError, match="0, 2, 4 or 8 k-blocks"):
        dataclasses.replace(p, kb_roll=16)
    with pytest.raises(ValueError, match=r"as 160 \(two scale_b blocks\)"):
        build_hopper(dataclasses.replace(p, bn=160, kb_roll=0, kb_pairs=True), e4m3, bf16,
                     scaled="block")
    with pytest.raises(ValueError, match="sb_ring .* needs smem_scales"):
        dataclasses.replace(p, smem_scales=False, sb_ring=True)
    s8 = dataclasses.replace(p, kb_roll=8, kb_stagger=True)
    assert s8.options_tag == "_stg" + p.options_tag and "_stg" not in p.options_tag
    row = for_scaling(s8, "row", e4m3, bf16)
    assert row.kb_roll == 0 and not row.kb_stagger
    # a 160-column plan (a table row's) stays, as a 256-column one does
    w160 = for_scaling(dataclasses.replace(choose(4096, 7168, 16384, e4m3, bf16), bn=160),
                       "block", e4m3, bf16, smem_scales=True)
    assert (w160.bn, w160.cluster, w160.kb_roll, w160.smem_scales) == (160, 1, 4, True)
    assert w160.smem_bytes(e4m3, bf16) <= 227 * 1024 and w160.stages == 5


@pytest.mark.parametrize("m,n,k,split", [
    # ten k-blocks: two rolling iterations of four and two left over; N past a tile
    (100, 136, 1168, 1),
    # split-K ranks of 3 and 2 k-blocks (no whole iteration: one at a time)
    pytest.param(128, 72, 656, 2, marks=pytest.mark.long),
])
def test_one_row_block_plans_roll_four_kblocks(m, n, k, split):
    """One tile row (M 65 to 128): the block-wise plan rolls four k-blocks with scale_a
    through the ring and the consumer index in uniform registers; bitwise the float64
    product on the interpreter."""
    p = for_scaling(one_row(m, n, k, e4m3, f32, sms=2 * split, split=split), "block", e4m3,
                    f32, smem_scales=True, one_row=True)
    assert (p.kb_roll, p.smem_scales, p.uniform_cons, p.split) == (4, True, True, split)
    kern = build_hopper(p, e4m3, f32, sms=2 * split, b_dtype=e5m2, scaled="block")
    _bitwise_block(kern, m, n, k)


def test_one_row_rule_leaves_other_plans():
    """The op takes the rule at M 65 to 128 only (M <= 64 keeps its plan's loop), the
    many-row plans and the other scaling modes keep theirs."""
    from ptxdsl.ops.matmul.api import hopper_kernel

    def name(m, mode="block"):
        return hopper_kernel(m, 8192, 8192, e4m3, bf16, None, None, 132, scaled=mode,
                             smem_scales=True).name
    assert "_r4" in name(128) and "_ss" in name(128) and "_uc" in name(128)
    assert "_r4" not in name(64) and "_uc" not in name(64)
    assert "_r4" not in name(128, "row")
    big = choose(4096, 7168, 16384, e4m3, bf16)
    assert for_scaling(big, "block", e4m3, bf16, True, one_row=False) == \
        for_scaling(big, "block", e4m3, bf16, True)


def test_block_scaled_plans_take_128_column_tiles():
    p = choose(4096, 7168, 4096, e4m3, bf16)
    assert p.bn == 256 and p.cluster == 2 and for_scaling(p, "row", e4m3, bf16) == p
    # 256 columns stay (two 128-column halves), without the cluster: the lab's fastest
    # with four k-blocks rolled, scale_a through the ring where the caller allows it
    w256 = for_scaling(p, "block", e4m3, bf16)
    assert w256.bn == 256 and w256.cluster == 1 and w256.smem_bytes(e4m3, bf16) <= 227 * 1024
    assert w256.kb_roll == 4 and not w256.smem_scales
    ss = for_scaling(p, "block", e4m3, bf16, smem_scales=True)
    assert ss.smem_scales and ss.smem_bytes(e4m3, bf16) <= 227 * 1024
    q = for_scaling(dataclasses.replace(p, bn=192), "block", e4m3, bf16)
    assert q.bn == 128 and q.stages > p.stages
    with pytest.raises(ValueError, match="64- or 128-column"):
        build_hopper(dataclasses.replace(p, bn=192), e4m3, bf16, scaled="block")
    with pytest.raises(ValueError, match="256 .two 128-column halves. without m_waves"):
        build_hopper(dataclasses.replace(p, kb_pairs=True), e4m3, bf16, scaled="block")
    with pytest.raises(ValueError, match="scaled must be"):
        build_hopper(q, e4m3, bf16, scaled="column")
    # 256-row tiles and k-block pairs: block-wise only, the ring re-fitted to 48 KiB stages
    w = for_scaling(dataclasses.replace(q, m_waves=2), "block", e4m3, bf16)
    assert w.bm == 256 and w.stages == 4 and w.smem_bytes(e4m3, bf16) <= 227 * 1024
    assert for_scaling(dataclasses.replace(p, m_waves=2, kb_pairs=False), "row", e4m3,
                       bf16) == p
    with pytest.raises(ValueError, match="dense block-wise fp8 kernel's"):
        build_hopper(dataclasses.replace(q, kb_pairs=True), e4m3, bf16, scaled=True)
    with pytest.raises(ValueError, match="m_waves=2"):
        dataclasses.replace(q, m_waves=2, kb_pairs=True)
    # rolling k-blocks: 2 or 4 an iteration, block-wise only, m64n64 chunks of 256 columns
    r = dataclasses.replace(w256, kb_roll=2)
    assert for_scaling(r, "row", e4m3, bf16).kb_roll == 0
    assert "m64n64k32" in build_hopper(r, e4m3, bf16, scaled="block").ptx("sm_90a")
    with pytest.raises(ValueError, match="kb_roll=3"):
        dataclasses.replace(q, kb_roll=3)
    with pytest.raises(ValueError, match="kb_roll=2"):
        dataclasses.replace(q, kb_roll=2, kb_pairs=True)
    with pytest.raises(ValueError, match="dense block-wise fp8 kernel's"):
        build_hopper(dataclasses.replace(q, kb_roll=2), e4m3, bf16, scaled="row")
    # scale_a through the ring: 512 bytes a stage, M a multiple of 4
    ss = fitted(dataclasses.replace(w256, smem_scales=True), e4m3, bf16)
    assert ss.stage_bytes(e4m3) == w256.stage_bytes(e4m3) + 512 and ss.stages == 4
    with pytest.raises(ValueError, match="M = 70 must be a multiple of 4"):
        grid_for(ss, 132)(70, 4096, 4096)
    assert grid_for(ss, 132)(72, 4096, 4096) == grid_for(w256, 132)(72, 4096, 4096)


# ---------------------------------------------------------------- the public call
@pytest.mark.parametrize("mode", ["row", "block"])
def test_numpy_scaled_matmul_on_the_simt_kernel(mode):
    rng = np.random.default_rng(11)
    m, n, k = 6, 20, 36 if mode == "row" else 140    # block-wise: the second k-block 12 long
    a = ints(rng, (m, k))
    b = ints(rng, (n, k)).T                # x @ w.T
    sa, sb = scales_for(rng, mode, m, n, k)
    bias = ints(rng, (n,))
    c = matmul(a.astype(E4M3), b.astype(E5M2), scale_a=sa, scale_b=sb, bias=bias,
               activation="relu", out_dtype=np.float32)
    np.testing.assert_array_equal(c, np.maximum(reference(a, b, sa, sb, mode) + bias, 0))


@pytest.mark.parametrize("mode", [pytest.param("row", marks=pytest.mark.long), "block"])
def test_sm90_dispatch_runs_the_scaled_hopper_kernel(monkeypatch, mode):
    """On a stand-in sm_90 device the public call runs the Hopper kernel (on the
    interpreter) with the mode's plan and scale arrays: random normal operands, bf16
    output within its rounding, a gelu epilogue; a row-major block-wise scale_a copied."""
    from runtime_fakes import fake_sm90_dispatch
    from ptxdsl.ops.matmul import api
    seen = []

    def hopper_kernel(*args, **kw):
        seen.append(args[-1])
        return real(*args, **kw)
    real = api.hopper_kernel
    fake_sm90_dispatch(monkeypatch, hopper_kernel)
    monkeypatch.setattr(api, "KERNELS", type(api.KERNELS)())
    rng = np.random.default_rng(12)
    m, n, k = 40, 144, 192
    a = rng.standard_normal((m, k)).astype(E4M3)
    w = rng.standard_normal((n, k)).astype(E4M3)
    sa, sb = scales_for(rng, mode, m, n, k)
    bias = rng.standard_normal(n).astype(np.float32)
    c = matmul(a, w.T, scale_a=sa, scale_b=sb, bias=bias, activation="gelu")
    assert seen == [mode] and c.dtype == ml_dtypes.bfloat16
    from ptxdsl.ops.matmul.epilogue import reference as act
    want = act(reference(a, w.T, sa, sb, mode) + bias, "gelu", np)
    np.testing.assert_allclose(c.astype(np.float64), want, rtol=2 ** -7, atol=2 ** -7)


@pytest.mark.long
def test_a_160_column_table_row_runs_block_wise_through_the_public_call(monkeypatch):
    """A table row with 160-column tiles reaches the block-wise kernel as it is
    (``plan.for_scaling``: rolling 80-column halves, no cluster, scale_a through the
    ring): tiles at every place of a ``scale_b`` block boundary, bf16 out within its
    rounding of the float64 reference."""
    from runtime_fakes import fake_sm90_dispatch
    from ptxdsl.ops.matmul import api, plan
    built = []

    def hopper_kernel(*args, **kw):
        kern = real(*args, **kw)
        built.append(kern.name)
        return kern
    real = api.hopper_kernel
    fake_sm90_dispatch(monkeypatch, hopper_kernel)
    monkeypatch.setattr(api, "KERNELS", type(api.KERNELS)())
    monkeypatch.setattr(plan, "measured", lambda *a: {"plan": {"bn": 160, "cluster": 1}})
    rng = np.random.default_rng(16)
    m, n, k = 132, 600, 400
    a = rng.standard_normal((m, k)).astype(E4M3)
    w = rng.standard_normal((n, k)).astype(E4M3)
    sa, sb = scales_for(rng, "block", m, n, k)
    c = matmul(a, w.T, scale_a=np.asfortranarray(sa), scale_b=sb)
    assert len(built) == 1 and "_n160_" in built[0] and built[0].endswith("_r4_ss_blockscaled")
    want = reference(a, w.T, sa, sb, "block")
    np.testing.assert_allclose(c.astype(np.float64), want, rtol=2 ** -7, atol=2 ** -7)


@pytest.mark.long
def test_torch_cpu_column_major_block_scales():
    torch = pytest.importorskip("torch")
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("torch without float8")
    rng = np.random.default_rng(13)
    m, n, k = 5, 12, 140
    a, w = ints(rng, (m, k)), ints(rng, (n, k))
    ta = torch.from_numpy(a).to(torch.float8_e4m3fn)
    tw = torch.from_numpy(w).to(torch.float8_e4m3fn)
    sa, sb = scales_for(rng, "block", m, n, k)
    # torch._scaled_mm keeps a block-wise scale_a column-major: read in place
    tsa = torch.from_numpy(np.ascontiguousarray(sa.T)).t()
    c = matmul(ta, tw.t(), scale_a=tsa, scale_b=torch.from_numpy(sb), out_dtype=torch.float32)
    assert torch.equal(c.double(), torch.from_numpy(reference(a, w.T, sa, sb, "block")))


@pytest.mark.parametrize("call,match", [
    (lambda a, b: matmul(a, b, scale_a=np.ones((4, 1), np.float32)), "fit no scaling mode"),
    (lambda a, b: matmul(a, b, scale_a=np.ones((4, 1), np.float32),
                         scale_b=np.ones((6, 1), np.float32)), r"row-wise \(scale_a \(4, 1\)"),
    (lambda a, b: matmul(a, b, scale_a=np.ones((4, 2), np.float32),
                         scale_b=np.ones((1, 1), np.float32)), r"block-wise \(scale_a \(4, 1\)"),
    (lambda a, b: matmul(a, b, scale_a=np.ones((4, 1), np.float64),
                         scale_b=np.ones((1, 6), np.float32)), "float32 array of a row-wise"),
    (lambda a, b: matmul(a[None], b, scale_a=np.ones((4, 1), np.float32),
                         scale_b=np.ones((1, 6), np.float32)), "batched operands take per-tensor"),
])
def test_scale_errors_name_the_callers_line(call, match):
    a, b = np.ones((4, 5), E4M3), np.ones((5, 6), E4M3)
    with pytest.raises(LaunchError, match=match) as e:
        call(a, b)
    assert "test_fp8_scales.py" in str(e.value)


def test_scale_a_goes_through_the_ring_only_when_its_copies_are_whole():
    """``Plan.smem_scales`` copies 16-byte pieces of the kernel's (K/128, M) ``scale_a``:
    M a multiple of 4 and a 16-byte aligned base, else the plan reads it from global."""
    from ptxdsl.ops.matmul.fp8 import ring_scales_ok
    buf = np.zeros(4 * 64 + 4, np.float32)
    base = buf[(-buf.ctypes.data % 16) // 4:][:4 * 64].reshape(4, 64)
    assert ring_scales_ok(base, 64)
    assert not ring_scales_ok(base, 62)
    assert not ring_scales_ok(buf[((-buf.ctypes.data % 16) // 4) + 1:][:4 * 60].reshape(4, 60), 60)


@pytest.mark.long
@pytest.mark.ptxas
def test_sb_ring_lab_set_assembles_without_spills():
    """``lab/fp8_block_plans.py --set sbr`` at 4096 x 7168 x 16384: the ``sb_ring`` lab
    option once (its ``sbr`` variant, the shipped 256-column plan's loop with scale_b
    through the ring) through ptxas -v (no spills, no warnings), the ring kept at the plan's depth
    (the slots lie in the barriers' room), and the consumers' main loop without a global
    load (``scale_b`` from the stage) where a disassembler is found."""
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", ".."))
    from lab.fp8_block_plans import SB_RING, variants
    from lab.matmul_uniform import main_loops
    from ptxdsl import toolchain
    got = variants(4096, 7168, 16384, 132, "H200")
    for name in list(SB_RING)[:1]:
        p = got[name]
        plain = dataclasses.replace(p, sb_ring=False)
        assert p.stages == fitted(plain, e4m3, bf16).stages
        kern = build_hopper(p, e4m3, bf16, sms=132, scaled="block")
        r = kern.resources()
        assert r.spill_stores + r.spill_loads + r.local == 0, name
        assert not kern.check().warnings, name
        if toolchain.find_tool("nvdisasm") or toolchain.find_tool("cuobjdump"):
            loops = main_loops(kern.sass())
            assert loops and not any("LDG" in t for body in loops for t in body), name
