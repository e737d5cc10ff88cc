"""Issue #48's silently-wrong cases on a real GPU: rms_norm's out= views of CUDA tensors
written through, ReLU keeping NaN in both GEMM kernels (max.NaN.f32), the FP8 quant
scale of a NaN / inf row, limits refused before launch.
Run: ``python -m pytest tests/gpu/test_hardening_gpu.py``."""
from __future__ import annotations

import numpy as np
import pytest

from gpu_env import NEEDS_GPU, torch_cuda

pytestmark = NEEDS_GPU
torch = torch_cuda()

from ptxdsl import Tile, kernel, reg, smem  # noqa: E402
from ptxdsl.core.errors import PtxdslError  # noqa: E402
from ptxdsl.core.types import f32  # noqa: E402
from ptxdsl.ops import matmul, rms_norm, rms_norm_quant  # noqa: E402


def _ref(x, w, eps=1e-6):
    x64 = x.double()
    return x64 * torch.rsqrt((x64 * x64).mean(-1, keepdim=True) + eps) * w.double()


@pytest.mark.parametrize("make", [
    lambda: torch.zeros(3, 4, 256, device="cuda").permute(1, 0, 2),
    lambda: torch.zeros(4, 3, 512, device="cuda")[..., ::2],
    lambda: torch.zeros(4, 6, 256, device="cuda")[:, ::2],
], ids=["permuted", "strided-inner", "strided-rows"])
def test_rms_norm_out_view_of_cuda_tensor(make):
    x = torch.randn(4, 3, 256, device="cuda")
    w = torch.randn(256, device="cuda")
    out = make()
    for _ in range(2):                       # the second call: the repeat-call memo
        out.zero_()
        with torch.no_grad():
            assert rms_norm(x, w, out=out) is out
        torch.testing.assert_close(out.double(), _ref(x, w), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("m, n, k", [(256, 256, 128), (37, 40, 24)])
def test_matmul_relu_keeps_nan(m, n, k):
    """(256, 256, 128): the Hopper kernel; (37, 40, 24) with unaligned rows: SIMT."""
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    a[3, 5] = float("nan")
    y = matmul(a, b, activation="relu")
    want = torch.relu(a.float() @ b.float())
    assert torch.isnan(y[3]).all()
    ok = ~torch.isnan(want)
    torch.testing.assert_close(y.float()[ok], want[ok], rtol=2e-2, atol=2e-2)
    assert (y.float()[ok] >= 0).all()


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_quant_scale_of_a_nan_or_inf_row(bad):
    x = torch.randn(8, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.ones(4096, device="cuda", dtype=torch.bfloat16)
    x[2, 17] = bad
    _, scale = rms_norm_quant(x, w)
    assert torch.isnan(scale[2]).all() and torch.isfinite(scale[[0, 1, 3]]).all()


def test_static_shared_memory_over_the_limit_is_refused():
    @kernel(in_specs=(Tile(32, f32),), out_specs=(Tile(32, f32),), block=(32, 1, 1))
    def big(X, Y):
        s = smem.alloc(f32, ((1 << 30) // 4,))
        s[0] = reg.scalar(f32, init=1.0)
    with pytest.raises(PtxdslError, match="shared"):
        big(torch.zeros(32, device="cuda"))
    torch.cuda.synchronize()
