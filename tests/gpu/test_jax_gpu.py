"""ptxdsl kernels inside jax.jit on the GPU: the XLA FFI custom call
(ptxdsl.runtime.jax_ffi) launching on XLA's stream, against numpy; and pyptx's fixed
experimental flash-attention examples on the GPU through the same path.

Run: ``python -m pytest tests/gpu/test_jax_gpu.py -q`` (needs jax with CUDA).
"""
from __future__ import annotations

import math
import os
import subprocess
import sys

import numpy as np
import pytest

from gpu_env import NEEDS_GPU
from jax_kernels import axpy2, widen_and_copy

pytestmark = NEEDS_GPU
jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

from ptxdsl.runtime import jax_export, jax_ffi, jax_ops  # noqa: E402


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


_FRESH = """
import sys
import numpy as np, jax, jax.numpy as jnp
from jax import export
from ptxdsl.runtime import jax_export, jax_ffi
jax_ffi.register()
exp = export.deserialize(open(sys.argv[1], "rb").read())
x = jnp.arange(10_000, dtype=jnp.float32)
y = jnp.full(10_000, 0.25, jnp.float32)
for _ in range(3):
    out = np.asarray(exp.call(x, y))
np.testing.assert_allclose(out, 2 * np.arange(10_000) + 0.25 + 1.0)
assert jax_export.loaded_images() == 1, jax_export.loaded_images()
print("fresh process ok")
"""


def test_export_serialize_deserialize_and_call(tmp_path):
    from jax import export
    f = jax_ffi.jax_call(axpy2)
    x = jnp.arange(10_000, dtype=jnp.float32)
    y = jnp.full(10_000, 0.25, jnp.float32)
    exp = export.export(jax.jit(lambda a, b: f(a, b) + 1.0),
                        disabled_checks=[export.DisabledSafetyCheck.custom_call(
                            jax_ffi.TARGET)])(x, y)
    blob = exp.serialize()
    assert b"ptxdsl_launch" in blob
    want = 2 * np.arange(10_000) + 0.25 + 1.0
    # this process, the kernel object forgotten: the call runs from its own recipe
    saved = dict(jax_ffi._REGISTRY)
    jax_ffi._REGISTRY.clear()
    try:
        np.testing.assert_allclose(np.asarray(export.deserialize(blob).call(x, y)), want)
    finally:
        jax_ffi._REGISTRY.update(saved)
    assert jax_export.loaded_images() >= 1
    # a process that never traced the kernel
    path = tmp_path / "axpy2.jax_export"
    path.write_bytes(bytes(blob))
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-c", _FRESH, str(path)], capture_output=True,
                       text=True, env=env, timeout=300)
    assert r.returncode == 0 and "fresh process ok" in r.stdout, r.stdout + r.stderr


def test_op_gradients_on_the_gpu():
    rng = np.random.default_rng(5)
    x = jnp.asarray(rng.standard_normal((64, 512)), jnp.bfloat16)
    w = jnp.asarray(rng.standard_normal(512), jnp.bfloat16)
    dx, dw = jax.jit(jax.grad(lambda a, b: jnp.sum(jax_ops.rms_norm(a, b).astype(jnp.float32)),
                              argnums=(0, 1)))(x, w)

    def ref(a, b):
        a = a.astype(jnp.float32)
        return jnp.sum(a * jax.lax.rsqrt(jnp.mean(a * a, -1, keepdims=True) + 1e-6)
                       * b.astype(jnp.float32))
    rx, rw = jax.grad(ref, argnums=(0, 1))(x, w)
    np.testing.assert_allclose(np.asarray(dx, np.float32), np.asarray(rx), rtol=5e-2, atol=5e-2)
    np.testing.assert_allclose(np.asarray(dw, np.float32), np.asarray(rw), rtol=5e-2, atol=0.5)
    q, k, v = (jnp.asarray(rng.standard_normal((2, 256, 4, 128)), jnp.bfloat16)
               for _ in range(3))
    c = jnp.asarray(rng.standard_normal((2, 256, 4, 128)), jnp.float32)

    def attn_ref(q, k, v):
        q, k, v = (t.astype(jnp.float32) for t in (q, k, v))
        s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(q.shape[-1])
        s = jnp.where(jnp.tril(jnp.ones((256, 256), bool)), s, -jnp.inf)
        return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, -1), v)

    loss = lambda f: lambda *t: jnp.sum(f(*t).astype(jnp.float32) * c)  # noqa: E731
    got = jax.jit(jax.grad(loss(lambda *t: jax_ops.attention(*t, causal=True)),
                           argnums=(0, 1, 2)))(q, k, v)
    want = jax.grad(loss(attn_ref), argnums=(0, 1, 2))(q, k, v)
    for a, b in zip(got, want):
        np.testing.assert_allclose(np.asarray(a, np.float32), np.asarray(b), rtol=5e-2,
                                   atol=5e-2)


def test_ops_run_as_ffi_calls_on_xla_buffers():
    """Each op call is one ptxdsl_op FFI call (no host callback) on XLA's stream; the
    results match numpy, forward and backward, and a jax.export of it runs after its
    serialized form is read back."""
    pytest.importorskip("torch")
    from jax import export
    from ptxdsl.runtime import jax_op_ffi
    rng = np.random.default_rng(6)
    x = jnp.asarray(rng.standard_normal((128, 1024)), jnp.float32)
    w = jnp.asarray(rng.standard_normal(1024), jnp.float32)
    f = jax.jit(lambda a, b: jax_ops.rms_norm(a, b, offset=1.0) * 2.0)
    text = f.lower(x, w).as_text()
    assert "ptxdsl_op" in text and "callback" not in text
    xs = np.asarray(x)
    want = 2 * xs / np.sqrt(np.mean(xs * xs, -1, keepdims=True) + 1e-6) * (1 + np.asarray(w))
    for _ in range(3):
        np.testing.assert_allclose(np.asarray(f(x, w)), want, rtol=1e-4, atol=1e-4)
    a = jnp.asarray(rng.standard_normal((256, 512)), jnp.bfloat16)
    b = jnp.asarray(rng.standard_normal((512, 384)), jnp.bfloat16)
    mm = jax.jit(lambda p, q: jax_ops.matmul(p, q, out_dtype=jnp.float32))
    assert "callback" not in mm.lower(a, b).as_text()
    np.testing.assert_allclose(np.asarray(mm(a, b)),
                               np.asarray(a, np.float32) @ np.asarray(b, np.float32),
                               rtol=2e-2, atol=2e-1)
    g = jax.jit(jax.grad(lambda p, q: jnp.sum(jax_ops.matmul(p, q, out_dtype=jnp.float32) ** 2),
                         argnums=(0, 1)))
    assert g.lower(a, b).as_text().count("ptxdsl_op") >= 3
    exp = export.export(f, disabled_checks=[export.DisabledSafetyCheck.custom_call(
        jax_op_ffi.OP_TARGET)])(x, w)
    back = export.deserialize(exp.serialize())
    np.testing.assert_allclose(np.asarray(back.call(x, w)), want, rtol=1e-4, atol=1e-4)
