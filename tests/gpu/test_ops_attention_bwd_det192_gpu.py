"""lab/attention_bwd_plans.py --set det192's variants (head dim 192's deterministic mode:
``det_poll`` in wg3, the default rows' step and fixed-cost options, ``det_units`` 8 and
4) over the plan's deterministic row, on an sm_90 GPU: dq, dk, dv against the float64
reference (max error <= 3e-2 of the largest value, bf16), ragged, GQA, full, causal and
window masks; bitwise repeatable; the same bits as the writer without det_poll (when a
turn is read changes, not the order of the adds to a panel); varlen with the plan's row."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from attention_bwd_gpu_checks import close
from gpu_env import NEEDS_GPU, torch_sm90
from ptxdsl.ops import attention, attention_backward
from ptxdsl.ops.attention import attention_backward_reference, bwd_api

pytestmark = NEEDS_GPU

STEP = dict(uniform_cons=True, wg3_fence1=True, wg3_pfree=True, wg3_ahead=2)
FIXED = dict(prep_wide=True, dkv_tma=True, dq_exit_read=True)
# over the plan's row (det_pipe, det_units 16, the step and fixed-cost options, det_poll)
VARIANTS = {"row": {}, "no-dpl": dict(det_poll=False),
            "plain": dict(det_poll=False, uniform_cons=False, wg3_fence1=False,
                          wg3_pfree=False, wg3_ahead=0, prep_wide=False, dkv_tma=False,
                          dq_exit_read=False),
            "u8": dict(det_units=8), "u4": dict(det_units=4)}
# the variant whose dQ bits each must equal: det_poll changes when a turn is read, not the
# order of the adds to a panel
SAME_BITS = {"row": dict(det_poll=False)}
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
    if vid in SAME_BITS:
        with monkeypatch.context() as mp:
            _over_plan(mp, SAME_BITS[vid])
            plain = attention_backward(do, q, k, v, out, lse, deterministic=True, **kw)
    _over_plan(monkeypatch, VARIANTS[vid])
    det = [attention_backward(do, q, k, v, out, lse, deterministic=True, **kw)
           for _ in range(3)]
    ref = attention_backward_reference(*(x.float().cpu().numpy() for x in (do, q, k, v)), **kw)
    close(det[0], ref, (vid, sq, sk, kw))
    assert all(torch.equal(a, b) for d in det[1:] for a, b in zip(det[0], d))
    if vid in SAME_BITS:
        assert torch.equal(det[0][0], plain[0])


def test_varlen_deterministic_row(monkeypatch):
    """varlen with the plan's deterministic row (the API drops dkv_tma there): bitwise
    repeatable, within 3e-2 of the largest value of the default mode's gradients."""
    from ptxdsl.ops import attention_varlen, attention_varlen_backward
    torch = torch_sm90()
    lens = [1, 300, 77, 517]
    g = torch.Generator(device="cuda").manual_seed(3)
    mk = lambda *s: torch.randn(*s, device="cuda", dtype=torch.bfloat16, generator=g)
    n = sum(lens)
    q, k, v, do = mk(n, 4, 192), mk(n, 2, 192), mk(n, 2, 192), mk(n, 4, 192)
    cu = torch.tensor([0] + list(np.cumsum(lens)), dtype=torch.int32, device="cuda")
    out, lse = attention_varlen(q, k, v, cu, cu, 517, 517, causal=True, return_lse=True)
    run = lambda det: attention_varlen_backward(do, q, k, v, out, lse, cu, cu, 517, 517,
                                                causal=True, deterministic=det)
    a, b, ref = run(True), run(True), run(False)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    for x, r in zip(a, ref):
        assert float((x.float() - r.float()).abs().max()) <= 3e-2 * float(r.float().abs().max())
