"""lab/attention_bwd_plans.py --set h192m's variants (head dim 192's step schedule:
``BwdConfig.wg3_ahead`` 2, the next step's S issued behind dQ's stage; ``wg3_pfree``, P's
stores behind dO's empty barrier instead of a CTA barrier; ``wg3_fence1``, one proxy
fence a thread per exchange; combined, and with the dQ writer warp), each over the
shipped plan row of the shape, on an sm_90 GPU: dq, dk, dv against the float64 reference
(max error <= 3e-2 of the largest value, bf16), ragged (a CTA with no step too), GQA,
full, causal and window masks, softcap; against SDPA's (cuDNN's, or flash's) gradients at
S = 1k; the deterministic row with the combined ones bitwise repeatable; varlen per
sequence."""
from __future__ import annotations

from dataclasses import replace

import pytest

from attention_bwd_gpu_checks import close, matches_sdpa, varlen_matches_each_sequence
from gpu_env import NEEDS_GPU, torch_sm90
from ptxdsl.ops import attention, attention_backward
from ptxdsl.ops.attention import attention_backward_reference, bwd_api

pytestmark = NEEDS_GPU

BOTH = dict(wg3_ahead=2, wg3_pfree=True)
VARIANTS = [dict(wg3_ahead=2), dict(wg3_pfree=True), dict(wg3_fence1=True), BOTH,
            dict(BOTH, wg3_fence1=True), dict(BOTH, wg3_fence1=True, dq_warp=True)]
IDS = ["sa2", "pf", "f1", "sa2-pf", "sa2-pf-f1", "sa2-pf-f1-dqw"]


def _over_plan(monkeypatch, extra):
    """The plan row of each call (wg3 at head dim 192) with ``extra``."""
    shipped = bwd_api.choose_bwd
    monkeypatch.setattr(bwd_api, "choose_bwd",
                        lambda *a, **k: replace(shipped(*a, **k), **extra))


SHAPES = {"one": (1, 1, dict(causal=True)), "causal": (333, 517, dict(causal=True)),
          "full": (517, 333, {}), "window": (700, 700, dict(window_size=(100, 20))),
          "no-step": (64, 300, dict(window_size=(10, 0))),
          "softcap": (300, 400, dict(causal=True, softcap=30.0))}
CASES = [(v, sh) for v in IDS[4:] for sh in SHAPES] + \
    [(v, sh) for v in IDS[:4] for sh in ("causal", "full", "softcap")]


@pytest.mark.parametrize("vid,shape", CASES, ids=[f"{v}-{sh}" for v, sh in CASES])
def test_matches_float64(monkeypatch, vid, shape):
    """Every shape for the combined variants (and their deterministic mode, bitwise
    repeated), three for each option alone."""
    torch = torch_sm90()
    extra = VARIANTS[IDS.index(vid)]
    _over_plan(monkeypatch, extra)
    sq, sk, kw = SHAPES[shape]
    g = torch.Generator(device="cuda").manual_seed(sq + sk)
    mk = lambda *s: torch.randn(*s, device="cuda", dtype=torch.bfloat16, generator=g)
    q, k, v, do = mk(2, sq, 4, 192), mk(2, sk, 2, 192), mk(2, sk, 2, 192), mk(2, sq, 4, 192)
    out, lse = attention(q, k, v, return_lse=True, **kw)
    got = attention_backward(do, q, k, v, out, lse, **kw)
    ref = attention_backward_reference(*(x.float().cpu().numpy() for x in (do, q, k, v)), **kw)
    close(got, ref, (sq, sk, kw))
    if extra.get("wg3_ahead") and extra.get("wg3_pfree"):
        det = [attention_backward(do, q, k, v, out, lse, deterministic=True, **kw)
               for _ in range(2)]
        close(det[0], ref, ("det", sq, sk, kw))
        assert all(torch.equal(a, b) for a, b in zip(*det))


@pytest.mark.parametrize("extra", VARIANTS, ids=IDS)
@pytest.mark.parametrize("causal", [False, True])
def test_matches_sdpa_at_1k(monkeypatch, extra, causal):
    """The lab's shape at S = 1k (B 4, H 10): against SDPA's f32 gradients (cuDNN, or flash
    where cuDNN refuses), max relative error <= 3e-2."""
    torch = torch_sm90()
    _over_plan(monkeypatch, extra)
    g = torch.Generator(device="cuda").manual_seed(192 + causal)
    q, k, v, do = (torch.randn(4, 1024, 10, 192, device="cuda", dtype=torch.bfloat16,
                               generator=g) for _ in range(4))
    out, lse = attention(q, k, v, causal=causal, return_lse=True)
    got = attention_backward(do, q, k, v, out, lse, causal=causal)
    matches_sdpa(torch, q, k, v, do, got, causal, extra)


@pytest.mark.parametrize("extra", VARIANTS[3:], ids=IDS[3:])
@pytest.mark.parametrize("causal", [True, False])
def test_varlen_matches_each_sequence(monkeypatch, extra, causal):
    torch = torch_sm90()
    _over_plan(monkeypatch, extra)
    varlen_matches_each_sequence(torch, 192, causal)

