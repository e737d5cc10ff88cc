"""``BwdConfig.s_ahead`` (:mod:`ptxdsl.ops.attention.bwd_ahead`): the next step's Sᵀ issued
before the step ends, behind dK (1) or behind dQ's stage (2), on FlashAttention-4's step
(``dq_warp``, ``dk_last``) at head dim 128 (``dq_split``) and 64 (``block_m`` 128): what it
emits, what ptxas makes of it, and the CPU interpreter's dq, dk, dv against float64 for
s_ahead 1, the lab option (several steps a CTA, so the carried Sᵀ crosses steps, heads of
a GQA group and the ring's wrap; a window with a CTA that has no step).
(s_ahead 2 on the plan rows, deterministic and not: test_bwd_pair.py, test_bwd_short.py,
test_bwd_interp.py, test_bwd_det64_ahead.py.)"""
from __future__ import annotations

import numpy as np
import pytest

from ptxdsl.core.types import bf16
from ptxdsl.ops import attention_backward
from ptxdsl.ops.attention import attention_backward_reference, attention_reference, bwd_api
from ptxdsl.ops.attention.bwd import build_backward
from ptxdsl.ops.attention.bwd_config import BwdConfig
from ptxdsl.ops.attention.config import Mask
from ptxas_resources import resources_or_skip  # noqa: E402

ml_dtypes = pytest.importorskip("ml_dtypes")
BF16 = ml_dtypes.bfloat16
from attention_bwd_checks import check_grads as _check  # noqa: E402

H128 = dict(stages=2, dq_tma=True, overlap=1, dq_swizzle=True, dq_split=True, ds_double=True,
            dq_warp=True, dk_last=True)
H64 = dict(stages=2, dq_tma=True, dq_swizzle=True, block_m=128, overlap=1, ds_double=True,
           dq_warp=True, dk_last=True)


def _mmas(text):
    """The wgmma lines' (n, A from registers) in program order."""
    return [(ln.split("m64n")[1].split("k16")[0], ln.count("{") == 2)
            for ln in text.splitlines() if "wgmma.mma_async" in ln]


def test_emits_the_next_scores():
    """Head dim 128, s_ahead 2: the plan's Sᵀ, dPᵀ, dV, dQ, dK becomes Sᵀ (before the
    loop), then dPᵀ, dV, dQ, dK and, after dQ's st.shared.v2.f32, the next Sᵀ; the loop's
    first wgmma is dPᵀ's, right after the carried Sᵀ's wait_group 0 (no slot wait: the
    slot was waited for where its Sᵀ was issued); the options it needs are checked."""
    text = build_backward(BwdConfig(**H128, s_ahead=2), bf16, 128, scale=0.1).ptx()
    s, dv = [("64", False)] * 8, [("128", True)] * 4
    assert _mmas(text) == s + s + dv + s + dv + s and "_sa2" in text
    tail = text[text.rindex("m64n128k16"):]
    assert "st.shared.v2.f32" in tail[:tail.index("m64n64k16")]
    loop = text[text.index("wgmma.commit_group"):]
    head = loop[:loop.index("m64n64k16")]
    assert "mbarrier.try_wait" not in head and "wgmma.wait_group.sync.aligned 0" in head
    for bad in (dict(H128, dk_last=False, s_ahead=1),
                dict(stages=2, dq_tma=True, overlap=1, dk_last=True, s_ahead=1),
                dict(H128, s_ahead=3)):
        with pytest.raises(ValueError, match="s_ahead"):
            BwdConfig(**bad)


# s_ahead 2 at head dim 64 is the plan rows' (bwd_plans.json rows 0, 1: test_bwd_pair.py,
# test_bwd_short.py, test_bwd_interp.py run them); s_ahead 1 is a lab option (no row takes
# it): one case
@pytest.mark.long
def test_window_matches_float64(monkeypatch):
    """Head dim 64, s_ahead 1: two 128-row blocks a head, two heads a CTA (q, dout (1, 130,
    2, 64), k, v (1, 270, 1, 64): GQA, bf16): four steps, the ring wrapping; the window
    leaves the first key block without a step; against float64."""
    c = BwdConfig(**H64, s_ahead=1)
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *_a, **_k: c)
    rng = np.random.default_rng(8)
    q, k, v, do = (rng.standard_normal((1, s, h, 64)).astype(BF16)
                   for s, h in ((130, 2), (270, 1), (270, 1), (130, 2)))
    kw = dict(window_size=(10, 0))
    out, lse = attention_reference(q, k, v, **kw)
    got = attention_backward(do, q, k, v, out.astype(BF16), lse.astype(np.float32), **kw)
    _check(got, attention_backward_reference(do, q, k, v, **kw))


@pytest.mark.ptxas
@pytest.mark.long
@pytest.mark.parametrize("d,mode,mask", [(128, 2, Mask(-1, 0)), (64, 1, Mask(40, 3))],
                         ids=["128-2-causal", "64-1-win"])
def test_ptxas_keeps_everything_in_registers_and_pipelined(d, mode, mask):
    """No spills, and no wgmma serialization notice (C7510-C7518, "Potential Performance
    Loss"): s_ahead 2 on head dim 128's 64-row step, and one case for the lab option
    s_ahead 1; softcap spills (8 bytes at 128, 200 at 64), as block_m 128's
    plan row does, and has its own row at 128. (s_ahead 1 at head dim 128 is C7512: dQ's
    and the next Sᵀ's accumulators and dK's A do not fit beside dK and dV.)"""
    base = H128 if d == 128 else H64
    k = build_backward(BwdConfig(**base, s_ahead=mode), bf16, d, mask, scale=0.07)
    r = resources_or_skip(k)
    assert r.spill_stores == 0 and r.spill_loads == 0 and r.local == 0, k.name
    assert "Performance Loss" not in k.check().log, k.name
