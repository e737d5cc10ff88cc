"""Hopper on a real H100/H200: tensor maps encoded by the runtime and re-pointed per call
(a warp-specialised TMA copy, exact), clusters launched on the fast path, and pyptx's
Hopper GEMM examples (imports renamed to ptxdsl) against torch references.

Run: ``python -m pytest tests/gpu/test_hopper_gpu.py -q``. pyptx's examples
come from ``$PTXDSL_PYPTX_EXAMPLES``, the pyptx git mirror or an installed pyptx wheel
(``bench/install_wheels.py``; see ``bench/pyptx_examples.py``); tests skip with a reason
when none is there, or without a GPU of compute capability 9.0, or without torch.
"""
from __future__ import annotations

import numpy as np
import pytest

from gpu_env import NEEDS_GPU, torch_sm90

pytestmark = NEEDS_GPU


def _example(name):
    from bench import pyptx_examples
    try:
        return pyptx_examples.load(name)
    except pyptx_examples.Unavailable as e:
        pytest.skip(str(e))


# ---------------------------------------------------------------- tensor maps, clusters
@pytest.mark.parametrize("shape", [(256, 256), (200, 384), (1000, 128)])
def test_tma_copy_is_exact_and_repointed_every_call(shape):
    torch = torch_sm90()
    from hopper_kernels import build_tma_copy
    k = build_tma_copy(f"tma_copy_{shape[0]}_{shape[1]}")
    g = torch.Generator(device="cuda").manual_seed(0)
    for i in range(4):  # the first call encodes; the others take the fast path
        a = torch.randn(shape, device="cuda", generator=g).to(torch.bfloat16)
        c = k(a)
        torch.cuda.synchronize()
        assert c.shape == a.shape and c.dtype == torch.bfloat16
        assert torch.equal(c, a), f"call {i}: the copy differs"
    launcher = k.runtime_cache["launcher"]
    assert launcher.slow_calls == 1, "later calls should have taken the fast path"
    assert launcher.tmaps.cache.misses == 1


def test_tma_copy_new_shapes_reuse_the_module():
    torch = torch_sm90()
    from hopper_kernels import build_tma_copy
    k = build_tma_copy("tma_copy_shapes")
    for shape in ((64, 128), (300, 256), (64, 128)):
        a = torch.randn(shape, device="cuda").to(torch.bfloat16)
        assert torch.equal(k(a), a)
    launcher = k.runtime_cache["launcher"]
    assert len(launcher.functions) == 1
    assert launcher.tmaps.cache.misses == 2  # (64, 128) twice: one encoding


# ---------------------------------------------------------------- pyptx's examples
@pytest.mark.parametrize("size", [2048, 4096])
def test_pyptx_gemm_highperf_hopper(size):
    torch = torch_sm90()
    m = _example("gemm_highperf_hopper")
    gen = torch.Generator(device="cuda")
    gen.manual_seed(size)
    a = torch.randn((size, size), device="cuda", dtype=torch.bfloat16, generator=gen)
    b = torch.randn((size, size), device="cuda", dtype=torch.bfloat16, generator=gen)
    sched = torch.tensor(m.create_hilbert_schedule(size // (m.BM * m.CLUSTER_M), size // m.BN),
                         device="cuda", dtype=torch.int32)
    out = m.gemm_warp_specialized(a, b, sched.view(torch.uint32))
    torch.cuda.synchronize()
    ref = torch.matmul(a.float(), b.float().T).to(torch.bfloat16).T.contiguous()
    diff = float((out.float() - ref.float()).abs().max())
    assert torch.allclose(out.float(), ref.float(), atol=1e-2, rtol=1e-2), f"max |diff| {diff}"


@pytest.mark.parametrize("G, M, N, K", [(1, 64, 8, 32), (2, 64, 8, 32), (4, 64, 16, 32),
                                        (8, 128, 16, 64), (4, 256, 32, 128),
                                        (8, 512, 64, 512)])
def test_pyptx_grouped_gemm(G, M, N, K):
    torch = torch_sm90()
    m = _example("grouped_gemm")
    k = m.build_grouped_gemm(G, M, N, K)
    np.random.seed(G * 1009 + M * 997 + N * 17 + K)
    a3 = torch.tensor((np.random.randn(G, M, K) * 0.1).astype(np.float32), device="cuda",
                      dtype=torch.bfloat16)
    b3 = torch.tensor((np.random.randn(G, K, N) * 0.1).astype(np.float32), device="cuda",
                      dtype=torch.bfloat16)
    out = k(a3.reshape(G * M, K), b3.reshape(G * K, N)).reshape(G, M, N)
    torch.cuda.synchronize()
    ref = torch.einsum("gmk,gkn->gmn", a3.float(), b3.float())
    diff = float((out - ref).abs().max())
    assert torch.allclose(out, ref, atol=1e-4, rtol=1e-3), f"max |diff| {diff}"
