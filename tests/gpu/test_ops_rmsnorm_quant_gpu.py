"""``rms_norm_quant`` (RMSNorm with FP8 e4m3 output) on a real GPU (H100/H200).

The dequantised output within e4m3 rounding of the float64 answer; dynamic scales
within f32 error of ``max|y| / 448`` (and exactly the documented f32 arithmetic for an
rstd within a few ulps of float64's); static scales, saturation, the residual written
back in place, all-zero rows, the per-signature fast path, numpy arrays through
ml_dtypes. Run: ``python -m pytest tests/gpu/test_ops_rmsnorm_quant_gpu.py``.
"""
from __future__ import annotations

import numpy as np
import pytest

from gpu_env import NEEDS_GPU, torch_cuda

pytestmark = NEEDS_GPU
torch = torch_cuda()

from ptxdsl.ops import rms_norm_quant  # noqa: E402
from ptxdsl.ops.rmsnorm.quant import FP8_MAX, MIN_SCALE  # noqa: E402

EPS = 1e-6
DT = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
SHAPES = [(2048, 8192), (4096, 1000), (7, 4097), (1, 8192), (64, 5120), (16, 7168),
          (33, 1), (5, 32768), (3, 16384), (300, 96), (4, 65536)]


def case(shape, dt, seed=0, offset=0.0):
    g = torch.Generator(device="cuda").manual_seed(seed * 7 + shape[0] * 31 + shape[1])
    x = (torch.randn(*shape, device="cuda", generator=g)
         * torch.exp2(torch.randint(-6, 6, (shape[0], 1), device="cuda", generator=g))).to(DT[dt])
    w = (torch.randn(shape[1], device="cuda", generator=g) * 0.5 + (0.0 if offset else 1.0))
    return x, w.to(DT[dt])


def ref64(h, w, offset=0.0):
    h64 = h.double()
    return h64 * torch.rsqrt((h64 * h64).mean(-1, keepdim=True) + EPS) * (offset + w.double())


def e4m3_ulp(v):
    a = v.abs().clamp_min(2.0 ** -6)
    return torch.exp2(torch.floor(torch.log2(a)) - 3)


def assert_within_e4m3(y, scale, want):
    assert y.dtype == torch.float8_e4m3fn
    v = want / scale.double()
    q = y.double()
    inside = v.abs() <= FP8_MAX
    err = (q - v).abs()
    bound = e4m3_ulp(v) / 2 + v.abs() * 1e-5 + 1e-30
    assert bool((err[inside] <= bound[inside]).all()), float((err - bound)[inside].max())
    assert bool((q[~inside] == v[~inside].sign() * FP8_MAX).all())


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dt", ["f32", "bf16", "f16"])
def test_dynamic(shape, dt):
    x, w = case(shape, dt)
    y, scale = rms_norm_quant(x, w, EPS)
    assert y.shape == x.shape and scale.shape == (shape[0], 1) and scale.dtype == torch.float32
    want = ref64(x, w)
    top = want.abs().amax(-1, keepdim=True)
    torch.testing.assert_close(scale.double(), (top / FP8_MAX).clamp_min(MIN_SCALE),
                               rtol=2e-6, atol=0)
    assert_within_e4m3(y, scale, want)


def f32_ulps(a, b):
    """Distance in f32 ulps between positive f32 tensors (their bit patterns' difference)."""
    return (a.view(torch.int32).long() - b.view(torch.int32).long()).abs()


@pytest.mark.parametrize("shape", [(2048, 8192), (4096, 4096), (64, 5120), (300, 96),
                                   (7, 4097)])
@pytest.mark.parametrize("dt", ["f32", "bf16"])
def test_dynamic_is_the_documented_f32_arithmetic(shape, dt):
    """Each row's scale is within 4 f32 ulps of float64's max|y| / 448; and for one f32
    rstd (within 8 ulps of float64's) the scale is exactly ``max(fl(fl(max|p| * rstd) /
    448), MIN_SCALE)`` with ``p = fl(h * w)``, and every byte exactly
    ``e4m3(fl(fl(p * rstd) * fl(1 / scale)))``.

    The kernel's rstd is not an output, and its row sum's order is the kernel's own
    (threads per row, reduction tree): so each row's rstd is searched among the f32
    neighbours of the float64 value, as the one value that reproduces the row's scale and
    all its bytes. The model divides by 448 as ``div.rn.f32`` does: a tensor divisor
    (``t / 448.0`` would be torch's ``t * (1 / 448)``, off by an ulp in places)."""
    x, w = case(shape, dt, seed=1)
    y, scale = rms_norm_quant(x, w, EPS)
    want = ref64(x, w)
    s64 = (want.abs().amax(-1, keepdim=True) / FP8_MAX).clamp_min(MIN_SCALE).float()
    assert int(f32_ulps(scale, s64).max()) <= 4, "scale not within 4 ulps of float64's"
    p = x.float() * w.float()                      # mul.f32, as the kernel forms p
    top = p.abs().amax(-1, keepdim=True)
    h64 = x.double()
    r64 = torch.rsqrt((h64 * h64).mean(-1, keepdim=True) + EPS).float()
    k448 = torch.full_like(top, FP8_MAX)
    got = y.view(torch.uint8)
    found = torch.zeros_like(scale, dtype=torch.bool)
    for d in range(-8, 9):
        r = (r64.view(torch.int32) + d).view(torch.float32)
        s = torch.clamp_min((top * r) / k448, MIN_SCALE)
        q = ((p * r) * (1.0 / s)).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
        found |= (s == scale) & (q.view(torch.uint8) == got).all(-1, keepdim=True)
    assert bool(found.all()), f"{int((~found).sum())} rows match no f32 rstd near float64's"


@pytest.mark.parametrize("dt", ["f32", "bf16"])
@pytest.mark.parametrize("kind", ["float", "tensor"])
def test_static_scale_and_saturation(dt, kind):
    x, w = case((512, 4096), dt, seed=2)
    s = 0.004
    given = s if kind == "float" else torch.tensor([s], device="cuda")
    y, out = rms_norm_quant(x, w, EPS, scale=given)
    assert out is given
    want = ref64(x, w)
    assert bool(((want / s).abs() > FP8_MAX + 16).any())  # some values saturate
    assert_within_e4m3(y, torch.tensor(s, device="cuda"), want)


@pytest.mark.parametrize("dt", ["f32", "bf16", "f16"])
@pytest.mark.parametrize("dynamic", [True, False])
def test_residual_written_back_in_place(dt, dynamic):
    x, w = case((1000, 4096), dt, seed=3)
    r, _ = case((1000, 4096), dt, seed=4)
    h = (x.float() + r.float()).to(DT[dt])
    r_ptr = r.data_ptr()
    y, scale = rms_norm_quant(x, w, EPS, residual=r, scale=None if dynamic else 0.02)
    assert r.data_ptr() == r_ptr and torch.equal(r, h)
    want = ref64(h, w)
    assert_within_e4m3(y, scale if dynamic else torch.tensor(0.02, device="cuda"), want)


def test_offset_gemma():
    x, w = case((256, 2048), "bf16", seed=5, offset=1.0)
    y, scale = rms_norm_quant(x, w, EPS, offset=1.0)
    assert_within_e4m3(y, scale, ref64(x, w, 1.0))


def test_zero_rows_tiny_rows_and_no_rows():
    x, w = case((8, 1024), "f32", seed=6)
    x[2] = 0
    x[5] = 1e-30
    y, scale = rms_norm_quant(x, w, EPS)
    assert float(scale[2, 0]) == pytest.approx(MIN_SCALE, rel=0)
    assert float(scale[5, 0]) == pytest.approx(MIN_SCALE, rel=0)
    assert not bool(y.float().isnan().any())
    assert int((y.view(torch.uint8)[2] & 0x7F).max()) == 0
    y0, s0 = rms_norm_quant(x[:0], w)
    assert y0.shape == (0, 1024) and s0.shape == (0, 1)


def test_layouts_3d_strided_and_transposed():
    x, w = case((6, 100), "f32", seed=7)
    big = torch.randn(2, 3, 128, device="cuda")
    y, s = rms_norm_quant(big[..., :100], w)
    assert y.shape == (2, 3, 100) and s.shape == (2, 3, 1)
    assert_within_e4m3(y, s, ref64(big[..., :100], w))
    xt = torch.randn(100, 6, device="cuda").t()
    y, s = rms_norm_quant(xt, w)
    assert_within_e4m3(y, s, ref64(xt, w))


def test_repeated_calls_fast_path_and_determinism():
    """The memo's entry (second call on) gives the general path's bytes; results are
    the same bits on every run."""
    from ptxdsl.ops.rmsnorm import quant_api
    quant_api.clear()
    x, w = case((4096, 4096), "bf16", seed=8)
    runs = [rms_norm_quant(x, w, EPS) for _ in range(4)]
    assert len(quant_api.QUANT) == 1
    for y, s in runs[1:]:
        assert torch.equal(y.view(torch.uint8), runs[0][0].view(torch.uint8))
        assert torch.equal(s, runs[0][1])
    st = [rms_norm_quant(x, w, EPS, scale=0.01) for _ in range(3)]
    for y, s in st[1:]:
        assert s == 0.01 and torch.equal(y.view(torch.uint8), st[0][0].view(torch.uint8))
    r1, r2 = x.clone(), x.clone()
    a = rms_norm_quant(x, w, EPS, residual=r1)
    b = rms_norm_quant(x, w, EPS, residual=r2)
    assert torch.equal(a[0].view(torch.uint8), b[0].view(torch.uint8)) and torch.equal(r1, r2)


def test_numpy_on_the_gpu_matches_torch():
    import ml_dtypes
    x, w = case((64, 2048), "f32", seed=9)
    y, s = rms_norm_quant(x, w, EPS)
    yn, sn = rms_norm_quant(x.cpu().numpy(), w.cpu().numpy(), EPS)
    assert yn.dtype == ml_dtypes.float8_e4m3fn
    np.testing.assert_array_equal(yn.view(np.uint8), y.view(torch.uint8).cpu().numpy())
    np.testing.assert_array_equal(sn, s.cpu().numpy())
