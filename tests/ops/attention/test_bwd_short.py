"""``BwdConfig.prep_wide`` (:mod:`ptxdsl.ops.attention.bwd_prepw`: the preprocess and
postprocess in 16-byte accesses, D / 8 threads a row) and ``BwdConfig.dkv_tma``
(:mod:`ptxdsl.ops.attention.bwd_epi`: dK, dV through K's and V's shared tiles by TMA
stores), ``BwdConfig.dq_exit_read`` (the dQ writer's last wait for reads only) and
``BwdConfig.lpt_units`` (CTAs in key block-major sections): what they emit
and refuse, the wide kernels against :mod:`.bwd_prep`'s on the CPU
interpreter (padded rows, -inf LSE, the deterministic semaphores), dq, dk, dv against
float64 with all three on the plan rows of head dims 64 and 128 (ragged key blocks past SK,
GQA, causal / full; lpt_units' sections), varlen falling back, and ptxas -v (incl. the
80-query tile)."""
from __future__ import annotations

import numpy as np
import pytest

from ptxdsl.core.types import bf16, f16
from ptxdsl.ops import attention_backward
from ptxdsl.ops.attention import attention_backward_reference, attention_reference, bwd_api
from ptxdsl.ops.attention.bwd import build_backward
from ptxdsl.ops.attention.bwd_config import BwdConfig
from ptxdsl.ops.attention.bwd_m80 import build_backward_m80
from ptxdsl.ops.attention.bwd_prep import build_postprocess, build_preprocess
from ptxdsl.ops.attention.bwd_prepw import build_postprocess_wide, build_preprocess_wide
from ptxdsl.ops.attention.config import Mask
from ptxas_resources import resources_or_skip  # noqa: E402

ml_dtypes = pytest.importorskip("ml_dtypes")
BF16 = ml_dtypes.bfloat16
from attention_bwd_checks import check_grads, check_varlen_causal, gqa_grads_match  # noqa: E402

H128 = dict(stages=2, dq_tma=True, overlap=1, dq_swizzle=True, dq_split=True, ds_double=True,
            dq_warp=True, dk_last=True)
H64 = dict(stages=2, dq_tma=True, dq_swizzle=True, block_m=128, overlap=1, ds_double=True,
           dq_warp=True, dk_last=True, s_ahead=2)
M80 = dict(stages=2, dq_tma=True, overlap=1, dq_swizzle=True, block_m=80, ds_double=True,
           dq_warp=True, dk_last=True, dq_swap=True)


def test_refuses_what_it_cannot_do():
    """prep_wide: head dims whose D / 8 threads do not divide a warp; dkv_tma: the
    layouts whose warpgroups do not own 64 keys of every column, and varlen."""
    with pytest.raises(ValueError, match="prep_wide"):
        build_preprocess_wide(bf16, 96)
    with pytest.raises(ValueError, match="prep_wide"):
        build_postprocess_wide(bf16, 160, 0.1)
    with pytest.raises(ValueError, match="dkv_tma"):
        BwdConfig(stages=2, dq_tma=True, dq_swizzle=True, col_split=True, dkv_tma=True)
    with pytest.raises(ValueError, match="dkv_tma"):
        build_backward(BwdConfig(**H128, dkv_tma=True), bf16, 128, scale=0.1, varlen=True)
    with pytest.raises(ValueError, match="lpt_units"):
        BwdConfig(lpt_units=-1)
    with pytest.raises(ValueError, match="dq_exit_read"):
        BwdConfig(stages=2, dq_tma=True, dq_exit_read=True)
    assert "_kvt_lpt4" in BwdConfig(**H128, dkv_tma=True, lpt_units=4).tag
    assert BwdConfig(**H128, prep_wide=True).tag == BwdConfig(**H128).tag  # main unchanged


@pytest.mark.long
def test_wide_kernels_emit_16_byte_accesses():
    """The wide preprocess: two v4 loads a row (O, dO) and two v4 zero stores; the
    postprocess: two v4 f32 loads and one v4 store a row; an f16 build too."""
    pre = build_preprocess_wide(bf16, 128).ptx()
    assert pre.count("ld.global.v4.b32") == 4 and pre.count("st.global.v4.f32") == 4
    assert pre.count("shfl.sync.bfly.b32") == 2 * 4          # log2(16) a row, two rows
    post = build_postprocess_wide(f16, 64, 0.1).ptx()
    assert post.count("ld.global.v4.f32") == 4 and post.count("st.global.v4.b32") == 2


@pytest.mark.long
@pytest.mark.parametrize("d,shape,det", [(64, (2, 100, 3), True), (128, (1, 70, 2), False),
                                         (192, (1, 70, 2), True)],
                         ids=["64-det", "128-default", "192-det"])
def test_wide_kernels_match_the_warp_a_row_ones(d, shape, det):
    """Same dpsum, nlse2 (-inf for a row that saw no key and for padding), zeroed dq_acc
    (and semaphores) from NaN-filled buffers; the postprocess bitwise the same."""
    b, sq, h = shape
    rng = np.random.default_rng(d)
    o, do = (rng.standard_normal((b, sq, h, d)).astype(BF16) for _ in range(2))
    lse = rng.standard_normal((b, h, sq)).astype(np.float32)
    lse[0, 0, 3] = -np.inf
    sqp = -(-sq // 64) * 64
    res = []
    for build in (build_preprocess, build_preprocess_wide):
        outs = [np.full((b, h, sqp), np.nan, np.float32), np.full((b, h, sqp), np.nan, np.float32),
                np.full((b, h, sqp, d), np.nan, np.float32)]
        if det:
            outs.append(np.full((b, h, sqp // 64), 7, np.uint32))
        build(bf16, d, deterministic=det).interpret(o, do, lse, *outs)
        res.append(outs)
    for x, y in zip(*res):
        assert not np.isnan(y).any()
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-5)
    acc = rng.standard_normal((b, h, sqp, d)).astype(np.float32)
    got = []
    for build in (build_postprocess, build_postprocess_wide):
        dq = np.full((b, sq, h, d), 7, BF16)
        build(bf16, d, 0.3).interpret(acc, dq)
        got.append(dq.astype(np.float32))
    assert (got[0] == got[1]).all()


def _case(monkeypatch, c, d, sq, sk, seed, **kw):
    """q, dout (1, sq, 2, d), k, v (1, sk, 1, d): GQA, bf16, against float64."""
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *_a, **_k: c)
    gqa_grads_match(d, sq, sk, seed, **kw)


@pytest.mark.long
@pytest.mark.parametrize("base,d,sq,sk,kw", [
    (H64, 64, 90, 130, {}), (dict(H128, lpt_units=8), 128, 70, 100, dict(causal=True))],
    ids=["64-full", "128-causal-lpt8"])
def test_matches_float64(monkeypatch, base, d, sq, sk, kw):
    """The plan rows with all three (bwd_plans.json's head dim 64 full / window row, head
    dim 128's causal 64-row one; the 80-query tile's rows: test_bwd_m80_*.py, head dim
    64's causal row: test_bwd_pair.py): two key blocks (the second past SK: the TMA store
    clips its rows), several steps a CTA, both heads of the GQA group summed before the
    store."""
    c = BwdConfig(**base, prep_wide=True, dkv_tma=True, dq_exit_read=True)
    _case(monkeypatch, c, d, sq, sk, sq + sk, **kw)


@pytest.mark.long
def test_longest_first_sections_match_float64(monkeypatch):
    """lpt_units 2 over 3 (batch, K/V head) units (a last section of one), 3 key blocks a
    unit, causal with more keys than queries: every CTA's (key block, unit) once."""
    monkeypatch.setattr(bwd_api, "choose_bwd",
                        lambda *_a, **_k: BwdConfig(**H128, lpt_units=2, dkv_tma=True))
    rng = np.random.default_rng(3)
    q, k, v, do = (rng.standard_normal((3, s, 1, 128)).astype(BF16) for s in (70, 260, 260, 70))
    out, lse = attention_reference(q, k, v, causal=True)
    got = attention_backward(do, q, k, v, out.astype(BF16), lse.astype(np.float32),
                             causal=True)
    check_grads(got, attention_backward_reference(do, q, k, v, causal=True))


@pytest.mark.long
def test_varlen_falls_back(monkeypatch):
    """A plan with both options: varlen takes bwd_prep's padded-row kernels and the
    st.global epilogue (a sequence's last key block is not whole)."""
    c = BwdConfig(**dict(H128, prep_wide=True, dkv_tma=True))
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *_a, **_k: c)
    rng = np.random.default_rng(5)
    cq, ck = np.array([0, 70, 90], np.int32), np.array([0, 40, 170], np.int32)
    q, do = (rng.standard_normal((90, 2, 128)).astype(BF16) for _ in range(2))
    k, v = (rng.standard_normal((170, 1, 128)).astype(BF16) for _ in range(2))
    check_varlen_causal(q, k, v, do, cq, ck)


@pytest.mark.long
@pytest.mark.parametrize("base,d,mask,det", [
    (H64, 64, Mask(), False), (H64, 64, Mask(40, 3), False), (H128, 128, Mask(-1, 0), True),
    (M80, 128, Mask(), False)], ids=["64-full", "64-window", "128-causal-det", "m80-full"])
def test_ptxas_keeps_everything_in_registers_and_pipelined(base, d, mask, det):
    """dkv_tma with dq_exit_read adds no spills and no wgmma serialization notice
    (C7510-C7520) to the plan rows' kernels (the 80-query tile has no deterministic mode,
    nor window rows); two TMA stores a panel; the writer ends on a read wait."""
    c = BwdConfig(**base, dkv_tma=True, dq_exit_read=True)
    build = build_backward_m80 if c.dq_swap else build_backward
    k = build(c, bf16, d, mask, scale=0.07, deterministic=det)
    r = resources_or_skip(k)
    assert r.spill_stores == 0 and r.spill_loads == 0 and r.local == 0, k.name
    assert "Performance Loss" not in k.check().log, k.name
    text = k.ptx()
    assert text.count("cp.async.bulk.tensor.4d.global.shared::cta") == 2 * (d // 64)
    # the writer's last wait is for reads: one full wait fewer than without dq_exit_read
    plain = build(BwdConfig(**base, dkv_tma=True), bf16, d, mask, scale=0.07,
                  deterministic=det).ptx()
    full = "cp.async.bulk.wait_group 0"
    assert plain.count(full) - text.count(full) == 1
