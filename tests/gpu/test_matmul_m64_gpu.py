"""The Hopper GEMM's ``Plan.consumers = 1`` (64-row tiles) and the dense
``Plan.epi_overlap`` on a real GPU, at the plans ``lab/matmul_trailing.py --set m64``
times and at ragged shapes: integer-valued inputs bit-exact with f32 output, random normal
within bf16 rounding and the same bits twice.
Run: ``python -m pytest tests/gpu/test_matmul_m64_gpu.py``.
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
    (128, 6144, 4096, dict(consumers=1, bn=96, cluster=2, stages=10), "K"),
    (128, 6144, 4096, dict(consumers=1, bn=96, cluster=1, stages=10), "K"),
    (128, 6144, 4096, dict(consumers=1, bn=128, cluster=2, stages=8), "MN"),
    (128, 8192, 8192, dict(consumers=1, bn=128, cluster=2, stages=9, epi_in_ring=True), "MN"),
    (379, 1000, 520, dict(consumers=1, bn=128, cluster=2, stages=8), "K"),
    (379, 1000, 520, dict(consumers=1, bn=128, cluster=1, stages=8), "MN"),
    (1024, 14336, 4096, dict(bn=128, cluster=2, stages=5, epi_overlap=2), "K"),
    (1024, 14336, 4096, dict(bn=128, cluster=2, stages=5, epi_overlap=1), "MN"),
    (379, 1000, 1096, dict(bn=128, cluster=1, stages=5, epi_overlap=2), "MN"),
    (1024, 14336, 4096, dict(bn=176, cluster=2, stages=4, epi_overlap=2), "K"),
    (379, 1000, 1096, dict(bn=176, cluster=1, stages=4, epi_overlap=2), "K"),
    (379, 1000, 1096, dict(consumers=1, bn=64, cluster=2, stages=8, epi_overlap=3), "K")])
def test_m64_and_overlap_exact(m, n, k, fields, b_major):
    from ptxdsl.ops.matmul.config import Plan
    from ptxdsl.ops.matmul.plan import one_tile_each
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    p = Plan(**fields)
    if p.epi_in_ring and not one_tile_each(p, m, n, sms):
        pytest.skip(f"{sms} SMs: more tiles than CTAs")
    exact_and_repeatable(torch, lambda _odt: p, m, n, k, b_major)
