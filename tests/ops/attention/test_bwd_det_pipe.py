"""``BwdConfig.det_pipe`` (:mod:`ptxdsl.ops.attention.bwd_detpipe`): the dQ writer warp's
deterministic turns pipelined, and ``det_units`` (sections of that many (batch, K/V head)
units, :func:`ptxdsl.ops.attention.bwd_det.det_cta`). The same adds in the same order of
key blocks as the plain writer, so dQ's f32 accumulator has the plain writer's bits,
whether the CTAs run one at a time in launch order (a CTA waiting for a later one would
spin forever, which the interpreter reports) or all at once; every semaphore counts all
its adds; dq, dk, dv against float64."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from ptxdsl.core.types import bf16
from ptxdsl.ops.attention import attention_backward_reference, bwd_api
from ptxdsl.ops.attention.bwd import build_backward
from ptxdsl.ops.attention.bwd_wg3 import build_backward_wg3
from ptxdsl.ops.attention.bwd_config import BwdConfig, choose_bwd
from ptxdsl.ops.attention.bwd_det import det_cta
from ptxdsl.ops.attention.config import Mask

from attention_bwd_det_run import adds_per_block, check, run

H128 = BwdConfig(stages=2, dq_tma=True, overlap=1, dq_swizzle=True, dq_split=True,
                 ds_double=True, dq_warp=True, dk_last=True)
H64 = BwdConfig(stages=2, dq_tma=True, dq_swizzle=True, block_m=128, overlap=1,
                ds_double=True, dq_warp=True)
H192 = BwdConfig(stages=2, dq_tma=True, dq_swizzle=True, wg3=True, consumer_regs=160,
                 overlap=2, dq_warp=True)


def _with(monkeypatch, c):
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *_a, **_k: c)


def test_emits_one_landing_and_one_pass_a_block():
    """The writer's loop: the turn polled before the stages are taken, both warpgroups'
    adds in flight together, one wait for them to land and one release of two turns."""
    c = replace(H128, det_pipe=True)
    text = build_backward(c, bf16, 128, Mask(), scale=0.1, deterministic=True).ptx()
    # (the plain writer: a release per warpgroup, each after its own add's landing)
    assert text.count("red.release.gpu.global.add.u32") == 1
    assert text.count("cp.async.bulk.wait_group 0") == 2         # the step's, the last
    body = text[text.index("bar.arrive"):]          # (the writer's, after its first arrives)
    spin = body.index("ld.acquire.gpu")
    assert spin < body.index("bar.sync 4, 160") < body.index("bar.sync 5, 160") < \
        body.index("cp.async.bulk.wait_group.read") < body.index("red.release")
    with pytest.raises(ValueError, match="det_pipe"):
        BwdConfig(stages=2, dq_tma=True, det_pipe=True)


@pytest.mark.long
@pytest.mark.parametrize("c,d", [(H128, 128), (H64, 64), (H192, 192)])
def test_the_default_mode_kernel_is_the_plain_one(c, d):
    build = build_backward_wg3 if c.wg3 else build_backward
    assert build(replace(c, det_pipe=True), bf16, d, Mask(0, 0), scale=0.1).ptx() \
        .replace("_dtp", "") == build(c, bf16, d, Mask(0, 0), scale=0.1).ptx()


@pytest.mark.parametrize("b,hk,nblk,g", [(2, 3, 5, 4), (1, 16, 32, 16), (3, 11, 8, 32),
                                         (1, 1, 7, 2)])
def test_det_units_sections_keep_launch_order(b, hk, nblk, g):
    """Sections of ``g`` units (the last takes the rest): every (batch, K/V head, key
    block) once, a unit's key blocks in launch order, ``g`` CTAs apart inside a section."""
    seen = {}
    for cta in range(b * hk * nblk):
        nb, h, bb = det_cta(cta, nblk, hk, b * hk, 4096, 1, 128, g)
        assert (bb, h, nb) not in seen
        seen[(bb, h, nb)] = cta
    assert len(seen) == b * hk * nblk
    for (bb, h, nb), cta in seen.items():
        if nb:
            gap = cta - seen[(bb, h, nb - 1)]
            assert gap == min(g, b * hk - (bb * hk + h) // g * g)


CASES = [   # (head dim 64's and 192's: the rows in test_bwd_det64_*.py, test_bwd_det192.py)
    pytest.param((1, 70, 200, 1, 1), 128, dict(causal=True), H128, marks=pytest.mark.long),
    # 3 units in sections of 2 and 1
    pytest.param((3, 64, 256, 1, 1), 128, dict(), replace(H128, det_units=2),
                 marks=pytest.mark.long),
    # head dim 64's deterministic row (det_desc, dk_last, the fixed-cost options) over two
    # 128-row steps with the plain writer (a word a 64-row half, a turn a key block each)
    # against det_pipe's (the first half's word for the block)
    pytest.param((1, 140, 200, 2, 1), 64, dict(causal=True),
                 replace(choose_bwd(64, "bf16", Mask(), False, True), det_pipe=False,
                         det_poll=False), marks=pytest.mark.long),
]


@pytest.mark.parametrize("shape,d,kw,c", CASES)
def test_pipelined_turns_add_in_the_plain_order(shape, d, kw, c, monkeypatch):
    _with(monkeypatch, c)
    plain = run(shape, d, kw, True, True, monkeypatch)[0]
    _with(monkeypatch, replace(c, det_pipe=True))
    alone, sem, got, args = run(shape, d, kw, True, True, monkeypatch)
    check(got, attention_backward_reference(*args, **kw))
    assert np.array_equal(alone.view(np.uint32), plain.view(np.uint32))
    np.testing.assert_array_equal(sem, adds_per_block(shape, d, kw, replace(c, det_pipe=True)))


@pytest.mark.long
def test_pipelined_bits_do_not_depend_on_the_interleaving(monkeypatch):
    shape, d, kw, c = CASES[0].values
    _with(monkeypatch, replace(c, det_pipe=True))
    alone = run(shape, d, kw, True, True, monkeypatch)[0]
    together = run(shape, d, kw, True, False, monkeypatch)[0]
    assert np.array_equal(alone.view(np.uint32), together.view(np.uint32))
