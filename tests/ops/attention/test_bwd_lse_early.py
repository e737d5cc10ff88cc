"""``BwdConfig.lse_early`` (the profile of head dim 64's step: P's FMAs waiting for their
-LSE·log2e loads): the first pairs loaded into registers before the wait for Sᵀ. What it
emits and refuses; head dim 64's causal row (kv_pair, s_ahead) and 128's full row
(dq_swap) with it on the CPU interpreter (race and proxy detectors) against float64, GQA
and ragged; the shipped full rows that take it (4 at 64, 8 at 128); ptxas -v: no spills
at the most pairs the lab times."""
from __future__ import annotations

import re
from dataclasses import replace

import pytest

from ptxdsl.core.types import bf16
from ptxdsl.ops.attention import bwd_api
from ptxdsl.ops.attention.bwd import build_backward
from ptxdsl.ops.attention.bwd_config import BwdConfig, choose_bwd
from ptxdsl.ops.attention.bwd_m80 import build_backward_m80
from ptxdsl.ops.attention.config import Mask
from attention_bwd_checks import gqa_grads_match
from ptxas_resources import resources_or_skip  # noqa: E402

pytest.importorskip("ml_dtypes")
LDS = r"ld\.shared\.v2\.f32"


@pytest.mark.parametrize("early", [4, 40])
def test_loads_before_the_wait(early):
    """The first ``early`` pairs (all 16 of a 128-query step where more are asked) are
    loaded before the step's first ``wgmma.wait_group``, the rest after it; the same
    loads in all; the ``_lse<n>`` tag; refused without overlap."""
    row = replace(choose_bwd(64, "bf16", Mask()), lse_early=0, dq_frag=False)
    texts = [build_backward(replace(row, lse_early=n), bf16, 64, Mask(), scale=0.125).ptx()
             for n in (0, early)]
    lds = [len(re.findall(LDS, t)) for t in texts]
    assert lds[0] == lds[1], lds
    step = texts[1][texts[1].index("wgmma.mma_async"):]    # (past the first Sᵀ's issue)
    before = step[:step.index("wgmma.wait_group")]
    assert len(re.findall(LDS, before)) == min(early, 16)
    assert replace(row, lse_early=4).tag == row.tag + "_lse4"
    with pytest.raises(ValueError, match="lse_early.*needs overlap"):
        BwdConfig(stages=2, dq_tma=True, lse_early=4)


@pytest.mark.long
@pytest.mark.parametrize("d,sq,sk,kw,early", [
    (64, 150, 260, dict(causal=True), 4), (128, 130, 70, {}, 10)],
    ids=["d64-causal", "d128-full"])
def test_rows_with_it_match_float64(monkeypatch, d, sq, sk, kw, early):
    """Head dim 64's causal row (kv_pair, s_ahead: the pairs loaded before the carried
    Sᵀ's wait) and head dim 128's full row (80 queries: all 10 pairs early)."""
    shipped = bwd_api.choose_bwd
    monkeypatch.setattr(bwd_api, "choose_bwd",
                        lambda *a, **k: replace(shipped(*a, **k), lse_early=early))
    gqa_grads_match(d, sq, sk, d + sq, **kw)


@pytest.mark.long
@pytest.mark.parametrize("d,sq,sk", [(64, 150, 260), (128, 170, 90)], ids=["d64", "d128"])
def test_shipped_full_rows_match_float64(d, sq, sk):
    """The shipped full-mask rows that take it, as the plan table gives them: several
    steps a CTA, GQA, the last key block past Sk."""
    assert choose_bwd(d, "bf16", Mask()).lse_early == (4 if d == 64 else 8)
    gqa_grads_match(d, sq, sk, d + sk)


@pytest.mark.ptxas
@pytest.mark.long
@pytest.mark.parametrize("d", [64, 128])
def test_no_spills(d):
    """The causal and full rows' main kernels with the most pairs the lab times (16 of 16
    at head dim 64, 8 of 10 at 128, whose full row spills 4 bytes with all 10): no
    spills, no local memory."""
    for mask in (Mask(), Mask(-1, 0)):
        row = replace(choose_bwd(d, "bf16", mask), lse_early=16 if d == 64 else 8)
        build = build_backward_m80 if row.dq_swap else build_backward
        r = resources_or_skip(build(row, bf16, d, mask, scale=0.125))
        assert r.spill_stores == 0 and r.spill_loads == 0 and r.local == 0, (d, mask)
