"""The Hopper GEMM's ``Plan.pingpong`` (two consumers on alternate 64-row tiles) on a
real GPU, at the plans ``lab/matmul_trailing.py --set nn96`` times (rings shallow enough
for f32 output) and at ragged shapes: integer-valued inputs bit-exact with f32 output,
random normal within bf16 rounding and the same bits twice.
Run: ``python -m pytest tests/gpu/test_matmul_pingpong_gpu.py``.
"""
from __future__ import annotations

import pytest

from gpu_env import NEEDS_GPU, torch_cuda

pytestmark = NEEDS_GPU
torch = torch_cuda()

HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


def ints(*shape):
    return torch.randint(-4, 5, shape, device="cuda").to(torch.bfloat16)


@pytest.mark.skipif(not HOPPER, reason="the Hopper kernel needs sm_90")
@pytest.mark.parametrize("m,n,k,fields,b_major", [
    (1024, 14336, 4096, dict(bn=256, cluster=2, stages=4, pingpong=True), "K"),
    (1024, 14336, 4096, dict(bn=256, cluster=2, stages=4, pingpong=True), "MN"),
    (1024, 14336, 4096, dict(bn=224, cluster=2, stages=4, pingpong=True), "K"),
    (4096, 4096, 4096, dict(bn=192, cluster=2, stages=5, pingpong=True), "MN"),
    (379, 1000, 1096, dict(bn=128, cluster=2, stages=6, pingpong=True), "K"),
    (379, 1000, 1096, dict(bn=256, cluster=1, stages=4, pingpong=True), "MN")])
def test_pingpong_exact(m, n, k, fields, b_major):
    from ptxdsl.core.types import bf16, f32
    from ptxdsl.ops.matmul.config import Plan
    from ptxdsl.ops.matmul.hopper import build_hopper
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    p = Plan(**fields)
    a, w = ints(m, k), ints(n, k)
    bk = w.t().contiguous() if b_major == "MN" else w
    out = torch.full((m, n), float("nan"), device="cuda")
    build_hopper(p, bf16, f32, sms=sms, b_major=b_major)(a, bk, out)
    torch.cuda.synchronize()
    assert torch.equal(out.double(), a.double() @ w.double().t())
    kb = build_hopper(p, bf16, bf16, sms=sms, b_major=b_major)
    x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    y = torch.randn(n, k, device="cuda").to(torch.bfloat16)
    yk = y.t().contiguous() if b_major == "MN" else y
    c1, c2 = (torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
              for _ in range(2))
    kb(x, yk, c1)
    kb(x, yk, c2)
    torch.cuda.synchronize()
    ref = x.double() @ y.double().t()
    assert ((c1.double() - ref).norm() / ref.norm()).item() < 4e-3
    assert torch.equal(c1, c2)
