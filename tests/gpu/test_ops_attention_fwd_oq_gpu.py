"""Config.o_in_q (the TMA-store epilogue staged in Q's buffer), Config.q_split (each
consumer's Q on its own barriers), Config.kv_spread (the full order K/V head by K/V
head) and Config.kv_rotate (a tile's key blocks from its m-block's on),
lab/attention_plans.py's ``gqa_full``, ``h256c``, ``rot_full`` and ``s16k2`` sets, on an
sm_90 GPU at ragged shapes (B2, H8, Hkv2): the output and LSE bitwise those of the same
config without them (head dim 256, and head dim 128 with three stages or 176-key blocks:
of the st.global epilogue, since O's own staging buffer does not fit; kv_rotate, which
reorders the sums: within bf16 rounding of them), within bf16 rounding of the float64
reference; repeat launches bit-identical."""
from __future__ import annotations

import dataclasses

import pytest

import numpy as np

from attention_fwd_gpu_checks import launch, same_and_right
from gpu_env import NEEDS_GPU, torch_sm90
from ptxdsl.ops.attention import attention_reference
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
    # lab --set s16k2: a third 128-key stage in the buffer O frees, 176-key blocks with
    # the epilogue, FA4's causal schedule at head dim 128, 192-row tiles at head dim 64
    (128, dict(block_n=128, stages=3, **_PL), _OQ),
    (128, dict(block_n=176, **_PL), dict(q_split=True, **_OQ)),
    (128, dict(block_n=128, stages=3, lazy_rescale=True, head_sections=True,
               section_mb=48), _OQ),
    (128, dict(block_n=128, pingpong=True, lazy_rescale=True, head_sections=True,
               section_mb=48), _OQ),
    (64, dict(block_n=128, stages=3, consumers=3, tma_store=True, **_PL), dict(o_in_q=True)),
    (64, dict(block_n=128, stages=4, consumers=3, **_PL), dict(q_split=True, **_OQ)),
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


@pytest.mark.parametrize("d,kw,layout", [
    (128, dict(block_n=128, **_PL), "dense"), (128, dict(block_n=176, **_PL), "dense"),
    (128, dict(block_n=128, **_PL), "packed"),
    (64, dict(block_n=128, consumers=3, **_PL), "dense")])
def test_kv_rotate_right(d, kw, layout):
    """Full, Sk = 1017 (the ragged last block read first by some tiles): within bf16
    rounding of the config without it and of the float64 reference."""
    torch = torch_sm90()
    gen = torch.Generator(device="cuda").manual_seed(d)
    q = torch.randn(2, 1000, 8, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    k, v = (torch.randn(2, 1017, 2, d, device="cuda", dtype=torch.bfloat16, generator=gen)
            for _ in range(2))
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    base = Config(**kw)
    want, _ = launch(torch, base, d, Mask(), q, k, v, layout, 4, sms)
    out, lse = launch(torch, dataclasses.replace(base, kv_rotate=True), d, Mask(), q, k, v,
                      layout, 4, sms)
    ref, rlse = attention_reference(*(x.float().cpu().numpy() for x in (q, k, v)))
    o = out.float().cpu().numpy().astype(np.float64)
    assert np.abs(o - ref).max() <= 2e-2 * np.abs(ref).max()
    assert (out.float() - want.float()).abs().max().item() <= 1e-2 * np.abs(ref).max()
    got = lse.cpu().numpy()
    assert (np.abs(got - rlse) / np.maximum(np.abs(rlse), 1)).max() <= 1e-3
