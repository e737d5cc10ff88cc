"""``BwdConfig.dq_frag`` (head dim 64's 128-query step, wg3's thirds): dQ staged in the
accumulator's fragment order by ``st.shared.v4.f32`` and added by the writer warp's one 1-D
``cp.reduce.async.bulk`` a warpgroup, dq_acc's 64 x 64 blocks in that order and the
postprocess (:func:`ptxdsl.ops.attention.bwd_prepw.build_postprocess_frag`) reading it
back. What it emits and refuses; head dim 64's full, causal (kv_pair) and deterministic
rows with it, and head dim 192's (wg3), on the CPU interpreter (race, proxy and
bulk-group detectors) against float64, GQA and ragged (rows past Sq in the last block);
the deterministic rows' turns; varlen drops it; ptxas -v."""
from __future__ import annotations

import re
from dataclasses import replace

import pytest

from ptxdsl.core.types import bf16
from ptxdsl.ops.attention import bwd_api
from ptxdsl.ops.attention.bwd import build_backward
from ptxdsl.ops.attention.bwd_config import BwdConfig, choose_bwd
from ptxdsl.ops.attention.config import Mask
from attention_bwd_checks import gqa_grads_match
from attention_bwd_det_run import check_turns
from ptxas_resources import resources_or_skip  # noqa: E402

pytest.importorskip("ml_dtypes")
BULK = "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32"


def test_stages_by_v4_and_adds_by_one_bulk_reduction():
    """Eight ``st.shared.v4.f32`` a step where sixteen ``.v2`` were, no tensor reduce-add,
    one bulk reduction of 16384 bytes (the writer's, for each warpgroup in a loop), the
    ``_dqf`` tag and the postprocess's name; refused without dq_warp or block_m 128."""
    row = replace(choose_bwd(64, "bf16", Mask()), dq_frag=False)
    texts = [build_backward(replace(row, dq_frag=on), bf16, 64, Mask(), scale=0.125).ptx()
             for on in (False, True)]
    v2 = [len(re.findall(r"st\.shared\.v2\.f32", t)) for t in texts]
    v4 = [len(re.findall(r"st\.shared\.v4\.f32", t)) for t in texts]
    assert v2[0] - v2[1] == 16 and v4[1] - v4[0] == 8, (v2, v4)
    assert "cp.reduce.async.bulk.tensor" in texts[0] and "cp.reduce.async.bulk.tensor" \
        not in texts[1]
    assert re.search(re.escape(BULK) + r" \[%rd\d+\], \[%r\d+\], 16384;", texts[1])
    assert replace(row, dq_frag=True).tag == row.tag + "_dqf"
    with pytest.raises(ValueError,
                       match="dq_frag.*needs dq_warp, and block_m=128, dq_split or wg3"):
        BwdConfig(stages=2, dq_tma=True, dq_swizzle=True, dq_frag=True)


def _frag(monkeypatch):
    """Each call's plan row with dq_frag where it takes it (128-query steps, the writer)."""
    shipped = bwd_api.choose_bwd

    def choose(*a, **k):
        row = shipped(*a, **k)
        takes = row.dq_warp and (row.block_m == 128 or row.wg3) and not k.get("varlen") \
            and not (len(a) > 5 and a[5])
        return replace(row, dq_frag=True) if takes else row
    monkeypatch.setattr(bwd_api, "choose_bwd", choose)


@pytest.mark.long
@pytest.mark.parametrize("sq,sk,kw", [(150, 260, {}), (200, 150, dict(causal=True))],
                         ids=["full", "causal"])
def test_rows_match_float64(monkeypatch, sq, sk, kw):
    """Full: the last 128-row block's second half past Sq (the postprocess skips its rows);
    causal: kv_pair's walks, both halves of several blocks."""
    _frag(monkeypatch)
    gqa_grads_match(64, sq, sk, sq + sk, **kw)


@pytest.mark.long
@pytest.mark.parametrize("kw", [{}, dict(causal=True)], ids=["full", "causal"])
def test_wg3_rows_match_float64(monkeypatch, kw):
    """Head dim 192's rows (wg3: three warpgroups, each a 64-column third of dQ, three
    blocks of dq_acc a 64-row block): full (wg3_ahead) and causal (lpt_units)."""
    _frag(monkeypatch)
    assert bwd_api.backward_kernels(192, **kw)[1].name.endswith("_dqf")
    gqa_grads_match(192, 130, 150, 192, **kw)


# head dim 128's 64-query step (the FlashAttention-3/4 causal tile) with dq_split and dq_frag
SPLIT = BwdConfig(stages=2, dq_tma=True, overlap=1, dq_swizzle=True, dq_split=True,
                  ds_double=True, dq_warp=True, dk_last=True, prep_wide=True, dkv_tma=True,
                  dq_exit_read=True, lpt_units=8, s_ahead=2, ahead_k=True, uniform_cons=True,
                  dq_frag=True)


@pytest.mark.long
@pytest.mark.parametrize("kw", [{}, dict(causal=True)], ids=["full", "causal"])
def test_split_rows_match_float64(monkeypatch, kw):
    """Head dim 128's 64-query step with dq_split (each warpgroup a 64-column half of dQ,
    two blocks of dq_acc a 64-row block, its own 16384-byte bulk reduction), ragged."""
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *a, **k: SPLIT)
    kern = bwd_api.backward_kernels(128, **kw)
    assert kern[1].name.endswith("_dqf") and kern[2].name.endswith("_d128_frag")
    assert re.search(re.escape(BULK) + r" \[%rd\d+\], \[%r\d+\], 16384;", kern[1].ptx())
    gqa_grads_match(128, 100, 150, 128, **kw)


@pytest.mark.long
@pytest.mark.parametrize("d,shape", [(64, (1, 140, 200, 2, 1)), (128, (1, 100, 150, 2, 1)),
                                     (192, (1, 100, 150, 2, 1))])
def test_deterministic_rows_take_their_turns(monkeypatch, d, shape):
    """The deterministic rows with it (head dim 64: the writer's turn a 64-row half around
    each bulk reduction; 192: det_pipe's three turns around the three), the main kernel run
    directly (the API runs the default kernel on the interpreter): gradients against
    float64, each row block's semaphore at its count, dq_acc bitwise the same CTA by CTA
    or all at once (full mask: the semaphores' model counts whole 128-row ranges)."""
    _frag(monkeypatch)
    c = bwd_api.choose_bwd(d, "bf16", Mask(), False, True, False) if d != 128 else \
        replace(SPLIT, lpt_units=0, s_ahead=0, ahead_k=False, det_pipe=True, det_desc=True)
    assert c.dq_frag
    check_turns(shape, d, {}, c, monkeypatch)


@pytest.mark.ptxas
@pytest.mark.long
def test_no_spills():
    """The full and causal rows' main kernels and the postprocess: no spills."""
    for mask in (Mask(), Mask(-1, 0)):
        k = build_backward(replace(choose_bwd(64, "bf16", mask), dq_frag=True), bf16, 64,
                           mask, scale=0.125)
        r = resources_or_skip(k)
        assert r.spill_stores == 0 and r.spill_loads == 0 and r.local == 0, k.name
