"""lab/attention_plans.py's h96 / gqa / h128c / h128f candidates that no plans row uses yet,
on an sm_90 GPU at ragged shapes against the float64 reference: 192-row tiles at head dim
96, head sections counted in K/V heads (dense GQA, packed, 48 MiB), the packed layout at
long Sq, one CTA a tile with ping-pong; repeat launches bit-identical."""
from __future__ import annotations

import numpy as np
import pytest

from gpu_env import NEEDS_GPU, torch_sm90
from ptxdsl.core.types import bf16
from ptxdsl.ops.attention import attention_reference
from ptxdsl.ops.attention.config import Config, Mask
from ptxdsl.ops.attention.fwd import build_forward

pytestmark = NEEDS_GPU

_PL = dict(persistent=True, lazy_rescale=True)
CASES = [
    (96, dict(block_n=112, consumers=3, tma_store=True, **_PL), "dense"),
    (128, dict(block_n=128, head_sections=True, section_mb=48, dynamic=True, **_PL),
     "packed"),
    (128, dict(block_n=128, pingpong=True, lazy_rescale=True, head_sections=True,
               section_mb=48), "packed"),
    (128, dict(block_n=128, head_sections=True, **_PL), "dense"),
]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("d,kw,layout", CASES)
def test_candidate_matches_float64(d, kw, layout, causal):
    torch = torch_sm90()
    b, sq, sk, h, hk = 2, 1000, 1017, 8, 2
    g = h // hk
    gen = torch.Generator(device="cuda").manual_seed(d + sq)
    q = torch.randn(b, sq, h, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    k, v = (torch.randn(b, sk, hk, d, device="cuda", dtype=torch.bfloat16, generator=gen)
            for _ in range(2))
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    kern = build_forward(Config(**kw), bf16, d, Mask(-1, 0) if causal else Mask(),
                         scale=d ** -0.5, sms=sms, layout=layout,
                         group=g if layout == "packed" else 1)
    out = torch.empty_like(q)
    if layout == "packed":
        qa, oa = q.view(b, sq, hk, g, d), out.view(b, sq, hk, g, d)
        lse = torch.empty(b, hk, g, sq, device="cuda", dtype=torch.float32)
    else:
        qa, oa = q, out
        lse = torch.empty(b, h, sq, device="cuda", dtype=torch.float32)
    word = (torch.zeros(1, dtype=torch.int32, device="cuda"),) if kw.get("dynamic") else ()
    kern(qa, k, v, oa, lse, *word)
    first = out.clone()
    kern(qa, k, v, oa, lse, *word)
    torch.cuda.synchronize()
    assert torch.equal(first, out)
    assert not word or int(word[0].item()) == 0
    ref, rlse = attention_reference(*(x.float().cpu().numpy() for x in (q, k, v)),
                                    causal=causal)
    o = out.float().cpu().numpy().astype(np.float64)
    assert np.abs(o - ref).max() <= 2e-2 * np.abs(ref).max()
    got = lse.reshape(b, h, sq).cpu().numpy()
    fin = ~np.isinf(rlse)
    np.testing.assert_array_equal(np.isinf(got), ~fin)
    assert (np.abs(got[fin] - rlse[fin]) / np.maximum(np.abs(rlse[fin]), 1)).max() <= 1e-3
