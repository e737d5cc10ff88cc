"""ptxdsl's ops on jax arrays, differentiable: ``rms_norm``, ``matmul``, ``attention``.

Each is a ``jax.custom_vjp`` function whose forward and backward run the op's own kernels
(:mod:`ptxdsl.ops`): the forward saves what the op's backward needs (rms_norm's per-row
``rstd``, attention's ``out`` and row log-sum-exp), and the backward calls
``ptxdsl.ops.rms_norm_backward``, ``ptxdsl.ops.attention_backward``, or for a product
``C = A @ B`` two more products, ``dA = dC @ Bᵀ`` and ``dB = Aᵀ @ dC``. So ``jax.grad``,
``jax.jit`` and ``jax.vmap`` (batch elements one after another) work through them::

    from ptxdsl.runtime import jax_ops
    loss = lambda x, w: jnp.sum(jax_ops.rms_norm(x, w) ** 2)
    dx, dw = jax.jit(jax.grad(loss, argnums=(0, 1)))(x, w)

Each kernel call is a ``jax.pure_callback`` into the op's numpy API: on a machine without
a GPU that runs ptxdsl's CPU interpreter (exact, slow: tiny shapes); with one, the op's
GPU kernels, with the arrays copied through the host (a single kernel's zero-copy path
inside XLA is :func:`ptxdsl.runtime.jax_ffi.jax_call`). The ops' shape and dtype rules
apply (matmul: float16 / bfloat16 operands; attention: ``(B, S, H, D)`` float16 /
bfloat16, backward head dims 64 and 128); their errors surface when jax traces the call.
"""
from __future__ import annotations

import functools

import numpy as np

__all__ = ["rms_norm", "matmul", "attention"]


def _host(fn, outs, *args):
    """``fn`` (numpy in, numpy out) as a jax computation whose results are ``outs``."""
    import jax

    def run(*arrays):
        res = fn(*(np.asarray(a) for a in arrays))
        res = res if isinstance(res, tuple) else (res,)
        return tuple(np.asarray(r).astype(o.dtype, copy=False).reshape(o.shape)
                     for r, o in zip(res, outs))

    return jax.pure_callback(run, tuple(outs), *args, vmap_method="sequential")


def _like(shape, dtype):
    import jax
    return jax.ShapeDtypeStruct(tuple(shape), np.dtype(dtype))


# ---------------------------------------------------------------- rms_norm
@functools.lru_cache(maxsize=None)
def _rms_norm(eps: float, offset: float):
    import jax
    from ..ops import rmsnorm

    def fwd_host(x, w):
        return rmsnorm.rms_norm(x, w, eps, offset=offset, return_rstd=True)

    def fwd(x, w):
        rows = x.shape[:-1]
        y, rstd = _host(fwd_host, (_like(x.shape, x.dtype), _like(rows, np.float32)), x, w)
        return y, (x, w, rstd)

    def bwd(saved, dy):
        x, w, rstd = saved
        dx, dw = _host(lambda g, a, b, r: rmsnorm.rms_norm_backward(g, a, b, r, offset=offset),
                       (_like(x.shape, x.dtype), _like(w.shape, w.dtype)),
                       dy.astype(x.dtype), x, w, rstd)
        return dx, dw

    @jax.custom_vjp
    def f(x, w):
        return fwd(x, w)[0]

    f.defvjp(fwd, bwd)
    return f


def rms_norm(x, weight, eps: float = 1e-6, *, offset: float = 0.0):
    """``x / sqrt(mean(x², -1) + eps) * (offset + weight)`` over the last dim
    (:func:`ptxdsl.ops.rms_norm`), differentiable in ``x`` and ``weight``."""
    return _rms_norm(float(eps), float(offset))(x, weight)


# ---------------------------------------------------------------- matmul
@functools.lru_cache(maxsize=None)
def _matmul(out_dtype):
    import jax
    from ..ops.matmul import api

    def product(a, b, odt):
        return _host(lambda x, y: api.matmul(x, y, out_dtype=odt),
                     (_like(a.shape[:-1] + b.shape[-1:], odt or a.dtype),), a, b)[0]

    def fwd(a, b):
        return product(a, b, out_dtype), (a, b)

    def bwd(saved, dc):
        a, b = saved
        g = dc.astype(a.dtype)   # the op multiplies f16/bf16 operands
        da = product(g, b.T, None).astype(a.dtype)
        db = product(a.T, g, None).astype(b.dtype)
        return da, db

    @jax.custom_vjp
    def f(a, b):
        return fwd(a, b)[0]

    f.defvjp(fwd, bwd)
    return f


def matmul(a, b, *, out_dtype=None):
    """``a @ b`` for 2-D float16 / bfloat16 ``a`` (M, K) and ``b`` (K, N)
    (:func:`ptxdsl.ops.matmul`; ``out_dtype`` e.g. ``jnp.float32``), differentiable in
    both: the gradient of each is one more product (``dC`` in the inputs' dtype)."""
    odt = None if out_dtype is None else np.dtype(out_dtype).name
    return _matmul(odt)(a, b)


# ---------------------------------------------------------------- attention
@functools.lru_cache(maxsize=None)
def _attention(causal: bool, scale, window, softcap: float):
    import jax
    from ..ops.attention import api, bwd_api
    opts = dict(causal=causal, softmax_scale=scale, window_size=window, softcap=softcap)

    def fwd(q, k, v):
        b, sq, h, _ = q.shape
        out, lse = _host(lambda x, y, z: api.attention(x, y, z, return_lse=True, **opts),
                         (_like(q.shape, q.dtype), _like((b, h, sq), np.float32)), q, k, v)
        return out, (q, k, v, out, lse)

    def bwd(saved, dout):
        q, k, v, out, lse = saved
        return _host(lambda g, x, y, z, o, s: bwd_api.attention_backward(g, x, y, z, o, s,
                                                                         **opts),
                     (_like(q.shape, q.dtype), _like(k.shape, k.dtype),
                      _like(v.shape, v.dtype)), dout.astype(q.dtype), q, k, v, out, lse)

    @jax.custom_vjp
    def f(q, k, v):
        return fwd(q, k, v)[0]

    f.defvjp(fwd, bwd)
    return f


def attention(q, k, v, *, causal: bool = False, softmax_scale: float | None = None,
              window_size=(-1, -1), softcap: float = 0.0):
    """``softmax(q kᵀ * scale [+ mask]) v`` per head (:func:`ptxdsl.ops.attention`: q
    ``(B, Sq, H, D)``, k and v ``(B, Sk, Hkv, D)``), differentiable in q, k and v
    (:func:`ptxdsl.ops.attention_backward`)."""
    scale = None if softmax_scale is None else float(softmax_scale)
    return _attention(bool(causal), scale, tuple(window_size), float(softcap))(q, k, v)
