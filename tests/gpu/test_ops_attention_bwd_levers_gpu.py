"""The backward levers of lab/attention_bwd_plans.py --set levers (``BwdConfig.lse_early``:
-LSE·log2e loaded before the wait for Sᵀ, all of a step's pairs; ``BwdConfig.dq_frag``:
dQ in fragment order, one bulk reduction) over head dims 64's,
96's, 128's and 192's plan rows, on an sm_90 GPU: dq, dk, dv against the float64
reference (max error <= 3e-2 of the largest value, bf16), ragged (a CTA with no step
too), GQA, full, causal and window masks, softcap; the deterministic rows with it bitwise
repeatable; against SDPA's gradients at S = 1k; varlen per sequence."""
from __future__ import annotations

from dataclasses import replace

import pytest

from attention_bwd_gpu_checks import (gqa_matches_float64, matches_sdpa_at_1k,
                                      varlen_matches_each_sequence)
from gpu_env import NEEDS_GPU, torch_sm90
from ptxdsl.ops.attention import bwd_api

pytestmark = NEEDS_GPU

HEAD_DIMS = [64, 96, 128, 192]
SHAPES = {"causal": (333, 517, dict(causal=True)), "full": (517, 333, {}),
          "window": (700, 700, dict(window_size=(100, 20))),
          "no-step": (64, 300, dict(window_size=(10, 0))),
          "softcap": (300, 400, dict(causal=True, softcap=30.0))}


LEVERS = {"lse": lambda row: bool(row.overlap) and not row.wg3 and dict(lse_early=16),
          "frag": lambda row: row.dq_warp and (row.block_m == 128 or row.wg3 or row.dq_split)
          and dict(dq_frag=True)}


@pytest.fixture(params=list(LEVERS))
def lever(monkeypatch, request):
    """The plan row of each call with the lever (where the row's kernel takes it)."""
    shipped = bwd_api.choose_bwd

    def choose(*a, **k):
        row = shipped(*a, **k)
        extra = LEVERS[request.param](row)
        return replace(row, **extra) if extra else row
    monkeypatch.setattr(bwd_api, "choose_bwd", choose)


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("d", HEAD_DIMS)
def test_matches_float64(lever, d, shape):
    """Every shape at every head dim; the deterministic mode (its own rows) at the causal
    and window shapes, twice, bitwise equal."""
    sq, sk, kw = SHAPES[shape]
    gqa_matches_float64(torch_sm90(), d, sq, sk, kw, shape in ("causal", "window"))


@pytest.mark.parametrize("d", [64, 128, 192])
@pytest.mark.parametrize("causal", [False, True])
def test_matches_sdpa_at_1k(lever, d, causal):
    """The lab's shape at S = 1k (B 16, H 2048 // d): against SDPA's f32 gradients, max
    relative error <= 3e-2."""
    matches_sdpa_at_1k(torch_sm90(), d, causal)


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [True, False])
def test_varlen_matches_each_sequence(lever, d, causal):
    varlen_matches_each_sequence(torch_sm90(), d, causal)
