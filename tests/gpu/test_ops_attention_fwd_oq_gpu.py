"""Config.o_in_q (the TMA-store epilogue staged in Q's buffer), lab/attention_plans.py's
``gqa_full``, ``h256c`` and ``s16k2`` sets, on an sm_90 GPU at ragged shapes (B2, H8,
Hkv2): the output and LSE bitwise those of the same config without it (head dim 256, and
head dim 128 with three stages or 176-key blocks: of the st.global epilogue, since O's own
staging buffer does not fit), within bf16 rounding of the float64 reference; repeat
launches bit-identical."""
from __future__ import annotations

import dataclasses

import pytest

from attention_fwd_gpu_checks import same_and_right
from gpu_env import NEEDS_GPU
from ptxdsl.ops.attention.config import Config, Mask

pytestmark = NEEDS_GPU

_PL = dict(persistent=True, lazy_rescale=True)
_OQ = dict(tma_store=True, o_in_q=True)
CASES = [   # (head dim, the config without the option, the option and what it needs)
    (128, dict(block_n=128, tma_store=True, **_PL), dict(o_in_q=True)),
    (256, dict(block_n=80, pingpong=True, head_sections=True, dynamic=True, **_PL), _OQ),
    (256, dict(block_n=80, pingpong=True, **_PL), _OQ),
    (256, dict(block_n=80, **_PL), _OQ),
    (256, dict(block_n=80, pingpong=True, lazy_rescale=True, head_sections=True,
               section_mb=48), _OQ),
    # lab --set s16k2: a third 128-key stage in the buffer O frees, 176-key blocks with
    # the epilogue, FA4's causal schedule at head dim 128, 192-row tiles at head dim 64
    (128, dict(block_n=128, stages=3, **_PL), _OQ),
    (128, dict(block_n=176, **_PL), _OQ),
    (128, dict(block_n=128, stages=3, lazy_rescale=True, head_sections=True,
               section_mb=48), _OQ),
    (128, dict(block_n=128, pingpong=True, lazy_rescale=True, head_sections=True,
               section_mb=48), _OQ),
    (64, dict(block_n=128, stages=3, consumers=3, tma_store=True, **_PL), dict(o_in_q=True)),
    (64, dict(block_n=128, stages=4, consumers=3, **_PL), _OQ),
]


@pytest.mark.parametrize("mask", [Mask(-1, 0), Mask(300, 0), Mask()],
                         ids=["causal", "window", "full"])
@pytest.mark.parametrize("d,kw,on", CASES)
def test_o_in_q_matches_without(d, kw, on, mask):
    base = Config(**kw)
    same_and_right(d, base, dataclasses.replace(base, **on), "dense", mask)
