"""``BwdConfig.s_ahead`` 2 in the 80-query tile (:mod:`ptxdsl.ops.attention.bwd_m80` with
:class:`~ptxdsl.ops.attention.bwd_ahead.Ahead`): the next step's Sᵀ queued behind dK in
dQ's accumulator once dQ is staged. What it accepts and emits, the CPU interpreter's dq,
dk, dv against float64 (ring wrap, GQA, a CTA with no step, ``lpt_units``), and ptxas
-v. (The deterministic mode's turns run without s_ahead, the shipped det row's step:
test_bwd_m80_det.py; det with s_ahead is in no row.)"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from ptxdsl.core.types import bf16
from ptxdsl.ops import attention_backward
from ptxdsl.ops.attention import attention_backward_reference, attention_reference, bwd_api
from ptxdsl.ops.attention.bwd_config import BwdConfig
from ptxdsl.ops.attention.bwd_m80 import build_backward_m80
from ptxdsl.ops.attention.config import Mask
from ptxas_resources import resources_or_skip  # noqa: E402

ml_dtypes = pytest.importorskip("ml_dtypes")
BF16 = ml_dtypes.bfloat16
from attention_bwd_checks import check_grads  # noqa: E402

M80 = dict(stages=2, dq_tma=True, overlap=1, dq_swizzle=True, block_m=80, ds_double=True,
           dq_warp=True, dk_last=True, dq_swap=True)
FIXED = dict(prep_wide=True, dkv_tma=True, dq_exit_read=True)
SA = dict(M80, **FIXED, s_ahead=2, ahead_k=True)


def test_takes_s_ahead_2():
    """dq_swap takes s_ahead 2 (and ahead_k), not 1 (its dQ and the next Sᵀ would both be
    live beside dK's A)."""
    assert "_sa2_dqs_kvt_lpt8_xr" in BwdConfig(**SA, lpt_units=8).tag
    with pytest.raises(ValueError, match="dq_swap"):
        BwdConfig(**M80, s_ahead=1)


@pytest.mark.long
def test_emits_the_next_score_behind_dk():
    """One Sᵀ (8 m64n80 k-steps) before the loop, the step starting with dPᵀ and ending
    with the next Sᵀ behind dK: 8 wgmmas more than the plain step's 34 in the text."""
    mm = lambda c: [ln.split()[0] for ln in build_backward_m80(
        BwdConfig(**c), bf16, 128, Mask(-1, 0), scale=0.1).ptx().splitlines()
        if "wgmma.mma_async" in ln]
    plain, ahead = mm(M80), mm(dict(M80, s_ahead=2))
    s, kv = ["wgmma.mma_async.sync.aligned.m64n80k16.f32.bf16.bf16"] * 8, \
        ["wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16"] * 5
    assert plain == s + s + kv + s + kv
    assert ahead == s + s + kv + s + kv + s


def _case(monkeypatch, c, b, hk, sq, sk, **kw):
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *_a, **_k: c)
    rng = np.random.default_rng(sq + sk + b)
    q, k, v, do = (rng.standard_normal((b, s, h, 128)).astype(BF16)
                   for s, h in ((sq, 2 * hk), (sk, hk), (sk, hk), (sq, 2 * hk)))
    out, lse = attention_reference(q, k, v, **kw)
    got = attention_backward(do, q, k, v, out.astype(BF16), lse.astype(np.float32), **kw)
    check_grads(got, attention_backward_reference(do, q, k, v, **kw))


@pytest.mark.long
@pytest.mark.parametrize("extra,b,hk,sq,sk,kw", [
    (dict(lpt_units=2, uniform_cons=True), 3, 1, 90, 200, dict(causal=True)),
    ({}, 1, 1, 100, 300, dict(window_size=(10, 0))),
    (dict(ahead_k=False), 1, 1, 170, 200, {})],
    ids=["causal-lpt", "window-no-step", "full-branch"])
def test_matches_float64(monkeypatch, extra, b, hk, sq, sk, kw):
    """Two query heads a K/V head (GQA: the carried Sᵀ crosses the head's loop), the ring
    wrapping; causal: the shipped causal row's options (uniform_cons) with sections of
    ``lpt_units`` 2 over three units (two sections, the last shorter; the row's 8 is one
    section here); the window leaves the first key block without a step (ahead_k's
    discarded Sᵀ from K's tile); without ahead_k, the branch."""
    _case(monkeypatch, BwdConfig(**dict(SA, **extra)), b, hk, sq, sk, **kw)


@pytest.mark.ptxas
@pytest.mark.long
def test_ptxas_keeps_everything_in_registers_and_pipelined():
    """The shipped causal row (ahead_k, lpt_units 8, uniform_cons): no spills and no wgmma
    notice at all (C7510-C7520); the row without ahead_k (a lab variant, once): the branch
    before the loop is C7519, as at head dim 64."""
    mask = Mask(-1, 0)
    c = BwdConfig(**SA, lpt_units=8, uniform_cons=True)
    k = build_backward_m80(c, bf16, 128, mask, scale=0.07)
    r = resources_or_skip(k)
    assert r.spill_stores == 0 and r.spill_loads == 0 and r.local == 0, k.name
    assert "(C75" not in k.check().log, k.name
    with_branch = build_backward_m80(replace(c, ahead_k=False), bf16, 128, mask, scale=0.07)
    assert "(C7519)" in with_branch.check().log
