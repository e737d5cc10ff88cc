"""``BwdConfig.prep_wide`` (the 16-byte preprocess and postprocess, bwd_prepw.py) and
``BwdConfig.dkv_tma`` (dK, dV by TMA stores from K's and V's tiles, bwd_epi.py) on an sm_90
GPU, on the plan rows of head dims 64 and 128 (the 80-query tile for 128's full mask): dq,
dk, dv against the float64 reference (max error <= 3e-2 of the largest value, bf16 and
f16), ragged (Sq and Sk not multiples of 64 or 128, Sq below one step), GQA, full, causal
and window masks, and the deterministic mode bitwise repeatable with both; with
``dq_exit_read`` (the writer's last wait for reads only: the next kernel sees every add);
``lpt_units``
(longest key blocks first in sections of units) with both."""
from __future__ import annotations

from dataclasses import replace

import pytest

from attention_bwd_gpu_checks import close
from gpu_env import NEEDS_GPU, torch_sm90
from ptxdsl.ops import attention, attention_backward
from ptxdsl.ops.attention import attention_backward_reference, bwd_api

pytestmark = NEEDS_GPU


@pytest.mark.parametrize("extra", [dict(prep_wide=True), dict(dkv_tma=True),
                                   dict(prep_wide=True, dkv_tma=True),
                                   dict(prep_wide=True, dkv_tma=True, dq_exit_read=True),
                                   dict(prep_wide=True, dkv_tma=True, lpt_units=3)],
                         ids=["pw", "kvt", "pw-kvt", "pw-kvt-xr", "pw-kvt-lpt3"])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("dt", ["bfloat16", "float16"])
@pytest.mark.parametrize("sq,sk,kw", [
    (1, 1, {}), (517, 333, {}), (333, 517, dict(causal=True)), (1000, 1000, dict(causal=True)),
    (700, 700, dict(window_size=(100, 20)))])
def test_matches_float64(monkeypatch, extra, d, dt, sq, sk, kw):
    torch = torch_sm90()
    shipped = bwd_api.choose_bwd
    if extra.get("lpt_units") and not (kw.get("causal") or "window_size" in kw):
        pytest.skip("lpt_units orders the causal / window masks' uneven key blocks")
    monkeypatch.setattr(bwd_api, "choose_bwd",
                        lambda *a, **k: replace(shipped(*a, **k), **extra))
    g = torch.Generator(device="cuda").manual_seed(sq + sk + d)
    mk = lambda *s: torch.randn(*s, device="cuda", dtype=getattr(torch, dt), generator=g)
    q, k, v, do = mk(2, sq, 4, d), mk(2, sk, 2, d), mk(2, sk, 2, d), mk(2, sq, 4, d)
    out, lse = attention(q, k, v, return_lse=True, **kw)
    got = attention_backward(do, q, k, v, out, lse, **kw)
    close(got, attention_backward_reference(
        *(x.float().cpu().numpy() for x in (do, q, k, v)), **kw))
    det = [attention_backward(do, q, k, v, out, lse, deterministic=True, **kw)
           for _ in range(2)]
    close(det[0], attention_backward_reference(
        *(x.float().cpu().numpy() for x in (do, q, k, v)), **kw))
    for a, b in zip(*det):
        assert torch.equal(a, b)
