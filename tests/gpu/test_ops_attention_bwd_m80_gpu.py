"""``BwdConfig.dq_swap`` (FlashAttention-3's 80-query head-dim-128 tile; lab/
attention_bwd_plans.py --set m80) on an sm_90 GPU: dq, dk, dv against the float64
reference (max error <= 3e-2 of the largest value, bf16 and f16), ragged (Sq and Sk not
multiples of 80 or 128, Sq below one step), GQA, the full mask and causal / window ones,
a CTA with no step; repeat calls agree (no stale dQ stage or dSᵀ buffer)."""
from __future__ import annotations

import pytest

from attention_bwd_gpu_checks import close
from gpu_env import NEEDS_GPU, torch_sm90
from ptxdsl.ops import attention, attention_backward
from ptxdsl.ops.attention import attention_backward_reference, bwd_api
from ptxdsl.ops.attention.bwd_config import BwdConfig

pytestmark = NEEDS_GPU

M80 = dict(stages=2, dq_tma=True, overlap=1, dq_swizzle=True, block_m=80, ds_double=True,
           dq_warp=True, dk_last=True, dq_swap=True)


@pytest.mark.parametrize("dt", ["bfloat16", "float16"])
@pytest.mark.parametrize("sq,sk,kw", [
    (1, 1, {}), (517, 333, {}), (333, 517, {}), (1000, 1000, {}), (79, 1100, {}),
    (333, 517, dict(causal=True)), (700, 700, dict(window_size=(100, 20))),
    (300, 1100, dict(window_size=(10, 0)))])
def test_matches_float64(monkeypatch, dt, sq, sk, kw):
    torch = torch_sm90()
    c = BwdConfig(**M80)
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *_a, **_k: c)
    g = torch.Generator(device="cuda").manual_seed(sq + sk)
    mk = lambda *s: torch.randn(*s, device="cuda", dtype=getattr(torch, dt), generator=g)
    q, k, v, do = mk(2, sq, 4, 128), mk(2, sk, 2, 128), mk(2, sk, 2, 128), mk(2, sq, 4, 128)
    out, lse = attention(q, k, v, return_lse=True, **kw)
    first = attention_backward(do, q, k, v, out, lse, **kw)
    close(first, attention_backward_reference(
        *(x.float().cpu().numpy() for x in (do, q, k, v)), **kw))
    again = attention_backward(do, q, k, v, out, lse, **kw)
    for a, b in zip(first, again):
        assert torch.allclose(a.float(), b.float(), atol=1e-2, rtol=1e-2)
