"""ptxdsl's ops on jax arrays (ptxdsl.runtime.jax_ops), differentiated by jax: each
gradient comes from the op's own backward kernels (here on the CPU interpreter, at tiny
shapes) and is checked against jax's autodiff of a float32 reference."""
from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

from ptxdsl.runtime import jax_ops  # noqa: E402

pytestmark = pytest.mark.skipif(jax.default_backend() == "gpu",
                                reason="the CPU interpreter path; GPU: tests/gpu/test_jax_gpu.py")


def _rms_ref(x, w, eps=1e-6, offset=0.0):
    x = x.astype(jnp.float32)
    return x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + eps) * (offset + w)


def test_rms_norm_grad_inside_jit_matches_jax_autodiff():
    rng = np.random.default_rng(1)
    x = jnp.asarray(rng.standard_normal((3, 64)), jnp.float32)
    w = jnp.asarray(rng.standard_normal(64), jnp.float32)
    c = jnp.asarray(rng.standard_normal((3, 64)), jnp.float32)

    def loss(f):
        return lambda a, b: jnp.sum(f(a, b) * c)

    got = jax.jit(jax.grad(loss(lambda a, b: jax_ops.rms_norm(a, b, offset=1.0)),
                           argnums=(0, 1)))(x, w)
    want = jax.grad(loss(lambda a, b: _rms_ref(a, b, offset=1.0)), argnums=(0, 1))(x, w)
    for g, r in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(r), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(jax_ops.rms_norm(x, w)), np.asarray(_rms_ref(x, w)),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.long
def test_matmul_grad_is_two_products():
    rng = np.random.default_rng(2)
    a = jnp.asarray(rng.standard_normal((16, 32)), jnp.bfloat16)
    b = jnp.asarray(rng.standard_normal((32, 8)), jnp.bfloat16)
    c = jnp.asarray(rng.standard_normal((16, 8)), jnp.float32)
    out = jax_ops.matmul(a, b, out_dtype=jnp.float32)
    assert out.dtype == jnp.float32
    f32 = lambda t: t.astype(jnp.float32)  # noqa: E731
    np.testing.assert_allclose(np.asarray(out), np.asarray(f32(a) @ f32(b)), rtol=1e-2,
                               atol=1e-2)
    da, db = jax.grad(lambda x, y: jnp.sum(jax_ops.matmul(x, y, out_dtype=jnp.float32) * c),
                      argnums=(0, 1))(a, b)
    assert da.dtype == jnp.bfloat16 and db.shape == (32, 8)
    ra, rb = jax.grad(lambda x, y: jnp.sum((x @ y) * c), argnums=(0, 1))(f32(a), f32(b))
    np.testing.assert_allclose(np.asarray(f32(da)), np.asarray(ra), rtol=3e-2, atol=6e-2)
    np.testing.assert_allclose(np.asarray(f32(db)), np.asarray(rb), rtol=3e-2, atol=6e-2)


def test_vmap_runs_each_batch_element():
    rng = np.random.default_rng(3)
    x = jnp.asarray(rng.standard_normal((2, 3, 64)), jnp.float32)
    w = jnp.asarray(rng.standard_normal(64), jnp.float32)
    got = jax.vmap(lambda t: jax_ops.rms_norm(t, w))(x)
    np.testing.assert_allclose(np.asarray(got), np.asarray(_rms_ref(x, w)), rtol=1e-5,
                               atol=1e-5)


def _attn_ref(q, k, v, causal):
    q, k, v = (t.astype(jnp.float32) for t in (q, k, v))
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(q.shape[-1])
    if causal:
        sq, sk = q.shape[1], k.shape[1]
        keep = jnp.arange(sk)[None, :] <= jnp.arange(sq)[:, None] + sk - sq
        s = jnp.where(keep, s, -jnp.inf)
    return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, -1), v)


@pytest.mark.long
@pytest.mark.parametrize("causal", [False, True])
def test_attention_grad_uses_the_backward_kernels(causal):
    rng = np.random.default_rng(4)
    q, k, v = (jnp.asarray(rng.standard_normal((1, 16, 1, 64)), jnp.bfloat16)
               for _ in range(3))
    c = jnp.asarray(rng.standard_normal((1, 16, 1, 64)), jnp.float32)
    loss = lambda f: lambda *t: jnp.sum(f(*t).astype(jnp.float32) * c)  # noqa: E731
    got = jax.jit(jax.grad(loss(lambda *t: jax_ops.attention(*t, causal=causal)),
                           argnums=(0, 1, 2)))(q, k, v)
    want = jax.grad(loss(lambda *t: _attn_ref(*t, causal)), argnums=(0, 1, 2))(q, k, v)
    for g, r in zip(got, want):
        assert g.dtype == jnp.bfloat16
        np.testing.assert_allclose(np.asarray(g, np.float32), np.asarray(r, np.float32),
                                   rtol=5e-2, atol=5e-2)
