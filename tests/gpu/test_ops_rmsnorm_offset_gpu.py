"""Gemma's ``offset`` (``y = x * rstd * (offset + w)``) on a real GPU: forward and backward
against float64 autograd at row lengths that take each schedule (row per warp, per CTA,
persistent, cluster of CTAs), dW bitwise repeatable and equal to the offset-free dW.
Run: ``python -m pytest tests/gpu/test_ops_rmsnorm_offset_gpu.py``.
"""
from __future__ import annotations

import pytest

from gpu_env import NEEDS_GPU, torch_cuda

pytestmark = NEEDS_GPU
torch = torch_cuda()

from ptxdsl.ops import RMSNorm, rms_norm, rms_norm_backward  # noqa: E402

EPS = 1e-6
DT = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
SHAPES = [(300, 96), (4096, 1000), (2048, 8192), (64, 16384), (16, 65536), (4, 131072),
          (2, 262144)]


def case(shape, dt, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed + shape[0] * 31 + shape[1])
    x = torch.randn(*shape, device="cuda", generator=g).to(DT[dt])
    w = (torch.randn(shape[1], device="cuda", generator=g) * 0.1).to(DT[dt])  # w - 1
    dy = torch.randn(*shape, device="cuda", generator=g).to(DT[dt])
    return x, w, dy


def ref(x, w, dy, offset):
    xr = x.double().requires_grad_()
    wr = w.double().requires_grad_()
    y = xr * torch.rsqrt((xr * xr).mean(-1, keepdim=True) + EPS) * (offset + wr)
    y.backward(dy.double())
    return y.detach(), xr.grad, wr.grad


def rel(a, b):
    return ((a.double() - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dt", ["f32", "bf16"])
def test_forward_and_backward_with_offset(shape, dt):
    x, w, dy = case(shape, dt)
    y, rstd = rms_norm(x, w, EPS, offset=1.0, return_rstd=True)
    dx, dw = rms_norm_backward(dy, x, w, rstd, offset=1.0)
    ry, rdx, rdw = ref(x, w, dy, 1.0)
    tol = 2e-6 if dt == "f32" else 8e-3
    assert rel(y, ry) <= tol
    assert rel(dx, rdx) <= (2e-5 if dt == "f32" else 2e-2)
    assert rel(dw, rdw) <= (2e-5 if dt == "f32" else 2e-2)


@pytest.mark.parametrize("shape", [(4096, 1000), (2048, 8192), (16, 65536)])
def test_dweight_bitwise_repeatable_and_offset_free(shape):
    """dW = sum(dy * x * rstd) does not read w: the same bits with and without the
    offset, and on every run."""
    x, w, dy = case(shape, "f32", 1)
    _, rstd = rms_norm(x, w, EPS, offset=1.0, return_rstd=True)
    runs = [rms_norm_backward(dy, x, w, rstd, offset=1.0)[1] for _ in range(3)]
    plain = rms_norm_backward(dy, x, w, rstd)[1]
    for r in runs[1:] + [plain]:
        assert torch.equal(r.view(torch.int32), runs[0].view(torch.int32))


def test_autograd_module_and_residual():
    x, w, dy = case((512, 4096), "bf16", 2)
    m = RMSNorm(4096, eps=EPS, offset=1.0, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        m.weight.copy_(w)
    xg = x.clone().requires_grad_()
    y = m(xg)
    y.backward(dy)
    ry, rdx, rdw = ref(x, w, dy, 1.0)
    assert rel(y, ry) <= 8e-3 and rel(xg.grad, rdx) <= 2e-2 and rel(m.weight.grad, rdw) <= 2e-2
    r = torch.randn_like(x)
    h = (x.float() + r.float()).to(torch.bfloat16)
    with torch.no_grad():
        y2 = rms_norm(x, w, EPS, offset=1.0, residual=r)
    assert torch.equal(r, h)
    assert rel(y2, ref(h, w, dy, 1.0)[0]) <= 8e-3
    # a repeated plain call with the offset (the guard-first fast path) still applies it
    for _ in range(3):
        y3 = rms_norm(x, w, EPS, offset=1.0)
    assert rel(y3, ry) <= 8e-3
    y4 = rms_norm(x, w, EPS)
    assert rel(y4, ref(x, w, dy, 0.0)[0]) <= 8e-3
