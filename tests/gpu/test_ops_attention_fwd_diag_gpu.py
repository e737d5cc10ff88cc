"""Config.diag_n (a consumer's last key block, where its rows see at most ``diag_n``
keys, with a narrower softmax and P·V) and Config.late_epilogue (a tile's epilogue under the next
tile's first Q·Kᵀ), lab/attention_plans.py's ``diag`` set, on an sm_90 GPU at ragged
shapes: the output and LSE bitwise those of the same config without them (the keys
diag_n skips are masked for every row of the consumer), within bf16 rounding of the
float64 reference; repeat launches bit-identical."""
from __future__ import annotations

import dataclasses

import pytest

from attention_fwd_gpu_checks import same_and_right
from gpu_env import NEEDS_GPU
from ptxdsl.ops.attention.config import Config, Mask

pytestmark = NEEDS_GPU

_PL = dict(persistent=True, lazy_rescale=True)
CASES = [   # (head dim, the config without diag_n, diag_n, layout): the causal plan rows
    (64, dict(block_n=128, persistent=True), 64, "dense"),
    (64, dict(block_n=128, stages=3, consumers=3, **_PL), 64, "dense"),
    (128, dict(block_n=128, head_sections=True, tma_store=True, **_PL), 64, "dense"),
    (128, dict(block_n=128, tma_store=True, store_wait_once=True, **_PL), 64, "dense"),
    (128, dict(block_n=128, **_PL), 64, "packed"),
    (256, dict(block_n=80, pingpong=True, head_sections=True, dynamic=True, **_PL), 48,
     "dense"),
    (256, dict(block_n=80, pingpong=True, consumer_bound=True, **_PL), 32, "dense"),
    (256, dict(block_n=80, pingpong=True, **_PL), 64, "dense"),
]


@pytest.mark.parametrize("mask", [Mask(-1, 0), Mask(300, 0)], ids=["causal", "window"])
@pytest.mark.parametrize("d,kw,dn,layout", CASES)
def test_diag_matches_without(d, kw, dn, layout, mask):
    base = Config(**kw)
    same_and_right(d, base, dataclasses.replace(base, diag_n=dn), layout, mask)


@pytest.mark.parametrize("sq,sk", [(1024, 1024), (640, 1024)])
def test_diag_aligned_causal(sq, sk):
    """Sq and Sk multiples of the block (the bench's shapes: the first consumer's
    diagonal block narrow in every tile), and Sq < Sk."""
    base = Config(block_n=128, tma_store=True, store_wait_once=True, **_PL)
    same_and_right(128, base, dataclasses.replace(base, diag_n=64), "dense", Mask(-1, 0),
                   sq=sq, sk=sk)


_W1 = dict(tma_store=True, store_wait_once=True)
LATE = [    # (head dim, the config without the options, the options, layout)
    (64, dict(block_n=128, persistent=True), dict(diag_n=64), "dense"),
    (64, dict(block_n=128, stages=3, consumers=3, **_PL), dict(diag_n=64), "dense"),
    (128, dict(block_n=128, **_W1, **_PL), {}, "dense"),
    (128, dict(block_n=128, head_sections=True, **_W1, **_PL), dict(diag_n=64), "dense"),
    (128, dict(block_n=128, tma_store=True, **_PL), {}, "dense"),   # a wait every tile
    (128, dict(block_n=128, **_PL), {}, "packed"),
    (256, dict(block_n=80, pingpong=True, head_sections=True, dynamic=True, **_PL),
     dict(diag_n=48), "dense"),
    (256, dict(block_n=80, pingpong=True, **_PL), {}, "dense"),
]


@pytest.mark.parametrize("mask", [Mask(-1, 0), Mask(300, 0), Mask()],
                         ids=["causal", "window", "full"])
@pytest.mark.parametrize("d,kw,on,layout", LATE)
def test_late_epilogue_matches_without(d, kw, on, layout, mask):
    base = Config(**kw)
    same_and_right(d, base, dataclasses.replace(base, late_epilogue=True, **on), layout,
                   mask)
