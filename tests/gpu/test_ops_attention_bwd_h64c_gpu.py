"""Head dim 64's walk options on an sm_90 GPU (``BwdConfig.mask_peel``: the steps that
cross the mask in loops of their own; ``m_desc``: row blocks last to first; with
``lpt_units``), each on head dim 64's plan rows: dq, dk, dv against the float64 reference
(max error <= 3e-2 of the largest value, bf16 and f16), ragged (Sq, Sk not multiples of
128, Sq below one step), GQA, full, causal and window masks; ``mask_peel`` in the
deterministic mode bitwise repeatable."""
from __future__ import annotations

from dataclasses import replace

import pytest

from attention_bwd_gpu_checks import close
from gpu_env import NEEDS_GPU, torch_sm90
from ptxdsl.ops import attention, attention_backward
from ptxdsl.ops.attention import attention_backward_reference, bwd_api

pytestmark = NEEDS_GPU


@pytest.mark.parametrize("extra", [dict(mask_peel=True), dict(m_desc=True),
                                   dict(mask_peel=True, m_desc=True),
                                   dict(m_desc=True, lpt_units=3)],
                         ids=["peel", "desc", "peel-desc", "desc-lpt3"])
@pytest.mark.parametrize("dt", ["bfloat16", "float16"])
@pytest.mark.parametrize("sq,sk,kw", [
    (1, 1, {}), (517, 333, {}), (333, 517, dict(causal=True)), (517, 333, dict(causal=True)),
    (1000, 1000, dict(causal=True)), (700, 700, dict(window_size=(100, 20)))])
def test_matches_float64(monkeypatch, extra, dt, sq, sk, kw):
    torch = torch_sm90()
    shipped = bwd_api.choose_bwd
    # (m_desc is the default mode's order: the deterministic row keeps its own)
    det_extra = {k: v for k, v in extra.items() if k == "mask_peel"}
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda h, dt_, m, cap=False, det=False, vl=False:
                        replace(shipped(h, dt_, m, cap, det, vl),
                                **(det_extra if det or vl else extra)))
    g = torch.Generator(device="cuda").manual_seed(sq + sk)
    mk = lambda *s: torch.randn(*s, device="cuda", dtype=getattr(torch, dt), generator=g)
    q, k, v, do = mk(3, sq, 4, 64), mk(3, sk, 2, 64), mk(3, sk, 2, 64), mk(3, sq, 4, 64)
    out, lse = attention(q, k, v, return_lse=True, **kw)
    ref = attention_backward_reference(*(x.float().cpu().numpy() for x in (do, q, k, v)), **kw)
    close(attention_backward(do, q, k, v, out, lse, **kw), ref)
    det = [attention_backward(do, q, k, v, out, lse, deterministic=True, **kw)
           for _ in range(2)]
    close(det[0], ref)
    for a, b in zip(*det):
        assert torch.equal(a, b)
