"""The backward's kernels as built for the plan table's configs: what they emit, and that
ptxas keeps them in registers (no spills) for every head dim, mask and mode."""
from __future__ import annotations

import pytest

from ptxdsl.core.types import bf16
from ptxdsl.ops.attention import backward_kernels
from ptxdsl.ops.attention.bwd import build_backward
from ptxdsl.ops.attention.bwd_config import BWD_HEAD_DIMS, BwdConfig, choose_bwd
from ptxdsl.ops.attention.config import Mask
from ptxas_resources import resources_or_skip  # noqa: E402


def test_plan_rows_cover_every_head_dim_and_refuse_others():
    for d in BWD_HEAD_DIMS:
        for mask in (Mask(), Mask(-1, 0), Mask(32, 0)):
            assert choose_bwd(d, "bf16", mask).smem_bytes(d) <= 232448
    with pytest.raises(ValueError, match="head dims 64, 96, 128, 192, 256"):
        choose_bwd(80, "bf16", Mask())
    for softcap in (False, True):
        # 256: both warpgroups on 64 keys, each with half of the columns; 192: three
        # warpgroups on 96 keys (FlashAttention-3's tile), deterministic with the writer warp
        c = choose_bwd(256, "bf16", Mask(-1, 0), softcap)
        assert c.col_split and c.block_n == 64 and c.smem_bytes(256) <= 232448
        c = choose_bwd(192, "bf16", Mask(-1, 0), softcap)
        assert c.wg3 and c.block_n == 96 and c.smem_bytes(192) <= 232448
        c = choose_bwd(192, "bf16", Mask(-1, 0), softcap, True)
        assert c.wg3 and c.dq_warp


def test_varlen_skips_rows_of_128_query_steps():
    """Head dim 64's default plan steps 128 queries (with a dSᵀ pair per slot); varlen,
    whose padded rows start every 64, takes the next row, and softcap (which spills with
    128-query steps) keeps the 64-row plan; the deterministic mode steps 128 queries with the
    writer warp, but not in varlen."""
    assert choose_bwd(64, "bf16", Mask(-1, 0)).block_m == 128
    for kw in (dict(varlen=True), dict(softcap=True),
               dict(deterministic=True, varlen=True)):
        c = choose_bwd(64, "bf16", Mask(-1, 0), **kw)
        assert c.block_m == 64 and not c.ds_double, kw
    c = choose_bwd(64, "bf16", Mask(-1, 0), deterministic=True)
    assert c.block_m == 128 and c.dq_warp and not c.s_ahead


def test_main_kernel_emits_the_fa3_structure():
    """Head dim 128 steps FA3's 64 queries under a causal mask (dense: dQ's halves added
    by one 1-D bulk reduction each, dq_frag; varlen: by the tensor reduce), 80 under a full
    one (Sᵀ, dPᵀ m64n80, dQ swapAB)."""
    dense = backward_kernels(128, causal=True)[1].ptx()
    assert "m64n80k16" not in dense and "_dqf" in dense and "_m80_" not in dense
    assert "cp.reduce.async.bulk.global.shared::cta" in dense
    full = backward_kernels(128)[1].ptx()
    assert "m64n80k16" in full and "m64n64k16" not in full and "_m80_" in full
    text = backward_kernels(128, causal=True, varlen=True)[1].ptx()
    assert "setmaxnreg.dec.sync.aligned.u32" in text and "setmaxnreg.inc" in text
    assert text.count("wgmma.mma_async.sync.aligned.m64n64k16") >= 2 * 8 + 2 * 4
    assert "wgmma.mma_async.sync.aligned.m64n128k16" in text          # dV, dK (RS)
    assert "cp.reduce.async.bulk.tensor.3d.global.shared::cta.add.tile.bulk_group" in text  # (varlen: 3d)
    assert "red.global.add.f32" not in text                           # the plan: TMA
    # the plan's step ordering: Sᵀ and dPᵀ in two groups, Pᵀ computed while dPᵀ runs
    assert "wgmma.wait_group.sync.aligned 1;" in text
    # head dim 64's dense rows add dQ by one 1-D bulk reduction (dq_frag), the window row
    # by the tensor reduce
    assert "cp.reduce.async.bulk.global.shared::cta" in backward_kernels(64)[1].ptx()
    assert "cp.reduce.async.bulk.tensor" in backward_kernels(64, window_size=(9, 9))[1].ptx()


def test_head_dim_96_stops_its_gemms_at_96():
    """Head dim 96 in head dim 128's panels: Sᵀ, dPᵀ over 6 k-steps (m64n64k16), dV and dK
    n96 from registers, dQ an n64 chain (K's first panel) and an n32 one (the second's
    half), added as three 32-column TMA boxes."""
    text = backward_kernels(96, causal=True)[1].ptx()
    assert text.count("wgmma.mma_async.sync.aligned.m64n64k16") == 2 * 6 + 4
    assert text.count("wgmma.mma_async.sync.aligned.m64n96k16") == 2 * 4
    assert text.count("wgmma.mma_async.sync.aligned.m64n32k16") == 4
    assert text.count("cp.reduce.async.bulk.tensor") == 3
    with pytest.raises(ValueError, match="dq_swizzle"):
        build_backward(BwdConfig(stages=2, dq_tma=True), bf16, 96, scale=0.1)


def test_wide_head_dims_split_the_columns():
    """Head dim 256: Sᵀ and dPᵀ for 32 queries a warpgroup (m64n32, 16 k-steps each), dK,
    dV, dQ in 64-column pieces (m64n64, two per warpgroup); 192: 32-column pieces. Without
    pds_smem each warpgroup computes the whole Sᵀ and dPᵀ (m64n64)."""
    text = backward_kernels(256, causal=True)[1].ptx()
    assert "m64n256k16" not in text and "m64n128k16" not in text
    assert text.count("wgmma.mma_async.sync.aligned.m64n32k16") == 2 * 16
    assert text.count("wgmma.mma_async.sync.aligned.m64n64k16") == 2 * 2 * 4 + 2 * 4
    c = BwdConfig(stages=2, dq_tma=True, dq_swizzle=True, col_split=True, pds_smem=True)
    text = build_backward(c, bf16, 192, scale=0.1).ptx()
    assert text.count("wgmma.mma_async.sync.aligned.m64n32k16") == 2 * 12 + 3 * (2 * 4 + 4)
    c = BwdConfig(stages=1, dq_tma=True, dq_swizzle=True, col_split=True)
    text = build_backward(c, bf16, 256, scale=0.1).ptx()
    assert text.count("wgmma.mma_async.sync.aligned.m64n64k16") == 2 * 16 + 2 * 2 * 4 + 2 * 4
    with pytest.raises(ValueError, match="col_split"):
        BwdConfig(stages=1, dq_tma=True, col_split=True)
    with pytest.raises(ValueError, match="ds_double"):
        BwdConfig(stages=2, dq_tma=True, dq_swizzle=True, ds_double=True)
    with pytest.raises(ValueError, match="pds_smem"):
        BwdConfig(stages=1, dq_tma=True, dq_swizzle=True, col_split=True, overlap=1,
                  pds_smem=True)


@pytest.mark.ptxas
@pytest.mark.long
@pytest.mark.parametrize("d,causal,det,varlen", [
    (128, True, True, False), (64, True, False, False), (128, False, False, True),
    (96, True, True, False)])
def test_ptxas_keeps_everything_in_registers(d, causal, det, varlen):
    """The plan rows of head dims 64, 96, 128 (their preprocess, main kernel, postprocess)
    in the modes that differ in register pressure: deterministic, varlen, causal (the
    others: test_bwd_short.py, test_bwd_pair.py, test_bwd_det64_step.py,
    test_bwd_h128_dqwarp.py; 192 and 256: test_bwd_uniform.py, test_bwd_panel_split.py,
    test_bwd_h192_*.py)."""
    for k in backward_kernels(d, causal=causal, deterministic=det, varlen=varlen):
        r = resources_or_skip(k)
        assert r.spill_stores == 0 and r.spill_loads == 0 and r.local == 0, k.name


def test_block_m_128_doubles_the_queries_of_a_step():
    """Head dim 64 with 128 query rows a step: Sᵀ and dPᵀ m64n128 (4 k-steps each), dV and
    dK over 8 k-steps, dQ of the warpgroup's 64 rows over all 128 keys (8 k-steps), added
    as two 32-column boxes; both warpgroups' barrier around dSᵀ's stores."""
    c = BwdConfig(stages=2, dq_tma=True, dq_swizzle=True, block_m=128)
    k = build_backward(c, bf16, 64, Mask(-1, 0), scale=0.125)
    text = k.ptx()
    assert k.name.endswith("_m128")
    assert text.count("wgmma.mma_async.sync.aligned.m64n128k16") == 2 * 4
    assert text.count("wgmma.mma_async.sync.aligned.m64n64k16") == 2 * 8 + 8
    assert text.count("cp.reduce.async.bulk.tensor") == 2
    assert "bar.sync 3, 256;" in text
    assert c.smem_bytes(64) == 167976 and BwdConfig(stages=3, dq_tma=True, dq_swizzle=True,
                                                    block_m=128).smem_bytes(64) == 202808
    for bad in (dict(block_m=96), dict(block_m=128, dq_swizzle=False),
                dict(block_m=128, dq_split=True)):
        with pytest.raises(ValueError, match="block_m"):
            BwdConfig(**{"stages": 2, "dq_tma": True, "dq_swizzle": True, **bad})
    with pytest.raises(ValueError, match="block_m 128 is head dim 64's dense layout"):
        build_backward(c, bf16, 128, scale=0.1)
    with pytest.raises(ValueError, match="varlen"):
        build_backward(c, bf16, 64, scale=0.1, varlen=True)


def test_varlen_keeps_64_query_rows_a_step(monkeypatch):
    """A block_m 128 plan gives the varlen backward 64-row steps (its padded f32 rows
    start at multiples of 64), the dense one 128."""
    from ptxdsl.ops.attention import bwd_api
    c = BwdConfig(stages=2, dq_tma=True, dq_swizzle=True, block_m=128)
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *_a: c)
    assert bwd_api.backward_kernels(64, causal=True)[1].name.endswith("_m128")
    assert "_m128" not in bwd_api.backward_kernels(64, causal=True, varlen=True)[1].name


@pytest.mark.ptxas
@pytest.mark.long
@pytest.mark.parametrize("overlap,mask,det,stages,ds_double", [
    (0, Mask(), True, 2, False), (1, Mask(-1, 0), True, 3, False),
    (1, Mask(32, 0), True, 2, True)], ids=["o0-full-det", "o1-s3-causal-det", "o1-dsd-win-det"])
def test_ptxas_keeps_block_m_128_in_registers(overlap, mask, det, stages, ds_double):
    """The block_m 128 variants lab/attention_bwd_plans.py --set h64 times, one case each
    (the plan rows' own: test_bwd_pair.py, test_bwd_short.py): no spills (not with
    softcap, nor overlap 0 deterministic with a causal or window mask: 8-44 bytes)."""
    c = BwdConfig(stages=stages, dq_tma=True, dq_swizzle=True, block_m=128, overlap=overlap,
                  ds_double=ds_double)
    k = build_backward(c, bf16, 64, mask, scale=0.125, deterministic=det)
    r = resources_or_skip(k)
    assert r.spill_stores == 0 and r.spill_loads == 0 and r.local == 0, k.name
