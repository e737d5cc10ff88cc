"""Head dim 128's step structure after FlashAttention-4's sm90 backward: ``dq_warp`` (a
producer warp issues dQ's TMA reduce-adds; the consumers hand their stage over by
``bar.arrive``) and ``dk_last`` (dV before the dSᵀ exchange, dK behind dQ, dQ staged while
dK runs): what they emit, that ptxas keeps them in registers, and the CPU interpreter's
dq, dk, dv against float64 (dense, masks, GQA, varlen; the writer warp at the other head
dims: the plan rows in test_bwd_pair.py, test_bwd_short.py, test_bwd_det*.py)."""
from __future__ import annotations

import numpy as np
import pytest

from ptxdsl.core.types import bf16
from ptxdsl.ops import attention_backward
from ptxdsl.ops.attention import attention_backward_reference, attention_reference, bwd_api
from ptxdsl.ops.attention.bwd import build_backward
from ptxdsl.ops.attention.bwd_config import BwdConfig
from ptxdsl.ops.attention.config import Mask
from ptxas_resources import resources_or_skip  # noqa: E402

ml_dtypes = pytest.importorskip("ml_dtypes")
BF16 = ml_dtypes.bfloat16
from attention_bwd_checks import check_grads as _check, check_varlen_causal  # noqa: E402

PLAN = dict(stages=2, dq_tma=True, overlap=1, dq_swizzle=True, dq_split=True)
DQW = BwdConfig(**PLAN, dq_warp=True)
DKL = BwdConfig(**PLAN, dk_last=True)
BOTH = BwdConfig(**PLAN, dq_warp=True, dk_last=True)
BOTH2 = BwdConfig(**PLAN, dq_warp=True, dk_last=True, ds_double=True)


def _case(monkeypatch, c, sq, sk, seed, d=128, **kw):
    """q, dout (1, sq, 2, d), k, v (1, sk, 1, d): GQA, bf16, against float64."""
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *_a, **_k: c)
    rng = np.random.default_rng(seed)
    q, k, v, do = (rng.standard_normal((1, s, h, d)).astype(BF16)
                   for s, h in ((sq, 2), (sk, 1), (sk, 1), (sq, 2)))
    out, lse = attention_reference(q, k, v, **kw)
    _check(attention_backward(do, q, k, v, out.astype(BF16), lse.astype(np.float32), **kw),
           attention_backward_reference(do, q, k, v, **kw))


def test_emits_the_writer_warp_and_fa4_order():
    """dq_warp: the consumers arrive at FULL (4, 5) and wait at EMPTY (6, 7), 160 threads
    each; the TMA reduce-add is the writer's. dk_last: the dK chain (m64n128, RS) follows
    dQ's, not dV's."""
    plan = build_backward(BwdConfig(**PLAN), bf16, 128, scale=0.1).ptx()
    text = build_backward(BOTH, bf16, 128, scale=0.1).ptx()
    assert "bar.arrive" not in plan and "bar.arrive" in text
    # (the writer unrolls both warpgroups' boxes)
    assert "160;" in text and text.count("cp.reduce.async.bulk.tensor") == \
        2 * plan.count("cp.reduce.async.bulk.tensor")
    kinds = lambda t: ["n128" if "m64n128" in ln else "n64" for ln in t.splitlines()
                       if "wgmma.mma_async" in ln]
    # Sᵀ, dPᵀ (16 n64), then the plan: dV, dK (8 n128), dQ (8 n64); dk_last: dV, dQ, dK
    assert kinds(plan) == ["n64"] * 16 + ["n128"] * 8 + ["n64"] * 8
    assert kinds(text) == ["n64"] * 16 + ["n128"] * 4 + ["n64"] * 8 + ["n128"] * 4
    with pytest.raises(ValueError, match="dq_warp"):
        BwdConfig(stages=2, dq_warp=True)
    with pytest.raises(ValueError, match="dk_last"):
        BwdConfig(stages=2, dq_tma=True, dk_last=True)


@pytest.mark.long
def test_interpreter_matches_float64(monkeypatch):
    """Ragged, GQA, causal, two key blocks: both options together."""
    _case(monkeypatch, BOTH, 40, 130, 3, causal=True)


# BOTH2 is bwd_plans.json's head dim 128 row for a window (default mode); each option alone
# is a lab variant: one case each
@pytest.mark.long
@pytest.mark.parametrize("c,kw", [
    (DQW, dict(window_size=(40, 3))),
    (DKL, {}),
    (BOTH2, dict(window_size=(20, 50))),
], ids=["dqw-win", "dkl-full", "both2-win"])
def test_masks_match_float64(monkeypatch, c, kw):
    _case(monkeypatch, c, 70, 150, 5, **kw)


@pytest.mark.long
def test_varlen_matches_float64(monkeypatch):
    """Three packed sequences (one of one query), GQA, causal: each against float64."""
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *_a, **_k: BOTH2)
    cq, ck = np.cumsum([0, 33, 1, 100]), np.cumsum([0, 70, 129, 20])
    rng = np.random.default_rng(4)
    q, k, v, do = (rng.standard_normal((n, h, 128)).astype(BF16)
                   for n, h in ((cq[-1], 2), (ck[-1], 1), (ck[-1], 1), (cq[-1], 2)))
    check_varlen_causal(q, k, v, do, cq, ck)


@pytest.mark.ptxas
@pytest.mark.long
@pytest.mark.parametrize("c,mask,det,varlen", [
    (BOTH2, Mask(40, 3), False, False), (BOTH2, Mask(-1, 0), True, False),
    (BOTH2, Mask(-1, 0), False, True), (DKL, Mask(40, 3), True, False)],
    ids=["both2-win", "both2-causal-det", "both2-causal-varlen", "dkl-win-det"])
def test_ptxas_keeps_everything_in_registers(c, mask, det, varlen):
    """The plan row's register-heavy modes, and dk_last alone (a lab variant) in its
    worst case."""
    k = build_backward(c, bf16, 128, mask, scale=0.07, deterministic=det, varlen=varlen)
    r = resources_or_skip(k)
    if c is DKL and det and mask.left >= 0:
        # dk_last alone (not a plan row), deterministic, window: ptxas 13.0 spills 4 bytes
        # since bwd_det's turns (the plan's dq_warp + dk_last + ds_double does not)
        assert r.spill_stores <= 4 and r.local <= 8, k.name
        return
    assert r.spill_stores == 0 and r.spill_loads == 0 and r.local == 0, k.name
