"""The backward levers that FlashAttention-4's SASS and the profile of head dim 64's step
named (lab/attention_bwd_levers.py): ``BwdConfig.ds_stsm`` (:mod:`ptxdsl.ops.attention.
bwd_stsm`: dSᵀ stored by ``stmatrix.x4`` in the layout the ``st.shared.b32`` stores wrote)
and ``BwdConfig.lse_early`` (the first -LSE·log2e pairs loaded before the wait for Sᵀ).
What each emits and refuses; the plan rows of head dims 64 (block_m 128, kv_pair's causal
row and the full row) and 128 (dq_swap, causal) with them on the CPU interpreter (race
and proxy detectors) against float64, GQA and ragged; ptxas -v: no spills."""
from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest

from ptxdsl.core.types import bf16
from ptxdsl.ops import attention_backward
from ptxdsl.ops.attention import attention_backward_reference, attention_reference, bwd_api
from ptxdsl.ops.attention.bwd import build_backward
from ptxdsl.ops.attention.bwd_config import BwdConfig, choose_bwd
from ptxdsl.ops.attention.bwd_m80 import build_backward_m80
from ptxdsl.ops.attention.config import Mask
from attention_bwd_checks import check_grads
from ptxas_resources import resources_or_skip  # noqa: E402

ml_dtypes = pytest.importorskip("ml_dtypes")
BF16 = ml_dtypes.bfloat16
STSM = "stmatrix.sync.aligned.m8n8.x4.shared.b16"


@pytest.mark.parametrize("d,chunks", [(64, 8), (128, 5)])
def test_emits_one_stmatrix_a_chunk(d, chunks):
    """Each step's dSᵀ chunks (128 queries at 64, 80 at 128: 16 a chunk) one
    ``stmatrix.x4`` each, and four ``st.shared.b32`` fewer for each; the ``_stsm`` tag."""
    row = choose_bwd(d, "bf16", Mask(-1, 0))
    build = build_backward_m80 if row.dq_swap else build_backward
    texts = [build(replace(row, ds_stsm=on), bf16, d, Mask(-1, 0), scale=0.125).ptx()
             for on in (False, True)]
    assert texts[0].count(STSM) == 0 and texts[1].count(STSM) == chunks
    sts = [len(re.findall(r"st\.shared\.b32 ", t)) for t in texts]
    assert sts[0] - sts[1] == 4 * chunks, sts
    assert replace(row, ds_stsm=True).tag == row.tag + "_stsm"


def test_refused_with_its_own_tiles():
    """pds_smem and wg3 store their dSᵀ tiles their own way: refused, saying so."""
    with pytest.raises(ValueError, match="ds_stsm.*not with pds_smem or wg3"):
        BwdConfig(stages=1, dq_tma=True, dq_swizzle=True, col_split=True, pds_smem=True,
                  ds_stsm=True)


@pytest.mark.parametrize("early", [4, 40])
def test_lse_early_loads_before_the_wait(early):
    """The first ``early`` pairs (all 16 of a 128-query step where more are asked) are
    loaded before the step's first ``wgmma.wait_group``, the rest after it; the same
    loads in all; the ``_lse<n>`` tag."""
    row = replace(choose_bwd(64, "bf16", Mask()), lse_early=0)
    texts = [build_backward(replace(row, lse_early=n), bf16, 64, Mask(), scale=0.125).ptx()
             for n in (0, early)]
    lds = [len(re.findall(r"ld\.shared\.v2\.f32", t)) for t in texts]
    assert lds[0] == lds[1], lds
    step = texts[1][texts[1].index("wgmma.mma_async"):]    # (past the first Sᵀ's issue)
    before = step[:step.index("wgmma.wait_group")]
    assert len(re.findall(r"ld\.shared\.v2\.f32", before)) == min(early, 16)
    assert replace(row, lse_early=4).tag == row.tag + "_lse4"
    with pytest.raises(ValueError, match="lse_early.*needs overlap"):
        BwdConfig(stages=2, dq_tma=True, lse_early=4)


def _case(monkeypatch, d, sq, sk, seed, extra=None, **kw):
    """q, dout (1, sq, 2, d), k, v (1, sk, 1, d): GQA, bf16, against float64, each call's
    plan row with ``extra`` (ds_stsm by default)."""
    shipped = bwd_api.choose_bwd
    monkeypatch.setattr(bwd_api, "choose_bwd",
                        lambda *a, **k: replace(shipped(*a, **k), **(extra or dict(ds_stsm=True))))
    rng = np.random.default_rng(seed)
    q, k, v, do = (rng.standard_normal((1, s, h, d)).astype(BF16)
                   for s, h in ((sq, 2), (sk, 1), (sk, 1), (sq, 2)))
    out, lse = attention_reference(q, k, v, **kw)
    got = attention_backward(do, q, k, v, out.astype(BF16), lse.astype(np.float32), **kw)
    check_grads(got, attention_backward_reference(do, q, k, v, **kw))


@pytest.mark.long
@pytest.mark.parametrize("d,sq,sk,kw", [
    (64, 150, 260, dict(causal=True)), (64, 130, 70, {}), (128, 90, 70, dict(causal=True))],
    ids=["d64-causal", "d64-full", "d128-causal"])
def test_plan_rows_match_float64(monkeypatch, d, sq, sk, kw):
    """Head dim 64's causal row (kv_pair: a CTA walks two key blocks) and full row (128
    queries a step, both dSᵀ query halves), head dim 128's 80-query tile: several steps a
    CTA, both heads of the GQA group, the last key block's keys past Sk."""
    _case(monkeypatch, d, sq, sk, d + sq, **kw)


@pytest.mark.long
@pytest.mark.parametrize("d,sq,sk,kw,early", [
    (64, 150, 260, dict(causal=True), 4), (128, 130, 70, {}, 10)],
    ids=["d64-causal", "d128-full"])
def test_lse_early_rows_match_float64(monkeypatch, d, sq, sk, kw, early):
    """Head dim 64's causal row (kv_pair, s_ahead: the pairs loaded before the carried
    Sᵀ's wait) and head dim 128's full row (80 queries: all 10 pairs early)."""
    _case(monkeypatch, d, sq, sk, d + sq, dict(lse_early=early), **kw)


@pytest.mark.ptxas
@pytest.mark.long
@pytest.mark.parametrize("d", [64, 128])
def test_no_spills(d):
    """The causal and full rows' main kernels with each option (lse_early: the most pairs
    the lab times, 16 of 16 at head dim 64, 8 of 10 at 128, whose full row spills 4 bytes
    with all 10): no spills, no local memory."""
    early = dict(lse_early=16 if d == 64 else 8)
    for causal, extra in ((False, dict(ds_stsm=True)), (True, dict(ds_stsm=True)),
                          (False, early), (True, early)):
        row = choose_bwd(d, "bf16", Mask(-1, 0) if causal else Mask())
        build = build_backward_m80 if row.dq_swap else build_backward
        k = build(replace(row, **extra), bf16, d, Mask(-1, 0) if causal else Mask(),
                  scale=0.125)
        r = resources_or_skip(k)
        assert r.spill_stores == 0 and r.spill_loads == 0 and r.local == 0, k.name


@pytest.mark.long
@pytest.mark.parametrize("d,sq,sk", [(64, 150, 260), (128, 170, 90)], ids=["d64", "d128"])
def test_shipped_full_rows_match_float64(d, sq, sk):
    """The shipped full-mask rows that take lse_early (4 at head dim 64, 8 at 128), as the
    plan table gives them: several steps a CTA, GQA, the last key block past Sk."""
    rng = np.random.default_rng(d + sk)
    q, k, v, do = (rng.standard_normal((1, s, h, d)).astype(BF16)
                   for s, h in ((sq, 2), (sk, 1), (sk, 1), (sq, 2)))
    assert choose_bwd(d, "bf16", Mask()).lse_early == (4 if d == 64 else 8)
    out, lse = attention_reference(q, k, v)
    got = attention_backward(do, q, k, v, out.astype(BF16), lse.astype(np.float32))
    check_grads(got, attention_backward_reference(do, q, k, v))
