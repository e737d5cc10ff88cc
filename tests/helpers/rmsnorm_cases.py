"""RMSNorm backward inputs and their float64 answers, and the error measure the backward
tests hold the kernels to."""
from __future__ import annotations

import numpy as np

EPS = 1e-6


def case(m, n, dtype=np.float32, seed=0):
    """(dy, x, w, rstd) and the float64 (dx, dw) for them (from the rounded inputs)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((m, n)).astype(dtype)
    dy = rng.standard_normal((m, n)).astype(dtype)
    w = (rng.standard_normal(n) * 0.5 + 1).astype(dtype)
    x64, dy64, w64 = (a.astype(np.float64) for a in (x, dy, w))
    rstd = (1.0 / np.sqrt((x64 * x64).mean(-1) + EPS)).astype(np.float32)
    r64 = rstd.astype(np.float64)[:, None]
    g = dy64 * w64
    rdx = r64 * (g - x64 * r64**2 * (g * x64).sum(-1, keepdims=True) / n)
    rdw = (dy64 * x64 * r64).sum(0)
    return (dy, x, w, rstd), rdx, rdw


def rel_err(out, ref):
    scale = np.maximum(np.abs(ref).max(axis=-1, keepdims=True), 1e-30)
    return float(np.max(np.abs(out.astype(np.float64) - ref) / scale))
