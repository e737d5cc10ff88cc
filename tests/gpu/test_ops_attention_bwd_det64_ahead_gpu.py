"""Head dim 64's deterministic mode on the default row's step (``block_m`` 128, ``dk_last``,
``s_ahead`` 2, the fixed-cost options) with ``det_desc``, the writer's pipelined turns
(``det_pipe``, ``det_poll``) and ``ahead_k``, on an sm_90 GPU at shapes whose CTAs form
several sections and waves (S not a multiple of 128, GQA, full, causal and window masks):
bitwise repeatable over three more calls and within bf16 noise of the default row."""
from __future__ import annotations

from dataclasses import replace

import pytest

from gpu_env import NEEDS_GPU, torch_sm90
from ptxdsl.ops import attention, attention_backward
from ptxdsl.ops.attention import bwd_api
from ptxdsl.ops.attention.bwd_config import BwdConfig

pytestmark = NEEDS_GPU

STEP = BwdConfig(stages=2, dq_tma=True, dq_swizzle=True, block_m=128, overlap=1,
                 ds_double=True, dq_warp=True, dk_last=True, s_ahead=2, prep_wide=True,
                 dkv_tma=True, dq_exit_read=True)


def _call(monkeypatch, cfg, args, kw, det):
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *_a, **_k: cfg)
    return attention_backward(*args, deterministic=det, **kw)


@pytest.mark.parametrize("b,s,h,hk,kw", [(2, 4096, 16, 16, dict()),
                                         (3, 2000, 8, 2, dict(causal=True)),
                                         (2, 1500, 8, 4, dict(window_size=(300, 0)))])
@pytest.mark.parametrize("extra", [dict(det_desc=True), dict(det_desc=True, det_pipe=True),
                                   dict(det_desc=True, det_pipe=True, det_poll=True),
                                   dict(det_desc=True, ahead_k=True)],
                         ids=["dsc", "pipe-dsc", "pipe-dpl-dsc", "sak-dsc"])
def test_repeats_bitwise_and_matches_the_default_mode(b, s, h, hk, kw, extra, monkeypatch):
    torch = torch_sm90()
    g = torch.Generator(device="cuda").manual_seed(b + s)
    mk = lambda *sh: torch.randn(*sh, device="cuda", dtype=torch.bfloat16, generator=g)
    q, k, v, do = mk(b, s, h, 64), mk(b, s, hk, 64), mk(b, s, hk, 64), mk(b, s, h, 64)
    out, lse = attention(q, k, v, return_lse=True, **kw)
    args, c = (do, q, k, v, out, lse), replace(STEP, **extra)
    first = _call(monkeypatch, c, args, kw, True)
    ref = _call(monkeypatch, STEP, args, kw, False)
    for name, x, y in zip(("dq", "dk", "dv"), first, ref):
        x, y = x.float(), y.float()
        assert float((x - y).abs().max()) <= 2e-2 * max(float(y.abs().max()), 1e-2), name
    for _ in range(3):
        again = _call(monkeypatch, c, args, kw, True)
        assert all(torch.equal(x, y) for x, y in zip(first, again))
