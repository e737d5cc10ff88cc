"""Head dim 128's 80-query tile in the deterministic mode (``dq_swap`` with ``det_pipe``,
:mod:`ptxdsl.ops.attention.bwd_m80`) on an sm_90 GPU, at shapes whose CTAs form several
sections and waves (S not a multiple of 80, GQA, full and causal masks): bitwise
repeatable over three more calls and within bf16 noise of the same tile's default mode."""
from __future__ import annotations

from dataclasses import replace

import pytest

from gpu_env import NEEDS_GPU, torch_sm90
from ptxdsl.ops import attention, attention_backward
from ptxdsl.ops.attention import bwd_api
from ptxdsl.ops.attention.bwd_config import BwdConfig

pytestmark = NEEDS_GPU

M80 = BwdConfig(stages=2, dq_tma=True, overlap=1, dq_swizzle=True, block_m=80,
                ds_double=True, dq_warp=True, dk_last=True, dq_swap=True, det_pipe=True)
FIXED = dict(prep_wide=True, dkv_tma=True, dq_exit_read=True)


def _call(monkeypatch, cfg, args, kw, det):
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *_a, **_k: cfg)
    return attention_backward(*args, deterministic=det, **kw)


@pytest.mark.parametrize("b,s,h,hk,kw", [(2, 4096, 8, 8, dict()),
                                         (3, 2000, 6, 3, dict()),
                                         (3, 2000, 6, 3, dict(causal=True))])
@pytest.mark.parametrize("extra", [dict(), dict(FIXED), dict(FIXED, det_desc=True),
                                   dict(FIXED, det_desc=True, det_poll=True, det_units=8)],
                         ids=["pipe", "fixed", "fixed-dsc", "fixed-dsc-dpl-u8"])
def test_repeats_bitwise_and_matches_the_default_mode(b, s, h, hk, kw, extra, monkeypatch):
    torch = torch_sm90()
    g = torch.Generator(device="cuda").manual_seed(b + s)
    mk = lambda *sh: torch.randn(*sh, device="cuda", dtype=torch.bfloat16, generator=g)
    q, k, v, do = mk(b, s, h, 128), mk(b, s, hk, 128), mk(b, s, hk, 128), mk(b, s, h, 128)
    out, lse = attention(q, k, v, return_lse=True, **kw)
    args, c = (do, q, k, v, out, lse), replace(M80, **extra)
    first = _call(monkeypatch, c, args, kw, True)
    ref = _call(monkeypatch, c, args, kw, False)
    for name, x, y in zip(("dq", "dk", "dv"), first, ref):
        x, y = x.float(), y.float()
        assert float((x - y).abs().max()) <= 2e-2 * max(float(y.abs().max()), 1e-2), name
    for _ in range(3):
        again = _call(monkeypatch, c, args, kw, True)
        assert all(torch.equal(x, y) for x, y in zip(first, again))
