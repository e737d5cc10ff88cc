"""The deterministic backward's descending turns (``BwdConfig.det_desc``) and head dim
256's col_split kernel with the dQ writer warp (``dq_warp``, ``det_pipe``, ``det_units``,
``det_poll``) on an sm_90 GPU, at shapes whose CTAs form several sections and waves: the
writer warp's bits equal to the consumers' own turns' (the same adds in the same order);
the descending turns bitwise repeatable and within bf16 noise of the default mode (head
dims 64, 128, 192, 256; causal and full masks; GQA)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from gpu_env import NEEDS_GPU, torch_sm90
from ptxdsl.ops import attention, attention_backward
from ptxdsl.ops.attention import bwd_api
from ptxdsl.ops.attention.bwd_config import BwdConfig

pytestmark = NEEDS_GPU

H256 = BwdConfig(stages=1, dq_tma=True, dq_swizzle=True, col_split=True, pds_smem=True)
H256W = replace(H256, dq_warp=True, det_pipe=True)
H128 = BwdConfig(stages=2, dq_tma=True, overlap=1, dq_swizzle=True, dq_split=True,
                 ds_double=True, dq_warp=True, dk_last=True, det_pipe=True)
H64 = BwdConfig(stages=2, dq_tma=True, dq_swizzle=True, block_m=128, overlap=1,
                ds_double=True, dq_warp=True)
H192 = BwdConfig(stages=2, dq_tma=True, dq_swizzle=True, wg3=True, consumer_regs=160,
                 overlap=2, dq_warp=True, det_pipe=True, det_units=16)


def _inputs(torch, b, s, h, hk, d, kw):
    g = torch.Generator(device="cuda").manual_seed(b + s + d)
    mk = lambda *sh: torch.randn(*sh, device="cuda", dtype=torch.bfloat16, generator=g)
    q, k, v, do = mk(b, s, h, d), mk(b, s, hk, d), mk(b, s, hk, d), mk(b, s, h, d)
    out, lse = attention(q, k, v, return_lse=True, **kw)
    return do, q, k, v, out, lse


def _call(monkeypatch, cfg, args, kw, det=True):
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *_a, **_k: cfg)
    return attention_backward(*args, deterministic=det, **kw)


@pytest.mark.parametrize("b,s,h,hk,kw", [(2, 4096, 8, 8, dict()),
                                         (3, 2048, 4, 2, dict(causal=True))])
@pytest.mark.parametrize("extra", [dict(), dict(det_units=16), dict(det_poll=True)])
def test_head_dim_256_writer_warp_gives_the_consumers_bits(b, s, h, hk, kw, extra,
                                                            monkeypatch):
    torch = torch_sm90()
    args = _inputs(torch, b, s, h, hk, 256, kw)
    plain = _call(monkeypatch, H256, args, kw)
    for _ in range(2):
        again = _call(monkeypatch, replace(H256W, **extra), args, kw)
        assert all(torch.equal(x, y) for x, y in zip(plain, again))


@pytest.mark.parametrize("c,d,b,s,h,hk,kw", [
    (H256W, 256, 3, 2048, 4, 2, dict(causal=True)),
    (replace(H256, det_desc=True), 256, 2, 3072, 4, 4, dict(causal=True)),
    (H128, 128, 3, 2048, 6, 3, dict(causal=True)),
    (replace(H128, det_poll=True, det_units=8), 128, 2, 4096, 8, 8, dict()),
    (H64, 64, 2, 4096, 8, 4, dict(causal=True)),
    (H192, 192, 5, 2048, 4, 4, dict(causal=True)),
    (replace(H64, det_units=32), 64, 2, 4096, 8, 8, dict()),
])
def test_descending_turns_repeat_bitwise(c, d, b, s, h, hk, kw, monkeypatch):
    torch = torch_sm90()
    args = _inputs(torch, b, s, h, hk, d, kw)
    c = replace(c, det_desc=True)
    first = _call(monkeypatch, c, args, kw)
    ref = _call(monkeypatch, c, args, kw, det=False)
    for name, x, y in zip(("dq", "dk", "dv"), first, ref):
        x, y = x.float(), y.float()
        assert float((x - y).abs().max()) <= 2e-2 * max(float(y.abs().max()), 1e-2), name
    for _ in range(3):
        again = _call(monkeypatch, c, args, kw)
        assert all(torch.equal(x, y) for x, y in zip(first, again))
