"""``BwdConfig.dq_frag`` (head dim 64's 128-query step, wg3's thirds, head dim 128's dq_split
halves and dq_swap):
dQ (dq_swap: dQᵀ) staged in the accumulator's fragment order by ``st.shared.v4.f32`` and
added by the writer warp's one 1-D ``cp.reduce.async.bulk`` a warpgroup, dq_acc's blocks in
that order and the postprocesses (:func:`ptxdsl.ops.attention.bwd_prepw.
build_postprocess_frag`, ``build_postprocess_frag80``) reading it back. What it emits and
refuses; head dim 64's full, causal (kv_pair) and deterministic rows with it, head dim
192's (wg3) and 128's (dq_split: the causal row; dq_swap: 80-row blocks, rows padded to
80, 320 deterministic), on
the CPU interpreter (race, proxy and bulk-group detectors) against float64, GQA and ragged
(rows past Sq in the last block); the deterministic rows' turns; the 80-row postprocess
and the wide preprocess over 80-row units alone; varlen drops it; ptxas -v."""
from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest

from ptxdsl.core.types import bf16
from ptxdsl.ops.attention import bwd_api
from ptxdsl.ops.attention.bwd import build_backward
from ptxdsl.ops.attention.bwd_config import BwdConfig, choose_bwd, row_unit
from ptxdsl.ops.attention.bwd_m80 import build_backward_m80
from ptxdsl.ops.attention.bwd_prep import build_preprocess
from ptxdsl.ops.attention.bwd_prepw import build_postprocess_frag80, build_preprocess_wide
from ptxdsl.ops.attention.config import Mask
from attention_bwd_checks import gqa_grads_match
from attention_bwd_det_run import check_turns
from ptxas_resources import resources_or_skip  # noqa: E402

ml_dtypes = pytest.importorskip("ml_dtypes")
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
    with pytest.raises(ValueError, match="dq_frag.*needs dq_warp, and block_m=128, dq_split, "
                                         "wg3 or dq_swap"):
        BwdConfig(stages=2, dq_tma=True, dq_swizzle=True, dq_frag=True)


def test_dq_swap_stages_by_v4_and_pads_rows_to_80():
    """dq_swap (head dim 128's full row): ten ``st.shared.v4.f32`` where forty
    ``st.shared.f32`` were, one bulk reduction of 20480 bytes (a warpgroup's 80 x 64), no
    tensor reduce-add; the API's kernels with it (the wide preprocess over 80-row units,
    the ``_frag80`` postprocess) and its padded rows: 80 by default, 320 (lcm with the
    64-row semaphore words) in the deterministic mode, 64 without it or under varlen."""
    row = choose_bwd(128, "bf16", Mask())
    assert row.dq_swap and not row.dq_frag
    texts = [build_backward_m80(replace(row, dq_frag=on), bf16, 128, Mask(), scale=0.1).ptx()
             for on in (False, True)]
    assert [t.count("st.shared.f32") for t in texts] == [40, 0]
    assert [t.count("st.shared.v4.f32") for t in texts] == [0, 10]
    assert "cp.reduce.async.bulk.tensor" not in texts[1]
    assert re.search(re.escape(BULK) + r" \[%rd\d+\], \[%r\d+\], 20480;", texts[1])
    frag = replace(row, dq_frag=True)
    assert [row_unit(c, det) for c in (row, frag) for det in (False, True)] == [64, 64, 80, 320]
    with pytest.MonkeyPatch.context() as m:
        _frag(m)
        pre, main, post = bwd_api.backward_kernels(128)
        assert pre.name.endswith("_w_r80") and main.name.endswith("_dqf") \
            and post.name.endswith("_frag80")
        # (causal: the 64-query dq_split row, its dq_frag blocks 64 rows)
        assert [bwd_api.padded_rows(130, 128, causal=c) for c in (False, True)] == [160, 192]
        assert bwd_api.padded_rows(130, 128, deterministic=True) == 320
        assert bwd_api.padded_rows(130, 64) == 192      # (block_m 128's blocks: 64 rows)
        assert not bwd_api.plan_config(128, "bf16", Mask(), varlen=True).dq_frag


def _frag(monkeypatch):
    """Each call's plan row with dq_frag where it takes it (128-query steps, the writer)."""
    shipped = bwd_api.choose_bwd

    def choose(*a, **k):
        row = shipped(*a, **k)
        takes = row.dq_warp and (row.block_m == 128 or row.wg3 or row.dq_swap) \
            and not k.get("varlen") and not (len(a) > 5 and a[5])
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
@pytest.mark.parametrize("sq,sk,kw", [(150, 140, {}), (170, 90, dict(causal=True))],
                         ids=["full", "causal"])
def test_dq_swap_rows_match_float64(monkeypatch, sq, sk, kw):
    """Head dim 128's 80-query rows (full: lse_early; causal: s_ahead, lpt_units,
    uniform_cons): dQᵀ's fragment order, 80-row blocks in rows padded to 80 (the last
    block past Sq), the transposing postprocess."""
    if kw:          # (the causal row is the 64-query tile now: the 80-query one's options)
        monkeypatch.setattr(bwd_api, "choose_bwd", lambda *a, **k: replace(
            SPLIT, dq_split=False, block_m=80, dq_swap=True))
    else:
        _frag(monkeypatch)
    assert bwd_api.backward_kernels(128, **kw)[2].name.endswith("_frag80")
    gqa_grads_match(128, sq, sk, sq + sk, **kw)


def test_frag80_postprocess_turns_fragment_order_into_rows():
    """The 80-row postprocess alone: dq_acc written in the dQᵀ accumulators' fragment order
    from a known dQ (2 heads, Sq 90: two 80-row blocks a head, the second mostly past Sq);
    dq = dQ · scale rounded, every element, each row's 16-byte pieces in place."""
    b, h, sq, d, scale = 1, 2, 90, 128, 0.5
    sqp = -(-sq // 80) * 80
    rng = np.random.default_rng(3)
    dq_rows = rng.standard_normal((b, h, sqp, d)).astype(np.float32)
    # piece 128 k + t of warpgroup w, word j: column 64 w + 16 (t // 32) + t % 32 // 4 +
    # 8 (j // 2), query 8 k + 2 (t % 4) + j % 2 of the block
    w, k, t, j = np.meshgrid(np.arange(2), np.arange(10), np.arange(128), np.arange(4),
                             indexing="ij")
    col = 64 * w + 16 * (t // 32) + t % 32 // 4 + 8 * (j // 2)
    qry = 8 * k + 2 * (t % 4) + j % 2
    acc = np.empty_like(dq_rows)
    for mb in range(sqp // 80):
        blk = dq_rows[:, :, mb * 80:mb * 80 + 80]                  # (b, h, 80, d)
        acc[:, :, mb * 80:mb * 80 + 80] = blk[:, :, qry, col].reshape(b, h, 80, d)
    dq = np.zeros((b, sq, h, d), ml_dtypes.bfloat16)
    build_postprocess_frag80(bf16, d, scale).interpret(acc, dq)
    want = (dq_rows[:, :, :sq] * scale).astype(ml_dtypes.bfloat16).transpose(0, 2, 1, 3)
    np.testing.assert_array_equal(dq.view(np.uint16), want.view(np.uint16))


@pytest.mark.parametrize("det", [False, True])
def test_wide_preprocess_over_80_row_units(det):
    """The wide preprocess built for 80-row units (32 rows a CTA at head dim 128): one head
    of Sq 70 (SQP 80, the last CTA half past B·H·SQP) gives the per-warp preprocess's D,
    -LSE·log2e and zeroed dq_acc; nothing is written past SQP (the interpreter checks each
    access against its array); deterministic (SQP 320): the semaphore words zeroed."""
    b, h, sq, d = 1, 1, 70, 128
    sqp = 320 if det else 80
    rng = np.random.default_rng(5)
    o, do = (rng.standard_normal((b, sq, h, d)).astype(ml_dtypes.bfloat16) for _ in range(2))
    lse = rng.standard_normal((b, h, sq)).astype(np.float32)
    res = []
    for build in (build_preprocess, build_preprocess_wide):
        outs = [np.full((b, h, sqp), np.nan, np.float32), np.full((b, h, sqp), np.nan, np.float32),
                np.full((b, h, sqp, d), np.nan, np.float32)] + \
            ([np.full((b, h, sqp // 64), 7, np.uint32)] if det else [])
        kw = dict(unit=sqp) if build is build_preprocess_wide else {}
        build(bf16, d, deterministic=det, **kw).interpret(o, do, lse, *outs)
        res.append(outs)
    assert build_preprocess_wide(bf16, d, unit=80).name.endswith("_w_r80")
    for x, y in zip(*res):
        assert not np.isnan(y).any()
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-5)


@pytest.mark.long
@pytest.mark.parametrize("d,shape,split", [(64, (1, 140, 200, 2, 1), False),
                                           (192, (1, 100, 150, 2, 1), False),
                                           (128, (1, 37, 200, 2, 1), False),
                                           (128, (1, 100, 150, 2, 1), True)],
                         ids=["64", "192", "128-m80", "128-split"])
def test_deterministic_rows_take_their_turns(monkeypatch, d, shape, split):
    """The deterministic rows with it (head dim 64: the writer's turn a 64-row half around
    each bulk reduction; 192: det_pipe's three turns around the three; 128: dq_swap's two
    turns an 80-row block, rows padded to 320), the main kernel run directly (the API
    runs the default kernel on the interpreter): gradients against float64, each row
    block's semaphore at its count, dq_acc bitwise the same CTA by CTA or all at once
    (full mask: the semaphores' model counts whole 128-row ranges)."""
    _frag(monkeypatch)
    c = bwd_api.choose_bwd(d, "bf16", Mask(), False, True, False) if not split else \
        replace(SPLIT, lpt_units=0, s_ahead=0, ahead_k=False, det_pipe=True, det_desc=True)
    assert c.dq_frag
    check_turns(shape, d, {}, c, monkeypatch)


@pytest.mark.ptxas
@pytest.mark.long
def test_no_spills():
    """The full and causal rows' main kernels and the postprocess: no spills. Head dim
    128: the causal row with it, the full row with it at lse_early 5 (at 6 and more, 8
    the row's, ptxas spills) or with uniform_cons (lse_early 8 kept), the 80-row
    postprocess."""
    for mask in (Mask(), Mask(-1, 0)):
        k = build_backward(replace(choose_bwd(64, "bf16", mask), dq_frag=True), bf16, 64,
                           mask, scale=0.125)
        r = resources_or_skip(k)
        assert r.spill_stores == 0 and r.spill_loads == 0 and r.local == 0, k.name
    for mask, extra in ((Mask(-1, 0), {}), (Mask(), dict(lse_early=5)),
                        (Mask(), dict(uniform_cons=True))):
        k = build_backward_m80(replace(choose_bwd(128, "bf16", mask), dq_frag=True, **extra),
                               bf16, 128, mask, scale=0.125)
        r = resources_or_skip(k)
        assert r.spill_stores == 0 and r.spill_loads == 0 and r.local == 0, k.name
    r = resources_or_skip(build_postprocess_frag80(bf16, 128, 0.125))
    assert r.spill_stores == 0 and r.local == 0
