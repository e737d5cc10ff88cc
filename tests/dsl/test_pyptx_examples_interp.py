"""pyptx's experimental flash-attention examples and its warp-specialised Hopper GEMM on
ptxdsl, imports renamed: they trace, verify and assemble, and the interpreter runs them.

As published they have real synchronisation bugs, which the interpreter reports at their
lines: each flash-attention kernel stores P to shared memory from registers and hands it
to ``wgmma`` (the async proxy) with no ``fence.proxy.async`` in between; the GEMM's
consumers store C with ``stmatrix`` and TMA-store it with no fence either, and its idle
clusters' consumers arrive on a barrier in a CTA of their cluster that may have exited.
With those fixed (``patch=`` below: the fence, and a cluster barrier before each exit)
the outputs match numpy. The examples are read from the pyptx mirror or an installed
pyptx (``bench/pyptx_examples.py``), never copied here; without them these tests skip.
"""
from __future__ import annotations

import math
import sys

import numpy as np
import pytest

from paths import ROOT
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from bench import pyptx_examples  # noqa: E402
from ptxdsl import toolchain  # noqa: E402
from ptxdsl.core.errors import InterpreterError  # noqa: E402
from pyptx_fixes import fenced, gemm_fixed  # noqa: E402

ml_dtypes = pytest.importorskip("ml_dtypes")
BF16 = ml_dtypes.bfloat16
FA = {"flash_attention_hopper": lambda m: m.build_flash_attention_hopper(128, 128, 64),
      "flash_attention_parallel": lambda m: m.build_flash_attention_parallel(128, 128),
      "flash_attention_wgmma_kloop": lambda m: m.build_flash_attention_kloop(128)}


def _load(name, arch_dir="hopper/experimental", patch=None):
    try:
        return pyptx_examples.load(name, arch_dir, patch=patch)
    except pyptx_examples.Unavailable as e:
        pytest.skip(str(e))


def _attention(k):
    q_spec, kt_spec, _ = k.in_specs
    (m, hd), n = q_spec.dims, kt_spec.dims[1]
    rng = np.random.default_rng(0)
    q, kk, v = (rng.standard_normal(s).astype(BF16) for s in ((m, hd), (n, hd), (n, hd)))
    s = q.astype(np.float32) @ kk.astype(np.float32).T / math.sqrt(hd)
    p = np.exp(s - s.max(1, keepdims=True))
    ref = (p / p.sum(1, keepdims=True)) @ v.astype(np.float32)
    return (q, np.ascontiguousarray(kk.T), v), ref


@pytest.mark.parametrize("name", [pytest.param("flash_attention_hopper", marks=pytest.mark.long),
                                  "flash_attention_parallel", "flash_attention_wgmma_kloop"])
def test_flash_attention_traces_and_assembles(name):
    k = FA[name](_load(name))
    assert "wgmma.mma_async.sync.aligned" in k.ptx()
    if toolchain.find_ptxas():
        k.check()


def test_flash_attention_missing_fence_is_reported_at_its_line():
    m = _load("flash_attention_parallel")
    k = FA["flash_attention_parallel"](m)
    args, _ = _attention(k)
    with pytest.raises(InterpreterError, match=r"flash_attention_parallel\.py:\d+: wgmma\.mma_"
                                               r"async.*no fence\.proxy\.async lies between"):
        k.interpret(*args)


@pytest.mark.long
@pytest.mark.parametrize("name", sorted(FA))
def test_flash_attention_fenced_matches_numpy(name):
    k = FA[name](_load(name, patch=fenced))
    args, ref = _attention(k)
    np.testing.assert_allclose(np.asarray(k.interpret(*args), np.float32), ref, atol=5e-3)


@pytest.mark.long
def test_gemm_highperf_hopper_bugs_are_reported_and_the_fixed_kernel_matches_numpy():
    orig = _load("gemm_highperf_hopper", "hopper")
    size, kdim = 256, 256
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal((size, kdim)).astype(BF16) for _ in range(2))
    sched = orig.create_hilbert_schedule(size // (orig.BM * orig.CLUSTER_M),
                                         size // orig.BN).astype(np.uint32)
    # the padded C store reads its 8 pad columns, which no thread writes
    with pytest.raises(InterpreterError, match=r"gemm_highperf_hopper\.py:\d+: cp\.async\.bulk"
                                               r"\.tensor.*no fence\.proxy\.async lies"):
        orig.gemm_warp_specialized.interpret(a, b, sched, allow_uninitialized=True)
    a64, b64 = np.ascontiguousarray(a[:, :64]), np.ascontiguousarray(b[:, :64])
    with pytest.raises(InterpreterError, match=r"gemm_highperf_hopper\.py:\d+: mbarrier\.arrive"
                                               r".*which has exited"):
        orig.gemm_warp_specialized.interpret(a64, b64, sched, allow_uninitialized=True)
    fixed = _load("gemm_highperf_hopper", "hopper", patch=gemm_fixed)
    out = np.asarray(fixed.gemm_warp_specialized.interpret(a, b, sched,
                                                           allow_uninitialized=True))
    ref = (a.astype(np.float32) @ b.astype(np.float32).T).T
    np.testing.assert_allclose(out.view(BF16).astype(np.float32), ref, rtol=1e-2, atol=1e-1)
