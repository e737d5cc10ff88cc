"""pyptx's three Ampere GEMM examples, imports renamed to ptxdsl, on the GPU with torch tensors.

Each kernel's output is compared with a float32 torch reference (bf16 inputs).
Speed beside pyptx itself and cuBLAS: ``bench/ampere_gemm.py``.

Run: ``python -m pytest tests/gpu/test_pyptx_compat_gpu.py -q``
"""
from __future__ import annotations

import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [p for p in (os.path.join(ROOT, "bench"), ROOT) if p not in sys.path]

import ptxdsl  # noqa: E402
from gpu_env import NEEDS_GPU  # noqa: E402
import pyptx_examples  # noqa: E402

pytestmark = NEEDS_GPU

CASES = [("gemm", "build_gemm", [(256, 128, 256), (1024, 1024, 512)]),
         ("gemm_pipelined", "build_gemm_pipelined", [(256, 256, 256), (2048, 2048, 2048)]),
         ("gemm_highperf_ampere", "build_gemm_highperf", [(256, 256, 256), (4096, 4096, 4096)])]


@pytest.mark.parametrize("name,build,shapes", CASES, ids=[c[0] for c in CASES])
def test_ampere_example_on_gpu(name, build, shapes):
    torch = pytest.importorskip("torch")
    try:
        mod = pyptx_examples.load(name, "ampere")
    except pyptx_examples.Unavailable as e:
        pytest.skip(str(e))
    for M, N, K in shapes:
        k = getattr(mod, build)(M, N, K)
        g = torch.Generator(device="cuda")
        g.manual_seed(M + N + K)
        a = (torch.randn((M, K), device="cuda", generator=g) * 0.1).to(torch.bfloat16)
        bt = (torch.randn((N, K), device="cuda", generator=g) * 0.1).to(torch.bfloat16)
        out = k(a, bt)
        out = out[0] if isinstance(out, (tuple, list)) else out
        torch.cuda.synchronize()
        ref = a.float() @ bt.float().T
        err = float((out.float() - ref).abs().max())
        assert torch.allclose(out.float(), ref, atol=1e-2, rtol=1e-2), \
            f"{name} {M}x{N}x{K}: max abs error {err}"
