"""Head dim 192 in FlashAttention-3's hopper tile (``BwdConfig.wg3``, :mod:`.bwd_wg3`): 96
keys a CTA, three consumer warpgroups; what it emits, that it fits shared memory and
ptxas keeps it in registers, and the CPU interpreter's dq, dk, dv against float64."""
from __future__ import annotations

import numpy as np
import pytest

import ptxdsl.interp as interp
from ptxdsl.core.types import bf16
from ptxdsl.ops import attention_backward, attention_varlen_backward
from ptxdsl.ops.attention import attention_backward_reference, attention_reference, bwd_api
from ptxdsl.ops.attention.bwd_config import SMEM_PER_CTA, BwdConfig
from ptxdsl.ops.attention.bwd_wg3 import build_backward_wg3, smem_bytes
from ptxdsl.ops.attention.config import Mask
from ptxas_resources import resources_or_skip  # noqa: E402

ml_dtypes = pytest.importorskip("ml_dtypes")
BF16 = ml_dtypes.bfloat16
from attention_bwd_checks import (GpuClaimingFrame, check_grads as _check,  # noqa: E402
                                  check_varlen_causal)

WG3 = BwdConfig(stages=2, dq_tma=True, dq_swizzle=True, wg3=True, consumer_regs=160)


def _case(monkeypatch, c, sq, sk, seed, lead=1, **kw):
    """q, dout (lead, sq, 2, 192), k, v (lead, sk, 1, 192): GQA, bf16; the backward of the
    float64 reference's out and lse against float64."""
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *_a: c)
    rng = np.random.default_rng(seed)
    q, k, v, do = (rng.standard_normal((lead, s, h, 192)).astype(BF16)
                   for s, h in ((sq, 2), (sk, 1), (sk, 1), (sq, 2)))
    out, lse = attention_reference(q, k, v, **kw)
    _check(attention_backward(do, q, k, v, out.astype(BF16), lse.astype(np.float32), **kw),
           attention_backward_reference(do, q, k, v, **kw))


def test_emits_fa3_tile_and_fits():
    """Per warpgroup and step: S, dP m64n32 (12 k-steps each), dVᵀ and dKᵀ m64n96 (4
    k-steps each), dQ m64n64 (6 k-steps), two 32-column reduce-adds; 512 threads."""
    k = build_backward_wg3(WG3, bf16, 192, Mask(-1, 0), scale=0.1)
    text = k.ptx()
    assert text.count("wgmma.mma_async.sync.aligned.m64n32k16") == 2 * 12
    assert text.count("wgmma.mma_async.sync.aligned.m64n96k16") == 2 * 4
    assert text.count("wgmma.mma_async.sync.aligned.m64n64k16") == 6
    assert text.count("cp.reduce.async.bulk.tensor") == 2 and "bar.sync 1, 384" in text
    assert ".maxntid 512, 1, 1" in text and "_wg3" in text
    assert WG3.block_n == 96 and WG3.smem_bytes(192) == smem_bytes(WG3) <= SMEM_PER_CTA
    for bad in (dict(col_split=True), dict(overlap=1), dict(ex2_poly=True),
                dict(consumer_regs=240)):
        with pytest.raises(ValueError, match="wg3"):
            BwdConfig(**{**dict(stages=2, dq_tma=True, dq_swizzle=True, wg3=True,
                                consumer_regs=160), **bad})
    with pytest.raises(ValueError, match="dq_warp"):
        build_backward_wg3(WG3, bf16, 192, scale=0.1, deterministic=True)
    with pytest.raises(ValueError, match="head dim 192"):
        build_backward_wg3(WG3, bf16, 128, scale=0.1)


def test_interpreter_matches_float64(monkeypatch):
    """Ragged, GQA, causal, two key blocks (96 keys a CTA, the second 4), rows past SQ."""
    _case(monkeypatch, WG3, 40, 100, 11, causal=True)


@pytest.mark.long
@pytest.mark.parametrize("sq,sk,kw", [
    (130, 200, {}), (150, 100, dict(window_size=(40, 3))), (100, 230, dict(causal=True)),
    (64, 96, dict(window_size=(-1, 20))), (100, 150, dict(causal=True, softcap=5.0)),
    (130, 100, dict(softcap=3.0))])
def test_masks_and_shapes_match_float64(monkeypatch, sq, sk, kw):
    _case(monkeypatch, WG3, sq, sk, 5, lead=2 if sq == 64 else 1, **kw)


@pytest.mark.long
def test_one_stage_matches_float64(monkeypatch):
    _case(monkeypatch, BwdConfig(stages=1, dq_tma=True, dq_swizzle=True, wg3=True,
                                 consumer_regs=160), 100, 150, 3, causal=True)


@pytest.mark.ptxas
@pytest.mark.long
@pytest.mark.parametrize("stages,dqw,ov", [(1, False, 0), (2, False, 0), (2, True, 0),
                                           (2, True, 2), (2, False, 2)])
@pytest.mark.parametrize("mask,softcap", [(Mask(), 0.0), (Mask(-1, 0), 0.0),
                                          (Mask(40, 3), 0.0), (Mask(-1, 0), 30.0)])
def test_ptxas_keeps_everything_in_registers(stages, dqw, ov, mask, softcap):
    c = BwdConfig(stages=stages, dq_tma=True, dq_swizzle=True, wg3=True, consumer_regs=160,
                  dq_warp=dqw, overlap=ov)
    k = build_backward_wg3(c, bf16, 192, mask, scale=0.07, softcap=softcap)
    r = resources_or_skip(k)
    assert r.spill_stores == 0 and r.spill_loads == 0 and r.local == 0, k.name


@pytest.mark.long
@pytest.mark.parametrize("opts,kw", [(dict(dq_warp=True), dict(causal=True)),
                                     (dict(overlap=2), dict(window_size=(50, 10))),
                                     (dict(overlap=2, dq_warp=True), dict(softcap=4.0))])
def test_dq_warp_and_fa3_order_match_float64(monkeypatch, opts, kw):
    """dq_warp: the producer's warp 1 adds the three warpgroups' staged dQ; overlap 2: dV
    issued between P's and dS's stores (FA3's order)."""
    c = BwdConfig(stages=2, dq_tma=True, dq_swizzle=True, wg3=True, consumer_regs=160, **opts)
    assert c.tag.endswith("_wg3")
    _case(monkeypatch, c, 150, 200, 8, **kw)


def _run_det(monkeypatch, sq, sk, kw, one_at_a_time):
    """wg3 + dq_warp deterministic, its three kernels called directly (the API runs the
    default kernel on the interpreter): the f32 dQ adds, the semaphores, dq, dk, dv."""
    c = BwdConfig(stages=2, dq_tma=True, dq_swizzle=True, wg3=True, consumer_regs=160,
                  dq_warp=True)
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *_a: c)
    rng = np.random.default_rng(sq + sk)
    q, k, v, do = (rng.standard_normal(s).astype(BF16) for s in
                   ((1, sq, 2, 192), (1, sk, 1, 192), (1, sk, 1, 192), (1, sq, 2, 192)))
    out, lse = attention_reference(q, k, v, **kw)
    pre, main, post = bwd_api.backward_kernels(192, deterministic=True, **kw)
    assert main.name.endswith("_dqw_wg3_det")
    sqp = -(-sq // 64) * 64
    dpsum, nlse2 = np.zeros((1, 2, sqp), np.float32), np.zeros((1, 2, sqp), np.float32)
    acc, sem = np.zeros((1, 2, sqp, 192), np.float32), np.zeros((1, 2, sqp // 64), np.uint32)
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(k)
    pre.interpret(out.astype(BF16), do, lse.astype(np.float32), dpsum, nlse2, acc, sem)
    with monkeypatch.context() as m:
        if one_at_a_time:             # a batch of one CTA: each runs alone, in launch order
            m.setattr(interp, "MAX_BATCH_SHARED", 1)
        main.interpret(q, k, v, do, nlse2, dpsum, acc, dk, dv, sem)
    adds = acc.copy()
    post.interpret(acc, dq)
    _check((dq, dk, dv), attention_backward_reference(do, q, k, v, **kw))
    return adds, sem


@pytest.mark.long
def test_deterministic_turns_and_bits(monkeypatch):
    """Three key blocks (96 keys each), causal: each 64-row block's semaphore counts three
    adds per key block that reaches it; CTAs one at a time in launch order (none waits for
    a later one) and all at once give the same dQ bits."""
    sq, sk, kw = 130, 250, dict(causal=True)
    alone, sem = _run_det(monkeypatch, sq, sk, kw, True)
    off = sk - sq
    want = [3 * sum(1 for nb in range(3) if nb * 96 <= min(64 * mb + 63, sq - 1) + off)
            for mb in range(3)]
    np.testing.assert_array_equal(sem, np.broadcast_to(want, sem.shape))
    together, _ = _run_det(monkeypatch, sq, sk, kw, False)
    assert np.array_equal(alone.view(np.uint32), together.view(np.uint32))


@pytest.mark.ptxas
@pytest.mark.long
@pytest.mark.parametrize("ov", [0, 2])
@pytest.mark.parametrize("mask,varlen,det", [(Mask(), False, True), (Mask(-1, 0), False, True),
                                             (Mask(40, 3), False, True), (Mask(), True, False),
                                             (Mask(-1, 0), True, True)])
def test_ptxas_deterministic_and_varlen_keep_everything_in_registers(ov, mask, varlen, det):
    c = BwdConfig(stages=2, dq_tma=True, dq_swizzle=True, wg3=True, consumer_regs=160,
                  dq_warp=True, overlap=ov)
    k = build_backward_wg3(c, bf16, 192, mask, scale=0.07, deterministic=det, varlen=varlen)
    r = resources_or_skip(k)
    assert r.spill_stores == 0 and r.spill_loads == 0 and r.local == 0, k.name


@pytest.mark.long
@pytest.mark.parametrize("opts", [{}, dict(overlap=2, dq_warp=True)], ids=["s2", "ov2-dqw"])
def test_varlen_matches_float64(monkeypatch, opts):
    """Four packed sequences (one of one query, one whose keys end mid-block, so the next
    sequence's K rows are zeroed), GQA, causal: each against float64."""
    c = BwdConfig(stages=2, dq_tma=True, dq_swizzle=True, wg3=True, consumer_regs=160, **opts)
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
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *_a: WG3)
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


@pytest.mark.long
def test_varlen_deterministic_matches_float64(monkeypatch):
    """Packed ragged sequences, causal, GQA, wg3 + dq_warp deterministic through the API,
    CTAs one at a time in launch order (none waits for a later one)."""
    c = BwdConfig(stages=2, dq_tma=True, dq_swizzle=True, wg3=True, consumer_regs=160,
                  dq_warp=True, overlap=2)
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *_a: c)
    frame = bwd_api._frame
    monkeypatch.setattr(bwd_api, "_frame", lambda a: GpuClaimingFrame(frame(a)))
    monkeypatch.setattr(interp, "MAX_BATCH_SHARED", 1)
    cq, ck = np.cumsum([0, 70, 1, 130]), np.cumsum([0, 150, 20, 200])
    rng = np.random.default_rng(7)
    q, k, v, do = (rng.standard_normal((n, h, 192)).astype(BF16)
                   for n, h in ((cq[-1], 2), (ck[-1], 1), (ck[-1], 1), (cq[-1], 2)))
    check_varlen_causal(q, k, v, do, cq, ck, deterministic=True)
    assert bwd_api.backward_kernels(192, causal=True, deterministic=True,
                                    varlen=True)[1].name.endswith("_varlen_det")


@pytest.mark.long
def test_f16_window_matches_float64(monkeypatch):
    """float16 (its cvt and wgmma forms), a window both sides, overlap 2 with dq_warp."""
    c = BwdConfig(stages=2, dq_tma=True, dq_swizzle=True, wg3=True, consumer_regs=160,
                  overlap=2, dq_warp=True)
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *_a: c)
    rng = np.random.default_rng(1)
    q, k, v, do = (rng.standard_normal((1, s, h, 192)).astype(np.float16)
                   for s, h in ((70, 2), (150, 1), (150, 1), (70, 2)))
    out, lse = attention_reference(q, k, v, window_size=(30, 30))
    _check(attention_backward(do, q, k, v, out.astype(np.float16), lse.astype(np.float32),
                              window_size=(30, 30)),
           attention_backward_reference(do, q, k, v, window_size=(30, 30)))
