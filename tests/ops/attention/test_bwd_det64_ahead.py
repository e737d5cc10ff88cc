"""Head dim 64's deterministic backward on the default row's step: ``block_m`` 128 with
``dk_last`` and ``s_ahead`` 2 (the next Sᵀ queued behind dQ's stage, :mod:`ptxdsl.ops.
attention.bwd_ahead`), the writer warp's plain or pipelined turns (``det_pipe``) and
``det_desc``, with the fixed-cost options (all of them together: one case, the lab options
det_pipe and det_poll at head dim 64). On the interpreter: dq, dk, dv against float64 (a
ragged window, GQA), the same bits with the CTAs one at a time in launch order (no CTA
waits for a later one) as all at once, every semaphore counting all its adds, and a third
run's bits equal; ``ahead_k`` in the default mode. ptxas -v sm_90a (causal): no spills,
and ptxas's notices (C75xx) those of the default mode's kernel: one injected
``warpgroup.arrive`` (C7519) where the first step's Sᵀ, issued before the loop under a
branch, meets the loop; none with ``ahead_k`` (that Sᵀ without the branch), in either
mode."""
from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest

from ptxdsl.core.types import bf16
from ptxdsl.ops import attention_backward
from ptxdsl.ops.attention import attention_backward_reference, attention_reference, bwd_api
from ptxdsl.ops.attention.bwd import build_backward
from ptxdsl.ops.attention.bwd_config import BwdConfig
from ptxdsl.ops.attention.config import Mask
from ptxas_resources import resources_or_skip

from attention_bwd_det_run import BF16, check, run

FIXED = dict(prep_wide=True, dkv_tma=True, dq_exit_read=True)
STEP = BwdConfig(stages=2, dq_tma=True, dq_swizzle=True, block_m=128, overlap=1,
                 ds_double=True, dq_warp=True, dk_last=True, s_ahead=2, **FIXED)
PIPE = replace(STEP, det_desc=True, det_pipe=True)


def _adds(shape, kw):
    """Each 64-row half's semaphore at the end (det_pipe: the first half's word serves its
    128-row block): one per key block whose range takes any row of the block, on the first
    half's word; the second half's word none."""
    b, sq, sk, h, _ = shape
    left, right = kw.get("window_size", (-1, -1))
    right = 0 if kw.get("causal") else right
    off, halves = sk - sq, -(-sq // 64)
    want = np.zeros((b, h, halves), np.uint32)
    for mb in range(-(-sq // 128)):
        rows = np.arange(mb * 128, mb * 128 + 128)
        for nb in range(-(-sk // 128)):
            keys = np.arange(nb * 128, nb * 128 + 128)
            lo = rows[:, None] + off - (left if left >= 0 else 1 << 30)
            hi = rows[:, None] + off + (right if right >= 0 else 1 << 30)
            if ((keys[None] >= lo) & (keys[None] <= hi)).any():
                want[:, :, 2 * mb] += 1
    return want


@pytest.mark.long
def test_matches_float64_in_any_launch_order(monkeypatch):
    """The step with det_desc, det_pipe and det_poll (lab options at head dim 64: the
    deterministic row's own runs are test_bwd_det64_step.py's), a window whose first key
    block has no step, GQA."""
    shape, kw, c = (1, 100, 300, 2, 1), dict(window_size=(70, 0)), replace(PIPE, det_poll=True)
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *_a, **_k: c)
    alone, sem, got, args = run(shape, 64, kw, True, True, monkeypatch)
    check(got, attention_backward_reference(*args, **kw))
    np.testing.assert_array_equal(sem, _adds(shape, kw))
    together, _, again, _ = run(shape, 64, kw, True, False, monkeypatch)
    assert np.array_equal(alone.view(np.uint32), together.view(np.uint32))
    for a, b in zip(got, again):
        assert np.array_equal(np.asarray(a).view(np.uint16), np.asarray(b).view(np.uint16))


def _notices(k):
    return sorted(set(re.findall(r"\(C75\d\d\)", k.check().log)))


@pytest.mark.ptxas
@pytest.mark.long
def test_ptxas_as_the_default_mode():
    c, mask = PIPE, Mask(-1, 0)
    det = build_backward(c, bf16, 64, mask, scale=0.07, deterministic=True)
    r = resources_or_skip(det)
    assert r.spill_stores == 0 and r.spill_loads == 0 and r.local == 0, det.name
    default = build_backward(STEP, bf16, 64, mask, scale=0.07)
    assert _notices(det) == _notices(default) == ["(C7519)"], det.name
    # ahead_k: none, in either mode
    for k in (build_backward(replace(c, ahead_k=True), bf16, 64, mask, scale=0.07,
                             deterministic=True),
              build_backward(replace(STEP, ahead_k=True), bf16, 64, mask, scale=0.07)):
        r = resources_or_skip(k)
        assert r.spill_stores == 0 and r.spill_loads == 0 and r.local == 0, k.name
        assert _notices(k) == [], k.name


@pytest.mark.long
def test_ahead_k_default_mode_matches_float64(monkeypatch):
    """The default mode with ahead_k (the API runs it on the interpreter): a window whose
    first key block has no step (its CTA's Sᵀ from K's tile, discarded), GQA."""
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *_a, **_k: replace(STEP, ahead_k=True))
    rng = np.random.default_rng(5)
    q, k, v, do = (rng.standard_normal((1, s, h, 64)).astype(BF16)
                   for s, h in ((100, 2), (300, 1), (300, 1), (100, 2)))
    kw = dict(window_size=(70, 0))
    out, lse = attention_reference(q, k, v, **kw)
    got = attention_backward(do, q, k, v, out.astype(BF16), lse.astype(np.float32), **kw)
    check(got, attention_backward_reference(do, q, k, v, **kw))


def test_ahead_k_needs_s_ahead():
    with pytest.raises(ValueError, match="ahead_k"):
        replace(STEP, s_ahead=0, ahead_k=True)
