"""Hopper GEMM, the second flagship: ``C = act(A @ B + bias)`` on wgmma, fed by TMA.

The kernel is written in the DSL in ``ptxdsl/ops/matmul/hopper.py`` (its docstring
draws the pipeline; ``docs/matmul.md`` walks through it next to the PTX it records);
this script takes it, as a user would, from the op's public calls
(``ptxdsl.ops.matmul``: ``hopper_kernel`` builds the kernel a shape runs,
``describe`` names its plan):
a persistent grid of 384-thread CTAs in clusters of two, one producer warpgroup that
gives its registers to the two consumer warpgroups (``setmaxnreg``) and feeds a
four-stage ring of 128-byte-swizzled shared-memory tiles with ``cp.async.bulk.tensor``
(B multicast to both CTAs of a cluster), consumers issuing ``wgmma.mma_async
m64n256k16`` on 64x256 f32 accumulators, and an epilogue that adds the bias, applies
the activation, stages the tile in shared memory and writes it with TMA stores.

The same kernel takes float8 operands (e4m3 / e5m2) with per-tensor scales:
``m64n256k32`` wgmmas over 128-element K stages, ``scale_a * scale_b`` applied in the
epilogue (``matmul(a, b, scale_a=..., scale_b=...)``, as ``torch._scaled_mm``).

This script builds the kernels, runs ``ptxdsl.ops.matmul`` on a GPU (checked against a
float64 product: integer-valued inputs must match bit for bit, random normal ones within
bf16 rounding; bf16 and e4m3 operands) and, with torch, prints TFLOP/s beside cuBLAS.
Without a GPU it checks the op on the CPU interpreter (the SIMT kernel) and prints the
Hopper kernel's resources when ``ptxas`` is installed.

    python examples/hopper/gemm.py               # run and check
    ptxdsl ptx examples/hopper/gemm.py           # read the PTX
    ptxdsl check examples/hopper/gemm.py         # registers / spills (ptxas)
"""
from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

from _harness import on_gpu  # noqa: E402
from ptxdsl.ops import matmul  # noqa: E402
from ptxdsl.ops.matmul import describe, hopper_kernel  # noqa: E402
from ptxdsl.types import bf16, e4m3, f32  # noqa: E402

# The plans differ by SM count and device class; these are an H100 SXM's (132 SMs).
SMS, DEVICE = 132, "H100"


def build_gemm(m: int = 4096, n: int = 4096, k: int = 4096, out_dtype=bf16, *, bias=None,
               activation=None):
    """The Hopper kernel ``ptxdsl.ops.matmul`` runs for an (M, N, K) bf16 product of a
    row-major A and ``W.T`` (both K-major), with an optional bias dtype and activation."""
    return hopper_kernel(m, n, k, bf16, out_dtype, bias, activation, SMS, device=DEVICE)


def build_gemm_fp8(m: int = 4096, n: int = 4096, k: int = 4096, out_dtype=bf16):
    """The Hopper kernel for an (M, N, K) e4m3 product with per-tensor scales."""
    return hopper_kernel(m, n, k, e4m3, out_dtype, None, None, SMS, device=DEVICE,
                         scaled=True)


def KERNELS():
    """What ``ptxdsl ptx/check`` show: the 2-CTA-cluster kernel, the single-CTA one used
    when M fits one tile row, a bias + gelu epilogue with f32 output, and the e4m3
    kernel with scales."""
    return {"gemm_bf16": build_gemm(),
            "gemm_bf16_m128": build_gemm(128),
            "gemm_bias_gelu_f32": build_gemm(out_dtype=f32, bias=f32, activation="gelu"),
            "gemm_fp8": build_gemm_fp8()}


def check(m: int, n: int, k: int, rng, integer: bool) -> None:
    """One product on the GPU (torch) against float64."""
    import torch
    if integer:
        a = torch.randint(-4, 5, (m, k), device="cuda").to(torch.bfloat16)
        w = torch.randint(-4, 5, (n, k), device="cuda").to(torch.bfloat16)
        c = matmul(a, w.t(), out_dtype=torch.float32)
        ref = (a.double() @ w.double().t())
        ok = bool(torch.equal(c.double(), ref))
        what = "bit-exact" if ok else f"max error {(c.double() - ref).abs().max().item():.3g}"
    else:
        a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
        w = torch.randn(n, k, device="cuda").to(torch.bfloat16)
        c = matmul(a, w.t())
        ref = a.double() @ w.double().t()
        err = ((c.double() - ref).norm() / ref.norm()).item()
        ok = err < 8e-3
        what = f"relative error {err:.2e}"
    print(f"[{'OK' if ok else 'FAIL'}] matmul bf16 {m}x{n}x{k} "
          f"({'integers' if integer else 'normal'}): {what}")
    if not ok:
        raise SystemExit(1)


def check_fp8(m: int, n: int, k: int) -> None:
    """One e4m3 product with scales on the GPU (torch) against float64: integer-valued
    inputs bit-exact in f32, random normal ones within bf16 rounding."""
    import torch
    fp8 = torch.float8_e4m3fn
    sa, sb = torch.tensor([0.5], device="cuda"), torch.tensor([0.25], device="cuda")
    a = torch.randint(-4, 5, (m, k), device="cuda").float().to(fp8)
    w = torch.randint(-4, 5, (n, k), device="cuda").float().to(fp8)
    c = matmul(a, w.t(), scale_a=sa, scale_b=sb, out_dtype=torch.float32)
    ok = bool(torch.equal(c.double(), a.double() @ w.double().t() / 8))
    a = torch.randn(m, k, device="cuda").to(fp8)
    w = torch.randn(n, k, device="cuda").to(fp8)
    c = matmul(a, w.t(), scale_a=sa, scale_b=sb)
    ref = a.double() @ w.double().t() / 8
    err = ((c.double() - ref).norm() / ref.norm()).item()
    ok = ok and err < 8e-3
    print(f"[{'OK' if ok else 'FAIL'}] matmul e4m3 {m}x{n}x{k} with scales: integers "
          f"bit-exact, normal relative error {err:.2e}")
    if not ok:
        raise SystemExit(1)


def gpu_timing(m: int, n: int, k: int) -> None:
    import torch
    from _harness import time_us
    a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    w = torch.randn(n, k, device="cuda").to(torch.bfloat16)
    flop = 2.0 * m * n * k
    ours = time_us(lambda: matmul(a, w.t()), 20)
    cublas = time_us(lambda: torch.matmul(a, w.t()), 20)
    print(f"  {m}x{n}x{k} bf16 on {torch.cuda.get_device_name()}: ptxdsl "
          f"{flop / ours / 1e6:.0f} TFLOP/s | cuBLAS {flop / cublas / 1e6:.0f} TFLOP/s "
          f"(bench/matmul.py times it properly)")


def cpu_check() -> None:
    """The op on the interpreter: integer-valued inputs, bit-exact f32 output."""
    rng = np.random.default_rng(0)
    for m, n, k in [(7, 65, 33), (65, 40, 17)]:
        a = rng.integers(-4, 5, (m, k)).astype(np.float16)
        w = rng.integers(-4, 5, (n, k)).astype(np.float16)
        c = matmul(a, w.T, out_dtype=np.float32)
        ok = np.array_equal(c, a.astype(np.float64) @ w.astype(np.float64).T)
        print(f"[{'OK' if ok else 'FAIL'}] matmul f16 {m}x{n}x{k} on the interpreter")
        if not ok:
            raise SystemExit(1)
    try:
        import ml_dtypes
    except ImportError:
        ml_dtypes = None
    if ml_dtypes is not None:       # e4m3 operands with scales: the same, exactly
        a = rng.integers(-4, 5, (9, 48)).astype(ml_dtypes.float8_e4m3fn)
        w = rng.integers(-4, 5, (20, 48)).astype(ml_dtypes.float8_e4m3fn)
        c = matmul(a, w.T, scale_a=0.5, scale_b=0.25, out_dtype=np.float32)
        ok = np.array_equal(c, a.astype(np.float64) @ w.astype(np.float64).T / 8)
        print(f"[{'OK' if ok else 'FAIL'}] matmul e4m3 9x20x48 with scales on the interpreter")
        if not ok:
            raise SystemExit(1)
    print(f"  4096^3 bf16 on an {DEVICE}: {describe(4096, 4096, 4096, sms=SMS, device=DEVICE)}")
    try:
        r = build_gemm().resources()
        print(f"  Hopper kernel: {r.registers} registers, {r.spill_stores} spill stores "
              f"(ptxas -v)")
    except Exception as e:  # no ptxas here
        print(f"  (ptxas not available: {type(e).__name__})")


def main() -> None:
    if not on_gpu():
        print("running on the CPU interpreter (no GPU found)")
        cpu_check()
        return
    rng = np.random.default_rng(0)
    for shape in [(4096, 4096, 4096), (379, 1000, 72), (1, 256, 64), (256, 512, 8)]:
        check(*shape, rng, integer=True)
        check(*shape, rng, integer=False)
    for shape in [(4096, 4096, 4096), (379, 1000, 144), (1, 256, 128)]:
        check_fp8(*shape)
    try:
        gpu_timing(8192, 8192, 8192)
    except ImportError:
        print("  (install torch to compare timings)")


if __name__ == "__main__":
    main()
