"""Config.o_in_q (the TMA-store epilogue staged in Q's buffer), Config.q_split (each
consumer's Q on its own barriers) and Config.kv_spread (the full order K/V head by K/V
head), lab/attention_plans.py's ``gqa_full`` and ``h256c`` sets, on an sm_90 GPU at
ragged shapes (B2, H8, Hkv2): the output and LSE bitwise those of the same config
without them (head dim 256: of the st.global epilogue, since O's own staging buffer does
not fit), within bf16 rounding of the float64 reference; repeat launches bit-identical."""
from __future__ import annotations

import dataclasses

import pytest

from attention_fwd_gpu_checks import same_and_right
from gpu_env import NEEDS_GPU
from ptxdsl.ops.attention.config import Config, Mask

pytestmark = NEEDS_GPU

_PL = dict(persistent=True, lazy_rescale=True)
_OQ = dict(tma_store=True, o_in_q=True)
CASES = [   # (head dim, the config without the options, the options)
    (128, dict(block_n=128, tma_store=True, **_PL), dict(o_in_q=True)),
    (128, dict(block_n=128, tma_store=True, **_PL), dict(o_in_q=True, q_split=True)),
    (128, dict(block_n=128, **_PL), dict(q_split=True)),
    (256, dict(block_n=80, pingpong=True, head_sections=True, dynamic=True, **_PL), _OQ),
    (256, dict(block_n=80, pingpong=True, head_sections=True, dynamic=True, **_PL),
     dict(q_split=True, **_OQ)),
    (256, dict(block_n=80, pingpong=True, **_PL), dict(q_split=True, **_OQ)),
    (256, dict(block_n=80, **_PL), dict(q_split=True, **_OQ)),
    (256, dict(block_n=80, pingpong=True, lazy_rescale=True, head_sections=True,
               section_mb=48), _OQ),
]


@pytest.mark.parametrize("mask", [Mask(-1, 0), Mask(300, 0), Mask()],
                         ids=["causal", "window", "full"])
@pytest.mark.parametrize("d,kw,on", CASES)
def test_o_in_q_and_q_split_match_without(d, kw, on, mask):
    base = Config(**kw)
    same_and_right(d, base, dataclasses.replace(base, **on), "dense", mask)


@pytest.mark.parametrize("kw", [dict(block_n=128, **_PL), dict(block_n=128,
                                                                 lazy_rescale=True)])
def test_kv_spread_matches_without(kw):
    base = Config(**kw)
    same_and_right(128, base, dataclasses.replace(base, kv_spread=True), "dense", Mask())
