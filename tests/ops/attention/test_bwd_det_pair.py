"""``BwdConfig.det_pair`` (:mod:`ptxdsl.ops.attention.bwd_detpair`): clusters of two key
blocks, the odd one's dQ added into the even one's registers through ``st.async``, only the
even one taking turns. What it emits and refuses; head dim 64's and 128's deterministic rows
with it on the CPU interpreter: gradients against float64, each semaphore at its count of
leaders, dq_acc bitwise the same CTA by CTA or all at once; an odd count of key blocks (the
last partner past SK), GQA, causal."""
from __future__ import annotations

from dataclasses import replace

import pytest

from ptxdsl.core.types import bf16
from ptxdsl.ops.attention import bwd_api
from ptxdsl.ops.attention.bwd import build_backward
from ptxdsl.ops.attention.bwd_config import BwdConfig, SMEM_PER_CTA, choose_bwd
from ptxdsl.ops.attention.config import Mask
from attention_bwd_det_run import check_turns

pytest.importorskip("ml_dtypes")

DET64 = replace(choose_bwd(64, "bf16", Mask(), False, True), ds_double=False, det_pair=True)
DET128 = replace(choose_bwd(128, "bf16", Mask(-1, 0), False, True), det_pair=True)


def test_emits_clusters_and_refuses():
    k = build_backward(DET64, bf16, 64, Mask(), scale=0.125, deterministic=True)
    text = k.ptx()
    assert k.cluster == (2, 1, 1) and "_dpr" in k.name
    for op in ("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32",
               "mapa.shared::cluster.u32", "barrier.cluster.arrive"):
        assert op in text, op
    assert DET64.smem_bytes(64) <= SMEM_PER_CTA and DET128.smem_bytes(128) <= SMEM_PER_CTA
    with pytest.raises(ValueError, match="det_pair.*default mode"):
        build_backward(DET64, bf16, 64, Mask(), scale=0.125)
    with pytest.raises(ValueError, match="left window limit"):
        build_backward(DET64, bf16, 64, Mask(100, 20), scale=0.125, deterministic=True)
    with pytest.raises(ValueError, match="det_pair.*needs dq_warp"):
        BwdConfig(stages=2, dq_tma=True, dq_swizzle=True, block_m=128, det_pair=True)


@pytest.mark.long
@pytest.mark.parametrize("d,shape,kw,c", [
    (64, (2, 100, 300, 2, 1), {}, DET64),
    (64, (1, 200, 330, 2, 1), dict(causal=True), DET64),
    (128, (1, 150, 300, 2, 1), dict(causal=True), DET128)], ids=["64", "64-causal", "128"])
def test_pairs_take_the_turns(monkeypatch, d, shape, kw, c):
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *_a, **_k: c)
    check_turns(shape, d, kw, c, monkeypatch)
