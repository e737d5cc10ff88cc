"""Head dim 192 in FlashAttention-4's sm90 tile (``BwdConfig.wg2``, :mod:`.bwd_wg2`): 96
keys a CTA, two consumer warpgroups; what it emits, that it fits shared memory and ptxas
keeps it in registers, and the CPU interpreter's dq, dk, dv against float64."""
from __future__ import annotations

import numpy as np
import pytest

from ptxdsl.core.types import bf16
from ptxdsl.ops import attention_backward, attention_varlen_backward
from ptxdsl.ops.attention import attention_backward_reference, attention_reference, bwd_api
from ptxdsl.ops.attention.bwd_config import SMEM_PER_CTA, BwdConfig
from ptxdsl.ops.attention.bwd_wg2 import build_backward_wg2, smem_bytes
from ptxdsl.ops.attention.config import Mask
from ptxas_resources import resources_or_skip  # noqa: E402

ml_dtypes = pytest.importorskip("ml_dtypes")
BF16 = ml_dtypes.bfloat16
from attention_bwd_checks import check_grads as _check, check_varlen_causal  # noqa: E402

WG2 = dict(stages=2, dq_tma=True, dq_swizzle=True, wg2=True)


def _case(monkeypatch, c, sq, sk, seed, lead=1, dtype=BF16, hq=2, **kw):
    """q, dout (lead, sq, hq, 192), k, v (lead, sk, 1, 192): GQA; the backward of the
    float64 reference's out and lse against float64."""
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *_a: c)
    rng = np.random.default_rng(seed)
    q, k, v, do = (rng.standard_normal((lead, s, h, 192)).astype(dtype)
                   for s, h in ((sq, hq), (sk, 1), (sk, 1), (sq, hq)))
    out, lse = attention_reference(q, k, v, **kw)
    _check(attention_backward(do, q, k, v, out.astype(dtype), lse.astype(np.float32), **kw),
           attention_backward_reference(do, q, k, v, **kw))


def test_emits_fa4_tile_and_matches_float64(monkeypatch):
    """The interpreter against float64 (causal, 70 keys: one CTA, rows past SQ and keys
    past SK), then what that kernel emits per warpgroup and step: S, dP m64n48 (12 k-steps
    each), dVᵀ and dKᵀ three m64n48 (4 k-steps each), dQ m64n96 (6 k-steps), P and dS by
    six stmatrix.x4, three 32-column reduce-adds; 384 threads; and what wg2 refuses."""
    c = BwdConfig(**WG2, overlap=2)
    _case(monkeypatch, c, 20, 70, 11, hq=1, causal=True)
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
def test_two_key_blocks_match_float64(monkeypatch):
    """Ragged, GQA, causal, two key blocks (96 keys a CTA, the second 4), rows past SQ."""
    _case(monkeypatch, BwdConfig(**WG2, overlap=2), 40, 100, 11, causal=True)


SHAPES = [(130, 200, {}), (150, 100, dict(window_size=(40, 3))),
          (100, 230, dict(causal=True)), (64, 96, dict(window_size=(-1, 20))),
          (100, 150, dict(causal=True, softcap=5.0))]


@pytest.mark.long
@pytest.mark.parametrize("opts,sq,sk,kw", [(dict(overlap=2), *x) for x in SHAPES] + [
    (o, *x) for o, x in zip([{}, dict(dq_warp=True), dict(overlap=2, dq_warp=True),
                             dict(overlap=2, stages=1)], SHAPES[1:])])
def test_masks_and_shapes_match_float64(monkeypatch, opts, sq, sk, kw):
    """GQA (two query heads a K/V head), ragged lengths, every mask, softcap; the step's
    orders (overlap 0, 2), the dQ writer warp, one stage of Q."""
    _case(monkeypatch, BwdConfig(**{**WG2, **opts}), sq, sk, 5, lead=2 if sq == 64 else 1,
          **kw)


@pytest.mark.long
def test_f16_window_matches_float64(monkeypatch):
    """float16 (its cvt and wgmma forms), a window both sides, overlap 2 with dq_warp."""
    _case(monkeypatch, BwdConfig(**WG2, overlap=2, dq_warp=True), 70, 150, 1,
          dtype=np.float16, window_size=(30, 30))


@pytest.mark.long
@pytest.mark.parametrize("opts", [{}, dict(overlap=2, dq_warp=True)], ids=["s2", "ov2-dqw"])
def test_varlen_matches_float64(monkeypatch, opts):
    """Four packed sequences (one of one query, one whose keys end mid-block, so the next
    sequence's K rows, 64-byte swizzled, are zeroed), GQA, causal: each against float64."""
    c = BwdConfig(**WG2, **opts)
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *_a: c)
    cq, ck = np.cumsum([0, 33, 1, 100, 70]), np.cumsum([0, 70, 129, 20, 100])
    rng = np.random.default_rng(4)
    q, k, v, do = (rng.standard_normal((n, h, 192)).astype(BF16)
                   for n, h in ((cq[-1], 2), (ck[-1], 1), (ck[-1], 1), (cq[-1], 2)))
    check_varlen_causal(q, k, v, do, cq, ck)


@pytest.mark.long
def test_varlen_full_zeroes_the_next_sequences_keys(monkeypatch):
    """Without a mask a key block's rows past its sequence's keys (the next sequence's, in
    the TMA box) would reach dQ through dS·K: each sequence against float64."""
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *_a: BwdConfig(**WG2, overlap=2))
    cq, ck = np.cumsum([0, 40, 70]), np.cumsum([0, 50, 120])
    rng = np.random.default_rng(6)
    q, k, v, do = (rng.standard_normal((n, 2, 192)).astype(BF16)
                   for n in (cq[-1], ck[-1], ck[-1], cq[-1]))
    seqs = [(slice(cq[i], cq[i + 1]), slice(ck[i], ck[i + 1])) for i in range(2)]
    out, lse = np.zeros_like(q), np.zeros((2, cq[-1]), np.float32)
    for sq, sk in seqs:
        o, lo = attention_reference(q[sq][None], k[sk][None], v[sk][None])
        out[sq], lse[:, sq] = o[0].astype(BF16), lo[0]
    got = attention_varlen_backward(do, q, k, v, out, lse, cq, ck, 70, 120)
    for sq, sk in seqs:
        _check([g[None] for g in (got[0][sq], got[1][sk], got[2][sk])],
               attention_backward_reference(do[sq][None], q[sq][None], k[sk][None],
                                            v[sk][None]))


@pytest.mark.ptxas
@pytest.mark.long
@pytest.mark.parametrize("opts", [{}, dict(overlap=2), dict(dq_warp=True),
                                  dict(overlap=2, dq_warp=True), dict(overlap=2, stages=1)])
@pytest.mark.parametrize("mask,softcap,varlen", [
    (Mask(), 0.0, False), (Mask(-1, 0), 0.0, False), (Mask(40, 3), 0.0, False),
    (Mask(-1, 0), 30.0, False), (Mask(), 0.0, True), (Mask(-1, 0), 0.0, True)])
def test_ptxas_keeps_everything_in_registers(opts, mask, softcap, varlen):
    k = build_backward_wg2(BwdConfig(**{**WG2, **opts}), bf16, 192, mask, scale=0.07,
                           softcap=softcap, varlen=varlen)
    r = resources_or_skip(k)
    assert r.spill_stores == 0 and r.spill_loads == 0 and r.local == 0, k.name
