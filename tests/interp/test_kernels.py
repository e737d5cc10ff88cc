"""Whole kernels in the seed's style on the interpreter against float64 numpy.

Softmax, SwiGLU and LayerNorm (tests/helpers/interp_kernels.py, not taken from
examples/) are written the way the seed writes RMSNorm: one CTA per row, warp
butterflies, per-warp partials in shared memory, ``bar.sync``. The seed RMSNorm itself is checked
over random shapes. All must match float64 to ~1e-6 relative.
"""
from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from interp_kernels import build_layer_norm, build_softmax, build_swiglu
from seed_kernels import build_rms_norm as _build_rms_norm

build_rms_norm = functools.lru_cache(maxsize=None)(_build_rms_norm)

TOL = 2e-6


def rel_err(got, ref):
    return float(np.max(np.abs(got - ref)) / max(np.max(np.abs(ref)), 1e-30))


SHAPES = st.tuples(st.integers(1, 6), st.sampled_from([128, 256, 384, 512, 1024]))


@settings(max_examples=12, deadline=None)
@given(shape=SHAPES, seed=st.integers(0, 2 ** 16), scale=st.sampled_from([0.01, 1.0, 30.0]))
def test_softmax_matches_float64(shape, seed, scale):
    B, N = shape
    x = (np.random.default_rng(seed).standard_normal((B, N)) * scale).astype(np.float32)
    y = build_softmax(N).interpret(x)
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(1, keepdims=True))
    ref = e / e.sum(1, keepdims=True)
    assert rel_err(y, ref) < TOL


@settings(max_examples=12, deadline=None)
@given(B=st.integers(1, 5), N=st.integers(1, 200), seed=st.integers(0, 2 ** 16))
def test_swiglu_matches_float64(B, N, seed):
    rng = np.random.default_rng(seed)
    a = (rng.standard_normal((B, N)) * 4).astype(np.float32)
    g = rng.standard_normal((B, N)).astype(np.float32)
    y = build_swiglu(N).interpret(a, g)
    a64 = a.astype(np.float64)
    ref = a64 / (1 + np.exp(-a64)) * g
    assert np.all(np.abs(y - ref) <= TOL * np.abs(ref) + 1e-30)


@settings(max_examples=12, deadline=None)
@given(shape=SHAPES, seed=st.integers(0, 2 ** 16), shift=st.sampled_from([0.0, 10.0]))
def test_layer_norm_matches_float64(shape, seed, shift):
    B, N = shape
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((B, N)) + shift).astype(np.float32)
    w = rng.standard_normal(N).astype(np.float32)
    b = rng.standard_normal(N).astype(np.float32)
    y = build_layer_norm(N).interpret(x, w, b)
    x64 = x.astype(np.float64)
    mu = x64.mean(1, keepdims=True)
    ref = (x64 - mu) / np.sqrt(((x64 - mu) ** 2).mean(1, keepdims=True) + 1e-5) * w + b
    assert rel_err(y, ref) < TOL


@settings(max_examples=15, deadline=None)
@given(B=st.integers(1, 8), n32=st.integers(1, 64), seed=st.integers(0, 2 ** 16))
def test_seed_rms_norm_matches_float64(B, n32, seed):
    N = 32 * n32 if n32 % 4 else 128 * (n32 // 4)   # multiples of 32 and of 128
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((B, N)).astype(np.float32)
    w = rng.standard_normal(N).astype(np.float32)
    y = build_rms_norm(B, N).interpret(x, w)
    x64 = x.astype(np.float64)
    ref = x64 / np.sqrt((x64 ** 2).mean(1, keepdims=True) + 1e-6) * w
    assert rel_err(y, ref) < TOL


def test_outputs_passed_in_are_written_in_place_and_dims_checked():
    k = build_softmax(128)
    x = np.random.default_rng(1).standard_normal((3, 128)).astype(np.float32)
    out = np.full((3, 128), np.nan, np.float32)
    r = k.interpret(x, out)
    assert r is out and np.all(np.isfinite(out))
    from ptxdsl.core.errors import LaunchError
    with pytest.raises(LaunchError, match="float32"):
        k.interpret(x.astype(np.float64))
    with pytest.raises(LaunchError, match="needs 128 along axis 1"):
        k.interpret(np.zeros((3, 64), np.float32))
    with pytest.raises(LaunchError, match="dim B is 3 elsewhere"):
        k.interpret(x, np.zeros((4, 128), np.float32))


def test_interpret_env_var_routes_kernel_calls(monkeypatch):
    monkeypatch.setenv("PTXDSL_INTERPRET", "1")
    # A kernel made now: the variable is read when a kernel is defined, and the cached
    # builder may hold one from a hypothesis example that drew N=40 without it.
    k = build_swiglu.__wrapped__(40)
    a = np.ones((2, 40), np.float32)
    y = k(a, a)
    np.testing.assert_allclose(y, 1 / (1 + np.exp(-1.0)), rtol=1e-6)
