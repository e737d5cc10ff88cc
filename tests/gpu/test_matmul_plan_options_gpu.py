"""The Hopper GEMM's ``Plan.one_partial``, ``b_prefetch`` and ``epi_in_ring`` on a real GPU:
integer-valued inputs bit-exact with f32 output at the shapes lab/matmul_trailing.py times
and ragged ones, random normal within bf16 rounding and the same bits twice.
Run: ``python -m pytest tests/gpu/test_matmul_plan_options_gpu.py``.
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
    (128, 6144, 4096, dict(bn=96, split=2, one_partial=True), "K"),
    (128, 6144, 4096, dict(bn=96, split=2, one_partial=True, b_prefetch=8), "K"),
    (128, 8192, 8192, dict(bn=128, split=2, one_partial=True), "MN"),
    (128, 8192, 8192, dict(bn=64, split=1, b_prefetch=16), "K"),
    (37, 1000, 520, dict(bn=128, split=2, one_partial=True, b_prefetch=2), "K"),
    (379, 1000, 1096, dict(bn=256, cluster=2, b_prefetch=8), "K"),
    (100, 264, 4104, dict(bn=64, split=2, one_partial=True), "MN"),
    (128, 6144, 4096, dict(bn=96, split=2, one_partial=True, epi_in_ring=True, stages=7), "K"),
    (128, 8192, 8192, dict(bn=128, split=2, one_partial=True, epi_in_ring=True), "MN"),
    (128, 8192, 8192, dict(bn=64, epi_in_ring=True, stages=9), "K"),
    (379, 1000, 520, dict(bn=64, epi_in_ring=True, stages=9), "MN")])
def test_options_exact(m, n, k, fields, b_major):
    from ptxdsl.core.types import bf16, f32
    from ptxdsl.ops.matmul.config import Plan
    from ptxdsl.ops.matmul.plan import fitted, one_tile_each
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    fields.setdefault("cluster", 1)

    def plan(odt):      # the ring fitted unless given
        return Plan(**fields) if "stages" in fields else fitted(Plan(**fields), bf16, odt)
    if fields.get("epi_in_ring") and not one_tile_each(plan(f32), m, n, sms):
        pytest.skip(f"{sms} SMs: more tiles than CTAs")
    exact_and_repeatable(torch, plan, m, n, k, b_major)
