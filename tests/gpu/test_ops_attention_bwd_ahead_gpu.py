"""lab/attention_bwd_plans.py --set ahead's variants (``BwdConfig.s_ahead``: the next step's
Sᵀ issued before the step ends) on an sm_90 GPU: dq, dk, dv against the
float64 reference (max error <= 3e-2 of the largest value, bf16), ragged, GQA, masks, a
CTA with no step; the deterministic mode bitwise identical across runs; varlen per
sequence at head dim 128."""
from __future__ import annotations

import pytest

from attention_bwd_gpu_checks import close, varlen_matches_each_sequence
from gpu_env import NEEDS_GPU, torch_sm90
from ptxdsl.ops import attention, attention_backward
from ptxdsl.ops.attention import attention_backward_reference, bwd_api
from ptxdsl.ops.attention.bwd_config import BwdConfig

pytestmark = NEEDS_GPU

H128 = dict(stages=2, dq_tma=True, overlap=1, dq_swizzle=True, dq_split=True, ds_double=True,
            dq_warp=True, dk_last=True)
H64 = dict(stages=2, dq_tma=True, dq_swizzle=True, block_m=128, overlap=1, ds_double=True,
           dq_warp=True, dk_last=True)
CFGS = [(128, BwdConfig(**H128, s_ahead=2)), (64, BwdConfig(**H64, s_ahead=1)),
        (64, BwdConfig(**H64, s_ahead=2))]
IDS = ["d128-sa2", "d64-sa1", "d64-sa2"]


@pytest.mark.parametrize("d,c", CFGS, ids=IDS)
@pytest.mark.parametrize("sq,sk,kw", [
    (1, 1, dict(causal=True)), (333, 517, dict(causal=True)), (517, 333, {}),
    (700, 700, dict(window_size=(100, 20))), (200, 63, dict(causal=True)),
    (300, 1100, dict(window_size=(10, 0)))])
def test_matches_float64(monkeypatch, d, c, sq, sk, kw):
    torch = torch_sm90()
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *_a, **_k: c)
    g = torch.Generator(device="cuda").manual_seed(sq + sk)
    mk = lambda *s: torch.randn(*s, device="cuda", dtype=torch.bfloat16, generator=g)
    q, k, v, do = mk(2, sq, 4, d), mk(2, sk, 2, d), mk(2, sk, 2, d), mk(2, sq, 4, d)
    out, lse = attention(q, k, v, return_lse=True, **kw)
    first = attention_backward(do, q, k, v, out, lse, **kw)
    close(first, attention_backward_reference(
        *(x.float().cpu().numpy() for x in (do, q, k, v)), **kw))
    det = attention_backward(do, q, k, v, out, lse, deterministic=True, **kw)
    for _ in range(2):
        again = attention_backward(do, q, k, v, out, lse, deterministic=True, **kw)
        assert all(torch.equal(a, b) for a, b in zip(det, again))


def test_varlen_matches_each_sequence(monkeypatch):
    torch = torch_sm90()
    c = BwdConfig(**H128, s_ahead=2)
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *_a, **_k: c)
    varlen_matches_each_sequence(torch, 128, True)
