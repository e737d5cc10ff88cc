"""pyptx's Hopper GEMM examples run on ptxdsl with only their imports renamed: they trace,
print the PTX a Hopper GEMM needs and assemble with ptxas.

The examples are read at test time (never copied here) from the pyptx mirror, an
installed pyptx or ``$PTXDSL_PYPTX_EXAMPLES`` (see ``bench/pyptx_examples.py``); without
any of them these tests skip and say where they looked. The warp-specialised kernel in
``tests/helpers/hopper_kernels.py`` exercises the same surface without them
(``tests/dsl/test_hopper_helpers.py``); tests/gpu/test_hopper_gpu.py runs both examples.
"""
from __future__ import annotations

import re

import os
import sys

import pytest

from paths import ROOT
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from bench import pyptx_examples  # noqa: E402
from ptxdsl import toolchain  # noqa: E402


def _load(name):
    try:
        return pyptx_examples.load(name)
    except pyptx_examples.Unavailable as e:
        pytest.skip(str(e))


def test_only_imports_are_renamed():
    try:
        text, _ = pyptx_examples.source("gemm_highperf_hopper")
    except pyptx_examples.Unavailable as e:
        pytest.skip(str(e))
    new = pyptx_examples.renamed(text)
    changed = [(a, b) for a, b in zip(text.splitlines(), new.splitlines()) if a != b]
    assert len(text.splitlines()) == len(new.splitlines())
    assert changed and all("pyptx" in a and "ptxdsl" in b and "import" in a
                           for a, b in changed)
    # pyptx's names become ptxdsl.pyptx's (from pyptx import ...) or ptxdsl's own
    assert not re.search(r"(?<!ptxdsl\.)\bpyptx\b", "".join(b for _, b in changed))


def test_gemm_highperf_hopper_traces_and_assembles():
    m = _load("gemm_highperf_hopper")
    k = m.gemm_warp_specialized
    text = k.ptx()
    for needle in (".target sm_90a", ".version 8.7", ".extern .shared .align 128 .b8 smem[];",
                   ".param .align 64 .b8 A_tmap[128]", ".param .align 64 .b8 B_tmap[128]",
                   ".param .align 64 .b8 C_tmap[128]", ".maxntid 384, 1, 1", ".explicitcluster",
                   ".reqnctapercluster 2, 1, 1", "%clusterid.x",
                   "setmaxnreg.inc.sync.aligned.u32 240;", "setmaxnreg.dec.sync.aligned.u32 24;",
                   "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16",
                   "cp.async.bulk.tensor.3d.shared::cluster.global.tile."
                   "mbarrier::complete_tx::bytes.multicast::cluster",
                   "cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group",
                   "stmatrix.sync.aligned.m8n8.x4.trans.shared::cta.b16",
                   "mbarrier.arrive.shared::cluster.b64 _,", "consumer_tile_loop:",
                   "producer_chunk_loop:", "consumer_exit:", "producer_exit:"):
        assert needle in text, needle
    assert k.cluster == (2, 1, 1) and k.dynamic_shared == m.SMEM_TOTAL
    if toolchain.find_ptxas() is None:
        pytest.skip("no ptxas to assemble with")
    res = k.resources()
    assert res.spill_stores == 0 and res.registers <= 168


@pytest.mark.parametrize("G, M, N, K", [(1, 64, 8, 32), (4, 64, 16, 32), (8, 128, 16, 64),
                                        (4, 256, 32, 128), (8, 512, 64, 512)])
def test_grouped_gemm_traces_and_assembles(G, M, N, K):
    m = _load("grouped_gemm")
    k = m.build_grouped_gemm(G, M, N, K)
    text = k.ptx()
    assert "wgmma.mma_async.sync.aligned.m64n" in text
    assert "cp.async.bulk.tensor.2d.shared::cluster.global" in text
    assert ".param .align 64 .b8 A_tmap[128]" in text
    if toolchain.find_ptxas() is not None:
        k.check()
