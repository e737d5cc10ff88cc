"""The Hopper GEMM's ``Plan.pingpong`` (two consumers on alternate 64-row tiles) on a
real GPU, at the plans ``lab/matmul_trailing.py --set nn96`` times (rings shallow enough
for f32 output) and at ragged shapes: integer-valued inputs bit-exact with f32 output,
random normal within bf16 rounding and the same bits twice.
Run: ``python -m pytest tests/gpu/test_matmul_pingpong_gpu.py``.
"""
from __future__ import annotations

import pytest

from gpu_env import NEEDS_GPU, torch_cuda
from matmul_gpu_checks import exact_and_repeatable

pytestmark = NEEDS_GPU
torch = torch_cuda()

HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


@pytest.mark.skipif(not HOPPER, reason="the Hopper kernel needs sm_90")
@pytest.mark.parametrize("m,n,k,fields,b_major", [
    (1024, 14336, 4096, dict(bn=256, cluster=2, stages=4, pingpong=True), "K"),
    (1024, 14336, 4096, dict(bn=256, cluster=2, stages=4, pingpong=True), "MN"),
    (1024, 14336, 4096, dict(bn=224, cluster=2, stages=4, pingpong=True), "K"),
    (4096, 4096, 4096, dict(bn=192, cluster=2, stages=5, pingpong=True), "MN"),
    (379, 1000, 1096, dict(bn=128, cluster=2, stages=6, pingpong=True), "K"),
    (379, 1000, 1096, dict(bn=256, cluster=1, stages=4, pingpong=True), "MN")])
def test_pingpong_exact(m, n, k, fields, b_major):
    from ptxdsl.ops.matmul.config import Plan
    exact_and_repeatable(torch, lambda _odt: Plan(**fields), m, n, k, b_major)
