"""lab/attention_bwd_plans.py --set h128b's variants (``BwdConfig.dq_warp``, ``dk_last``;
not plan rows yet) on an sm_90 GPU: dq, dk, dv against the float64 reference (max error
<= 3e-2 of the largest value, bf16), ragged, GQA, masks; the deterministic mode (the
writer warp takes the semaphore turns) bitwise identical across runs; varlen per sequence."""
from __future__ import annotations

import pytest

from attention_bwd_gpu_checks import close, varlen_matches_each_sequence
from gpu_env import NEEDS_GPU, torch_sm90
from ptxdsl.ops import attention, attention_backward
from ptxdsl.ops.attention import attention_backward_reference, bwd_api
from ptxdsl.ops.attention.bwd_config import BwdConfig

pytestmark = NEEDS_GPU

PLAN = dict(stages=2, dq_tma=True, overlap=1, dq_swizzle=True, dq_split=True)
CFGS = [dict(dq_warp=True), dict(dk_last=True), dict(dq_warp=True, dk_last=True),
        dict(dq_warp=True, ds_double=True), dict(dq_warp=True, dk_last=True, ds_double=True)]
IDS = ["dqw", "dkl", "dqw-dkl", "dqw-dsx2", "dqw-dkl-dsx2"]


def _use(monkeypatch, cfg):
    c = BwdConfig(**PLAN, **cfg)
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *_a, **_k: c)


@pytest.mark.parametrize("cfg", CFGS, ids=IDS)
@pytest.mark.parametrize("sq,sk,kw", [
    (1, 1, dict(causal=True)), (333, 517, dict(causal=True)), (517, 333, {}),
    (700, 700, dict(window_size=(100, 20))), (200, 63, dict(causal=True))])
def test_matches_float64(monkeypatch, cfg, sq, sk, kw):
    torch = torch_sm90()
    _use(monkeypatch, cfg)
    g = torch.Generator(device="cuda").manual_seed(sq + sk)
    mk = lambda *s: torch.randn(*s, device="cuda", dtype=torch.bfloat16, generator=g)
    q, k, v, do = mk(2, sq, 4, 128), mk(2, sk, 2, 128), mk(2, sk, 2, 128), mk(2, sq, 4, 128)
    out, lse = attention(q, k, v, return_lse=True, **kw)
    first = attention_backward(do, q, k, v, out, lse, **kw)
    close(first, attention_backward_reference(
        *(x.float().cpu().numpy() for x in (do, q, k, v)), **kw))
    det = attention_backward(do, q, k, v, out, lse, deterministic=True, **kw)
    for _ in range(2):
        again = attention_backward(do, q, k, v, out, lse, deterministic=True, **kw)
        assert all(torch.equal(a, b) for a, b in zip(det, again))


@pytest.mark.parametrize("cfg", CFGS, ids=IDS)
def test_varlen_matches_each_sequence(monkeypatch, cfg):
    torch = torch_sm90()
    _use(monkeypatch, cfg)
    varlen_matches_each_sequence(torch, 128, True)
