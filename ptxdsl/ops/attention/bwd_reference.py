"""The float64 numpy reference of the backward, in flash_attn_func's layout: what the tests
and the benchmark check :func:`~.bwd_api.attention_backward` against."""
from __future__ import annotations

import numpy as np

from .reference import exp_scores


def attention_backward_reference(dout, q, k, v, *, causal: bool = False,
                                 softmax_scale: float | None = None, window_size=(-1, -1),
                                 softcap: float = 0.0):
    """``(dq, dk, dv)`` in float64 for ``out = softmax(cap(q kᵀ * scale) + mask) v``: q and
    dout ``(B, Sq, H, D)``, k / v ``(B, Sk, Hkv, D)`` (dk / dv summed over each GQA group),
    keys aligned bottom-right as in :func:`~.reference.attention_reference`."""
    q, k, do = (np.asarray(x, np.float64) for x in (q, k, dout))
    b, sq, h, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    g = h // hk
    p, den, _, kk, vv, t, scale = exp_scores(q, k, v, causal, softmax_scale, window_size,
                                             softcap)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = np.where(den > 0, p / den, 0.0)
    o = np.einsum("bhqk,bkhd->bhqd", p, vv)
    dob = do.transpose(0, 2, 1, 3)                       # (b, h, q, d)
    dv = np.einsum("bhqk,bhqd->bkhd", p, dob)
    dp = np.einsum("bhqd,bkhd->bhqk", dob, vv)
    ds = p * (dp - (dob * o).sum(-1, keepdims=True))
    if softcap:
        ds = ds * (1.0 - t * t)
    ds *= scale
    dq = np.einsum("bhqk,bkhd->bqhd", ds, kk)
    dk = np.einsum("bhqk,bqhd->bkhd", ds, q)
    dk = dk.reshape(b, sk, hk, g, d).sum(3)
    dv = dv.reshape(b, sk, hk, g, d).sum(3)
    return dq, dk, dv


__all__ = ["attention_backward_reference"]
