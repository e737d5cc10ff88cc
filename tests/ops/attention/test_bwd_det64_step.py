"""Head dim 64's deterministic row (``bwd_plans.json`` row 1: the writer warp's turns,
``det_desc``, the fixed-cost options) with the default row's step, as ``lab
--set pair`` times it: ``dk_last`` (dK issued behind dQ, dQ staged under it), and with
``s_ahead`` 2. On the CPU interpreter: float64, every row block's semaphore at its count of
adds, and the f32 dQ accumulator bitwise the same with the CTAs one at a time in launch
order (a CTA never waits for a later one) or all together; ptxas -v without spills."""
from __future__ import annotations

from dataclasses import replace

import pytest

from ptxdsl.core.types import bf16
from ptxdsl.ops.attention import bwd_api
from ptxdsl.ops.attention.bwd import build_backward
from ptxdsl.ops.attention.bwd_config import choose_bwd
from ptxdsl.ops.attention.config import Mask
from ptxas_resources import resources_or_skip  # noqa: E402

pytest.importorskip("ml_dtypes")
from attention_bwd_det_run import check_turns  # noqa: E402

ROW = choose_bwd(64, "bf16", Mask(), False, True)         # the deterministic row
STEPS = {"dkl": dict(dk_last=True), "dkl-sa2": dict(dk_last=True, s_ahead=2)}


@pytest.mark.long
@pytest.mark.parametrize("step", list(STEPS))
@pytest.mark.parametrize("shape,kw", [((1, 130, 257, 1, 1), dict(causal=True)),
                                      ((1, 130, 257, 1, 1), {})], ids=["causal", "full"])
def test_turns_and_bits(shape, kw, step, monkeypatch):
    c = replace(ROW, **STEPS[step])
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *_a, **_k: c)
    check_turns(shape, 64, kw, c, monkeypatch)


@pytest.mark.ptxas
@pytest.mark.long
@pytest.mark.parametrize("step", list(STEPS))
@pytest.mark.parametrize("mask", [Mask(), Mask(-1, 0)], ids=["full", "causal"])
def test_ptxas_keeps_everything_in_registers(step, mask):
    """No spills and no wgmma serialization notice (s_ahead 2's C7519, the first Sᵀ under
    a branch, is the default row's own)."""
    k = build_backward(replace(ROW, **STEPS[step]), bf16, 64, mask, scale=0.1,
                       deterministic=True)
    r = resources_or_skip(k)
    assert r.spill_stores == 0 and r.spill_loads == 0 and r.local == 0, k.name
    assert "Performance Loss" not in k.check().log, k.name
