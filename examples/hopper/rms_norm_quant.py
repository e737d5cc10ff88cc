"""RMSNorm with FP8 output: ``rms_norm_quant``, what an inference server runs before an
FP8 GEMM.

``y = x / sqrt(mean(x^2) + eps) * (offset + w)`` per row, quantised to e4m3
(``float8_e4m3fn``) with a dynamic per-row scale ``max|y| / 448`` (or a given static
scale), optionally after adding a residual that is written back in place. The kernel is
``ptxdsl/ops/rmsnorm/quant.py``: the row stays in registers, so x is read once and one
byte per element is written. This script runs it (on the GPU when one is present, else on
the CPU interpreter) and checks each result against float64.

    python examples/hopper/rms_norm_quant.py            # run and check
    ptxdsl ptx examples/hopper/rms_norm_quant.py        # read the PTX
"""
from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import ptxdsl  # noqa: E402
from ptxdsl.ops import rms_norm_quant  # noqa: E402
from ptxdsl.ops.rmsnorm import FP8_MAX, MIN_SCALE, max_vec, quant_kernel  # noqa: E402
from ptxdsl.types import bf16, f32  # noqa: E402

EPS = 1e-6


def build_rms_norm_quant(N: int = 8192, dtype=bf16, dynamic: bool = True,
                         residual: bool = False, arch: str = "sm_90a"):
    """The kernel ``rms_norm_quant`` runs for rows of N elements (any number of rows):
    :func:`~ptxdsl.ops.rmsnorm.quant.plan_quant`'s schedule, with as many CTAs per SM
    as ptxas fits without spilling (``ptxdsl/ops/rmsnorm/plan.py``)."""
    return quant_kernel(N, dtype, dtype, max_vec(N, dtype), residual, dynamic, EPS, 0.0, arch)


def KERNELS():
    """What ``ptxdsl ptx/check`` show: dynamic bf16 rows of 8192, a static f32 kernel
    with a residual, and a short ragged row."""
    return {"rms_norm_quant_8192": build_rms_norm_quant(8192),
            "rms_norm_quant_static_res_4096": build_rms_norm_quant(4096, f32, False, True),
            "rms_norm_quant_1000": build_rms_norm_quant(1000, f32)}


def reference(h: np.ndarray, w: np.ndarray, offset: float = 0.0) -> np.ndarray:
    h64 = h.astype(np.float64)
    return h64 / np.sqrt((h64 * h64).mean(-1, keepdims=True) + EPS) * (offset + w)


def within_e4m3(q: np.ndarray, scale, want: np.ndarray) -> float:
    """The largest error of the FP8 values in units of half their e4m3 spacing (<= 1:
    correctly rounded, up to f32 noise)."""
    v = np.clip(want / np.asarray(scale, np.float64), -FP8_MAX, FP8_MAX)
    half = np.exp2(np.floor(np.log2(np.maximum(np.abs(v), 2.0 ** -6))) - 4)
    return float(np.max(np.abs(q.astype(np.float64) - v) / (half * (1 + 1e-4))))


def check(m: int, n: int, *, residual: bool = False, static: float | None = None,
          offset: float = 0.0) -> None:
    rng = np.random.default_rng(m * 7919 + n)
    x = rng.standard_normal((m, n)).astype(np.float32)
    w = (rng.standard_normal(n) * 0.1 + (0.0 if offset else 1.0)).astype(np.float32)
    r = rng.standard_normal((m, n)).astype(np.float32) if residual else None
    h = x + r if residual else x
    y, scale = rms_norm_quant(x, w, EPS, residual=r, offset=offset, scale=static)
    want = reference(h, w, offset)
    err = within_e4m3(y, scale, want)
    ok = err <= 1.0 and (r is None or np.array_equal(r, h))
    if static is None:
        top = np.abs(want).max(-1, keepdims=True)
        ok = ok and np.allclose(scale, np.maximum(top / FP8_MAX, MIN_SCALE), rtol=2e-6)
    what = "static" if static is not None else "dynamic"
    extra = (" +residual" if residual else "") + (f" offset {offset}" if offset else "")
    print(f"[{'OK' if ok else 'FAIL'}] rms_norm_quant {what:7s} f32 {m:5d} x {n:5d}{extra}"
          f"  error {err:.2f} of half an e4m3 step")
    if not ok:
        raise SystemExit(1)


def main() -> None:
    on_gpu = not ptxdsl.interpret_requested() and ptxdsl.gpu_available()
    print(f"running on {'the GPU' if on_gpu else 'the CPU interpreter (no GPU found)'}")
    m = 2048 if on_gpu else 4
    check(m, 8192)
    check(m, 1000, residual=True)
    check(m, 4096, static=0.01)
    check(m, 2048, offset=1.0)


if __name__ == "__main__":
    main()
