"""ptxdsl.ops.grouped_matmul on a real GPU (H100/H200): one launch over ragged groups.

Integer operands in [-4, 4] with an f32 output: bit-exact against float64 per group, rows
past the last group untouched; empty groups; B as the transpose view of a (G, N, K) stack
(K-major) and as a (G, K, N) stack; bf16 and float8 (per-tensor scales); beside a loop of
``torch.mm`` and ``torch._grouped_mm`` where torch has it; offs on the GPU or m_splits.
Run: ``python -m pytest tests/gpu/test_ops_matmul_grouped_gpu.py``.
"""
from __future__ import annotations

import pytest

from gpu_env import NEEDS_GPU, torch_cuda

pytestmark = NEEDS_GPU
torch = torch_cuda()

from ptxdsl.ops import grouped_matmul  # noqa: E402
from ptxdsl.ops.matmul import grouped  # noqa: E402

SIZES = [[128, 0, 300, 7, 1000, 64], [1] * 8, [4096, 0], [513, 77, 0, 2000]]
# The grouped Hopper kernel's plan options (off by default): each alone and all together.
OPTIONS = [{}, {"cluster_n": 2}, {"tail_skip": True}, {"tma_store": True},
           {"epi_overlap": 2}, {"cluster_n": 2, "tail_skip": True, "tma_store": True},
           {"cluster_n": 4, "tail_skip": True, "tma_store": True, "epi_overlap": 3}]


@pytest.fixture(params=OPTIONS, ids=lambda o: "+".join(o) or "default")
def options(request, monkeypatch):
    """``grouped.plan_for`` with the option's fields set."""
    import dataclasses
    base = grouped.plan_for

    def plan_for(dt, odt, n=0):       # two accumulators fit beside tiles of <= 128 columns
        p = base(dt, odt, n)
        return dataclasses.replace(p, **{k: v for k, v in request.param.items()
                                         if k != "epi_overlap" or p.bn <= 128})
    monkeypatch.setattr(grouped, "plan_for", plan_for)
    return request.param


def ints(*shape, dtype=torch.bfloat16):
    return torch.randint(-4, 5, shape, device="cuda").float().to(dtype)


def check(c, a, w, sizes, scale=1.0):
    start = 0
    for g, s in enumerate(sizes):
        want = a[start:start + s].double() @ w[g].double().t() * scale
        assert torch.equal(c[start:start + s].double(), want), g
        start += s
    assert bool(torch.isnan(c[start:]).all())


@pytest.mark.parametrize("sizes", SIZES)
@pytest.mark.parametrize("k_major", [True, False])
@pytest.mark.parametrize("n,k", [(512, 1024), (264, 200), (1408, 256)])
def test_bf16_bit_exact(sizes, k_major, n, k, options):
    g = len(sizes)
    a, w = ints(sum(sizes) + 5, k), ints(g, n, k)
    b = w.transpose(1, 2) if k_major else w.transpose(1, 2).contiguous()
    offs = torch.tensor(sizes, device="cuda").cumsum(0).to(torch.int32)
    out = torch.full((a.shape[0], n), float("nan"), device="cuda")
    grouped_matmul(a, b, offs, out=out, out_dtype=torch.float32)
    check(out, a, w, sizes)


@pytest.mark.parametrize("sizes", SIZES[:2])
def test_fp8_per_tensor_bit_exact(sizes):
    g, n, k = len(sizes), 384, 512
    a = ints(sum(sizes) + 3, k, dtype=torch.float8_e4m3fn)
    w = ints(g, n, k, dtype=torch.float8_e4m3fn)
    out = torch.full((a.shape[0], n), float("nan"), device="cuda")
    grouped_matmul(a, w.transpose(1, 2), m_splits=sizes, out=out, out_dtype=torch.float32,
                   scale_a=torch.tensor([0.5], device="cuda"), scale_b=0.25)
    check(out, a, w, sizes, 0.125)


def test_random_bf16_beside_torch():
    sizes, n, k = [300, 0, 1200, 64, 17, 900, 2048, 5], 2048, 1024
    g = len(sizes)
    a = torch.randn(sum(sizes), k, device="cuda").bfloat16()
    w = torch.randn(g, n, k, device="cuda").bfloat16()
    offs = torch.tensor(sizes, device="cuda").cumsum(0).to(torch.int32)
    c = grouped_matmul(a, w.transpose(1, 2), offs)
    loop = torch.cat([x @ w[i].t() for i, x in enumerate(a.split(sizes))])
    assert ((c.float() - loop.float()).norm() / loop.float().norm()).item() < 1e-2
    if hasattr(torch, "_grouped_mm"):
        t = torch._grouped_mm(a, w.transpose(1, 2), offs=offs)
        assert ((c.float() - t.float()).norm() / t.float().norm()).item() < 1e-2


@pytest.mark.parametrize("sizes", SIZES[:2])
def test_fp8_row_wise_bit_exact(sizes, options):
    """scale_a per row of a, scale_b (G, N) per column of each expert's matrix."""
    g, n, k = len(sizes), 384, 512
    total = sum(sizes) + 3
    a = ints(total, k, dtype=torch.float8_e4m3fn)
    w = ints(g, n, k, dtype=torch.float8_e4m3fn)
    sa = (2.0 ** torch.randint(-3, 3, (total, 1), device="cuda")).float()
    sb = (2.0 ** torch.randint(-3, 3, (g, n), device="cuda")).float()
    out = torch.full((total, n), float("nan"), device="cuda")
    grouped_matmul(a, w.transpose(1, 2), m_splits=sizes, out=out, out_dtype=torch.float32,
                   scale_a=sa, scale_b=sb)
    start = 0
    for i, s in enumerate(sizes):
        want = a[start:start + s].double() @ w[i].double().t()
        want = want * sa[start:start + s].double() * sb[i].double()
        assert torch.equal(out[start:start + s].double(), want), i
        start += s
    assert bool(torch.isnan(out[start:]).all())
