"""Head dim 192's fixed-cost options in wg3 on an sm_90 GPU (``BwdConfig.prep_wide`` at
D = 192, ``dkv_tma``: dKᵀ, dVᵀ through K's and V's tiles by TMA stores, ``dq_exit_read``,
``lpt_units``), each on head dim 192's plan rows: dq, dk, dv against the float64 reference
(max error <= 3e-2 of the largest value, bf16 and f16), ragged (Sq, Sk not multiples of
64 or 96, Sq below one step), GQA, full, causal and window masks; the deterministic mode
with them bitwise repeatable."""
from __future__ import annotations

from dataclasses import replace

import pytest

from attention_bwd_gpu_checks import close
from gpu_env import NEEDS_GPU, torch_sm90
from ptxdsl.ops import attention, attention_backward
from ptxdsl.ops.attention import attention_backward_reference, bwd_api

pytestmark = NEEDS_GPU
FIXED = dict(prep_wide=True, dkv_tma=True, dq_exit_read=True)


@pytest.mark.parametrize("extra", [dict(prep_wide=True), dict(dkv_tma=True),
                                   dict(dq_exit_read=True), FIXED, dict(FIXED, dq_warp=True),
                                   dict(FIXED, lpt_units=3)],
                         ids=["pw", "kvt", "xr", "pw-kvt-xr", "dqw-pw-kvt-xr", "pw-kvt-xr-lpt3"])
@pytest.mark.parametrize("dt", ["bfloat16", "float16"])
@pytest.mark.parametrize("sq,sk,kw", [
    (1, 1, {}), (517, 333, {}), (333, 517, dict(causal=True)), (1000, 1000, dict(causal=True)),
    (700, 700, dict(window_size=(100, 20)))])
def test_matches_float64(monkeypatch, extra, dt, sq, sk, kw):
    torch = torch_sm90()
    shipped = bwd_api.choose_bwd
    if extra.get("lpt_units") and not (kw.get("causal") or "window_size" in kw):
        pytest.skip("lpt_units orders the causal / window masks' uneven key blocks")
    # (the deterministic row: its own det_units order whatever lpt_units says)
    monkeypatch.setattr(bwd_api, "choose_bwd",
                        lambda *a, **k: replace(shipped(*a, **k), **extra))
    g = torch.Generator(device="cuda").manual_seed(sq + sk)
    mk = lambda *s: torch.randn(*s, device="cuda", dtype=getattr(torch, dt), generator=g)
    q, k, v, do = mk(3, sq, 4, 192), mk(3, sk, 2, 192), mk(3, sk, 2, 192), mk(3, sq, 4, 192)
    out, lse = attention(q, k, v, return_lse=True, **kw)
    ref = attention_backward_reference(*(x.float().cpu().numpy() for x in (do, q, k, v)), **kw)
    close(attention_backward(do, q, k, v, out, lse, **kw), ref)
    det = [attention_backward(do, q, k, v, out, lse, deterministic=True, **kw)
           for _ in range(2)]
    close(det[0], ref)
    for a, b in zip(*det):
        assert torch.equal(a, b)
