"""The Hopper GEMM's ``Plan.uniform_cons`` (the consumer index through ``shfl.sync.idx``)
on an sm_90 GPU, on the plans ``lab/matmul_uniform.py`` times (the op's plan at each
shape and layout, with the option) and ragged shapes: bf16 output bitwise the plan's
without it on random normal inputs, integer-valued inputs exact with f32 output, the
same bits twice; fp8 per tensor and block-wise bitwise the plan's without it; the grouped
kernel (ragged and empty groups, both B majors) bitwise the plan's without it, exact with
integer-valued inputs.
Run: ``python -m pytest tests/gpu/test_matmul_uniform_cons_gpu.py``.
"""
from __future__ import annotations

import dataclasses

import pytest

from gpu_env import NEEDS_GPU, torch_cuda
from matmul_gpu_checks import exact_and_repeatable

pytestmark = NEEDS_GPU
torch = torch_cuda()

HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


def _device():
    from ptxdsl.ops.matmul.plan import device_class
    from ptxdsl.runtime import driver
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    return sms, device_class(driver.get().device(torch.cuda.current_device()))


def _plan(m, n, k, dt, odt, b_major, scaled=None):
    from ptxdsl.ops.matmul.plan import choose, for_majors, for_scaling
    sms, cls = _device()
    p = for_majors(choose(m, n, k, dt, odt, sms, device=cls, b_major=b_major), dt, odt, "K",
                   b_major)
    p = for_scaling(p, scaled, dt, odt, scaled == "block") if scaled else p
    return dataclasses.replace(p, uniform_cons=False)   # the many-row plans take it


@pytest.mark.skipif(not HOPPER, reason="the Hopper kernel needs sm_90")
@pytest.mark.parametrize("m,n,k", [(4096, 4096, 4096), (128, 8192, 8192), (1024, 14336, 4096),
                                   (128, 6144, 4096), (379, 1000, 1096)])
@pytest.mark.parametrize("b_major", ["K", "MN"])
def test_uniform_cons_bf16(m, n, k, b_major):
    from ptxdsl.core.types import bf16
    from ptxdsl.ops.matmul.hopper import build_hopper
    sms, _ = _device()
    p = _plan(m, n, k, bf16, bf16, b_major)
    q = dataclasses.replace(p, uniform_cons=True)
    exact_and_repeatable(torch, lambda odt: dataclasses.replace(
        _plan(m, n, k, bf16, odt, b_major), uniform_cons=True), m, n, k, b_major)
    x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    y = torch.randn(n, k, device="cuda").to(torch.bfloat16)
    yb = y.t().contiguous() if b_major == "MN" else y
    outs = []
    for plan in (p, q):
        c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        build_hopper(plan, bf16, bf16, sms=sms, b_major=b_major)(x, yb, c)
        outs.append(c)
    torch.cuda.synchronize()
    assert torch.equal(outs[0], outs[1])


@pytest.mark.skipif(not HOPPER, reason="the Hopper kernel needs sm_90")
@pytest.mark.parametrize("m,n,k,scaled", [(4096, 4096, 4096, "tensor"),
                                          (4096, 7168, 16384, "block"),
                                          (380, 1000, 528, "block")])
def test_uniform_cons_fp8(m, n, k, scaled):
    from ptxdsl.core.types import bf16, e4m3
    from ptxdsl.ops.matmul.hopper import build_hopper
    sms, _ = _device()
    p = _plan(m, n, k, e4m3, bf16, "K", scaled)
    g = torch.Generator(device="cuda").manual_seed(5)
    a = torch.randn(m, k, device="cuda", generator=g).to(torch.float8_e4m3fn)
    w = torch.randn(n, k, device="cuda", generator=g).to(torch.float8_e4m3fn)
    if scaled == "block":
        kb = -(-k // 128)
        sa = (2.0 ** torch.randint(-2, 2, (kb, m), device="cuda", generator=g)).float()
        sb = (2.0 ** torch.randint(-2, 2, (kb, -(-n // 128)), device="cuda",
                                   generator=g)).float()
    else:
        sa, sb = torch.tensor([0.5], device="cuda"), torch.tensor([2.0], device="cuda")
    outs = []
    for plan in (p, dataclasses.replace(p, uniform_cons=True)):
        c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        build_hopper(plan, e4m3, bf16, sms=sms, scaled=scaled)(a, w, sa, sb, c)
        outs.append(c)
    torch.cuda.synchronize()
    assert bool(torch.isfinite(outs[0].float()).all())
    assert torch.equal(outs[0], outs[1])


@pytest.mark.skipif(not HOPPER, reason="the Hopper kernel needs sm_90")
@pytest.mark.parametrize("g,n,k", [(64, 1408, 2048), (16, 4096, 7168), (5, 264, 200)])
@pytest.mark.parametrize("b_major", ["K", "MN"])
def test_uniform_cons_grouped(g, n, k, b_major):
    """The grouped kernel (``grouped.plan_for``'s plan) with and without the option over
    ragged tokens per expert with empty experts: random normal bf16 out bitwise the same;
    integer-valued inputs exact with f32 out, rows past the last group untouched (NaN)."""
    from ptxdsl.core.types import bf16, f32
    from ptxdsl.ops.matmul.grouped import plan_for
    from ptxdsl.ops.matmul.hopper import build_hopper
    sms, _ = _device()
    gen = torch.Generator(device="cuda").manual_seed(g + n)
    sizes = torch.randint(0, 300, (g,), device="cuda", generator=gen)
    sizes[g // 2] = 0
    sizes[-1] = 0
    offs = sizes.cumsum(0).to(torch.int32)
    total = int(offs[-1]) + 5
    if b_major == "MN" and k % 64:
        k += 64 - k % 64            # an MN-major stack needs K a multiple of 64
    for odt, tdt in ((bf16, torch.bfloat16), (f32, torch.float32)):
        ints = odt == f32
        a = (torch.randint(-4, 5, (total, k), device="cuda", generator=gen).float() if ints
             else torch.randn(total, k, device="cuda", generator=gen)).to(torch.bfloat16)
        w = (torch.randint(-4, 5, (g, n, k), device="cuda", generator=gen).float() if ints
             else torch.randn(g, n, k, device="cuda", generator=gen)).to(torch.bfloat16)
        b2 = w.reshape(g * n, k) if b_major == "K" else \
            w.transpose(1, 2).contiguous().reshape(g * k, n)
        p = dataclasses.replace(plan_for(bf16, odt, n), uniform_cons=False)
        outs = []
        for plan in (p, dataclasses.replace(p, uniform_cons=True)):
            c = torch.full((total, n), float("nan"), device="cuda", dtype=tdt)
            build_hopper(plan, bf16, odt, sms=sms, b_major=b_major, grouped=True)(a, b2, offs,
                                                                                  c)
            outs.append(c)
        torch.cuda.synchronize()
        end = int(offs[-1])
        assert bool(torch.isnan(outs[1][end:].float()).all())
        assert torch.equal(outs[0][:end], outs[1][:end])
        if ints:
            start = 0
            for i, e in enumerate(offs.tolist()):
                want = a[start:e].double() @ w[i].double().t()
                assert torch.equal(outs[1][start:e].double(), want)
                start = e
