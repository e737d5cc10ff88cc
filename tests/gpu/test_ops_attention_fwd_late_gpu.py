"""Config.late_epilogue (a tile's epilogue under the next tile's first Q·Kᵀ),
lab/attention_plans.py's ``diag`` set, on an sm_90 GPU at ragged shapes: the output and
LSE bitwise those of the same config without it, within bf16 rounding of the float64
reference; repeat launches bit-identical."""
from __future__ import annotations

import dataclasses

import pytest

from attention_fwd_gpu_checks import same_and_right
from gpu_env import NEEDS_GPU
from ptxdsl.ops.attention.config import Config, Mask

pytestmark = NEEDS_GPU

_PL = dict(persistent=True, lazy_rescale=True)
_W1 = dict(tma_store=True, store_wait_once=True)
LATE = [    # (head dim, the config without it, layout): the causal plan rows and kin
    (64, dict(block_n=128, persistent=True), "dense"),
    (64, dict(block_n=128, stages=3, consumers=3, **_PL), "dense"),
    (128, dict(block_n=128, **_W1, **_PL), "dense"),
    (128, dict(block_n=128, head_sections=True, **_W1, **_PL), "dense"),
    (128, dict(block_n=128, tma_store=True, **_PL), "dense"),   # a wait every tile
    (128, dict(block_n=128, **_PL), "packed"),
    (256, dict(block_n=80, pingpong=True, head_sections=True, dynamic=True, **_PL),
     "dense"),
    (256, dict(block_n=80, pingpong=True, **_PL), "dense"),
]


@pytest.mark.parametrize("mask", [Mask(-1, 0), Mask(300, 0), Mask()],
                         ids=["causal", "window", "full"])
@pytest.mark.parametrize("d,kw,layout", LATE)
def test_late_epilogue_matches_without(d, kw, layout, mask):
    base = Config(**kw)
    same_and_right(d, base, dataclasses.replace(base, late_epilogue=True), layout, mask)
