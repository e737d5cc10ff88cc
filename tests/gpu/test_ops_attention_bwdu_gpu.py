"""lab/attention_bwd_plans.py --set bwdu's variant (``BwdConfig.uniform_cons``: the backward
consumers' warpgroup index from lane 0 through ``shfl.sync.idx``) over each head dim's
shipped plan row, on an sm_90 GPU: dq, dk, dv against the float64 reference (max error
<= 3e-2 of the largest value, bf16), ragged (a CTA with no step too), GQA, full, causal
and window masks, softcap; the deterministic rows with it bitwise repeatable; against
SDPA's (cuDNN's, or flash's) gradients at S = 1k; varlen per sequence."""
from __future__ import annotations

from dataclasses import replace

import pytest

from attention_bwd_gpu_checks import (gqa_matches_float64, matches_sdpa_at_1k,
                                      varlen_matches_each_sequence)
from gpu_env import NEEDS_GPU, torch_sm90
from ptxdsl.ops.attention import bwd_api

pytestmark = NEEDS_GPU

HEAD_DIMS = [64, 96, 128, 192, 256]
SHAPES = {"causal": (333, 517, dict(causal=True)), "full": (517, 333, {}),
          "window": (700, 700, dict(window_size=(100, 20))),
          "no-step": (64, 300, dict(window_size=(10, 0))),
          "softcap": (300, 400, dict(causal=True, softcap=30.0))}


@pytest.fixture
def uniform(monkeypatch):
    """The plan row of each call with uniform_cons."""
    shipped = bwd_api.choose_bwd
    monkeypatch.setattr(bwd_api, "choose_bwd",
                        lambda *a, **k: replace(shipped(*a, **k), uniform_cons=True))


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("d", HEAD_DIMS)
def test_matches_float64(uniform, d, shape):
    """Every shape at every head dim; the deterministic mode (its own rows) at the causal
    and window shapes, twice, bitwise equal."""
    sq, sk, kw = SHAPES[shape]
    gqa_matches_float64(torch_sm90(), d, sq, sk, kw, shape in ("causal", "window"))


@pytest.mark.parametrize("d", [64, 128, 192, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_matches_sdpa_at_1k(uniform, d, causal):
    """The lab's shape at S = 1k (B 16, H 2048 // d): against SDPA's f32 gradients (cuDNN,
    or flash where cuDNN refuses), max relative error <= 3e-2."""
    matches_sdpa_at_1k(torch_sm90(), d, causal)


@pytest.mark.parametrize("d", [64, 128, 192, 256])
@pytest.mark.parametrize("causal", [True, False])
def test_varlen_matches_each_sequence(uniform, d, causal):
    varlen_matches_each_sequence(torch_sm90(), d, causal)
