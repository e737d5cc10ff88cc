"""Head dim 192's step schedule in wg3 (:mod:`ptxdsl.ops.attention.bwd_wg3ahead`):
``BwdConfig.wg3_ahead`` (the next step's S issued before this step ends, carried across
the back edge), ``wg3_pfree`` (P's stores behind dO's empty barrier, not a CTA barrier)
and ``wg3_fence1`` (the exchanges' proxy fence by the readers only): what they emit and
refuse, the CPU interpreter (with its race and proxy detectors) against float64 (ragged,
GQA, causal / window, softcap, a CTA with no step, varlen, the causal row's options; the
deterministic mode with them: test_bwd_det192.py), and ptxas -v."""
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


SHAPES = {"causal": (100, 230, dict(causal=True)),
          "no-step": (64, 300, dict(window_size=(10, 0))),
          "softcap": (100, 150, dict(causal=True, softcap=5.0))}
CASES = [("sa2-pf-f1", "no-step"), ("sa2-pf-f1", "softcap"), ("sa1", "causal")]


@pytest.mark.long
@pytest.mark.parametrize("vid,shape", CASES, ids=[f"{v}-{sh}" for v, sh in CASES])
def test_matches_float64(monkeypatch, vid, shape):
    """Several steps a warpgroup across both heads of the GQA group (the carried S
    crosses the head loop and the ring's wrap); ``no-step``: key blocks no query sees
    (the first S from K's tile, discarded). The three options together under a window
    (no-step) and causal with softcap; wg3_ahead 1 (a lab option) causal. The plan rows
    with them: the causal row below, the full and window rows in test_bwd_uniform.py's
    test_plan_rows_match_float64 (d192-full, d192-window)."""
    sq, sk, kw = SHAPES[shape]
    _case(monkeypatch, BwdConfig(**ROW, **VARIANTS[IDS.index(vid)]), sq, sk, sq + sk,
          lead=2 if sq == 64 else 1, **kw)


@pytest.mark.long
@pytest.mark.parametrize("extra", VARIANTS[4:5], ids=IDS[4:5])
def test_causal_row_options_match_float64(monkeypatch, extra):
    """Over the causal row (dkv_tma: the last, discarded S reads every warpgroup's panel
    of K's tile, so a CTA barrier after the drain keeps the TMA epilogue behind it), with
    the options and uniform_cons as the plan row takes them; lpt_units 3 over 2 (batch,
    K/V head) units (a short last section, key block-major), three key blocks (the last
    past SK: the TMA store clips its rows) of one row block, a step for each head of the
    GQA group (the carried S crosses the head loop)."""
    _case(monkeypatch, BwdConfig(**dict(CAUSAL_ROW, lpt_units=3, uniform_cons=True),
                                 **extra), 40, 200, 3, lead=2, causal=True)


@pytest.mark.long
def test_varlen_matches_float64():
    """The plan's causal row as varlen takes it (dense-only dkv_tma dropped, the step
    options, the writer warp, uniform_cons): three packed sequences (one of one query, one
    whose keys end mid-block, one with fewer keys than queries), GQA, each against
    float64."""
    assert bwd_api.backward_kernels(192, causal=True, varlen=True)[1].name.endswith(
        "_w3a2_pfr_f1_uc_varlen")
    cq, ck = np.cumsum([0, 33, 1, 40]), np.cumsum([0, 70, 129, 20])
    rng = np.random.default_rng(4)
    q, k, v, do = (rng.standard_normal((n, h, 192)).astype(BF16)
                   for n, h in ((cq[-1], 2), (ck[-1], 1), (ck[-1], 1), (cq[-1], 2)))
    check_varlen_causal(q, k, v, do, cq, ck)


DQW = dict(ROW, dq_warp=True)


@pytest.mark.ptxas
@pytest.mark.long
@pytest.mark.parametrize("base,mask,softcap,varlen", [
    (CAUSAL_ROW, Mask(-1, 0), 0.0, False), (DQW, Mask(-1, 0), 30.0, False),
    (DQW, Mask(-1, 0), 0.0, True), (DQW, Mask(40, 3), 0.0, False)],
    ids=["causal-row", "dqw-softcap", "dqw-varlen", "dqw-window"])
def test_ptxas_keeps_everything_in_registers(base, mask, softcap, varlen):
    """The three options over the causal row and the full/window row (the writer warp):
    causal, softcap, varlen, a window. No spills (softcap: at most 32 bytes, as the
    shipped row's own at the full mask, 24 stored, 32 loaded: 160 registers hold its tanh
    values only just); wg3_ahead 2 leaves no wgmma under a branch (no C7519, which the
    shipped rows have) and none serialized (C7512)."""
    c = BwdConfig(**base, **VARIANTS[3])
    k = build_backward_wg3(c, bf16, 192, mask, scale=0.07, softcap=softcap, varlen=varlen)
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
