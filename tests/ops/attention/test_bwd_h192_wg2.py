"""Head dim 192 in FlashAttention-4's sm90 tile (``BwdConfig.wg2``, :mod:`.bwd_wg2`): 96
keys a CTA, two consumer warpgroups; what it emits, that it fits shared memory and ptxas
keeps it in registers, and the CPU interpreter's dq, dk, dv against float64 (one case
each: wg2 is in no plan row)."""
from __future__ import annotations

import numpy as np
import pytest

from ptxdsl.core.types import bf16
from ptxdsl.ops import attention_backward
from ptxdsl.ops.attention import attention_backward_reference, attention_reference, bwd_api
from ptxdsl.ops.attention.bwd_config import SMEM_PER_CTA, BwdConfig
from ptxdsl.ops.attention.bwd_wg2 import build_backward_wg2, smem_bytes
from ptxdsl.ops.attention.config import Mask
from ptxas_resources import resources_or_skip  # noqa: E402

ml_dtypes = pytest.importorskip("ml_dtypes")
BF16 = ml_dtypes.bfloat16
from attention_bwd_checks import check_grads as _check  # noqa: E402

WG2 = dict(stages=2, dq_tma=True, dq_swizzle=True, wg2=True)


def _case(monkeypatch, c, sq, sk, seed, **kw):
    """q, dout (1, sq, 2, 192), k, v (1, sk, 1, 192): GQA; the backward of the float64
    reference's out and lse against float64."""
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *_a: c)
    rng = np.random.default_rng(seed)
    q, k, v, do = (rng.standard_normal((1, s, h, 192)).astype(BF16)
                   for s, h in ((sq, 2), (sk, 1), (sk, 1), (sq, 2)))
    out, lse = attention_reference(q, k, v, **kw)
    _check(attention_backward(do, q, k, v, out.astype(BF16), lse.astype(np.float32), **kw),
           attention_backward_reference(do, q, k, v, **kw))


def test_emits_fa4_tile(monkeypatch):
    """What the causal kernel emits per warpgroup and step: S, dP m64n48 (12 k-steps
    each), dVᵀ and dKᵀ three m64n48 (4 k-steps each), dQ m64n96 (6 k-steps), P and dS by
    six stmatrix.x4, three 32-column reduce-adds; 384 threads; and what wg2 refuses."""
    c = BwdConfig(**WG2, overlap=2)
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *_a: c)
    text = bwd_api.backward_kernels(192, causal=True)[1].ptx()
    assert text.count("wgmma.mma_async.sync.aligned.m64n48k16") == 2 * 12 + 2 * 3 * 4
    assert text.count("wgmma.mma_async.sync.aligned.m64n96k16") == 6
    assert text.count("stmatrix.sync.aligned.m8n8.x4.shared.b16") == 6
    assert text.count("cp.reduce.async.bulk.tensor") == 3 and "bar.sync 1, 256" in text
    assert ".maxntid 384, 1, 1" in text and c.tag.endswith("_wg2")
    assert c.block_n == 96 and c.smem_bytes(192) == smem_bytes(c) <= SMEM_PER_CTA
    for bad in (dict(wg3=True, consumer_regs=160), dict(overlap=1), dict(dq_swizzle=False),
                dict(col_split=True), dict(ex2_poly=True)):
        with pytest.raises(ValueError, match="wg2"):
            BwdConfig(**{**WG2, **bad})
    with pytest.raises(ValueError, match="deterministic"):
        build_backward_wg2(c, bf16, 192, scale=0.1, deterministic=True)
    with pytest.raises(ValueError, match="head dim 192"):
        build_backward_wg2(c, bf16, 128, scale=0.1)


@pytest.mark.long
def test_matches_float64(monkeypatch):
    """wg2 is in no plan row (a lab layout): its one interpreter case, the most demanding
    (overlap 2 with the dQ writer warp): ragged, GQA, causal, two key blocks (96 keys a
    CTA, the second 4), rows past SQ."""
    _case(monkeypatch, BwdConfig(**WG2, overlap=2, dq_warp=True), 40, 100, 11, causal=True)


@pytest.mark.ptxas
@pytest.mark.long
def test_ptxas_keeps_everything_in_registers():
    """Its one ptxas case: overlap 2 with the writer warp, causal with softcap."""
    k = build_backward_wg2(BwdConfig(**WG2, overlap=2, dq_warp=True), bf16, 192, Mask(-1, 0),
                           scale=0.07, softcap=30.0)
    r = resources_or_skip(k)
    assert r.spill_stores == 0 and r.spill_loads == 0 and r.local == 0, k.name
