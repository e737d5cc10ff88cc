"""The column-split backward's head-dim-192 layout ``panel_split`` (each consumer warpgroup
owns 64-column panel w and half w of panel 2: an n64 and an n32 wgmma piece of dK, dV and
dQ, not three n32): what it emits, that ptxas keeps it in registers, and the CPU
interpreter's dq, dk, dv against float64 (dense, deterministic, varlen): the plan's two
col_split rows at head dim 192 at each mask, the lab ordering (overlap 1) once."""
from __future__ import annotations

import numpy as np
import pytest

from ptxdsl.core.types import bf16
from ptxdsl.ops import attention_backward
from ptxdsl.ops.attention import attention_backward_reference, attention_reference, bwd_api
from ptxdsl.ops.attention.bwd import build_backward
from ptxdsl.ops.attention.bwd_cols import col_pieces, stage_panels
from ptxdsl.ops.attention.bwd_config import BwdConfig
from ptxdsl.ops.attention.config import Mask
from ptxas_resources import resources_or_skip  # noqa: E402

ml_dtypes = pytest.importorskip("ml_dtypes")
BF16 = ml_dtypes.bfloat16
from attention_bwd_checks import check_grads as _check, check_varlen_causal  # noqa: E402

COLS = dict(dq_tma=True, dq_swizzle=True, col_split=True, panel_split=True)
PDS2 = BwdConfig(stages=2, pds_smem=True, **COLS)
OV1 = BwdConfig(stages=2, overlap=1, **COLS)
ROW15 = BwdConfig(stages=2, **COLS)             # bwd_plans.json's col_split rows at 192
ROW16 = BwdConfig(stages=2, dq_tma=True, dq_swizzle=True, col_split=True, pds_smem=True)


def _inputs(sq, sk, seed, lead=(1,)):
    """q, dout (lead, sq, 2, 192) and k, v (lead, sk, 1, 192): GQA, bf16."""
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((*lead, s, h, 192)).astype(BF16)
            for s, h in ((sq, 2), (sk, 1), (sk, 1), (sq, 2))]


def _case(sq, sk, seed, deterministic=False, **kw):
    """The backward of out, lse from the float64 reference, checked against float64."""
    q, k, v, do = _inputs(sq, sk, seed)
    out, lse = attention_reference(q, k, v, **kw)
    _check(attention_backward(do, q, k, v, out.astype(BF16), lse.astype(np.float32),
                              deterministic=deterministic, **kw),
           attention_backward_reference(do, q, k, v, **kw))


def _use(monkeypatch, c):
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *_a: c)


def test_pieces_cover_every_column_once():
    for c, d in ((PDS2, 192), (BwdConfig(stages=1, pds_smem=True, **{**COLS,
                                                                    "panel_split": False}), 256)):
        cols = sorted(f + w * s + i for width, f, s in col_pieces(c, d) for w in (0, 1)
                      for i in range(width))
        assert cols == list(range(d))
        assert sum(32 for _ in stage_panels(c, d)) == c.wg_cols(d)
    assert [p[0] for p in col_pieces(PDS2, 192)] == [64, 32]


def test_emits_n64_and_n32_pieces():
    """Per warpgroup and step: Sᵀ, dPᵀ for 32 queries (m64n32, 12 k-steps each); dV, dK an
    n64 and an n32 piece (4 k-steps each); dQ an n64 and an n32 chain; three 32-column
    TMA reduce-adds."""
    text = build_backward(PDS2, bf16, 192, Mask(-1, 0), scale=0.1).ptx()
    assert text.count("wgmma.mma_async.sync.aligned.m64n32k16") == 2 * 12 + 2 * 4 + 4
    assert text.count("wgmma.mma_async.sync.aligned.m64n64k16") == 2 * 4 + 4
    assert text.count("cp.reduce.async.bulk.tensor") == 3
    assert "_pnl" in text
    with pytest.raises(ValueError, match="panel_split"):
        BwdConfig(stages=2, dq_tma=True, dq_swizzle=True, panel_split=True)
    with pytest.raises(ValueError, match="panel_split"):
        build_backward(BwdConfig(stages=1, pds_smem=True, **COLS), bf16, 256, scale=0.1)


@pytest.mark.long
def test_interpreter_matches_float64(monkeypatch):
    """Ragged, GQA, causal, two key blocks (64 keys a CTA): the plan's panel_split row."""
    _use(monkeypatch, ROW15)
    _case(70, 100, 11, causal=True)


@pytest.mark.long
@pytest.mark.parametrize("c,kw,det", [
    (ROW15, {}, False), (ROW15, dict(window_size=(40, 3)), False),
    (ROW16, {}, False), (ROW16, dict(causal=True), True),
    (ROW16, dict(window_size=(40, 3)), False),
    (OV1, dict(causal=True, softcap=3.0), False),
], ids=["row-full", "row-window", "pds-row-full", "pds-row-causal-det", "pds-row-window",
        "ov1-causal-softcap"])
def test_orderings_masks_and_modes_match_float64(monkeypatch, c, kw, det):
    """The plan's two col_split rows at head dim 192 (panel_split; pds_smem without it)
    at the masks they serve (panel_split's causal: test_interpreter_matches_float64), and
    one case of panel_split with overlap 1 (in no row); panel_split with pds_smem:
    test_varlen_matches_float64."""
    _use(monkeypatch, c)
    _case(70, 150, 5, det, **kw)


@pytest.mark.long
def test_varlen_matches_float64(monkeypatch):
    """Three packed sequences (one of one query), GQA, causal, deterministic: each against
    float64."""
    _use(monkeypatch, PDS2)
    cq, ck = np.cumsum([0, 33, 1, 100]), np.cumsum([0, 70, 129, 20])
    q, k, v, do = (x[0] for x in _inputs(cq[-1], ck[-1], 4))
    check_varlen_causal(q, k, v, do, cq, ck, deterministic=True)


@pytest.mark.ptxas
@pytest.mark.long
@pytest.mark.parametrize("c,mask,softcap,det,varlen", [
    (ROW15, Mask(-1, 0), 30.0, False, False), (ROW15, Mask(-1, 0), 0.0, False, True),
    (ROW16, Mask(-1, 0), 0.0, True, False), (ROW16, Mask(), 30.0, True, True)],
    ids=["row-causal-softcap", "row-causal-varlen", "pds-row-causal-det",
         "pds-row-full-softcap-det-varlen"])
def test_ptxas_keeps_everything_in_registers(c, mask, softcap, det, varlen):
    k = build_backward(c, bf16, 192, mask, scale=0.07, softcap=softcap, deterministic=det,
                       varlen=varlen)
    r = resources_or_skip(k)
    assert r.spill_stores == 0 and r.spill_loads == 0 and r.local == 0, k.name
