"""pyptx's public PTX corpus (tests/data/pyptx_corpus, Apache-2.0): every file parses
(lines the instruction table cannot check kept raw), canonical emission is a fixed point,
and where ptxas accepts the original it accepts the canonical text with the same
``ptxas -v`` resources (a few files by default, one per source and feature family with
``-m long``)."""
from __future__ import annotations

import glob
import os
import re

import pytest

import ptxdsl
from ptxdsl import toolchain
from ptxdsl.core.errors import PtxdslError, ToolchainError

from paths import ROOT

CORPUS = os.path.join(ROOT, "tests", "data", "pyptx_corpus")
FILES = sorted(glob.glob(os.path.join(CORPUS, "**", "*.ptx"), recursive=True))
# Files every instruction of which the table checks (no keep_unknown needed). Of the rest,
# 131 are LLVM test fragments that read parameters their entry does not declare (ptxas
# refuses them too); the others use forms the table lacks (tcgen05.ld/st/cp/shift,
# mov.b128, im2col tensor copies, %clusterid.w) or PTX ptxas refuses.
STRICT_FLOOR = 72


def _rel(path):
    return os.path.relpath(path, CORPUS)


def _read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def test_the_corpus_is_here_with_its_licence():
    assert len(FILES) == 219
    assert "Apache License" in _read(os.path.join(CORPUS, "LICENSE"))


@pytest.mark.parametrize("path", FILES, ids=_rel)
def test_parses_and_emits_a_fixed_point(path):
    once = ptxdsl.parse_ptx(_read(path), filename=path, keep_unknown=True).emit()
    assert ptxdsl.parse_ptx(once, keep_unknown=True).emit() == once


def test_strict_parse_checks_every_instruction_or_names_the_line():
    ok = 0
    for path in FILES:
        try:
            ptxdsl.parse_ptx(_read(path), filename=path)
            ok += 1
        except PtxdslError as e:
            assert re.search(re.escape(path) + r":\d+", str(e)), str(e)
    assert ok >= STRICT_FLOOR


def _have_ptxas():
    try:
        return toolchain.find_ptxas() is not None
    except ToolchainError:
        return False


def _same_resources(path):
    text = _read(path)
    mod = ptxdsl.parse_ptx(text, filename=path, keep_unknown=True)
    try:
        original = toolchain.assemble(text, mod.arch)
    except PtxdslError:
        return None   # ptxas 13 refuses the original (old target, undeclared parameters)
    canonical = toolchain.assemble(mod.emit(), mod.arch)
    assert canonical.resources == original.resources, _rel(path)
    return True


@pytest.mark.ptxas
@pytest.mark.skipif(not _have_ptxas(), reason="no ptxas")
@pytest.mark.parametrize("name", ["external/triton/matmul_wgmma_v32_sm90a.ptx",
                                  "external/fastcu_k12_sm90a.ptx",
                                  "external/matmul_wmma_v2.ptx", "function_call.ptx"])
def test_canonical_text_has_the_originals_ptxas_resources(name):
    assert _same_resources(os.path.join(CORPUS, name))


# The long sweep: one file that ptxas 13 assembles per source and feature family beside the
# default test's four (Triton's wgmma matmul, fastcu, the wmma matmuls, function_call): 66
# of the 219 assemble, most of them LLVM one-intrinsic fragments of a few families (0.05
# CPU-s each) and near-copies (wmma v1-v10, Triton's tma v33-v35), so one of each
# exercises what the others do. less_slow_sm90a.ptx alone takes ~15 CPU-s of ptxas: its
# family is less_slow_sm80.ptx, its Hopper forms Triton's warp-specialized attention's.
SWEEP = [
    # hand-written, one feature each
    "branches.ptx", "mbarrier_full.ptx", "minimal.ptx", "predicates.ptx", "shared_memory.ptx",
    "vector_add.ptx",
    # external sources
    "external/less_slow_sm80.ptx", "external/ptoxide_gemm.ptx", "external/matmul_wmma_v10.ptx",
    "external/triton/fa_ws_pingpong_sm90a.ptx", "external/triton/matmul_tma_v33_sm90a.ptx",
    "external/triton/matmul_tma_sm120a.ptx",
    # LLVM NVPTX tests: one per test file (feature family)
    "external/llvm/cluster-dim__kernel_func_clusterxyz.ptx",
    "external/llvm/fence-proxy-sm90__test_nvvm_fence_proxy_async_shared_cluster.ptx",
    "external/llvm/intrinsics-sm90__test_barrier_cluster_aligned.ptx",
    "external/llvm/mbarrier__barrierarrivedropshared.ptx",
    "external/llvm/setmaxnreg__test_set_maxn_reg.ptx",
    "external/llvm/wgmma-sm90a-fence__test_wgmma_wait_group_sync_aligned.ptx",
]


@pytest.mark.long
@pytest.mark.ptxas
@pytest.mark.skipif(not _have_ptxas(), reason="no ptxas")
def test_every_family_keeps_its_ptxas_resources(request):
    """:data:`SWEEP`, one assemblable file per source and feature family: ptxas accepts
    the original and the canonical text with the same resources."""
    if "long" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("sweep: run with -m long")
    for name in SWEEP:
        assert _same_resources(os.path.join(CORPUS, name)), name
