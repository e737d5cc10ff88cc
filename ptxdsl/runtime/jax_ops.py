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

Each op call (forward or backward) is one custom call (:mod:`.jax_op_ffi`): on the GPU
the XLA FFI call ``ptxdsl_op``, which runs the op's kernels on XLA's buffers and stream
(no host copies; it needs torch, whose CUDA path of the op it runs); on a machine without
a GPU a ``jax.pure_callback`` into the op's numpy API, which runs ptxdsl's CPU
interpreter (exact, slow: tiny shapes). The ops' shape and dtype rules
apply (matmul: float16 / bfloat16 operands; attention: ``(B, S, H, D)`` float16 /
bfloat16, backward head dims 64 and 128); their errors surface when jax traces the call.
"""
from __future__ import annotations

import functools

import numpy as np

from .jax_op_ffi import call

__all__ = ["rms_norm", "matmul", "attention"]


def _like(shape, dtype):
    import jax
    return jax.ShapeDtypeStruct(tuple(shape), np.dtype(dtype))


def _with_vjp(fwd, bwd):
    """The jax function ``fwd(...)[0]`` whose gradient is ``bwd(saved, cotangent)``
    (``fwd`` returns ``(output, saved)``)."""
    import jax

    @jax.custom_vjp
    def f(*args):
        return fwd(*args)[0]

    f.defvjp(fwd, bwd)
    return f


# ---------------------------------------------------------------- rms_norm
@functools.lru_cache(maxsize=None)
def _rms_norm(eps: float, offset: float):
    def fwd(x, w):
        rows = x.shape[:-1]
        y, rstd = call("rms_norm", {"eps": eps, "offset": offset},
                       (_like(x.shape, x.dtype), _like(rows, np.float32)), x, w)
        return y, (x, w, rstd)

    def bwd(saved, dy):
        x, w, rstd = saved
        dx, dw = call("rms_norm_backward", {"offset": offset},
                      (_like(x.shape, x.dtype), _like(w.shape, w.dtype)),
                      dy.astype(x.dtype), x, w, rstd)
        return dx, dw

    return _with_vjp(fwd, bwd)


def rms_norm(x, weight, eps: float = 1e-6, *, offset: float = 0.0):
    """``x / sqrt(mean(x², -1) + eps) * (offset + weight)`` over the last dim
    (:func:`ptxdsl.ops.rms_norm`), differentiable in ``x`` and ``weight``."""
    return _rms_norm(float(eps), float(offset))(x, weight)


# ---------------------------------------------------------------- matmul
@functools.lru_cache(maxsize=None)
def _matmul(out_dtype):

    def product(a, b, odt):
        return call("matmul", {"out_dtype": odt},
                    (_like(a.shape[:-1] + b.shape[-1:], odt or a.dtype),), a, b)[0]

    def fwd(a, b):
        return product(a, b, out_dtype), (a, b)

    def bwd(saved, dc):
        a, b = saved
        g = dc.astype(a.dtype)   # the op multiplies f16/bf16 operands
        da = product(g, b.T, None).astype(a.dtype)
        db = product(a.T, g, None).astype(b.dtype)
        return da, db

    return _with_vjp(fwd, bwd)


def matmul(a, b, *, out_dtype=None):
    """``a @ b`` for 2-D float16 / bfloat16 ``a`` (M, K) and ``b`` (K, N)
    (:func:`ptxdsl.ops.matmul`; ``out_dtype`` e.g. ``jnp.float32``), differentiable in
    both: the gradient of each is one more product (``dC`` in the inputs' dtype)."""
    odt = None if out_dtype is None else np.dtype(out_dtype).name
    return _matmul(odt)(a, b)


# ---------------------------------------------------------------- attention
@functools.lru_cache(maxsize=None)
def _attention(causal: bool, scale, window, softcap: float):
    opts = dict(causal=causal, softmax_scale=scale, window_size=list(window),
                softcap=softcap)

    def fwd(q, k, v):
        b, sq, h, _ = q.shape
        out, lse = call("attention", opts,
                        (_like(q.shape, q.dtype), _like((b, h, sq), np.float32)), q, k, v)
        return out, (q, k, v, out, lse)

    def bwd(saved, dout):
        q, k, v, out, lse = saved
        return call("attention_backward", opts,
                    (_like(q.shape, q.dtype), _like(k.shape, k.dtype),
                     _like(v.shape, v.dtype)), dout.astype(q.dtype), q, k, v, out, lse)

    return _with_vjp(fwd, bwd)


def attention(q, k, v, *, causal: bool = False, softmax_scale: float | None = None,
              window_size=(-1, -1), softcap: float = 0.0):
    """``softmax(q kᵀ * scale [+ mask]) v`` per head (:func:`ptxdsl.ops.attention`: q
    ``(B, Sq, H, D)``, k and v ``(B, Sk, Hkv, D)``), differentiable in q, k and v
    (:func:`ptxdsl.ops.attention_backward`)."""
    scale = None if softmax_scale is None else float(softmax_scale)
    return _attention(bool(causal), scale, tuple(window_size), float(softcap))(q, k, v)
