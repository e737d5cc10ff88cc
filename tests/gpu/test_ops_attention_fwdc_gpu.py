"""Config.uniform_cons (the consumer index through shfl.sync.idx) and Config.q_double (Q
in two buffers the tiles of a CTA take in turn), lab/attention_plans.py's ``fwdc`` set, on
an sm_90 GPU on the hd128 and hd64 causal plans rows' shapes (B2, H8, Hkv2, Sq 3000, Sk
3100: about three tiles a persistent CTA, so each Q buffer is taken more than once): the
output and LSE bitwise those of the row without them, within bf16 rounding of the float64
reference; repeat launches bit-identical."""
from __future__ import annotations

import dataclasses

import pytest

from attention_fwd_gpu_checks import same_and_right
from gpu_env import NEEDS_GPU
from ptxdsl.ops.attention.config import Config, Mask

pytestmark = NEEDS_GPU

_ROW128 = dict(block_n=128, persistent=True, lazy_rescale=True, tma_store=True,
               store_wait_once=True)
_ROW64 = dict(block_n=128, persistent=True, lazy_rescale=True, consumers=3, stages=3)
_UQ = dict(uniform_cons=True, q_double=True)
CASES = [   # (head dim, the plans row, the options)
    (128, _ROW128, dict(uniform_cons=True)), (128, _ROW128, dict(q_double=True)),
    (128, _ROW128, _UQ), (128, _ROW128, dict(late_epilogue=True, **_UQ)),
    (64, _ROW64, dict(uniform_cons=True)), (64, _ROW64, dict(q_double=True)),
]


@pytest.mark.parametrize("mask", [Mask(-1, 0), Mask()], ids=["causal", "full"])
@pytest.mark.parametrize("d,kw,on", CASES)
def test_match_the_row_without(d, kw, on, mask):
    base = Config(**kw)
    same_and_right(d, base, dataclasses.replace(base, **on), "dense", mask, sq=3000,
                   sk=3100)


def test_packed_layout():
    """The packed GQA layout (a group of 4) with both, causal."""
    base = Config(block_n=128, persistent=True, lazy_rescale=True)
    same_and_right(128, base, dataclasses.replace(base, **_UQ), "packed", Mask(-1, 0),
                   sq=3000, sk=3100)
