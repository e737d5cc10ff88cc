"""lab/attention_bwd_plans.py --set det192's variants (head dim 192's deterministic mode:
``det_poll`` in wg3, the default rows' step and fixed-cost options, ``det_units`` 8 and
4), on an sm_90 GPU: dq, dk, dv against the float64 reference (max error <= 3e-2 of the
largest value, bf16), ragged, GQA, full, causal and window masks; bitwise repeatable; the
same bits as the plain det_pipe writer (det_poll changes when a turn is read, not the
order of the adds)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from attention_bwd_gpu_checks import close
from gpu_env import NEEDS_GPU, torch_sm90
from ptxdsl.ops import attention, attention_backward
from ptxdsl.ops.attention import attention_backward_reference, bwd_api

pytestmark = NEEDS_GPU

STEP = dict(uniform_cons=True, wg3_fence1=True, wg3_pfree=True, wg3_ahead=2)
FIXED = dict(prep_wide=True, dkv_tma=True, dq_exit_read=True)
VARIANTS = {"dpl": dict(det_poll=True), "st-fx": dict(STEP, **FIXED),
            "st-fx-dpl": dict(STEP, **FIXED, det_poll=True),
            "st-fx-dpl-u8": dict(STEP, **FIXED, det_poll=True, det_units=8),
            "st-fx-dpl-u4": dict(STEP, **FIXED, det_poll=True, det_units=4)}
SHAPES = {"causal": (333, 517, dict(causal=True)), "full": (517, 333, {}),
          "window": (700, 700, dict(window_size=(100, 20)))}


def _over_plan(monkeypatch, extra):
    shipped = bwd_api.choose_bwd
    monkeypatch.setattr(bwd_api, "choose_bwd",
                        lambda *a, **k: replace(shipped(*a, **k), **extra))


@pytest.mark.parametrize("vid", list(VARIANTS))
@pytest.mark.parametrize("shape", list(SHAPES))
def test_deterministic_matches_float64_and_repeats(monkeypatch, vid, shape):
    torch = torch_sm90()
    sq, sk, kw = SHAPES[shape]
    g = torch.Generator(device="cuda").manual_seed(sq + sk)
    mk = lambda *s: torch.randn(*s, device="cuda", dtype=torch.bfloat16, generator=g)
    q, k, v, do = mk(2, sq, 4, 192), mk(2, sk, 2, 192), mk(2, sk, 2, 192), mk(2, sq, 4, 192)
    out, lse = attention(q, k, v, return_lse=True, **kw)
    plain = attention_backward(do, q, k, v, out, lse, deterministic=True, **kw)
    _over_plan(monkeypatch, VARIANTS[vid])
    det = [attention_backward(do, q, k, v, out, lse, deterministic=True, **kw)
           for _ in range(3)]
    ref = attention_backward_reference(*(x.float().cpu().numpy() for x in (do, q, k, v)), **kw)
    close(det[0], ref, (vid, sq, sk, kw))
    assert all(torch.equal(a, b) for d in det[1:] for a, b in zip(det[0], d))
    if vid == "dpl":         # (the plan's det row + det_poll: the same adds, same order)
        assert torch.equal(det[0][0], plain[0])
