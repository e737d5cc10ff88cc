"""``rms_norm_quant`` (RMSNorm with FP8 e4m3 output) on the CPU interpreter.

Against float64: the dequantised output within e4m3 rounding of the exact answer. Against
an f32 numpy model of what the kernel is documented to compute (``ptxdsl/ops/rmsnorm/
quant.py``), given the kernel's own rstd: the scales and the FP8 bytes bit for bit. The
residual is written back as ``rms_norm`` writes it.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import ptxdsl.interp  # noqa: F401  (the package's own interpreter: a broken one fails here)
from ptxdsl.core.errors import LaunchError
from ptxdsl.ops import rms_norm, rms_norm_quant
from ptxdsl.ops.rmsnorm.quant import FP8_MAX, MIN_SCALE, build_quant, plan_quant
from ptxdsl.core.types import bf16, f16, f32

import ml_dtypes  # noqa: E402
from sweeps import sweep  # noqa: E402
E4M3 = ml_dtypes.float8_e4m3fn
EPS = 1e-6
SETTINGS = settings(max_examples=10, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])
NS = [1, 3, 8, 17, 100, 257, 1024, 1030, 2048, 4097]
NP = {f32: np.float32, f16: np.float16, bf16: ml_dtypes.bfloat16}


def e4m3_ulp(v):
    """The spacing of e4m3 values at magnitude |v| (2^-9 below the normal range)."""
    a = np.maximum(np.abs(v), 2.0 ** -6)
    return np.exp2(np.floor(np.log2(a)) - 3)


def ref64(h, w, offset=0.0, eps=EPS):
    h64 = h.astype(np.float64)
    rstd = 1.0 / np.sqrt((h64 * h64).mean(-1, keepdims=True) + eps)
    return h64 * rstd * (offset + w.astype(np.float64))


def dequant(y, scale):
    return y.astype(np.float64) * np.asarray(scale, np.float64)


def assert_within_e4m3(y, scale, want64, slack=1e-5):
    """Each byte is the rounding of ``want / scale`` to e4m3 (within half a spacing, with
    f32 slack for values next to a midpoint), saturated at 448."""
    v = want64 / np.asarray(scale, np.float64)
    q = y.astype(np.float64)
    inside = np.abs(v) <= FP8_MAX
    err = np.abs(q - v)
    assert np.all(err[inside] <= e4m3_ulp(v[inside]) / 2 + np.abs(v[inside]) * slack + 1e-30)
    assert np.all(q[~inside] == np.sign(v[~inside]) * FP8_MAX)


def f32_model(h, w, rstd, offset=0.0, scale=None):
    """What the kernel computes, in f32 numpy, from its own rstd: p = h * (offset + w);
    y = p * rstd; dynamic scale = max(max|y| / 448, MIN_SCALE); q = e4m3(y * (1/scale))."""
    one = np.float32(1)
    wv = w.astype(np.float32) + np.float32(offset) if offset else w.astype(np.float32)
    p = h.astype(np.float32) * wv
    y = p * rstd.astype(np.float32)[..., None]
    if scale is None:
        s = np.maximum(np.abs(y).max(-1, keepdims=True) / np.float32(FP8_MAX),
                       np.float32(MIN_SCALE))
    else:
        s = np.full(y.shape[:-1] + (1,), np.float32(scale))
    v = y * (one / s)
    q = np.clip(v, -FP8_MAX, FP8_MAX).astype(E4M3)
    return q, s.astype(np.float32)


def _rows(m, n, seed, dtype=np.float32, spread=True):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((m, n))
    if spread:  # rows of very different sizes, one of them tiny
        x = x * np.exp2(rng.integers(-8, 8, (m, 1)))
    w = rng.standard_normal(n) * 0.5 + 0.3
    return x.astype(dtype), w.astype(dtype)


# ---------------------------------------------------------------- dynamic scale
@SETTINGS
@given(m=st.integers(1, 5), n=st.sampled_from(NS), offset=st.sampled_from([0.0, 1.0]),
       seed=st.integers(0, 2**16))
def test_dynamic_f32_matches_float64(m, n, offset, seed):
    x, w = _rows(m, n, seed)
    y, scale = rms_norm_quant(x, w, EPS, offset=offset)
    assert y.dtype == E4M3 and y.shape == x.shape
    assert scale.dtype == np.float32 and scale.shape == (m, 1)
    want = ref64(x, w, offset)
    amax = np.abs(want).max(-1, keepdims=True)
    np.testing.assert_allclose(scale, np.maximum(amax / FP8_MAX, MIN_SCALE), rtol=2e-6)
    assert_within_e4m3(y, scale, want)
    assert np.abs(y.astype(np.float32)).max() <= FP8_MAX


@SETTINGS
@given(m=st.integers(1, 4), n=st.sampled_from(NS), offset=st.sampled_from([0.0, 1.0]),
       seed=st.integers(0, 2**16))
def test_dynamic_scales_and_bytes_are_the_documented_f32_arithmetic(m, n, offset, seed):
    """Given the rstd the same row sum gives (rms_norm's kernel: same threads, same order),
    the scale is exactly the f32 max|y| / 448 and every byte the documented rounding."""
    x, w = _rows(m, n, seed)
    y, scale = rms_norm_quant(x, w, EPS, offset=offset)
    _, rstd = rms_norm(x, w, EPS, return_rstd=True)
    q, s = f32_model(x, w, rstd, offset)
    np.testing.assert_array_equal(scale.view(np.uint32), s.view(np.uint32))
    np.testing.assert_array_equal(y.view(np.uint8), q.view(np.uint8))


@pytest.mark.parametrize("dtype", [f16, bf16])
@pytest.mark.parametrize("wdt", sweep(["x", "f32"], keep=1))
def test_dynamic_half_inputs(dtype, wdt):
    """f16/bf16 rows (numpy float16 / ml_dtypes bfloat16), weights of x's dtype or f32."""
    for n in (8, 1000, 2048):
        x, w = _rows(3, n, n, NP[dtype])
        if wdt == "f32":
            w = w.astype(np.float32)
        y, scale = rms_norm_quant(x, w, EPS)
        want = ref64(x.astype(np.float64), w.astype(np.float64))
        np.testing.assert_allclose(scale[:, 0], np.abs(want).max(-1) / FP8_MAX, rtol=2e-6)
        assert_within_e4m3(y, scale, want)
        _, rstd = rms_norm(x, w, EPS, return_rstd=True)
        q, s = f32_model(x.astype(np.float32), w, rstd)
        np.testing.assert_array_equal(y.view(np.uint8), q.view(np.uint8))


def test_all_zero_rows_get_the_minimum_scale_and_zero_bytes():
    x, w = _rows(4, 256, 3)
    x[1] = 0.0
    x[3] = 1e-30  # normalises to about 1e-27: far below the clamp
    y, scale = rms_norm_quant(x, w, EPS)
    assert scale[1, 0] == np.float32(MIN_SCALE) and scale[3, 0] == np.float32(MIN_SCALE)
    assert not np.isnan(y.astype(np.float32)).any()
    assert (y[1].view(np.uint8) & 0x7F == 0).all() and (y[3].view(np.uint8) & 0x7F == 0).all()
    assert scale[0, 0] > MIN_SCALE and scale[2, 0] > MIN_SCALE


def test_eps_is_applied():
    """A tiny row is dominated by eps: its y (hence its scale) shrinks with a larger eps."""
    x = np.full((1, 64), 1e-3, np.float32)
    w = np.ones(64, np.float32)
    for eps in (1e-6, 1e-2):
        y, s = rms_norm_quant(x, w, eps)
        np.testing.assert_allclose(s[0, 0], 1e-3 / np.sqrt(1e-6 + eps) / FP8_MAX, rtol=2e-6)


# ---------------------------------------------------------------- static scale
@pytest.mark.parametrize("kind", ["float", "numpy"])
def test_static_scale(kind):
    x, w = _rows(5, 1030, 7, spread=False)
    s = 0.01  # small: the largest values saturate
    given_scale = s if kind == "float" else np.array([s], np.float32)
    y, out_scale = rms_norm_quant(x, w, EPS, scale=given_scale)
    assert out_scale is given_scale
    want = ref64(x, w)
    assert (np.abs(want / s) > FP8_MAX + 16).any()  # saturation is exercised
    assert_within_e4m3(y, np.float32(s), want)
    _, rstd = rms_norm(x, w, EPS, return_rstd=True)
    q, _ = f32_model(x, w, rstd, scale=s)
    np.testing.assert_array_equal(y.view(np.uint8), q.view(np.uint8))


def test_static_scale_array_of_one_element_any_shape():
    x, w = _rows(2, 64, 8)
    a, _ = rms_norm_quant(x, w, scale=0.25)
    for s in (np.float32(0.25), np.array(0.25, np.float32), np.array([[0.25]], np.float32)):
        b, got = rms_norm_quant(x, w, scale=s)
        assert got is s
        np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))


@pytest.mark.parametrize("bad,match", [
    (0.0, "positive finite"), (-1.0, "positive finite"), (float("nan"), "positive finite"),
    (float("inf"), "positive finite"), (1e-50, "positive finite"),
    (np.array([1.0, 2.0], np.float32), "one float32"),
    (np.array([1.0], np.float64), "one float32"), ("0.1", "number or a one-element")])
def test_bad_static_scales_are_explained(bad, match):
    x, w = _rows(2, 8, 0)
    with pytest.raises(LaunchError, match=match):
        rms_norm_quant(x, w, scale=bad)


# ---------------------------------------------------------------- residual
@SETTINGS
@given(m=st.integers(1, 4), n=st.sampled_from([4, 100, 1024, 1030]),
       dynamic=st.booleans(), dtype=st.sampled_from([f32, bf16]), seed=st.integers(0, 2**16))
def test_residual_is_added_normalised_and_written_back(m, n, dynamic, dtype, seed):
    x, w = _rows(m, n, seed, NP[dtype], spread=False)
    r, _ = _rows(m, n, seed + 1, NP[dtype], spread=False)
    h = (x.astype(np.float32) + r.astype(np.float32)).astype(NP[dtype])  # rounded to dtype
    res = r.copy()
    y, scale = rms_norm_quant(x, w, EPS, residual=res, scale=None if dynamic else 0.02)
    np.testing.assert_array_equal(res.view(np.uint8), h.view(np.uint8))
    want = ref64(h.astype(np.float64), w.astype(np.float64))
    assert_within_e4m3(y, scale if dynamic else np.float32(0.02), want)
    y2, scale2 = rms_norm_quant(h, w, EPS, scale=None if dynamic else 0.02)
    np.testing.assert_array_equal(y.view(np.uint8), y2.view(np.uint8))
    if dynamic:
        np.testing.assert_array_equal(scale, scale2)


def test_strided_residual_is_written_back():
    """numpy residuals without unit inner stride go through a copy, written back after."""
    x, w = _rows(3, 64, 2)
    big = np.random.default_rng(0).standard_normal((3, 128)).astype(np.float32)
    res = big[:, ::2]
    h = x + res
    rms_norm_quant(x, w, residual=res)
    np.testing.assert_array_equal(big[:, ::2], h)


# ---------------------------------------------------------------- layouts and shapes
def test_leading_dims_strided_rows_and_transposes():
    rng = np.random.default_rng(4)
    big = rng.standard_normal((2, 3, 100)).astype(np.float32)
    w = rng.standard_normal(96).astype(np.float32)
    x = big[..., :96]                     # strided rows, leading dims
    y, scale = rms_norm_quant(x, w)
    assert y.shape == (2, 3, 96) and scale.shape == (2, 3, 1)
    assert_within_e4m3(y, scale, ref64(x, w))
    xt = rng.standard_normal((96, 5)).astype(np.float32).T  # no unit inner stride: copied
    y, scale = rms_norm_quant(xt, w)
    assert_within_e4m3(y, scale, ref64(xt, w))


def test_no_rows():
    y, scale = rms_norm_quant(np.zeros((0, 16), np.float32), np.ones(16, np.float32))
    assert y.shape == (0, 16) and y.dtype == E4M3 and scale.shape == (0, 1)
    y, s = rms_norm_quant(np.zeros((0, 16), np.float32), np.ones(16, np.float32), scale=2.0)
    assert y.shape == (0, 16) and s == 2.0


def test_bad_inputs_are_explained():
    x = np.zeros((2, 8), np.float32)
    with pytest.raises(LaunchError, match=r"weight must have shape \(8,\)"):
        rms_norm_quant(x, np.zeros(7, np.float32))
    with pytest.raises(LaunchError, match="x must be float32, float16 or bfloat16"):
        rms_norm_quant(x.astype(np.int32), np.zeros(8, np.int32))
    with pytest.raises(LaunchError, match="residual must have x's shape"):
        rms_norm_quant(x, np.zeros(8, np.float32), residual=np.zeros((2, 4), np.float32))
    with pytest.raises(LaunchError, match="eps must be finite"):
        rms_norm_quant(x, np.zeros(8, np.float32), -1.0)
    with pytest.raises(LaunchError, match="offset must be finite"):
        rms_norm_quant(x, np.zeros(8, np.float32), offset=float("inf"))
    with pytest.raises(LaunchError, match="at least 1"):
        rms_norm_quant(np.zeros((2, 0), np.float32), np.zeros(0, np.float32))


# ---------------------------------------------------------------- the kernel
@pytest.mark.parametrize("dtype", [f32, bf16])
@pytest.mark.parametrize("dynamic", sweep([True, False], keep=1))
def test_long_rows_two_pass_give_the_same_bytes(dtype, dynamic):
    """Rows too long for registers read h and w again after the reduction; the bytes
    and scales are those of the one-pass kernel (p = h * w is formed the same way)."""
    n, m = 2048, 3
    p = plan_quant(n, dtype)
    assert not p.two_pass
    x, w = _rows(m, n, 11, NP[dtype])
    r, _ = _rows(m, n, 12, NP[dtype])
    outs = []
    for two in (False, True):
        k = build_quant(dataclasses.replace(p, two_pass=two), dtype, dtype, eps=EPS,
                        residual=True, dynamic=dynamic, offset=1.0)
        xb, rb, wb = (a.view(np.uint16) if dtype == bf16 else a for a in (x, r.copy(), w))
        y = np.zeros((m, n), np.uint8)
        extra = [] if dynamic else [np.array([0.03], np.float32)]
        sc = [np.zeros(m, np.float32)] if dynamic else []
        k.interpret(xb, rb, wb, *extra, y, rb, *sc)
        outs.append((y, rb, *sc))
    for a, b in zip(*outs):
        np.testing.assert_array_equal(a, b)


def test_plan_keeps_the_row_in_registers_up_to_32_values_per_thread():
    for n, dt in [(8192, bf16), (8192, f32), (16384, bf16), (32768, f32), (32768, bf16),
                  (4096, f16), (100, f32)]:
        p = plan_quant(n, dt)
        assert not p.two_pass and p.per_thread * p.vec <= 32, (n, dt)
    assert plan_quant(65536, bf16).two_pass and plan_quant(40000, f32).two_pass


@pytest.mark.parametrize("n,dtype", [(8192, bf16), (8192, f32), (4096, f16), (1000, f32)])
def test_one_read_of_x_one_write_of_y(n, dtype):
    """The kernel's global accesses: x (and r) loaded once per chunk, w once, the FP8
    bytes (and h) stored once; one bar.sync for the sum and the max together."""
    p = plan_quant(n, dtype)
    K = p.per_thread
    for residual in (False, True):
        for dynamic in (True, False):
            text = build_quant(p, dtype, dtype, residual=residual, dynamic=dynamic).ptx()
            loads = text.count("ld.global")
            stores = text.count("st.global")
            assert loads == K * (2 + residual) + (not dynamic), (n, dtype, residual, dynamic)
            assert stores == K * (1 + residual) + dynamic  # + the scale, by lane 0
            assert text.count("bar.sync") == (1 if p.threads > 32 else 0)
            assert "cvt.rn.satfinite.e4m3x2.f32" in text and "L1::evict_first" not in text


@pytest.mark.parametrize("ns", [
    pytest.param([65536], id="longest"),
    pytest.param([1, 100, 1000, 4096, 7168, 8192, 16384, 32768], id="the-rest",
                 marks=pytest.mark.long)])
def test_quant_kernels_assemble_without_spills(ns):
    from ptxdsl.toolchain import find_ptxas
    if find_ptxas() is None:
        pytest.skip("no ptxas")
    from ptxdsl.ops.rmsnorm.fwd import max_vec
    from ptxdsl.ops.rmsnorm.plan import quant_kernel
    for n in ns:
        for dt in (f32, bf16):
            for res in (False, True):
                for dyn in (False, True):
                    k = quant_kernel(n, dt, dt, max_vec(n, dt), res, dyn, EPS, 0.0, "sm_90a")
                    r = k.resources()
                    assert r.spill_stores == 0 and r.local == 0, (n, dt, res, dyn, r)


# ---------------------------------------------------------------- torch (CPU: the interpreter)
def test_torch_cpu_tensors():
    torch = pytest.importorskip("torch")
    from ptxdsl.ops.rmsnorm import quant_api
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 40, generator=g)
    w = torch.randn(40, generator=g).requires_grad_()
    r = torch.randn(3, 40, generator=g)
    h = x + r
    y, scale = rms_norm_quant(x, w, EPS, residual=r, offset=1.0)
    assert y.dtype == torch.float8_e4m3fn and scale.shape == (3, 1)
    assert scale.dtype == torch.float32 and not y.requires_grad
    torch.testing.assert_close(r, h, rtol=0, atol=0)
    yn, sn = rms_norm_quant(h.numpy(), w.detach().numpy(), EPS, offset=1.0)
    np.testing.assert_array_equal(y.view(torch.uint8).numpy(), yn.view(np.uint8))
    np.testing.assert_array_equal(scale.numpy(), sn)
    st = torch.tensor([0.05])
    y2, s2 = rms_norm_quant(h, w, EPS, offset=1.0, scale=st)
    assert s2 is st
    y3, _ = rms_norm_quant(h, w, EPS, offset=1.0, scale=0.05)
    torch.testing.assert_close(y2.view(torch.uint8), y3.view(torch.uint8), rtol=0, atol=0)
    with pytest.raises(LaunchError, match="number or a one-element"):
        rms_norm_quant(h, w, scale=np.array([0.05], np.float32))
    assert len(quant_api.QUANT) == 0  # CPU tensors are never recorded for the fast path
