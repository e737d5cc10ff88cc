"""``BwdConfig.det_desc`` (:mod:`ptxdsl.ops.attention.bwd_det`): the deterministic turns in
descending key-block order, CTAs walking their row blocks up from the diagonal and each
section launching its last key block first; head dim 256's col_split kernel with the dQ
writer warp (``dq_warp``, ``det_pipe``); and ``det_poll`` (the writer's next turn read
early). On the interpreter: dq, dk, dv against float64; no CTA waits for a later one (the
CTAs one at a time in launch order would spin forever); the same bits whether the CTAs
run alone or all at once; every semaphore counts all its adds."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from ptxdsl.core.types import bf16
from ptxdsl.ops.attention import attention_backward_reference, bwd_api
from ptxdsl.ops.attention.bwd import build_backward
from ptxdsl.ops.attention.bwd_config import BwdConfig
from ptxdsl.ops.attention.bwd_det import det_cta
from ptxdsl.ops.attention.config import Mask

from attention_bwd_det_run import adds_per_block, check, check_turns, run

H256 = BwdConfig(stages=1, dq_tma=True, dq_swizzle=True, col_split=True, pds_smem=True)
H256W = replace(H256, dq_warp=True, det_pipe=True)
H128 = BwdConfig(stages=2, dq_tma=True, overlap=1, dq_swizzle=True, dq_split=True,
                 ds_double=True, dq_warp=True, dk_last=True, det_pipe=True)
H64 = BwdConfig(stages=2, dq_tma=True, dq_swizzle=True, block_m=128, overlap=1,
                ds_double=True, dq_warp=True)
H192 = BwdConfig(stages=2, dq_tma=True, dq_swizzle=True, wg3=True, consumer_regs=160,
                 overlap=2, dq_warp=True, det_pipe=True)


def _with(monkeypatch, c):
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *_a, **_k: c)


@pytest.mark.parametrize("b,hk,nblk,g", [(2, 3, 5, 4), (1, 1, 7, 0), (3, 11, 8, 32)])
def test_sections_launch_the_last_key_block_first(b, hk, nblk, g):
    """Every (batch, K/V head, key block) once; a unit's key block ``nb + 1`` launched
    before ``nb``, the same CTAs as the ascending order's, mirrored in the key block."""
    seen = {}
    for cta in range(b * hk * nblk):
        nb, h, bb = det_cta(cta, nblk, hk, b * hk, 4096, 1, 128, g, desc=True)
        assert (nb, h, bb) == (lambda a: (nblk - 1 - a[0], a[1], a[2]))(
            det_cta(cta, nblk, hk, b * hk, 4096, 1, 128, g))
        seen[(bb, h, nb)] = cta
    assert len(seen) == b * hk * nblk
    assert all(cta > seen[(bb, h, nb + 1)] for (bb, h, nb), cta in seen.items()
               if nb + 1 < nblk)


@pytest.mark.long
@pytest.mark.parametrize("det,varlen", [(False, False), (True, True)])
def test_the_default_mode_and_varlen_kernels_are_unchanged(det, varlen):
    """Only the dense layout's deterministic kernel takes the descending order."""
    kw = dict(scale=0.1, deterministic=det, varlen=varlen)
    assert build_backward(replace(H256W, det_desc=True), bf16, 256, Mask(0, 0), **kw) \
        .ptx().replace("_dsc", "") == build_backward(H256W, bf16, 256, Mask(0, 0), **kw).ptx()


DESC = [   # (shape (b, sq, sk, h, hk), head dim, mask, config)
    ((1, 130, 200, 2, 1), 256, dict(causal=True), replace(H256W, det_desc=True)),
    ((2, 100, 190, 2, 1), 256, dict(window_size=(70, 30)), replace(H256, det_desc=True)),
    ((3, 64, 200, 1, 1), 256, dict(causal=True), replace(H256W, det_desc=True, det_units=2)),
    ((2, 100, 150, 2, 1), 256, dict(), replace(H256W, det_desc=True, det_units=1)),
    ((1, 130, 260, 2, 1), 128, dict(causal=True), replace(H128, det_desc=True, det_poll=True)),
    ((1, 130, 257, 1, 1), 64, dict(causal=True), replace(H64, det_desc=True)),
    ((1, 130, 257, 1, 1), 64, dict(), replace(H64, det_pipe=True, det_poll=True)),
    ((1, 70, 250, 1, 1), 192, dict(causal=True), replace(H192, det_desc=True)),
    ((1, 200, 130, 1, 1), 64, dict(causal=True), BwdConfig(stages=2, det_desc=True)),
]


@pytest.mark.long
@pytest.mark.parametrize("shape,d,kw,c", DESC)
def test_descending_turns(shape, d, kw, c, monkeypatch):
    _with(monkeypatch, c)
    check_turns(shape, d, kw, c, monkeypatch)


@pytest.mark.long
@pytest.mark.parametrize("shape,kw,extra", [
    ((1, 130, 200, 1, 1), dict(causal=True), dict()),
    ((3, 64, 256, 2, 1), dict(), dict(det_units=2)),
    ((1, 130, 200, 2, 1), dict(causal=True), dict(det_poll=True)),
])
def test_head_dim_256_writer_warp_adds_in_the_plain_order(shape, kw, extra, monkeypatch):
    """col_split with the writer warp (and its pipelined turns, and det_poll's early
    reads): the consumers' own turns' bits."""
    _with(monkeypatch, H256)
    plain = run(shape, 256, kw, True, True, monkeypatch)[0]
    _with(monkeypatch, replace(H256W, **extra))
    alone, sem, got, args = run(shape, 256, kw, True, True, monkeypatch)
    check(got, attention_backward_reference(*args, **kw))
    assert np.array_equal(alone.view(np.uint32), plain.view(np.uint32))
    np.testing.assert_array_equal(sem, adds_per_block(shape, 256, kw, H256W))
