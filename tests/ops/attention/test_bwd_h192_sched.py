"""Head dim 192's step schedule in wg3 (:mod:`ptxdsl.ops.attention.bwd_wg3ahead`):
``BwdConfig.wg3_ahead`` (the next step's S issued before this step ends, carried across
the back edge), ``wg3_pfree`` (P's stores behind dO's empty barrier, not a CTA barrier)
and ``wg3_fence1`` (the exchanges' proxy fence by the readers only): what they emit and
refuse, the CPU interpreter (with its race and proxy detectors) against float64 (ragged,
GQA, full / causal / window, softcap, a CTA with no step, varlen, the deterministic mode,
the causal row's options), and ptxas -v."""
from __future__ import annotations

import numpy as np
import pytest

from ptxdsl.core.types import bf16
from ptxdsl.ops import attention_backward
from ptxdsl.ops.attention import attention_backward_reference, attention_reference, bwd_api
from ptxdsl.ops.attention.bwd_config import BwdConfig
from ptxdsl.ops.attention.bwd_wg3 import build_backward_wg3
from ptxdsl.ops.attention.config import Mask
from ptxas_resources import resources_or_skip  # noqa: E402

ml_dtypes = pytest.importorskip("ml_dtypes")
BF16 = ml_dtypes.bfloat16
from attention_bwd_checks import check_grads, check_varlen_causal  # noqa: E402

ROW = dict(stages=2, dq_tma=True, dq_swizzle=True, wg3=True, consumer_regs=160, overlap=2)
CAUSAL_ROW = dict(ROW, prep_wide=True, dkv_tma=True, dq_exit_read=True, lpt_units=16)
S32 = "wgmma.mma_async.sync.aligned.m64n32k16"


def test_emits_the_carried_s_and_refuses_without_wg3():
    """wg3_ahead 2: S's 12 wgmmas twice (the first step's before the loop, the next
    step's in it), dP's once, no wgmma under a branch (C7519's cause); wg3_pfree: one
    384-thread barrier fewer, a wait on dO's empty barrier instead; tags; refusals."""
    c = BwdConfig(**ROW, wg3_ahead=2, wg3_pfree=True)
    assert c.tag.endswith("_wg3_w3a2_pfr")
    text = build_backward_wg3(c, bf16, 192, Mask(-1, 0), scale=0.1).ptx()
    # the shipped row: S32 2 x 12, three "bar.sync 1, 384" (P's exchange before and
    # after its stores, dS's after), five mbarrier waits (K/V full, Q full, dO full,
    # the producer's Q and dO empty)
    assert text.count(S32) == 3 * 12 and text.count("bar.sync 1, 384") == 2
    # + Q's full wait before the loop and in the next S's issue (not at the step's
    # top), + dO's empty wait before P's stores
    assert text.count("mbarrier.try_wait.parity") == 5 + 2
    assert BwdConfig(**ROW, wg3_fence1=True).tag.endswith("_wg3_f1")
    for bad in (dict(wg3_ahead=3), dict(wg3_ahead=1, wg3=False, consumer_regs=240),
                dict(wg3_fence1=True, wg3=False, consumer_regs=240),
                dict(wg3_ahead=2, stages=1), dict(wg3_pfree=True, overlap=0)):
        with pytest.raises(ValueError, match="wg3_ahead|wg3_pfree|wg3_fence1"):
            BwdConfig(**{**ROW, **bad})


def _case(monkeypatch, c, sq, sk, seed, lead=1, **kw):
    """q, dout (lead, sq, 2, 192), k, v (lead, sk, 1, 192): GQA, bf16, against float64."""
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *_a, **_k: c)
    rng = np.random.default_rng(seed)
    q, k, v, do = (rng.standard_normal((lead, s, h, 192)).astype(BF16)
                   for s, h in ((sq, 2), (sk, 1), (sk, 1), (sq, 2)))
    out, lse = attention_reference(q, k, v, **kw)
    got = attention_backward(do, q, k, v, out.astype(BF16), lse.astype(np.float32), **kw)
    check_grads(got, attention_backward_reference(do, q, k, v, **kw))


BOTH = dict(wg3_ahead=2, wg3_pfree=True)
VARIANTS = [dict(wg3_ahead=2), dict(wg3_pfree=True), dict(wg3_fence1=True),
            dict(BOTH, wg3_fence1=True), dict(BOTH, wg3_fence1=True, dq_warp=True),
            dict(wg3_ahead=1)]
IDS = ["sa2", "pf", "f1", "sa2-pf-f1", "sa2-pf-f1-dqw", "sa1"]


SHAPES = {"full": (130, 200, {}), "causal": (100, 230, dict(causal=True)),
          "window": (150, 100, dict(window_size=(40, 3))),
          "no-step": (64, 300, dict(window_size=(10, 0))),
          "softcap": (100, 150, dict(causal=True, softcap=5.0))}
CASES = [(v, sh) for v in IDS[3:4] for sh in SHAPES] + \
    [(v, sh) for v in IDS[:3] + IDS[4:] for sh in ("full", "causal")]


@pytest.mark.long
@pytest.mark.parametrize("vid,shape", CASES, ids=[f"{v}-{sh}" for v, sh in CASES])
def test_matches_float64(monkeypatch, vid, shape):
    """Several steps a warpgroup across both heads of the GQA group (the carried S
    crosses the head loop and the ring's wrap); ``no-step``: key blocks no query sees
    (the first S from K's tile, discarded). All three options on every shape, each
    alone (and with the writer warp, and wg3_ahead 1) full and causal."""
    sq, sk, kw = SHAPES[shape]
    _case(monkeypatch, BwdConfig(**ROW, **VARIANTS[IDS.index(vid)]), sq, sk, sq + sk,
          lead=2 if sq == 64 else 1, **kw)


@pytest.mark.long
@pytest.mark.parametrize("extra", VARIANTS[4:5], ids=IDS[4:5])
def test_causal_row_options_match_float64(monkeypatch, extra):
    """Over the causal row (dkv_tma: the last, discarded S reads every warpgroup's panel
    of K's tile, so a CTA barrier after the drain keeps the TMA epilogue behind it), with
    the options as the plan row takes them (each alone: test_matches_float64)."""
    _case(monkeypatch, BwdConfig(**dict(CAUSAL_ROW, lpt_units=2), **extra), 130, 250, 3,
          lead=3, causal=True)


@pytest.mark.long
def test_varlen_matches_float64(monkeypatch):
    c = BwdConfig(**ROW, **BOTH, wg3_fence1=True)
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *_a, **_k: c)
    cq, ck = np.cumsum([0, 33, 1, 100, 70]), np.cumsum([0, 70, 129, 20, 100])
    rng = np.random.default_rng(4)
    q, k, v, do = (rng.standard_normal((n, h, 192)).astype(BF16)
                   for n, h in ((cq[-1], 2), (ck[-1], 1), (ck[-1], 1), (cq[-1], 2)))
    check_varlen_causal(q, k, v, do, cq, ck)


@pytest.mark.long
def test_deterministic_row_with_both_matches_float64(monkeypatch):
    """The deterministic row (writer warp, det_pipe) with wg3_ahead 2, wg3_pfree and
    wg3_fence1, its
    three kernels called directly (the API runs the default kernel on the interpreter)."""
    c = BwdConfig(**ROW, dq_warp=True, det_pipe=True, det_units=16, **BOTH, wg3_fence1=True)
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *_a, **_k: c)
    sq, sk, kw = 130, 250, dict(causal=True)
    rng = np.random.default_rng(9)
    q, k, v, do = (rng.standard_normal(s).astype(BF16) for s in
                   ((1, sq, 2, 192), (1, sk, 1, 192), (1, sk, 1, 192), (1, sq, 2, 192)))
    out, lse = attention_reference(q, k, v, **kw)
    pre, main, post = bwd_api.backward_kernels(192, deterministic=True, **kw)
    assert main.name.endswith("_w3a2_pfr_f1_det")
    sqp = -(-sq // 64) * 64
    dpsum, nlse2 = np.zeros((1, 2, sqp), np.float32), np.zeros((1, 2, sqp), np.float32)
    acc, sem = np.zeros((1, 2, sqp, 192), np.float32), np.zeros((1, 2, sqp // 64), np.uint32)
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(k)
    pre.interpret(out.astype(BF16), do, lse.astype(np.float32), dpsum, nlse2, acc, sem)
    main.interpret(q, k, v, do, nlse2, dpsum, acc, dk, dv, sem)
    post.interpret(acc, dq)
    check_grads((dq, dk, dv), attention_backward_reference(do, q, k, v, **kw))


@pytest.mark.ptxas
@pytest.mark.long
@pytest.mark.parametrize("base", [ROW, CAUSAL_ROW, dict(ROW, dq_warp=True)],
                         ids=["row", "causal-row", "dqw"])
@pytest.mark.parametrize("extra", [VARIANTS[0], VARIANTS[1], VARIANTS[3]],
                         ids=[IDS[0], IDS[1], IDS[3]])
@pytest.mark.parametrize("mask,softcap,varlen,det", [
    (Mask(), 0.0, False, False), (Mask(-1, 0), 0.0, False, False),
    (Mask(40, 3), 0.0, False, False), (Mask(-1, 0), 30.0, False, False),
    (Mask(-1, 0), 0.0, True, False), (Mask(-1, 0), 0.0, False, True)],
    ids=["full", "causal", "window", "softcap", "varlen", "det"])
def test_ptxas_keeps_everything_in_registers(base, extra, mask, softcap, varlen, det):
    """No spills (softcap: at most 32 bytes, as the shipped row's own at the full mask,
    24 stored, 32 loaded: 160 registers hold its tanh values only just); wg3_ahead 2
    leaves no wgmma under a branch (no C7519, which the shipped rows have) and none
    serialized (C7512)."""
    if det and not base.get("dq_warp"):
        pytest.skip("wg3's deterministic mode needs dq_warp")
    if varlen and base.get("lpt_units"):
        base = dict(ROW, prep_wide=True)        # (dense-only options: varlen keeps ROW's)
    c = BwdConfig(**base, **extra)
    k = build_backward_wg3(c, bf16, 192, mask, scale=0.07, softcap=softcap, varlen=varlen,
                           deterministic=det)
    r = resources_or_skip(k)
    most = 32 if softcap else 0
    assert r.spill_stores <= most and r.spill_loads <= most and r.local <= most, k.name
    log = k.check().log
    assert "C7512" not in log and (not c.wg3_ahead or "C7519" not in log), log


@pytest.mark.ptxas
@pytest.mark.long
def test_ptxas_ahead_behind_dk_spills():
    """wg3_ahead 1 (the next S right behind dK, dQ's accumulator still live): ptxas
    spills and serializes at 160 registers, which is why the lab times 2 only."""
    k = build_backward_wg3(BwdConfig(**ROW, wg3_ahead=1), bf16, 192, Mask(), scale=0.07)
    r = resources_or_skip(k)
    assert r.spill_stores > 0 and "C7512" in k.check().log
