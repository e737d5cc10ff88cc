"""The deterministic backward's pipelined writer turns (``BwdConfig.det_pipe``) and
``det_units`` sections on an sm_90 GPU: dq, dk, dv bitwise equal to the plain writer's with
the same config (the same adds in the same order; the CTAs' own sums unchanged), and
bitwise repeatable, at shapes whose CTAs form several sections and waves (head dims 64
with 128-row steps, 128, 192's wg3; full, causal and window masks)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from gpu_env import NEEDS_GPU, torch_sm90
from ptxdsl.ops import attention, attention_backward
from ptxdsl.ops.attention import bwd_api
from ptxdsl.ops.attention.bwd_config import BwdConfig

pytestmark = NEEDS_GPU

H128 = BwdConfig(stages=2, dq_tma=True, overlap=1, dq_swizzle=True, dq_split=True,
                 ds_double=True, dq_warp=True, dk_last=True)
H64 = BwdConfig(stages=2, dq_tma=True, dq_swizzle=True, block_m=128, overlap=1,
                ds_double=True, dq_warp=True)
H192 = BwdConfig(stages=2, dq_tma=True, dq_swizzle=True, wg3=True, consumer_regs=160,
                 overlap=2, dq_warp=True)


@pytest.mark.parametrize("c,b,s,h,hk,kw", [
    (H128, 2, 4096, 8, 8, dict()),
    (H128, 3, 2048, 6, 3, dict(causal=True)),
    (H128, 2, 3072, 4, 2, dict(window_size=(300, 100))),
    (H64, 2, 4096, 8, 4, dict(causal=True)),
    (H192, 2, 2048, 4, 4, dict(causal=True)),
])
@pytest.mark.parametrize("extra", [dict(det_pipe=True), dict(det_pipe=True, det_units=16),
                                   dict(det_units=32)])
def test_pipelined_turns_give_the_plain_writers_bits(c, b, s, h, hk, kw, extra, monkeypatch):
    torch = torch_sm90()
    d = {H128: 128, H64: 64, H192: 192}[c]
    g = torch.Generator(device="cuda").manual_seed(b + s + d)
    mk = lambda *sh: torch.randn(*sh, device="cuda", dtype=torch.bfloat16, generator=g)
    q, k, v, do = mk(b, s, h, d), mk(b, s, hk, d), mk(b, s, hk, d), mk(b, s, h, d)
    out, lse = attention(q, k, v, return_lse=True, **kw)
    call = lambda cfg: (monkeypatch.setattr(bwd_api, "choose_bwd", lambda *_a, **_k: cfg),
                        attention_backward(do, q, k, v, out, lse, deterministic=True,
                                           **kw))[1]
    plain = call(c)
    for _ in range(3):
        again = call(replace(c, **extra))
        assert all(torch.equal(x, y) for x, y in zip(plain, again))
