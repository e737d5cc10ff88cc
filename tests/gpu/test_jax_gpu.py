"""ptxdsl kernels inside jax.jit on the GPU: the XLA FFI custom call
(ptxdsl.runtime.jax_ffi) launching on XLA's stream, against numpy; and pyptx's fixed
experimental flash-attention examples on the GPU through the same path.

Run: ``python -m pytest tests/gpu/test_jax_gpu.py -q`` (needs jax with CUDA).
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from gpu_env import NEEDS_GPU
from jax_kernels import axpy2, widen_and_copy

pytestmark = NEEDS_GPU
jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

from ptxdsl.runtime import jax_ffi  # noqa: E402


@pytest.fixture(autouse=True)
def _jax_on_gpu():
    if jax.default_backend() != "gpu":
        pytest.skip("jax has no GPU backend here (install jax's CUDA wheels)")


def test_ffi_call_inside_jit_matches_numpy():
    f = jax_ffi.jax_call(axpy2)
    x = jnp.arange(10_000, dtype=jnp.float32)
    y = jnp.full(10_000, 0.25, jnp.float32)
    step = jax.jit(lambda a, b: f(a, b) - 1.0)
    for _ in range(3):  # the kernel is loaded once, launched each call
        got = np.asarray(step(x, y))
    np.testing.assert_allclose(got, 2 * np.arange(10_000) + 0.25 - 1.0)
    text = jax.jit(lambda a, b: f(a, b)).lower(x, y).as_text()
    assert jax_ffi.TARGET in text and "ptxdsl_kernel" in text


def test_ffi_bf16_and_two_outputs_and_vmap():
    x = (jnp.arange(3 * 64, dtype=jnp.float32) / 4).reshape(3, 64).astype(jnp.bfloat16)
    wide, same = jax.jit(jax_ffi.jax_call(widen_and_copy))(x)
    np.testing.assert_array_equal(np.asarray(wide), np.asarray(x, np.float32))
    np.testing.assert_array_equal(np.asarray(same, np.float32), np.asarray(x, np.float32))
    f = jax_ffi.jax_call(axpy2)
    xs = jnp.arange(2 * 300, dtype=jnp.float32).reshape(2, 300)
    np.testing.assert_allclose(np.asarray(jax.vmap(f)(xs, xs)), 3 * np.asarray(xs))


FA = {"flash_attention_parallel": lambda m: m.build_flash_attention_parallel(256, 512),
      "flash_attention_wgmma_kloop": lambda m: m.build_flash_attention_kloop(512),
      "flash_attention_hopper": lambda m: m.build_flash_attention_hopper(256, 512, 64)}


@pytest.mark.parametrize("name", sorted(FA))
def test_pyptx_flash_attention_fixed_on_the_gpu(name):
    import ml_dtypes

    from bench import pyptx_examples
    from pyptx_fixes import fenced
    try:
        k = FA[name](pyptx_examples.load(name, "hopper/experimental", patch=fenced))
    except pyptx_examples.Unavailable as e:
        pytest.skip(str(e))
    (m, hd), n = k.in_specs[0].dims, k.in_specs[1].dims[1]
    rng = np.random.default_rng(3)
    q, kk, v = (rng.standard_normal(s).astype(ml_dtypes.bfloat16)
                for s in ((m, hd), (n, hd), (n, hd)))
    out = jax.jit(jax_ffi.jax_call(k))(jnp.asarray(q), jnp.asarray(np.ascontiguousarray(kk.T)),
                                       jnp.asarray(v))
    s = q.astype(np.float32) @ kk.astype(np.float32).T / math.sqrt(hd)
    p = np.exp(s - s.max(1, keepdims=True))
    ref = (p / p.sum(1, keepdims=True)) @ v.astype(np.float32)
    np.testing.assert_allclose(np.asarray(out, np.float32), ref, atol=2e-2)
