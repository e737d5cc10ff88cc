"""Gemma's ``offset``: ``y = x * rstd * (offset + w)``, forward and backward, on the CPU
interpreter against float64 numpy; dW stays bitwise deterministic (and offset-free)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import ptxdsl.interp  # noqa: F401  (the package's own interpreter: a broken one fails here)
from ptxdsl.core.errors import LaunchError
from ptxdsl.ops import rms_norm, rms_norm_backward
from ptxdsl.ops.rmsnorm.bwd import build_backward, plan_backward
from ptxdsl.ops.rmsnorm.bwd_dw import build_dw_reduce
from ptxdsl.ops.rmsnorm.fwd import build_forward, max_vec, plan
from ptxdsl.ops.rmsnorm.fwd_loop import build_forward_loop
from ptxdsl.core.types import bf16, bf16_bits_to_f32, f16, f32, f32_to_bf16_bits
from sweeps import sweep  # noqa: E402

EPS = 1e-6
OFFSETS = [1.0, -0.5, 0.25, 3.0]
SETTINGS = settings(max_examples=10, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def ref_fwd(x, w, offset, eps=EPS):
    x64 = x.astype(np.float64)
    rstd = 1.0 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + eps)
    return x64 * rstd * (offset + w.astype(np.float64)), rstd[..., 0]


def ref_bwd(dy, x, w, rstd, offset):
    """float64 dx, dw from the f32 rstd the forward saved."""
    n = x.shape[-1]
    x64, dy64, r64 = x.astype(np.float64), dy.astype(np.float64), \
        rstd.astype(np.float64)[:, None]
    g = dy64 * (offset + w.astype(np.float64))
    dx = r64 * (g - x64 * r64**2 * (g * x64).sum(-1, keepdims=True) / n)
    dw = (dy64 * x64 * r64).sum(0)
    # dx = rstd*(g - x*rstd^2*mean(g*x)) cancels: measure against the terms' size
    scale = np.maximum(np.abs(r64 * g).max(-1, keepdims=True), np.abs(dx).max(-1, keepdims=True))
    return dx, dw, scale, max(float(np.abs(dy64 * x64 * r64).sum(0).max()), 1e-30)


def rel_err(out, ref):
    scale = np.maximum(np.abs(ref).max(axis=-1, keepdims=True), 1e-30)
    return float(np.max(np.abs(out.astype(np.float64) - ref) / scale))


def _case(m, n, seed, wscale=0.1):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((m, n)).astype(np.float32)
    w = (rng.standard_normal(n) * wscale).astype(np.float32)  # Gemma: w stored as w - 1
    dy = rng.standard_normal((m, n)).astype(np.float32)
    return x, w, dy


# ---------------------------------------------------------------- forward
@SETTINGS
@given(m=st.integers(1, 4), n=st.sampled_from([1, 3, 8, 100, 257, 1000, 1030, 4097]),
       offset=st.sampled_from(OFFSETS), residual=st.booleans(), seed=st.integers(0, 2**16))
def test_forward_with_offset_matches_float64(m, n, offset, residual, seed):
    x, w, r = _case(m, n, seed)
    if residual:
        res = r.copy()
        y, rstd = rms_norm(x, w, EPS, offset=offset, residual=res, return_rstd=True)
        np.testing.assert_array_equal(res, x + r)
        x = x + r
    else:
        y, rstd = rms_norm(x, w, EPS, offset=offset, return_rstd=True)
    ref, rref = ref_fwd(x, w, offset)
    assert rel_err(y, ref) < 2e-6
    np.testing.assert_allclose(rstd, rref, rtol=1e-6)


def test_forward_with_offset_on_strided_rows_and_leading_dims():
    rng = np.random.default_rng(1)
    big = rng.standard_normal((2, 3, 100)).astype(np.float32)
    x = big[..., :96]  # rows are not contiguous with each other
    w = (rng.standard_normal(96) * 0.1).astype(np.float32)
    y = rms_norm(x, w, EPS, offset=1.0)
    assert y.shape == x.shape
    assert rel_err(y, ref_fwd(x, w, 1.0)[0]) < 2e-6


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dtype=st.sampled_from([f16, bf16]), wf32=st.booleans(),
       n=st.sampled_from([8, 100, 1030, 2048]), seed=st.integers(0, 2**16))
def test_half_forward_with_offset_within_one_ulp(dtype, wf32, n, seed):
    """f16/bf16 rows, f32 or half weights: offset + w is formed in f32 (the weight is
    widened first), the output within 1 ulp of the correctly rounded f64 answer."""
    x, w, _ = _case(2, n, seed)
    if dtype == f16:
        xh, wh = x.astype(np.float16), w.astype(np.float16)
        xw, ww = xh.astype(np.float32), wh.astype(np.float32)
    else:
        xh, wh = f32_to_bf16_bits(x), f32_to_bf16_bits(w)
        xw, ww = bf16_bits_to_f32(xh), bf16_bits_to_f32(wh)
    wa, wv = (w, w) if wf32 else (wh, ww)
    k = build_forward(plan(n, dtype, max_vec(n, dtype)), dtype, f32 if wf32 else dtype,
                      eps=EPS, offset=1.0)
    y = np.zeros_like(xh)
    k.interpret(xh, wa, y)
    ref = ref_fwd(xw, wv, 1.0)[0]
    if dtype == f16:
        got, ref_r = y.astype(np.float64), ref.astype(np.float16).astype(np.float64)
        ulp = np.spacing(np.abs(ref.astype(np.float16))).astype(np.float64)
    else:
        rb = f32_to_bf16_bits(ref.astype(np.float32))
        got, ref_r = bf16_bits_to_f32(y).astype(np.float64), bf16_bits_to_f32(rb)
        ulp = np.abs(bf16_bits_to_f32(rb + 1).astype(np.float64) - ref_r)
    assert (np.abs(got - ref_r) / np.maximum(ulp, 1e-30)).max() <= 1.0


@pytest.mark.parametrize("residual", [False, True])
def test_persistent_forward_with_offset(residual):
    """The loop kernel (w loaded once per CTA, the offset added once) over several rows."""
    m, n = 7, 1000
    x, w, r = _case(m, n, 4)
    k = build_forward_loop(plan(n, f32), f32, f32, 2, eps=EPS, residual=residual,
                           with_rstd=True, offset=1.0)
    if residual:
        y, rstd = np.zeros_like(x), np.zeros(m, np.float32)
        k.interpret(x, r, w, y, r, rstd)
        x = r
    else:
        y, rstd = k.interpret(x, w)
    ref, rref = ref_fwd(x, w, 1.0)
    assert rel_err(y, ref) < 2e-6
    np.testing.assert_allclose(rstd, rref, rtol=1e-6)


def test_offset_zero_records_the_plain_kernel_and_offset_one_add_per_weight():
    """offset=0 emits the PTX of the kernels without it (no cost to plain calls);
    another offset adds exactly one add.f32 per weight value a thread loads."""
    for n, dt in [(8192, f32), (8192, bf16), (100, f32), (65536, f32)]:
        p = plan(n, dt)
        plain = build_forward(p, dt, dt).ptx()
        assert build_forward(p, dt, dt, offset=0.0).ptx() == plain
        gemma = build_forward(p, dt, dt, offset=1.0).ptx()
        per_thread = p.per_thread * p.vec
        assert gemma.count("add.f32") - plain.count("add.f32") == per_thread, (n, dt)
        assert "0f3F800000" in gemma  # 1.0 as an f32 immediate
    bp = plan_backward(8192, f32, 132)
    assert build_backward(bp, f32, f32, offset=0.0).ptx() == build_backward(bp, f32, f32).ptx()


def test_bad_offsets_are_explained():
    x, w = np.zeros((2, 8), np.float32), np.zeros(8, np.float32)
    with pytest.raises(LaunchError, match="offset must be a real number"):
        rms_norm(x, w, offset="one")
    with pytest.raises(LaunchError, match="offset must be finite"):
        rms_norm(x, w, offset=float("nan"))
    with pytest.raises(LaunchError, match="offset must be finite"):
        rms_norm_backward(x, x, w, np.ones(2, np.float32), offset=float("inf"))


# ---------------------------------------------------------------- backward
@SETTINGS
@given(m=st.integers(1, 6), n=st.sampled_from([1, 8, 96, 257, 1000, 1030, 4097]),
       offset=st.sampled_from(OFFSETS), seed=st.integers(0, 2**16))
def test_backward_with_offset_matches_float64(m, n, offset, seed):
    x, w, dy = _case(m, n, seed)
    rstd = ref_fwd(x, w, offset)[1].astype(np.float32)
    dx, dw = rms_norm_backward(dy, x, w, rstd, offset=offset)
    rdx, rdw, scale, dscale = ref_bwd(dy, x, w, rstd, offset)
    assert float(np.max(np.abs(dx - rdx) / scale)) < 1e-5
    assert float(np.max(np.abs(dw - rdw))) <= 1e-5 * dscale


@pytest.mark.parametrize("kind", sweep(["fused", "unfused", "streaming", "staged"], keep=1))
def test_every_backward_schedule_takes_the_offset(kind):
    """Registers-resident (fused and two-launch), streamed and shared-memory-staged rows
    all read offset + w for dx, and their dW is the plain kernel's, bit for bit (dW does
    not depend on w)."""
    m, n, offset = 5, 2048 if kind == "streaming" else 1024, 1.0
    if kind == "fused":
        p = plan_backward(n, f32, 2)
    elif kind == "unfused":
        p = plan_backward(n, f32, 2, fused=False)
    elif kind == "streaming":
        p = plan_backward(n, f32, 2, threads=32, ctas_per_sm=1)
        assert p.streaming
    else:
        p = plan_backward(n, f32, 2, threads=128, ctas_per_sm=1, stages=2)
        assert p.stages == 2
    x, w, dy = _case(m, n, 7)
    rstd = ref_fwd(x, w, offset)[1].astype(np.float32)

    def run(off):
        k = build_backward(p, f32, f32, offset=off)
        if p.fused:
            dx, dw, _ = k.interpret(dy, x, w, rstd, np.zeros(2, np.uint32))
        else:
            dx, part = k.interpret(dy, x, w, rstd)
            dw = build_dw_reduce(n, p.grid, f32).interpret(part)
        return dx, dw

    dx, dw = run(offset)
    rdx, rdw, scale, dscale = ref_bwd(dy, x, w, rstd, offset)
    assert float(np.max(np.abs(dx - rdx) / scale)) < 1e-5
    assert float(np.max(np.abs(dw - rdw))) <= 1e-5 * dscale
    dx0, dw0 = run(0.0)
    np.testing.assert_array_equal(dw.view(np.uint32), dw0.view(np.uint32))
    assert not np.array_equal(dx, dx0)


def test_backward_with_offset_dweight_is_bitwise_repeatable():
    x, w, dy = _case(37, 96, 3)
    rstd = ref_fwd(x, w, 1.0)[1].astype(np.float32)
    runs = [rms_norm_backward(dy, x, w, rstd, offset=1.0)[1].view(np.uint32)
            for _ in range(3)]
    assert all(np.array_equal(runs[0], r) for r in runs[1:])


def test_plan_caches_kernels_per_offset():
    """The ops' kernel cache keys the offset: a call with another offset never runs a
    kernel built for the first."""
    x, w, _ = _case(2, 64, 9)
    y0 = rms_norm(x, w, EPS)
    y1 = rms_norm(x, w, EPS, offset=1.0)
    y0b = rms_norm(x, w, EPS, offset=0.0)
    np.testing.assert_array_equal(y0, y0b)
    assert rel_err(y1, ref_fwd(x, w, 1.0)[0]) < 2e-6
    assert dataclasses.is_dataclass(plan(64, f32))


@pytest.mark.long
def test_cluster_kernels_take_the_offset():
    """The long-row kernels (a cluster of CTAs per row) add the offset to each weight
    they load, and record their plain PTX at offset 0."""
    from ptxdsl.ops.rmsnorm.bwd_cluster import build_backward_cluster, plan_backward_cluster
    from ptxdsl.ops.rmsnorm.fwd_cluster import build_forward_cluster, plan_cluster
    for dt in (f32, bf16):
        for stages in (0, 2):  # one row per cluster; persistent through a ring (w held)
            cp = plan_cluster(131072, dt, stages=stages)
            plain = build_forward_cluster(cp, dt, dt).ptx()
            assert build_forward_cluster(cp, dt, dt, offset=0.0).ptx() == plain
            gemma = build_forward_cluster(cp, dt, dt, offset=1.0).ptx()
            assert gemma.count("add.f32") - plain.count("add.f32") == cp.per_thread * cp.vec
        bp = plan_backward_cluster(131072, dt, 4)
        plain = build_backward_cluster(bp, dt, dt).ptx()
        assert build_backward_cluster(bp, dt, dt, offset=0.0).ptx() == plain
        gemma = build_backward_cluster(bp, dt, dt, offset=1.0).ptx()
        assert gemma.count("add.f32") - plain.count("add.f32") == bp.per_thread * bp.vec
