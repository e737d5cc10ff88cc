"""The Hopper GEMM's ``Plan.stream_k`` on a real GPU: integer-valued inputs bit-exact
with f32 output at the shapes lab/matmul_trailing.py --set streamk times and ragged ones
(both majors of B), the workspace's flags back at zero after each launch, random normal
within bf16 rounding and the same bits twice (deterministic), and through
``ptxdsl.ops.matmul`` (its per-stream workspace, the recorded repeat call).
Run: ``python -m pytest tests/gpu/test_matmul_stream_k_gpu.py``.
"""
from __future__ import annotations

import pytest

from gpu_env import NEEDS_GPU, torch_cuda

pytestmark = NEEDS_GPU
torch = torch_cuda()

HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


def ints(*shape):
    return torch.randint(-4, 5, shape, device="cuda").to(torch.bfloat16)


def _workspace(kern, m, n, k, sms):
    from ptxdsl.ops.matmul import streamk
    p = kern.stream_k_plan
    elems = streamk.workspace_elems(p, streamk.grid(p, m, n, k, sms))
    return [torch.zeros(streamk.FLAG_CAP, device="cuda", dtype=torch.int32),
            torch.full((elems - streamk.FLAG_CAP,), float("nan"), device="cuda")]


@pytest.mark.skipif(not HOPPER, reason="the Hopper kernel needs sm_90")
@pytest.mark.parametrize("m,n,k,bn,b_major,cluster", [
    (128, 6144, 4096, 64, "K", 1), (128, 6144, 4096, 128, "MN", 1),
    (128, 6144, 4096, 192, "K", 1), (128, 8192, 8192, 256, "MN", 1),
    (1024, 14336, 4096, 128, "K", 1), (1024, 14336, 4096, 256, "MN", 1),
    (1024, 14336, 4096, 128, "K", 2), (1024, 14336, 4096, 256, "MN", 2),
    (379, 1000, 528, 128, "K", 2), (379, 1000, 528, 128, "K", 1),
    (37, 1000, 4104, 64, "MN", 1), (128, 256, 64, 256, "K", 1)])
def test_stream_k_exact(m, n, k, bn, b_major, cluster):
    _exact(m, n, k, bn, b_major, cluster)


def _exact(m, n, k, bn, b_major, cluster):
    from ptxdsl.core.types import bf16, f32
    from ptxdsl.ops.matmul.config import Plan
    from ptxdsl.ops.matmul.hopper import build_hopper
    from ptxdsl.ops.matmul.plan import fitted
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    a, w = ints(m, k), ints(n, k)
    bk = w.t().contiguous() if b_major == "MN" else w
    out = torch.full((m, n), float("nan"), device="cuda")
    plan = Plan(bn=bn, cluster=cluster, stream_k=True)
    kern = build_hopper(fitted(plan, bf16, f32), bf16, f32, sms=sms, b_major=b_major)
    ws = _workspace(kern, m, n, k, sms)
    kern(a, bk, *ws, out)
    torch.cuda.synchronize()
    assert torch.equal(out.double(), a.double() @ w.double().t())
    assert int(ws[0].abs().sum()) == 0          # every flag reset by its owner
    kb = build_hopper(fitted(plan, bf16, bf16), bf16, bf16, sms=sms, b_major=b_major)
    ws = _workspace(kb, m, n, k, sms)
    x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    y = torch.randn(n, k, device="cuda").to(torch.bfloat16)
    yk = y.t().contiguous() if b_major == "MN" else y
    c1, c2 = (torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
              for _ in range(2))
    kb(x, yk, *ws, c1)
    kb(x, yk, *ws, c2)
    torch.cuda.synchronize()
    ref = x.double() @ y.double().t()
    assert ((c1.double() - ref).norm() / ref.norm()).item() < 4e-3
    assert torch.equal(c1, c2)


@pytest.mark.skipif(not HOPPER, reason="the Hopper kernel needs sm_90")
@pytest.mark.parametrize("layout", ["linear", "nn"])
def test_stream_k_through_the_op(monkeypatch, layout):
    """A plans-table row naming stream_k, as the op runs it: the general path (the
    stream's workspace) then the recorded repeat calls, exact each time, with a bias."""
    import ptxdsl.ops.matmul.api as api
    from ptxdsl.ops import matmul
    from ptxdsl.ops.matmul.config import Plan
    from ptxdsl.ops.matmul.plan import fitted
    monkeypatch.setattr(api, "choose", lambda m, n, k, dt, odt, sms, **_kw: fitted(
        Plan(bn=128, cluster=1, stream_k=True), dt, odt))
    api.clear()
    try:
        m, n, k = 128, 6144, 4096
        a, w, bias = ints(m, k), ints(n, k), ints(n)
        b = w.t() if layout == "linear" else w.t().contiguous()
        want = (a.double() @ w.double().t() + bias.double()).to(torch.bfloat16)
        for _ in range(3):
            got = matmul(a, b, bias=bias)
            torch.cuda.synchronize()
            assert torch.equal(got, want)
        again = api.MATMUL.lookup(a, b, bias, None, None, None, None)   # the recording
        torch.cuda.synchronize()
        assert again is not None and torch.equal(again, want)
    finally:
        api.clear()
