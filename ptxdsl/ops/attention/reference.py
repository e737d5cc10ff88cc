"""The float64 numpy reference of the forward, in flash_attn_func's layout: what the tests
and the benchmark check the kernel against."""
from __future__ import annotations

import numpy as np


def exp_scores(q, k, v, causal: bool, softmax_scale, window_size, softcap: float):
    """The float64 forward up to the softmax's exponentials, shared by both references:
    ``(e, den, mx, kk, vv, t, scale)`` with ``e = exp(s - mx)`` of the masked, capped
    scores ``s`` (B, H, Sq, Sk), ``den`` its row sums, ``mx`` the row maxima (0 for a row
    that sees no key), k and v repeated over each GQA group, ``t = tanh(s / softcap)``
    (None without a cap) and the scale."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    h, d = q.shape[2], q.shape[3]
    sq, sk, hk = q.shape[1], k.shape[1], k.shape[2]
    scale = d ** -0.5 if softmax_scale is None else float(softmax_scale)
    kk = np.repeat(k, h // hk, axis=2)
    vv = np.repeat(v, h // hk, axis=2)
    s = np.einsum("bqhd,bkhd->bhqk", q, kk) * scale
    t = None
    if softcap:
        t = np.tanh(s / softcap)
        s = softcap * t
    s = np.where(keys_seen(sq, sk, causal, window_size), s, -np.inf)
    mx = s.max(-1, keepdims=True)
    mx = np.where(np.isfinite(mx), mx, 0.0)
    e = np.exp(s - mx)
    return e, e.sum(-1, keepdims=True), mx, kk, vv, t, scale


def attention_reference(q, k, v, *, causal: bool = False, softmax_scale: float | None = None,
                        window_size=(-1, -1), softcap: float = 0.0):
    """``(out, lse)`` in float64: q ``(B, Sq, H, D)``, k / v ``(B, Sk, Hkv, D)`` (any float
    dtype; H a multiple of Hkv), keys aligned bottom-right. A row that sees no key gives 0
    and an LSE of -inf."""
    p, den, mx, _, vv, _, _ = exp_scores(q, k, v, causal, softmax_scale, window_size, softcap)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(den > 0, np.einsum("bhqk,bkhd->bhqd", p, vv) / den, 0.0)
        lse = np.where(den[..., 0] > 0, np.log(den[..., 0]) + mx[..., 0], -np.inf)
    return out.transpose(0, 2, 1, 3), lse


def keys_seen(sq: int, sk: int, causal: bool, window_size) -> np.ndarray:
    """``(sq, sk)`` booleans: row ``i`` sees key ``j`` (causal and windows aligned
    bottom-right, -1 unbounded)."""
    left, right = window_size
    if causal:
        right = 0
    i = np.arange(sq)[:, None] + (sk - sq)
    j = np.arange(sk)[None, :]
    ok = np.ones((sq, sk), bool)
    if right >= 0:
        ok &= j <= i + right
    if left >= 0:
        ok &= j >= i - left
    return ok


__all__ = ["attention_reference", "exp_scores", "keys_seen"]
