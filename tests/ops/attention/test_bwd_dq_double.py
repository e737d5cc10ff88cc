"""``BwdConfig.dq_double`` (:mod:`ptxdsl.ops.attention.bwd_dqwarp`): two dQ stages a
consumer warpgroup, taken by step parity, with named barriers 8-11 for the odd steps. What
it emits, refuses and costs in shared memory; head dim 64's and 128's deterministic rows
with it on the CPU interpreter (race, proxy and bulk-group detectors): gradients against
float64, every semaphore at its count, and dQ's f32 accumulator bitwise the plain row's (the
same adds in the same order: only the stage they come from alternates); the default mode's
rows against float64, ragged."""
from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest

from ptxdsl.core.types import bf16
from ptxdsl.ops.attention import bwd_api
from ptxdsl.ops.attention.bwd import build_backward
from ptxdsl.ops.attention.bwd_config import BwdConfig, SMEM_PER_CTA, choose_bwd
from ptxdsl.ops.attention.config import Mask
from attention_bwd_checks import gqa_grads_match
from attention_bwd_det_run import check_turns, run

pytest.importorskip("ml_dtypes")

# head dim 64's deterministic row: its second pair of dSᵀ tiles makes room for the stages
DET64 = replace(choose_bwd(64, "bf16", Mask(), False, True), ds_double=False)
DET128 = choose_bwd(128, "bf16", Mask(-1, 0), False, True)    # (full: dq_swap)


def _plan(monkeypatch, c):
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *_a, **_k: c)


def test_barriers_stages_and_refusals():
    """The consumers' odd steps wait and arrive on barriers 8-11 by a register id; the
    writer's first arrivals free all four stages; the tag; dq_split's two stages fit the one
    of before; refused without the writer warp or with kv_pair."""
    c = replace(DET64, dq_double=True)
    text = build_backward(c, bf16, 64, Mask(), scale=0.125, deterministic=True).ptx()
    first = [int(x) for x in re.findall(r"bar\.arrive (\d+), 160;", text)]
    assert sorted(first[:4]) == [6, 7, 10, 11], first
    assert re.search(r"bar\.sync %r\d+, 160;", text) and \
        re.search(r"bar\.arrive %r\d+, 160;", text)
    assert c.tag == DET64.tag + "_dq2"
    assert replace(DET128, dq_double=True).smem_bytes(128) == DET128.smem_bytes(128)
    assert replace(DET64, dq_double=True).smem_bytes(64) <= SMEM_PER_CTA < \
        replace(DET64, dq_double=True, ds_double=True).smem_bytes(64)
    with pytest.raises(ValueError, match="dq_double.*needs dq_warp"):
        BwdConfig(stages=2, dq_tma=True, dq_swizzle=True, dq_double=True)
    with pytest.raises(ValueError, match="dq_double.*kv_pair"):
        replace(choose_bwd(64, "bf16", Mask(-1, 0)), dq_double=True)


@pytest.mark.long
@pytest.mark.parametrize("d,shape,kw,c", [
    (64, (1, 140, 200, 2, 1), {}, DET64),
    (64, (1, 200, 150, 2, 1), dict(causal=True), replace(DET64, det_pipe=True)),
    (128, (1, 100, 150, 2, 1), dict(causal=True), DET128)], ids=["64", "64-pipe", "128"])
def test_deterministic_rows_add_in_the_plain_order(monkeypatch, d, shape, kw, c):
    """Against float64, every semaphore at its count and the accumulator bitwise the same
    CTA by CTA or all at once (:func:`check_turns`), and bitwise the plain stage's."""
    _plan(monkeypatch, c)
    plain = run(shape, d, kw, True, True, monkeypatch)[0]
    _plan(monkeypatch, replace(c, dq_double=True))
    check_turns(shape, d, kw, replace(c, dq_double=True), monkeypatch)
    double = run(shape, d, kw, True, True, monkeypatch)[0]
    assert np.array_equal(double.view(np.uint32), plain.view(np.uint32))


@pytest.mark.long
@pytest.mark.parametrize("d,kw", [(64, {}), (128, dict(causal=True))], ids=["64", "128"])
def test_default_rows_match_float64(monkeypatch, d, kw):
    """The default mode's rows with it (head dim 128's causal row: s_ahead hands the stage
    over under dK), ragged, GQA."""
    row = choose_bwd(d, "bf16", Mask(-1, 0) if kw else Mask())
    _plan(monkeypatch, replace(row, dq_double=True, ds_double=row.ds_double and d != 64))
    gqa_grads_match(d, 150, 230, 7 * d, **kw)
