"""Config.split_mask and Config.consumer_bound (lab/attention_plans.py's ``causal`` set;
one case also with store_wait_once) on an sm_90 GPU at ragged shapes: the output and LSE bitwise those of the same config without
them (the options change which instructions run, not a value), and within bf16 rounding
of the float64 reference; repeat launches bit-identical."""
from __future__ import annotations

import dataclasses

import pytest

from attention_fwd_gpu_checks import same_and_right
from gpu_env import NEEDS_GPU
from ptxdsl.ops.attention.config import Config, Mask

pytestmark = NEEDS_GPU

_PL = dict(persistent=True, lazy_rescale=True)
_ON = dict(split_mask=True, consumer_bound=True)
CASES = [   # (head dim, the config without the options, layout)
    (64, dict(block_n=128, stages=3, consumers=3, **_PL), "dense"),
    (64, dict(block_n=128, persistent=True), "dense"),
    (128, dict(block_n=128, head_sections=True, tma_store=True, **_PL), "dense"),
    (128, dict(block_n=128, tma_store=True, store_wait_once=True, **_PL), "dense"),
    (128, dict(block_n=128, **_PL), "packed"),
    (256, dict(block_n=80, pingpong=True, head_sections=True, dynamic=True, **_PL), "dense"),
    (256, dict(block_n=64, pingpong=True, **_PL), "dense"),
    (256, dict(block_n=80, pingpong=True, lazy_rescale=True, head_sections=True,
               section_mb=48), "dense"),
]


@pytest.mark.parametrize("mask", [Mask(-1, 0), Mask(300, 0)], ids=["causal", "window"])
@pytest.mark.parametrize("d,kw,layout", CASES)
def test_split_and_bound_match_without(d, kw, layout, mask):
    base = Config(**kw)
    same_and_right(d, base, dataclasses.replace(base, **_ON), layout, mask)
