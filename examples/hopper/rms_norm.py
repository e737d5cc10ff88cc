"""RMSNorm, the flagship: ``Y = X * W / sqrt(mean(X^2) + eps)`` per row.

The kernels are written in the DSL in ``ptxdsl/ops/rmsnorm/fwd.py`` (read it
next to the PTX this script can print): one CTA per long row held in
registers with 16-byte loads, a lane group per short row, predicated ragged
tails. This script builds them, runs them (on the GPU when one is present,
else on the CPU interpreter), checks every result against a float64 numpy
reference and, on a GPU, prints µs, TB/s and % of a device copy beside torch.

    python examples/hopper/rms_norm.py            # run and check
    ptxdsl ptx examples/hopper/rms_norm.py        # read the PTX
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import ptxdsl  # noqa: E402
from _harness import report  # noqa: E402
from ptxdsl.ops import rms_norm  # noqa: E402
from ptxdsl.ops.rmsnorm import build_forward, forward_plan as plan  # noqa: E402
from ptxdsl.types import bf16, f32  # noqa: E402

EPS = 1e-6


def build_rms_norm(N: int = 8192, dtype=f32, arch: str = "sm_90a"):
    """The forward kernel for rows of N elements (any number of rows)."""
    return build_forward(plan(N, dtype), dtype, dtype, eps=EPS, arch=arch)


def KERNELS():
    """What ``ptxdsl ptx/check`` show: a long-row, a short-row and a ragged-row kernel."""
    return {"rms_norm_8192": build_rms_norm(8192), "rms_norm_1024": build_rms_norm(1024),
            "rms_norm_4097": build_rms_norm(4097), "rms_norm_bf16_4096": build_rms_norm(4096, bf16)}


def reference(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    return x64 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + EPS) * w64


def check(m: int, n: int) -> float:
    rng = np.random.default_rng(m * 7919 + n)
    x = rng.standard_normal((m, n)).astype(np.float32)
    w = (rng.standard_normal(n) * 0.1 + 1.0).astype(np.float32)
    t0 = time.perf_counter()
    y = rms_norm(x, w, EPS)
    dt = time.perf_counter() - t0
    ref = reference(x, w)
    err = float(np.max(np.abs(y - ref) / np.abs(ref).max(axis=-1, keepdims=True)))
    ok = err < 2e-6
    print(f"[{'OK  ' if ok else 'FAIL'}] rms_norm f32 {m:5d} x {n:5d}  max rel err {err:.2e}"
          f"  ({dt * 1e3:.1f} ms end to end)")
    if not ok:
        raise SystemExit(1)
    return err


def gpu_timing(m: int, n: int) -> None:
    """µs and TB/s beside F.rms_norm and a device copy of the same bytes."""
    import torch
    import torch.nn.functional as F
    x = torch.randn(m, n, device="cuda")
    w = torch.randn(n, device="cuda") * 0.1 + 1
    y = torch.empty_like(x)
    report(f"{m}x{n}", 2 * x.numel() * 4, lambda: rms_norm(x, w, EPS, out=y),
           "F.rms_norm", lambda: F.rms_norm(x, (n,), w, EPS), lambda: y.copy_(x))


def main() -> None:
    on_gpu = not ptxdsl.interpret_requested() and ptxdsl.gpu_available()
    print(f"running on {'the GPU' if on_gpu else 'the CPU interpreter (no GPU found)'}")
    shapes = [(2048, 8192), (4096, 4096), (4096, 1000), (7, 4097)] if on_gpu else \
        [(8, 4096), (16, 1000), (3, 4097), (33, 96)]
    for m, n in shapes:
        check(m, n)
    if on_gpu:
        try:
            gpu_timing(2048, 8192)
        except ImportError:
            print("  (install torch to compare timings)")


if __name__ == "__main__":
    main()
