"""Head dim 192 in FlashAttention-3's hopper tile (``BwdConfig.wg3``, :mod:`.bwd_wg3`): 96
keys a CTA, three consumer warpgroups; what it emits, that it fits shared memory and
ptxas keeps it in registers, and the CPU interpreter's dq, dk, dv against float64: the
plain tile (causal; varlen at the full mask), one stage, float16, and the plan's
deterministic row with varlen. The plan rows (overlap 2, the writer warp and the step
options) at every mask, softcap and varlen: test_bwd_h192_sched.py and
test_bwd_uniform.py; the deterministic row's dense runs: test_bwd_det192.py."""
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
    for bad in (dict(col_split=True), dict(overlap=1), dict(dq_split=True),
                dict(consumer_regs=240)):
        with pytest.raises(ValueError, match="wg3"):
            BwdConfig(**{**dict(stages=2, dq_tma=True, dq_swizzle=True, wg3=True,
                                consumer_regs=160), **bad})
    with pytest.raises(ValueError, match="dq_warp"):
        build_backward_wg3(WG3, bf16, 192, scale=0.1, deterministic=True)
    with pytest.raises(ValueError, match="head dim 192"):
        build_backward_wg3(WG3, bf16, 128, scale=0.1)


@pytest.mark.long
def test_interpreter_matches_float64(monkeypatch):
    """Ragged, GQA, causal, two key blocks (96 keys a CTA, the second 4), rows past SQ."""
    _case(monkeypatch, WG3, 40, 100, 11, causal=True)


@pytest.mark.long
def test_one_stage_matches_float64(monkeypatch):
    """One stage of Q (a lab option: the rows take two), causal, two key blocks."""
    _case(monkeypatch, BwdConfig(stages=1, dq_tma=True, dq_swizzle=True, wg3=True,
                                 consumer_regs=160), 100, 150, 3, causal=True)


@pytest.mark.ptxas
@pytest.mark.long
def test_ptxas_one_stage_keeps_everything_in_registers():
    """One stage of Q (a lab option), causal with softcap; the plan rows' kernels:
    test_bwd_h192_sched.py's ptxas test."""
    c = BwdConfig(stages=1, dq_tma=True, dq_swizzle=True, wg3=True, consumer_regs=160)
    k = build_backward_wg3(c, bf16, 192, Mask(-1, 0), scale=0.07, softcap=30.0)
    r = resources_or_skip(k)
    assert r.spill_stores == 0 and r.spill_loads == 0 and r.local == 0, k.name


@pytest.mark.ptxas
@pytest.mark.long
def test_ptxas_deterministic_varlen_keeps_everything_in_registers():
    """The plan's deterministic row (the writer warp's pipelined turns), varlen, causal."""
    k = bwd_api.backward_kernels(192, causal=True, deterministic=True, varlen=True)[1]
    r = resources_or_skip(k)
    assert r.spill_stores == 0 and r.spill_loads == 0 and r.local == 0, k.name


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
    """Packed ragged sequences, causal, GQA, the plan's deterministic row (wg3, the writer
    warp's pipelined turns) through the API, CTAs one at a time in launch order (none
    waits for a later one). (The plain turns: test_bwd_det_pipe.py's head dim 192 case.)"""
    frame = bwd_api._frame
    monkeypatch.setattr(bwd_api, "_frame", lambda a: GpuClaimingFrame(frame(a)))
    monkeypatch.setattr(interp, "MAX_BATCH_SHARED", 1)
    cq, ck = np.cumsum([0, 70, 1, 40]), np.cumsum([0, 150, 20, 100])
    rng = np.random.default_rng(7)
    q, k, v, do = (rng.standard_normal((n, h, 192)).astype(BF16)
                   for n, h in ((cq[-1], 2), (ck[-1], 1), (ck[-1], 1), (cq[-1], 2)))
    check_varlen_causal(q, k, v, do, cq, ck, deterministic=True)
    name = bwd_api.backward_kernels(192, causal=True, deterministic=True, varlen=True)[1].name
    assert name.endswith("_dtp_u16_dpl_xr_w3a2_pfr_f1_uc_varlen_det")     # (no dkv_tma)


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
