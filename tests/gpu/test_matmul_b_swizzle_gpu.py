"""The Hopper GEMM's ``Plan.b_swizzle = 64`` (an MN-major B in 32-column atoms: 96- and
160-wide tiles of ``a @ b``) on a real GPU, at the plans ``lab/matmul_trailing.py --set
nn96`` times and at ragged shapes: integer-valued inputs bit-exact with f32 output, random
normal within bf16 rounding and the same bits twice.
Run: ``python -m pytest tests/gpu/test_matmul_b_swizzle_gpu.py``.
"""
from __future__ import annotations

import pytest

from gpu_env import NEEDS_GPU, torch_cuda
from matmul_gpu_checks import exact_and_repeatable

pytestmark = NEEDS_GPU
torch = torch_cuda()

HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
M64 = dict(consumers=1, b_swizzle=64)


@pytest.mark.skipif(not HOPPER, reason="the Hopper kernel needs sm_90")
@pytest.mark.parametrize("m,n,k,fields", [
    (128, 6144, 4096, dict(bn=96, cluster=2, stages=10, **M64)),
    (128, 6144, 4096, dict(bn=96, cluster=1, stages=10, **M64)),
    (128, 6144, 4096, dict(bn=128, cluster=2, stages=8, **M64)),
    (128, 8192, 8192, dict(bn=160, cluster=2, stages=6, **M64)),
    (379, 1000, 520, dict(bn=96, cluster=2, stages=10, **M64)),
    (379, 1000, 520, dict(bn=96, cluster=1, stages=6, b_swizzle=64))])
def test_b_swizzle_exact(m, n, k, fields):
    from ptxdsl.ops.matmul.config import Plan
    exact_and_repeatable(torch, lambda _odt: Plan(**fields), m, n, k, "MN")
