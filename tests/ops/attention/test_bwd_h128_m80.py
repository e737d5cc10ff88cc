"""``BwdConfig.dq_swap`` (:mod:`ptxdsl.ops.attention.bwd_m80`): FlashAttention-3's head-dim-128
full-mask tile, 80 queries a step with dQ computed transposed: what it emits, what it
refuses, what ptxas makes of it, and the CPU interpreter's dq, dk, dv against float64 at
ragged shapes (Sq not a multiple of 80, a partial key block, GQA, full and causal)."""
from __future__ import annotations

import numpy as np
import pytest

from ptxdsl.core.types import bf16, f16
from ptxdsl.ops import attention_backward
from ptxdsl.ops.attention import attention_backward_reference, attention_reference, bwd_api
from ptxdsl.ops.attention.bwd_config import SMEM_PER_CTA, BwdConfig
from ptxdsl.ops.attention.bwd_m80 import Layout, build_backward_m80
from ptxdsl.ops.attention.config import Mask
from ptxas_resources import resources_or_skip  # noqa: E402

ml_dtypes = pytest.importorskip("ml_dtypes")
BF16 = ml_dtypes.bfloat16
from attention_bwd_checks import check_grads  # noqa: E402

M80 = dict(stages=2, dq_tma=True, overlap=1, dq_swizzle=True, block_m=80, ds_double=True,
           dq_warp=True, dk_last=True, dq_swap=True)
FIXED = dict(prep_wide=True, dkv_tma=True, dq_exit_read=True)


def _mmas(text):
    """The wgmma lines' (shape, A from registers) in program order."""
    return [(ln.split("aligned.")[1].split("k16")[0], ln.count("{") == 2)
            for ln in text.splitlines() if "wgmma.mma_async" in ln]


def test_emits_the_swapped_step_and_checks_its_options():
    """A step: Sᵀ, dPᵀ (m64n80, 8 k-steps each), dV (m64n128, A from registers, 5 k-steps
    over the 80 queries), dQᵀ (m64n80 over 128 keys), dK (5 k-steps); dSᵀ by 20
    st.shared.b32 a thread, dQ staged by 40 st.shared.f32; 80-row boxes (expect_tx: Q and
    dO 2 x 80 x 128 x 2 bytes + -LSE·log2e and D 2 x 80 x 4); the layout fits, and
    smem_bytes says so; what dq_swap needs and refuses."""
    c = BwdConfig(**M80)
    text = build_backward_m80(c, bf16, 128, scale=0.1).ptx()
    s, kv = [("m64n80", False)] * 8, [("m64n128", True)] * 5
    assert _mmas(text) == s + s + kv + s + kv and "_m80_dqw_dkl_dqs" in text
    assert text.count("st.shared.b32") == 20 and text.count("st.shared.f32") == 40
    assert any(ln.rstrip().endswith("41600;") for ln in text.splitlines() if "expect_tx" in ln)
    assert Layout(c, 2).total == c.smem_bytes(128) <= SMEM_PER_CTA
    for bad in (dict(M80, block_m=64), dict(M80, dq_swap=False), dict(M80, dk_last=False),
                dict(M80, dq_split=True), dict(M80, s_ahead=1), dict(M80, stages=1)):
        with pytest.raises(ValueError, match="dq_swap|block_m"):
            BwdConfig(**bad)
    for kw in (dict(softcap=5.0), dict(varlen=True)):
        with pytest.raises(ValueError, match="dq_swap is head dim 128's dense tile"):
            build_backward_m80(c, bf16, 128, scale=0.1, **kw)
    with pytest.raises(ValueError, match="head dim 64"):
        build_backward_m80(c, bf16, 64, scale=0.1)


@pytest.mark.long
def test_matches_float64(monkeypatch):
    """Sq = 150: two 80-row steps a head (the second's last 10 rows past Sq: the
    preprocess's -inf rows), two heads a CTA, the ring wrapping: the shipped full row
    (with prep_wide, dkv_tma, dq_exit_read), GQA, bf16, against float64. (A single partial
    step, Sq = 37, and a window leaving a key block without a step run in
    test_bwd_m80_det.py; the plain step's window in test_bwd_m80_ahead.py.)"""
    c = BwdConfig(**M80, **FIXED)
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *_a, **_k: c)
    rng = np.random.default_rng(350)
    q, k, v, do = (rng.standard_normal((1, s, h, 128)).astype(BF16)
                   for s, h in ((150, 2), (200, 1), (200, 1), (150, 2)))
    out, lse = attention_reference(q, k, v)
    got = attention_backward(do, q, k, v, out.astype(BF16), lse.astype(np.float32))
    check_grads(got, attention_backward_reference(do, q, k, v))


@pytest.mark.ptxas
@pytest.mark.long
@pytest.mark.parametrize("dtype", [bf16, f16], ids=["full-row", "f16-row"])
def test_ptxas_keeps_everything_in_registers_and_pipelined(dtype):
    """No spills, and no wgmma serialization notice (C7510-C7520, "Potential Performance
    Loss"; dV issued before dSᵀ's stores is C7512): the shipped full row in bf16 and f16.
    (The causal row's step: test_bwd_m80_ahead.py.)"""
    k = build_backward_m80(BwdConfig(**M80, **FIXED), dtype, 128, Mask(), scale=0.07)
    r = resources_or_skip(k)
    assert r.spill_stores == 0 and r.spill_loads == 0 and r.local == 0, k.name
    assert "Performance Loss" not in k.check().log, k.name
