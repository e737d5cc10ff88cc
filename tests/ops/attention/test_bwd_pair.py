"""``BwdConfig.kv_pair`` (:mod:`ptxdsl.ops.attention.bwd_pair`): a CTA walks key blocks ``p``
and ``nblk - 1 - p`` of one (batch, K/V head) unit, the ring, the dQ writer's stages and
the carried Sᵀ running on across them, K and V reloaded once the first block's dK, dV have
left by TMA. What it refuses, dq, dk, dv against float64 on the CPU interpreter (the plan
row on an odd key-block count, whose middle block walks alone, GQA, causal; its lab
variants once each: an even count, full and a window with a key block that has no step),
and ptxas -v."""
from __future__ import annotations

import numpy as np
import pytest

from ptxdsl.core.types import bf16
from ptxdsl.ops import attention_backward
from ptxdsl.ops.attention import attention_backward_reference, attention_reference, bwd_api
from ptxdsl.ops.attention.bwd import build_backward
from ptxdsl.ops.attention.bwd_config import BwdConfig
from ptxdsl.ops.attention.bwd_layout import Smem
from ptxdsl.ops.attention.config import Mask
from ptxas_resources import resources_or_skip  # noqa: E402

ml_dtypes = pytest.importorskip("ml_dtypes")
BF16 = ml_dtypes.bfloat16
from attention_bwd_checks import check_grads  # noqa: E402

# head dim 64's plan row (bwd_plans.json row 0) and head dim 128's causal 64-row tile
H64 = dict(stages=2, dq_tma=True, dq_swizzle=True, block_m=128, overlap=1, ds_double=True,
           dq_warp=True, dk_last=True, s_ahead=2, prep_wide=True, dkv_tma=True,
           dq_exit_read=True)
H128 = dict(stages=2, dq_tma=True, overlap=1, dq_swizzle=True, dq_split=True, ds_double=True,
            dq_warp=True, dk_last=True, prep_wide=True, dkv_tma=True, dq_exit_read=True)
ST64 = dict(H64, dkv_tma=False)
KS64, KS128 = dict(H64, dkv_stage=True), dict(H128, dkv_stage=True)


def test_refuses_what_it_cannot_do():
    """Without the writer warp (its stages run on across the walks), with another CTA
    order, and in the deterministic mode (its turns assume a key block a CTA)."""
    with pytest.raises(ValueError, match="kv_pair"):
        BwdConfig(**{**H64, "dq_warp": False}, kv_pair=True)
    with pytest.raises(ValueError, match="kv_pair"):
        BwdConfig(**H64, kv_pair=True, lpt_units=8)
    with pytest.raises(ValueError, match="kv_pair"):
        build_backward(BwdConfig(**H64, kv_pair=True), bf16, 64, Mask(-1, 0), scale=0.1,
                       deterministic=True)
    with pytest.raises(ValueError, match="dkv_stage"):
        BwdConfig(**H64, dkv_stage=True)
    with pytest.raises(ValueError, match="dkv_stage"):
        BwdConfig(**ST64, kv_pair=True, dkv_stage=True)
    with pytest.raises(ValueError, match="pair_max"):
        BwdConfig(**H64, pair_max=4)
    assert BwdConfig(**H64, kv_pair=True).tag.endswith("_kvp")
    assert BwdConfig(**H64, kv_pair=True, pair_max=32).tag.endswith("_kvp_pm32")
    assert BwdConfig(**KS64, kv_pair=True).tag.endswith("_kvp_kvs")
    c = BwdConfig(**H64, kv_pair=True)          # kvempty: 8 bytes past the plan row's
    assert c.smem_bytes(64) == Smem(c, 64, 2).total == BwdConfig(**H64).smem_bytes(64) + 8


def _case(monkeypatch, c, d, h, sq, sk, seed, **kw):
    """q, dout (1, sq, h, d), k, v (1, sk, 1, d) (h 2: GQA), bf16, against float64."""
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *_a, **_k: c)
    rng = np.random.default_rng(seed)
    q, k, v, do = (rng.standard_normal((1, s, n, d)).astype(BF16)
                   for s, n in ((sq, h), (sk, 1), (sk, 1), (sq, h)))
    out, lse = attention_reference(q, k, v, **kw)
    got = attention_backward(do, q, k, v, out.astype(BF16), lse.astype(np.float32), **kw)
    check_grads(got, attention_backward_reference(do, q, k, v, **kw))


@pytest.mark.long
@pytest.mark.parametrize("base,d,h,sq,sk,kw", [
    # the plan row (bwd_plans.json row 0, pair_max 32): 3 key blocks: walks (0, 2) and (1)
    (dict(KS64, pair_max=32), 64, 2, 60, 260, dict(causal=True)),
    # pair_max: 3 key blocks > 2 walk one a CTA
    (dict(KS64, pair_max=2), 64, 1, 130, 260, dict(causal=True)),
    # with dkv_tma, without dkv_stage: 4 key blocks, the first two without a step
    (H64, 64, 1, 60, 400, dict(window_size=(20, 3))),
    # without dkv_tma: K, V released after the last wgmmas, dK, dV by st.global
    (ST64, 64, 1, 60, 260, {}),
    # head dim 128's 64-row tile with dkv_stage
    (KS128, 128, 1, 40, 300, dict(causal=True))],
    ids=["64-row-causal-odd-gqa", "64pm2-unpaired", "64-window", "64st-full", "128ks-causal"])
def test_matches_float64(monkeypatch, base, d, h, sq, sk, kw):
    """The plan row on a causal GQA shape, and each lab variant of it once (dkv_tma
    without dkv_stage, neither, head dim 128, a unit longer than pair_max)."""
    _case(monkeypatch, BwdConfig(**base, kv_pair=True), d, h, sq, sk, sq + sk, **kw)


@pytest.mark.ptxas
@pytest.mark.long
@pytest.mark.parametrize("base,d,mask", [
    (dict(KS64, pair_max=32), 64, Mask(-1, 0)), (H64, 64, Mask(40, 3)), (ST64, 64, Mask()),
    (KS128, 128, Mask(-1, 0))], ids=["64ks-pm32-causal", "64-window", "64st-full",
                                      "128ks-causal"])
def test_ptxas_keeps_everything_in_registers_and_pipelined(base, d, mask):
    """No spills and no wgmma serialization notice (C7510-C7518; dkv_stage's kernels carry
    the C7519 of the plan row's first Sᵀ under a branch)."""
    k = build_backward(BwdConfig(**base, kv_pair=True), bf16, d, mask, scale=0.07)
    r = resources_or_skip(k)
    assert r.spill_stores == 0 and r.spill_loads == 0 and r.local == 0, k.name
    assert "Performance Loss" not in k.check().log, k.name


@pytest.mark.long
@pytest.mark.parametrize("kw", [dict(varlen=True), dict(deterministic=True)],
                         ids=["varlen", "det"])
def test_varlen_and_deterministic_walk_one_key_block_a_cta(monkeypatch, kw):
    """A plan row with kv_pair: the varlen and deterministic kernels drop it (and
    dkv_stage, pair_max) rather than refuse."""
    c = BwdConfig(**H128, kv_pair=True, dkv_stage=True, pair_max=8)
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *_a, **_k: c)
    main = bwd_api.backward_kernels(128, causal=True, **kw)[1]
    assert "_kvp" not in main.name and "_kvs" not in main.name, main.name
