"""``BwdConfig.det_desc`` (:mod:`ptxdsl.ops.attention.bwd_det`): the deterministic turns in
descending key-block order, CTAs walking their row blocks up from the diagonal and each
section launching its last key block first: head dim 256's deterministic row (col_split
with the dQ writer warp, ``dq_warp``, ``det_pipe``) and the consumers' own turns. On the
interpreter: dq, dk, dv against float64; no CTA waits for a later one (the CTAs one at a
time in launch order would spin forever); the same bits whether the CTAs run alone or all
at once; every semaphore counts all its adds. (``det_poll``, the writer's next turn read
early: test_bwd_det64_ahead.py.)"""
from __future__ import annotations

from dataclasses import replace

import pytest

from ptxdsl.core.types import bf16
from ptxdsl.ops.attention import bwd_api
from ptxdsl.ops.attention.bwd import build_backward
from ptxdsl.ops.attention.bwd_config import BwdConfig
from ptxdsl.ops.attention.bwd_det import det_cta
from ptxdsl.ops.attention.config import Mask

from attention_bwd_det_run import check_turns

H256 = BwdConfig(stages=1, dq_tma=True, dq_swizzle=True, col_split=True, pds_smem=True)
H256W = replace(H256, dq_warp=True, det_pipe=True)


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
    # head dim 256's deterministic row (bwd_plans.json): the writer warp, det_pipe
    ((1, 70, 130, 1, 1), 256, dict(causal=True), replace(H256W, det_desc=True)),
    # the consumers' own turns descending (a lab variant)
    ((1, 200, 130, 1, 1), 64, dict(causal=True), BwdConfig(stages=2, det_desc=True)),
]


@pytest.mark.long
@pytest.mark.parametrize("shape,d,kw,c", DESC, ids=["256-row-causal", "64-plain-causal"])
def test_descending_turns(shape, d, kw, c, monkeypatch):
    """(head dims 64's and 128's rows with det_desc: test_bwd_det64_step.py, test_bwd_det.py;
    det_poll: test_bwd_det64_ahead.py)"""
    _with(monkeypatch, c)
    check_turns(shape, d, kw, c, monkeypatch)
