"""``BwdConfig.det_lag`` (:func:`ptxdsl.ops.attention.bwd_detpipe.det_step`): the pipelined
dQ writer passes a row block's turn one block late, after the next block's adds are issued
and once its own have landed. The same adds in the same order of key blocks, so on the CPU
interpreter the f32 dQ accumulator is bitwise the one without it, CTA by CTA in launch
order (a CTA's last turn passes at its end: none waits for a later one) and all at once;
every semaphore counts all its adds; dq, dk, dv against float64. Head dim 64's 128-row
steps (one word a block), 128's split columns and 192's three warpgroups (wg3)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from ptxdsl.ops.attention import attention_backward_reference, bwd_api
from ptxdsl.ops.attention.bwd_config import choose_bwd
from ptxdsl.ops.attention.config import Mask

from attention_bwd_det_run import adds_per_block, check, run


def _with(monkeypatch, c):
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *_a, **_k: c)


def test_det_lag_needs_the_pipelined_writer():
    row = choose_bwd(64, "bf16", Mask(), False, True)
    assert "_dlg" in replace(row, det_lag=True).tag
    with pytest.raises(ValueError, match="det_lag"):
        replace(row, det_pipe=False, det_poll=False, det_lag=True)
    with pytest.raises(ValueError, match="dq_swap"):
        replace(choose_bwd(128, "bf16", Mask(), False, True), det_lag=True)


CASES = [
    # head dim 64: two 128-row steps, the second's upper half past the padded rows
    pytest.param((1, 140, 200, 2, 1), 64, dict(causal=True), marks=pytest.mark.long),
    pytest.param((1, 70, 260, 2, 1), 64, dict(window_size=(70, 0)), marks=pytest.mark.long),
    pytest.param((1, 100, 200, 2, 1), 128, dict(causal=True), marks=pytest.mark.long),
    pytest.param((1, 100, 200, 1, 1), 192, dict(), marks=pytest.mark.long),
]


@pytest.mark.parametrize("shape,d,kw", CASES)
def test_late_turns_keep_the_bits(shape, d, kw, monkeypatch):
    left, right = kw.get("window_size", (-1, -1))
    row = choose_bwd(d, "bf16", Mask(left, 0 if kw.get("causal") else right), False, True)
    _with(monkeypatch, row)
    plain = run(shape, d, kw, True, True, monkeypatch)[0]
    _with(monkeypatch, replace(row, det_lag=True))
    alone, sem, got, args = run(shape, d, kw, True, True, monkeypatch)
    check(got, attention_backward_reference(*args, **kw))
    assert np.array_equal(alone.view(np.uint32), plain.view(np.uint32))
    np.testing.assert_array_equal(sem, adds_per_block(shape, d, kw, row))
    together = run(shape, d, kw, True, False, monkeypatch)[0]
    assert np.array_equal(together.view(np.uint32), plain.view(np.uint32))
