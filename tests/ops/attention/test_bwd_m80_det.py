"""The deterministic mode of head dim 128's 80-query tile (:mod:`ptxdsl.ops.attention.bwd_m80`
with ``det_pipe``): the dQ writer warp takes each 80-row block's turns (two a key block) as
:mod:`.bwd_detpipe` does for the 64-row kernel. On the interpreter at ragged shapes (Sq not
a multiple of 80, a partial key block, GQA, full and window masks, a key block without
a step): dq, dk, dv against
float64; the CTAs one at a time in launch order (none waits for a later one: it would spin
forever) and all at once give the same bits; every 80-row block's word counts all its adds.
ptxas -v sm_90a: no spills, no serialized wgmma."""
from __future__ import annotations

from dataclasses import replace

import pytest

from ptxdsl.core.types import bf16
from ptxdsl.ops.attention import bwd_api
from ptxdsl.ops.attention.bwd_config import BwdConfig
from ptxdsl.ops.attention.bwd_m80 import build_backward_m80
from ptxdsl.ops.attention.config import Mask
from ptxas_resources import resources_or_skip

from attention_bwd_det_run import check_turns

M80 = BwdConfig(stages=2, dq_tma=True, overlap=1, dq_swizzle=True, block_m=80,
                ds_double=True, dq_warp=True, dk_last=True, dq_swap=True, det_pipe=True)
FIXED = dict(prep_wide=True, dkv_tma=True, dq_exit_read=True)


def test_the_deterministic_mode_needs_the_pipelined_writer():
    with pytest.raises(ValueError, match="needs det_pipe"):
        build_backward_m80(replace(M80, det_pipe=False), bf16, 128, scale=0.1,
                           deterministic=True)


CASES = [   # (shape (b, sq, sk, h, hk), mask, config)
    ((1, 37, 200, 2, 1), dict(), replace(M80, **FIXED)),
    ((2, 37, 200, 1, 1), dict(window_size=(10, 0)),
     replace(M80, det_units=1, det_desc=True, det_poll=True, **FIXED)),
]


@pytest.mark.long
@pytest.mark.parametrize("shape,kw,c", CASES, ids=["full-gqa-row", "window-one-step-u1-dsc-dpl"])
def test_turns_on_80_row_blocks(shape, kw, c, monkeypatch):
    """The shipped full deterministic row (one partial 80-row block a head, two query heads
    a K/V head: each CTA's two steps take turns across the heads' loop, over two key
    blocks, the last partial); one partial step (Sq = 37) in two batches of one unit each
    (det_units 1) under a window that leaves the first key block without a step, with
    det_desc and det_poll. (Sq = 37: each case's two runs, CTA by CTA and all together,
    stay within ~40 CPU-s; several 80-row steps a head run in the default mode's cases.)"""
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *_a, **_k: c)
    check_turns(shape, 128, kw, c, monkeypatch)


@pytest.mark.ptxas
@pytest.mark.long
@pytest.mark.parametrize("mask,extra", [(Mask(), FIXED),
                                        (Mask(-1, 0), dict(det_desc=True, det_poll=True, **FIXED))],
                         ids=["row-full", "dsc-dpl-fixed-causal"])
def test_ptxas_keeps_everything_in_registers_and_pipelined(mask, extra):
    """The shipped full row, and det_desc with det_poll causal."""
    k = build_backward_m80(replace(M80, **extra), bf16, 128, mask, scale=0.07,
                           deterministic=True)
    r = resources_or_skip(k)
    assert r.spill_stores == 0 and r.spill_loads == 0 and r.local == 0, k.name
    assert "Performance Loss" not in k.check().log, k.name
