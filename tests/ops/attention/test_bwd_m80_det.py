"""The deterministic mode of head dim 128's 80-query tile (:mod:`ptxdsl.ops.attention.bwd_m80`
with ``det_pipe``): the dQ writer warp takes each 80-row block's turns (two a key block) as
:mod:`.bwd_detpipe` does for the 64-row kernel. On the interpreter at ragged shapes (Sq not
a multiple of 80, a partial key block, GQA, full and causal masks): dq, dk, dv against
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
    ((1, 150, 200, 2, 1), dict(), M80),
    ((2, 37, 130, 1, 1), dict(), replace(M80, det_units=1, **FIXED)),
    ((1, 170, 300, 2, 1), dict(causal=True), M80),
    ((1, 170, 300, 1, 1), dict(causal=True), replace(M80, det_desc=True, det_poll=True)),
    ((1, 250, 260, 1, 1), dict(), replace(M80, det_desc=True, det_poll=True, **FIXED)),
    ((1, 100, 300, 1, 1), dict(window_size=(10, 0)), M80),
]


@pytest.mark.long
@pytest.mark.parametrize("shape,kw,c", CASES,
                         ids=["full-gqa", "full-one-step-u1-fixed", "causal", "causal-dsc-dpl",
                              "full-dsc-dpl-fixed", "window-no-step"])
def test_turns_on_80_row_blocks(shape, kw, c, monkeypatch):
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *_a, **_k: c)
    check_turns(shape, 128, kw, c, monkeypatch)


@pytest.mark.ptxas
@pytest.mark.long
@pytest.mark.parametrize("mask", [Mask(), Mask(-1, 0)], ids=["full", "causal"])
@pytest.mark.parametrize("extra", [{}, dict(det_desc=True, det_poll=True, **FIXED)],
                         ids=["pipe", "dsc-dpl-fixed"])
def test_ptxas_keeps_everything_in_registers_and_pipelined(mask, extra):
    k = build_backward_m80(replace(M80, **extra), bf16, 128, mask, scale=0.07,
                           deterministic=True)
    r = resources_or_skip(k)
    assert r.spill_stores == 0 and r.spill_loads == 0 and r.local == 0, k.name
    assert "Performance Loss" not in k.check().log, k.name
