"""Config.split_mask and Config.consumer_bound (lab/attention_plans.py's ``causal`` set;
one case also with store_wait_once) on an sm_90 GPU at ragged shapes: the output and LSE bitwise those of the same config without
them (the options change which instructions run, not a value), and within bf16 rounding
of the float64 reference; repeat launches bit-identical."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from gpu_env import NEEDS_GPU, torch_sm90
from ptxdsl.core.types import bf16
from ptxdsl.ops.attention import attention_reference
from ptxdsl.ops.attention.config import Config, Mask
from ptxdsl.ops.attention.fwd import build_forward

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


def _launch(torch, c, d, mask, q, k, v, layout, g, sms):
    kern = build_forward(c, bf16, d, mask, scale=d ** -0.5, sms=sms, layout=layout,
                         group=g if layout == "packed" else 1)
    b, sq, h, _ = q.shape
    hk = h // g
    out = torch.empty_like(q)
    if layout == "packed":
        qa, oa = q.view(b, sq, hk, g, d), out.view(b, sq, hk, g, d)
        lse = torch.empty(b, hk, g, sq, device="cuda", dtype=torch.float32)
    else:
        qa, oa = q, out
        lse = torch.empty(b, h, sq, device="cuda", dtype=torch.float32)
    word = (torch.zeros(1, dtype=torch.int32, device="cuda"),) if c.dynamic else ()
    kern(qa, k, v, oa, lse, *word)
    first = out.clone()
    kern(qa, k, v, oa, lse, *word)
    torch.cuda.synchronize()
    assert torch.equal(first, out)
    assert not word or int(word[0].item()) == 0
    return out, lse.reshape(b, h, sq)


@pytest.mark.parametrize("mask", [Mask(-1, 0), Mask(300, 0)], ids=["causal", "window"])
@pytest.mark.parametrize("d,kw,layout", CASES)
def test_split_and_bound_match_without(d, kw, layout, mask):
    torch = torch_sm90()
    b, sq, sk, h, hk = 2, 1000, 1017, 8, 2
    g = h // hk
    gen = torch.Generator(device="cuda").manual_seed(d + sq)
    q = torch.randn(b, sq, h, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    k, v = (torch.randn(b, sk, hk, d, device="cuda", dtype=torch.bfloat16, generator=gen)
            for _ in range(2))
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    base = Config(**kw)
    want, wlse = _launch(torch, base, d, mask, q, k, v, layout, g, sms)
    out, lse = _launch(torch, dataclasses.replace(base, **_ON), d, mask, q, k, v, layout, g,
                       sms)
    assert torch.equal(out, want) and torch.equal(lse, wlse)
    ref, rlse = attention_reference(*(x.float().cpu().numpy() for x in (q, k, v)),
                                    window_size=(mask.left, mask.right))
    o = out.float().cpu().numpy().astype(np.float64)
    assert np.abs(o - ref).max() <= 2e-2 * np.abs(ref).max()
    got = lse.cpu().numpy()
    fin = ~np.isinf(rlse)
    np.testing.assert_array_equal(np.isinf(got), ~fin)
    assert (np.abs(got[fin] - rlse[fin]) / np.maximum(np.abs(rlse[fin]), 1)).max() <= 1e-3
