"""Config.q_prefetch (the next tile's Q prefetched into L2 once a tile's last K/V load is
issued), lab/attention_plans.py's ``fwd1k`` set, on an sm_90 GPU on the plans rows' shapes
it is timed beside (hd128 and hd256 full, with and without O staged in Q's buffer) and
the hd128 causal row's (the snake's next tile), B2 H8 Hkv2, Sq 3000, Sk 3100 (several
tiles a persistent CTA): the output and LSE bitwise those of the row without it, within
bf16 rounding of the float64 reference; repeat launches bit-identical."""
from __future__ import annotations

import dataclasses

import pytest

from attention_fwd_gpu_checks import same_and_right
from gpu_env import NEEDS_GPU
from ptxdsl.ops.attention.config import Config, Mask

pytestmark = NEEDS_GPU

_F128 = dict(block_n=128, persistent=True, lazy_rescale=True, uniform_cons=True)
_F256 = dict(block_n=80, pingpong=True, persistent=True, lazy_rescale=True,
             uniform_cons=True)
_OQ = dict(tma_store=True, o_in_q=True)
_C128 = dict(_F128, tma_store=True, store_wait_once=True, q_double=True,
             late_epilogue=True)
CASES = [   # (head dim, the row, the mask)
    (128, _F128, Mask()), (128, dict(_F128, tma_store=True, store_wait_once=True), Mask()),
    (256, _F256, Mask()), (256, dict(_F256, **_OQ), Mask()),
    (256, dict(_F256, block_n=64, **_OQ), Mask()),
    (128, _C128, Mask(-1, 0)), (256, dict(_F256, dynamic=True), Mask(-1, 0)),
]


@pytest.mark.parametrize("d,kw,mask", CASES)
def test_match_the_row_without(d, kw, mask):
    base = Config(**kw)
    same_and_right(d, base, dataclasses.replace(base, q_prefetch=True), "dense", mask,
                   sq=3000, sk=3100)


def test_packed_layout():
    """The packed GQA layout (a group of 4; 5-d Q boxes), causal."""
    base = Config(block_n=128, persistent=True, lazy_rescale=True)
    same_and_right(128, base, dataclasses.replace(base, q_prefetch=True), "packed",
                   Mask(-1, 0), sq=3000, sk=3100)
