"""Head dim 64's deterministic row (``bwd_plans.json`` row 2: the writer warp's pipelined
turns, one semaphore word a 128-row block, ``det_desc``, ``det_poll``, the fixed-cost
options) with the default row's step, as ``lab
--set pair`` times it: ``dk_last`` (dK issued behind dQ, dQ staged under it; with
``s_ahead`` 2 too: test_bwd_det64_ahead.py). On the CPU interpreter, for each mask: float64
and every row block's semaphore at its count of adds, with the CTAs one at a time in launch
order (a CTA never waits for a later one); causal: the f32 dQ accumulator bitwise the same
all together; ptxas -v without spills."""
from __future__ import annotations

import numpy as np
import pytest

from ptxdsl.core.types import bf16
from ptxdsl.ops.attention import attention_backward_reference, bwd_api
from ptxdsl.ops.attention.bwd import build_backward
from ptxdsl.ops.attention.bwd_config import choose_bwd
from ptxdsl.ops.attention.config import Mask
from ptxas_resources import resources_or_skip  # noqa: E402

pytest.importorskip("ml_dtypes")
from attention_bwd_det_run import adds_per_block, check, check_turns, run  # noqa: E402

ROW = choose_bwd(64, "bf16", Mask(), False, True)         # the deterministic row


@pytest.mark.long
@pytest.mark.parametrize("shape,kw", [((1, 70, 200, 1, 1), dict(causal=True)),
                                      ((1, 140, 200, 2, 1), dict(causal=True)),
                                      ((1, 70, 200, 1, 1), {}),
                                      ((1, 60, 260, 2, 1), dict(window_size=(70, 0)))],
                         ids=["causal", "causal-two-steps", "full", "window-gqa"])
def test_turns_and_bits(shape, kw, monkeypatch):
    """The row for each mask it serves, CTAs one at a time in launch order (the window: one
    64-row half, GQA, a first key block without a step; causal over two 128-row steps: key
    blocks that reach only the first step's rows count on its first half's word, which
    serves the step); causal also all at once (the same bits)."""
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *_a, **_k: ROW)
    if kw.get("causal"):
        check_turns(shape, 64, kw, ROW, monkeypatch)
        return
    _, sem, got, args = run(shape, 64, kw, True, True, monkeypatch)
    check(got, attention_backward_reference(*args, **kw))
    np.testing.assert_array_equal(sem, adds_per_block(shape, 64, kw, ROW))


@pytest.mark.ptxas
@pytest.mark.long
@pytest.mark.parametrize("mask", [Mask(), Mask(-1, 0)], ids=["full", "causal"])
def test_ptxas_keeps_everything_in_registers(mask):
    """No spills and no wgmma serialization notice."""
    k = build_backward(ROW, bf16, 64, mask, scale=0.1, deterministic=True)
    r = resources_or_skip(k)
    assert r.spill_stores == 0 and r.spill_loads == 0 and r.local == 0, k.name
    assert "Performance Loss" not in k.check().log, k.name
