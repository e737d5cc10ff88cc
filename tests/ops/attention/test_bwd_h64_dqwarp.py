"""Head dim 64's 128 x 128 tile (``block_m`` 128: FlashAttention-3's and -4's hdim-64 tile,
``SdP_swapAB``, dK and dV from registers, dQ by query rows) with their dQ writer warp
(``dq_warp``: warpgroup ``w``'s 64 query rows added by a producer warp) and FlashAttention-4's
step order (``dk_last``): what they emit, that ptxas keeps them in registers, and the CPU
interpreter's dq, dk, dv against float64 for each option alone (masks, GQA, Sq leaving a
block's second half past the padded rows; the deterministic mode with both, its bits in
either launch order: test_bwd_det64_step.py)."""
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

PLAN = dict(stages=2, dq_tma=True, dq_swizzle=True, block_m=128, overlap=1, ds_double=True)
DQW = BwdConfig(**PLAN, dq_warp=True)
DKL = BwdConfig(**PLAN, dk_last=True)
BOTH = BwdConfig(**PLAN, dq_warp=True, dk_last=True)


def _grads(monkeypatch, c, b, sq, sk, h, hk, seed, **kw):
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *_a, **_k: c)
    rng = np.random.default_rng(seed)
    q, k, v, do = (rng.standard_normal((b, s, n, 64)).astype(BF16)
                   for s, n in ((sq, h), (sk, hk), (sk, hk), (sq, h)))
    out, lse = attention_reference(q, k, v, **kw)
    args = (do, q, k, v, out.astype(BF16), lse.astype(np.float32))
    return args, attention_backward_reference(do, q, k, v, **kw)


def test_emits_the_writer_warp_and_fa4_order():
    """dq_warp: the consumers arrive at FULL, 160 threads, and the writer issues one box a
    warpgroup (the plan's consumers one each too); dk_last: dV (8 n64 RS k-steps), dQ
    (8 n64), then dK."""
    plan = build_backward(BwdConfig(**PLAN), bf16, 64, scale=0.1).ptx()
    text = build_backward(BOTH, bf16, 64, scale=0.1).ptx()
    assert "bar.arrive" not in plan and "bar.arrive" in text and "160;" in text
    assert text.count("cp.reduce.async.bulk.tensor") == \
        2 * plan.count("cp.reduce.async.bulk.tensor")
    # (n, A from registers: the line holds two register lists)
    kinds = lambda t: [("n128" if "m64n128" in ln else "n64", ln.count("{") == 2)
                       for ln in t.splitlines() if "wgmma.mma_async" in ln]
    sdp, rs, ss = [("n128", False)] * 8, [("n64", True)] * 8, [("n64", False)] * 8
    # Sᵀ, dPᵀ, then the plan: dV, dK (RS), dQ (SS); dk_last: dV, dQ, dK
    assert kinds(plan) == sdp + rs + rs + ss and kinds(text) == sdp + rs + ss + rs
    assert BOTH.smem_bytes(64) == BwdConfig(**PLAN).smem_bytes(64)


@pytest.mark.long
def test_interpreter_matches_float64(monkeypatch):
    """dk_last alone (a lab variant: the plan rows take both options, run in
    test_bwd_pair.py, test_bwd_short.py, test_bwd_interp.py), causal, GQA, Sq = 60 (the
    block's second half past SQP), two key blocks."""
    args, ref = _grads(monkeypatch, DKL, 1, 60, 150, 2, 1, 3, causal=True)
    _check(attention_backward(*args, causal=True), ref)


@pytest.mark.long
def test_writer_warp_alone_matches_float64(monkeypatch):
    """dq_warp alone (a lab variant), a window, GQA (two steps a CTA), three key blocks."""
    kw = dict(window_size=(40, 3))
    args, ref = _grads(monkeypatch, DQW, 1, 60, 270, 2, 1, 5, **kw)
    _check(attention_backward(*args, **kw), ref)


def test_varlen_takes_64_row_steps():
    """block_m 128 is the dense layout (the plan table gives varlen 64-row rows)."""
    with pytest.raises(ValueError, match="block_m 128"):
        build_backward(BOTH, bf16, 64, Mask(-1, 0), scale=0.1, varlen=True)


@pytest.mark.ptxas
@pytest.mark.long
@pytest.mark.parametrize("c,mask,det", [(DQW, Mask(40, 3), True), (DKL, Mask(-1, 0), True)],
                         ids=["dqw-win-det", "dkl-causal-det"])
def test_ptxas_keeps_everything_in_registers(c, mask, det):
    """Each option alone (lab variants: one case each; both together are the plan rows',
    test_bwd_pair.py, test_bwd_short.py, test_bwd_det64_step.py)."""
    k = build_backward(c, bf16, 64, mask, scale=0.07, deterministic=det)
    r = resources_or_skip(k)
    assert r.spill_stores == 0 and r.spill_loads == 0 and r.local == 0, k.name
