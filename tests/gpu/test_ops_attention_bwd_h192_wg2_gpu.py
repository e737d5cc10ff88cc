"""lab/attention_bwd_plans.py --set h192c's variants (``BwdConfig.wg2``: head dim 192 in
FlashAttention-4's sm90 tile, 96 keys a CTA, two consumer warpgroups; K in 64-byte and
P, dS in 32-byte swizzled panels) on an sm_90 GPU: dq, dk, dv against the float64
reference (max error <= 3e-2 of the largest value, bf16), ragged, GQA, full, causal and
window masks, softcap, overlap 0 and 2, dq_warp, one stage; varlen per sequence, causal
and full."""
from __future__ import annotations

import pytest

from attention_bwd_gpu_checks import close, varlen_matches_each_sequence
from gpu_env import NEEDS_GPU, torch_sm90
from ptxdsl.ops import attention, attention_backward
from ptxdsl.ops.attention import attention_backward_reference, bwd_api
from ptxdsl.ops.attention.bwd_config import BwdConfig

pytestmark = NEEDS_GPU

WG2 = dict(dq_tma=True, dq_swizzle=True, wg2=True)
CFGS = [dict(stages=2, overlap=2), dict(stages=2), dict(stages=2, overlap=2, dq_warp=True),
        dict(stages=2, dq_warp=True), dict(stages=1, overlap=2)]
IDS = ["s2-ov2", "s2", "s2-ov2-dqw", "s2-dqw", "s1-ov2"]


@pytest.mark.parametrize("cfg", CFGS, ids=IDS)
@pytest.mark.parametrize("sq,sk,kw", [
    (1, 1, dict(causal=True)), (333, 517, dict(causal=True)), (517, 333, {}),
    (700, 700, dict(window_size=(100, 20))), (200, 63, dict(causal=True)),
    (1024, 1024, {}), (300, 400, dict(causal=True, softcap=30.0))])
def test_matches_float64(monkeypatch, cfg, sq, sk, kw):
    torch = torch_sm90()
    c = BwdConfig(**WG2, **cfg)
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *_a, **_k: c)
    g = torch.Generator(device="cuda").manual_seed(sq + sk)
    mk = lambda *s: torch.randn(*s, device="cuda", dtype=torch.bfloat16, generator=g)
    q, k, v, do = mk(2, sq, 4, 192), mk(2, sk, 2, 192), mk(2, sk, 2, 192), mk(2, sq, 4, 192)
    out, lse = attention(q, k, v, return_lse=True, **kw)
    got = attention_backward(do, q, k, v, out, lse, **kw)
    ref = attention_backward_reference(*(x.float().cpu().numpy() for x in (do, q, k, v)), **kw)
    close(got, ref, (sq, sk, kw))


@pytest.mark.parametrize("cfg", CFGS[:3], ids=IDS[:3])
@pytest.mark.parametrize("causal", [True, False])
def test_varlen_matches_each_sequence(monkeypatch, cfg, causal):
    torch = torch_sm90()
    c = BwdConfig(**WG2, **cfg)
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *_a, **_k: c)
    varlen_matches_each_sequence(torch, 192, causal)
