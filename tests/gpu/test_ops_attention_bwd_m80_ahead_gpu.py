"""The 80-query tile (``BwdConfig.dq_swap``) with the fixed-cost options and the lab's
new variants (``lab/attention_bwd_plans.py --set h128c``): ``lpt_units`` (key block-major
sections) and ``s_ahead`` 2 with ``ahead_k`` (the next Sᵀ behind dK), on an sm_90 GPU:
dq, dk, dv against the float64 reference (max error <= 3e-2 of the largest value), ragged
shapes, GQA over several (batch, K/V head) units (sections that do not divide them),
causal / window / full, a CTA with no step; repeat calls agree; the deterministic mode
with s_ahead bitwise repeats."""
from __future__ import annotations

import pytest

from attention_bwd_gpu_checks import close
from gpu_env import NEEDS_GPU, torch_sm90
from ptxdsl.ops import attention, attention_backward
from ptxdsl.ops.attention import attention_backward_reference, bwd_api
from ptxdsl.ops.attention.bwd_config import BwdConfig

pytestmark = NEEDS_GPU

M80 = dict(stages=2, dq_tma=True, overlap=1, dq_swizzle=True, block_m=80, ds_double=True,
           dq_warp=True, dk_last=True, dq_swap=True, prep_wide=True, dkv_tma=True,
           dq_exit_read=True)


def _inputs(torch, b, sq, sk, kw):
    g = torch.Generator(device="cuda").manual_seed(sq + sk + b)
    mk = lambda *s: torch.randn(*s, device="cuda", dtype=torch.bfloat16, generator=g)
    q, k, v, do = mk(b, sq, 4, 128), mk(b, sk, 2, 128), mk(b, sk, 2, 128), mk(b, sq, 4, 128)
    out, lse = attention(q, k, v, return_lse=True, **kw)
    return do, q, k, v, out, lse


@pytest.mark.parametrize("extra", [dict(lpt_units=3), dict(s_ahead=2, ahead_k=True),
                                   dict(lpt_units=8, s_ahead=2, ahead_k=True)],
                         ids=["lpt3", "sa2", "lpt8-sa2"])
@pytest.mark.parametrize("b,sq,sk,kw", [
    (3, 1000, 1000, dict(causal=True)), (2, 333, 517, dict(causal=True)),
    (3, 517, 333, {}), (2, 300, 1100, dict(window_size=(10, 0)))])
def test_matches_float64(monkeypatch, extra, b, sq, sk, kw):
    torch = torch_sm90()
    c = BwdConfig(**M80, **extra)
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *_a, **_k: c)
    args = _inputs(torch, b, sq, sk, kw)
    first = attention_backward(*args, **kw)
    close(first, attention_backward_reference(
        *(x.float().cpu().numpy() for x in args[:4]), **kw))
    again = attention_backward(*args, **kw)
    for x, y in zip(first, again):
        assert torch.allclose(x.float(), y.float(), atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("kw", [dict(causal=True), {}], ids=["causal", "full"])
def test_deterministic_with_s_ahead_repeats_bitwise(monkeypatch, kw):
    torch = torch_sm90()
    c = BwdConfig(**M80, s_ahead=2, ahead_k=True, det_pipe=True, det_desc=True, det_poll=True)
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *_a, **_k: c)
    args = _inputs(torch, 2, 1100, 1100, kw)
    first = attention_backward(*args, deterministic=True, **kw)
    close(first, attention_backward_reference(
        *(x.float().cpu().numpy() for x in args[:4]), **kw))
    for _ in range(3):
        for x, y in zip(first, attention_backward(*args, deterministic=True, **kw)):
            assert torch.equal(x, y)
