"""lab/attention_bwd_plans.py --set h128d's variants (``BwdConfig.dp_pin``: dPᵀ's wait
pinned below Pᵀ's exponentials; ``dv_first``: dV queued behind dPᵀ, dSᵀ from the packed
Pᵀ; ``dq_batch``: the writer's two adds before their reads; ``ds_fence1``: the exchange's
writers' proxy fence only) over head dim 128's 80-query plan rows, on an sm_90 GPU: dq,
dk, dv against the float64 reference (max error <= 3e-2 of the largest value, bf16 and
f16), ragged, GQA, full, causal and window masks, a CTA with no step; repeat calls agree;
against SDPA's gradients at S = 1k."""
from __future__ import annotations

from dataclasses import replace

import pytest

from attention_bwd_gpu_checks import close, matches_sdpa
from gpu_env import NEEDS_GPU, torch_sm90
from ptxdsl.ops import attention, attention_backward
from ptxdsl.ops.attention import attention_backward_reference, bwd_api
from ptxdsl.ops.attention.config import Mask

pytestmark = NEEDS_GPU

PLAIN, AHEAD = dict(s_ahead=0, ahead_k=False), dict(s_ahead=2, ahead_k=True)
VARIANTS = {"uc-pin": dict(uniform_cons=True, dp_pin=True),
            "uc-dvf": dict(uniform_cons=True, dv_first=True, **PLAIN),
            "uc-dvf-sa2": dict(uniform_cons=True, dv_first=True, **AHEAD),
            "uc-pin-dvf": dict(uniform_cons=True, dp_pin=True, dv_first=True, **PLAIN),
            "uc-dvf-sa2-dqb-xf1": dict(uniform_cons=True, dv_first=True, dq_batch=True,
                                       ds_fence1=True, **AHEAD),
            "pin": dict(dp_pin=True)}
SHAPES = {"full": (517, 333, {}), "causal": (333, 517, dict(causal=True)),
          "short": (79, 1100, {}), "window": (700, 700, dict(window_size=(100, 20))),
          "no-step": (300, 1100, dict(window_size=(10, 0)))}


def _over_plan(monkeypatch, extra):
    """Each call's plan row with ``extra``; where that row is not head dim 128's 80-query
    tile (the window mask's), the full mask's row, which is."""
    shipped = bwd_api.choose_bwd

    def row(d, dt, mask, *a, **k):
        c = shipped(d, dt, mask, *a, **k)
        return c if c.dq_swap else shipped(d, dt, Mask(), *a, **k)
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *a, **k: replace(row(*a, **k), **extra))


@pytest.mark.parametrize("dt", ["bfloat16", "float16"])
@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_matches_float64(monkeypatch, variant, shape, dt):
    torch = torch_sm90()
    _over_plan(monkeypatch, VARIANTS[variant])
    sq, sk, kw = SHAPES[shape]
    g = torch.Generator(device="cuda").manual_seed(sq + sk)
    mk = lambda *s: torch.randn(*s, device="cuda", dtype=getattr(torch, dt), generator=g)
    q, k, v, do = mk(2, sq, 4, 128), mk(2, sk, 2, 128), mk(2, sk, 2, 128), mk(2, sq, 4, 128)
    out, lse = attention(q, k, v, return_lse=True, **kw)
    first = attention_backward(do, q, k, v, out, lse, **kw)
    close(first, attention_backward_reference(
        *(x.float().cpu().numpy() for x in (do, q, k, v)), **kw), (variant, shape, dt))
    again = attention_backward(do, q, k, v, out, lse, **kw)
    for a, b in zip(first, again):
        assert torch.allclose(a.float(), b.float(), atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_matches_sdpa_at_1k(monkeypatch, variant, causal):
    """The lab's shape at S = 1k (B 16, H 16): against SDPA's gradients (cuDNN, or
    flash), max relative error <= 3e-2."""
    torch = torch_sm90()
    _over_plan(monkeypatch, VARIANTS[variant])
    g = torch.Generator(device="cuda").manual_seed(7)
    mk = lambda: torch.randn(16, 1024, 16, 128, device="cuda", dtype=torch.bfloat16,
                             generator=g)
    q, k, v, do = mk(), mk(), mk(), mk()
    out, lse = attention(q, k, v, return_lse=True, causal=causal)
    got = attention_backward(do, q, k, v, out, lse, causal=causal)
    matches_sdpa(torch, q, k, v, do, got, causal, (variant, causal))
