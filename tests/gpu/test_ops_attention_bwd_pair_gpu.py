"""lab/attention_bwd_plans.py --set pair's variants (``BwdConfig.kv_pair``: two key blocks a
CTA, ``p`` and ``nblk - 1 - p``; with ``dkv_stage``, and without ``dkv_tma``; not plan rows) on an sm_90 GPU: dq, dk, dv against the
float64 reference (max error <= 3e-2 of the largest value, bf16), ragged, GQA, odd and even
key-block counts, causal, full, and windows with key blocks that have no step."""
from __future__ import annotations

import pytest

from attention_bwd_gpu_checks import close
from gpu_env import NEEDS_GPU, torch_sm90
from ptxdsl.ops import attention, attention_backward
from ptxdsl.ops.attention import attention_backward_reference, bwd_api
from ptxdsl.ops.attention.bwd_config import BwdConfig

pytestmark = NEEDS_GPU

H64 = dict(stages=2, dq_tma=True, dq_swizzle=True, block_m=128, overlap=1, ds_double=True,
           dq_warp=True, dk_last=True, s_ahead=2, prep_wide=True, dkv_tma=True,
           dq_exit_read=True, kv_pair=True)
H128 = dict(stages=2, dq_tma=True, overlap=1, dq_swizzle=True, dq_split=True, ds_double=True,
            dq_warp=True, dk_last=True, prep_wide=True, dkv_tma=True, dq_exit_read=True,
            kv_pair=True)


@pytest.mark.parametrize("d,c", [
    (64, BwdConfig(**H64)), (128, BwdConfig(**H128)),
    (64, BwdConfig(**H64, dkv_stage=True)), (128, BwdConfig(**H128, dkv_stage=True)),
    (64, BwdConfig(**dict(H64, dkv_tma=False))),
    (64, BwdConfig(**H64, dkv_stage=True, pair_max=4))],     # 517 keys unpaired, 333 paired
    ids=["d64", "d128", "d64-ks", "d128-ks", "d64-st", "d64-ks-pm4"])
@pytest.mark.parametrize("sq,sk,kw", [
    (1, 1, dict(causal=True)), (333, 517, dict(causal=True)), (517, 333, {}),
    (640, 640, dict(causal=True)), (700, 700, dict(window_size=(100, 20))),
    (200, 63, dict(causal=True)), (300, 1100, dict(window_size=(10, 0)))])
def test_matches_float64(monkeypatch, d, c, sq, sk, kw):
    torch = torch_sm90()
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *_a, **_k: c)
    g = torch.Generator(device="cuda").manual_seed(sq + sk)
    mk = lambda *s: torch.randn(*s, device="cuda", dtype=torch.bfloat16, generator=g)
    q, k, v, do = mk(2, sq, 4, d), mk(2, sk, 2, d), mk(2, sk, 2, d), mk(2, sq, 4, d)
    out, lse = attention(q, k, v, return_lse=True, **kw)
    got = attention_backward(do, q, k, v, out, lse, **kw)
    close(got, attention_backward_reference(
        *(x.float().cpu().numpy() for x in (do, q, k, v)), **kw))
