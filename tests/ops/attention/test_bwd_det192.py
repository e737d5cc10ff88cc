"""Head dim 192's deterministic mode (``wg3`` with the writer warp's pipelined turns):
``det_poll`` in wg3 (the next row block's semaphore read into a shared word while this
block's adds land, :func:`ptxdsl.ops.attention.bwd_wg3._writer`) and the default row's
step options (``uniform_cons``, ``wg3_fence1``, ``wg3_pfree``, ``wg3_ahead`` 2) and
fixed-cost options in the deterministic mode: the plan's row. On the interpreter: that
row at each mask, dq, dk, dv against float64, CTA by CTA in launch order (no CTA waits for
a later one); its f32 dQ accumulator bitwise the same row's without det_poll (the same
adds in the same order); every semaphore counts all its adds. ptxas -v: no spills."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from ptxdsl.core.types import bf16
from ptxdsl.ops.attention import attention_backward_reference, bwd_api
from ptxdsl.ops.attention.bwd_config import BwdConfig
from ptxdsl.ops.attention.bwd_wg3 import build_backward_wg3
from ptxdsl.ops.attention.config import Mask
from ptxas_resources import resources_or_skip  # noqa: E402

from attention_bwd_det_run import adds_per_block, check, run

DET = BwdConfig(stages=2, dq_tma=True, dq_swizzle=True, wg3=True, consumer_regs=160,
                overlap=2, dq_warp=True, det_pipe=True, det_units=16)
STEP = dict(uniform_cons=True, wg3_fence1=True, wg3_pfree=True, wg3_ahead=2)
FIXED = dict(prep_wide=True, dkv_tma=True, dq_exit_read=True)
ROW = replace(DET, **STEP, **FIXED, det_poll=True)      # bwd_plans.json's deterministic row


def _with(monkeypatch, c):
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *_a, **_k: c)


def test_det_poll_takes_wg3_with_det_pipe():
    assert "_dpl" in replace(DET, det_poll=True).tag
    with pytest.raises(ValueError, match="det_poll"):
        replace(DET, det_pipe=False, det_poll=True)


@pytest.mark.long
def test_det_poll_reads_the_next_turn_under_the_landing():
    """One more ``ld.acquire`` (the next block's, between the read wait and the landing
    wait), its value kept in the word after the barriers; the default kernel takes none."""
    c = replace(DET, det_poll=True)
    text = build_backward_wg3(c, bf16, 192, Mask(), scale=0.1, deterministic=True).ptx()
    old = build_backward_wg3(DET, bf16, 192, Mask(), scale=0.1, deterministic=True).ptx()
    assert text.count("ld.acquire.gpu") == old.count("ld.acquire.gpu") + 1
    tail = text[text.index("cp.async.bulk.wait_group.read"):]
    assert tail.index("ld.acquire.gpu") < tail.index("cp.async.bulk.wait_group 0")
    default = build_backward_wg3(c, bf16, 192, Mask(), scale=0.1).ptx()
    assert "ld.acquire" not in default


@pytest.mark.long
def test_det_poll_adds_in_the_plain_writers_order(monkeypatch):
    """The plan's deterministic row, causal: det_poll changes when a turn is read, not the
    adds: the f32 dQ bits of the row without it (CTA by CTA in launch order: no CTA waits
    for a later one); float64; every semaphore at its count."""
    shape, kw = (1, 70, 200, 1, 1), dict(causal=True)
    c = bwd_api.choose_bwd(192, "bf16", Mask(-1, 0), False, True)
    assert c == ROW
    _with(monkeypatch, replace(ROW, det_poll=False))
    plain = run(shape, 192, kw, True, True, monkeypatch)[0]
    _with(monkeypatch, c)
    alone, sem, got, args = run(shape, 192, kw, True, True, monkeypatch)
    check(got, attention_backward_reference(*args, **kw))
    assert np.array_equal(alone.view(np.uint32), plain.view(np.uint32))
    np.testing.assert_array_equal(sem, adds_per_block(shape, 192, kw, c))


@pytest.mark.long
@pytest.mark.parametrize("shape,kw", [((1, 70, 130, 2, 1), {}),
                                      ((1, 100, 130, 2, 1), dict(window_size=(50, 20)))],
                         ids=["full", "window"])
def test_deterministic_row_matches_float64(monkeypatch, shape, kw):
    """The plan's deterministic row (its causal mask: the run above), GQA, CTAs one at a
    time in launch order: float64, every semaphore at its count."""
    c = bwd_api.choose_bwd(192, "bf16", Mask(*kw.get("window_size", (-1, -1))), False, True)
    assert c == ROW
    _, sem, got, args = run(shape, 192, kw, True, True, monkeypatch)
    check(got, attention_backward_reference(*args, **kw))
    np.testing.assert_array_equal(sem, adds_per_block(shape, 192, kw, c))


@pytest.mark.ptxas
@pytest.mark.long
def test_ptxas_keeps_everything_in_registers():
    """The plan's deterministic row, causal (varlen: test_bwd_h192_wg3.py)."""
    k = build_backward_wg3(ROW, bf16, 192, Mask(-1, 0), scale=0.07, deterministic=True)
    r = resources_or_skip(k)
    assert r.spill_stores == 0 and r.spill_loads == 0 and r.local == 0, k.name
