"""SwiGLU: ``Y = silu(G) * U`` with ``silu(g) = g * sigmoid(g) = g / (1 + exp(-g))``.

Element-wise and memory-bound (two reads, one write per element), so the work
is all in the access pattern and in keeping the math off the critical path:

* every access is 16 bytes (``ld.global.cs.v4.f32`` / ``st.global.cs.v4.f32``:
  ``.cs`` streams, evict-first, since every byte is touched once), and each
  thread issues all of its loads before any math, so several 16-byte requests
  per thread are in flight;
* ``sigmoid(g) = 1 / (1 + 2^(-g*log2(e)))``: one ``mul``, one ``ex2.approx.ftz``,
  one ``add``, one ``rcp.approx.ftz`` (two MUFU ops), then two ``mul`` for
  ``g * s * u``. Large negative ``g`` gives ``2^big = inf``, ``rcp(inf) = 0``:
  the right limit, no special case.

The arrays are contiguous, so the kernel sees them as one flat run of B * N
values: CTA ``c`` covers the ``cols`` values from ``c * cols`` on, and
consecutive CTAs read consecutive memory, as a device copy does. The number
of rows is a run-time dimension ("B").

    python examples/hopper/swiglu.py          # run + check (GPU, else interpreter)
    ptxdsl ptx examples/hopper/swiglu.py      # read the PTX
"""
from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

from _harness import on_gpu, report, run  # noqa: E402,F401
from ptxdsl import Tile, kernel, ptx, reg  # noqa: E402
from ptxdsl.types import f32, u32  # noqa: E402

LOG2E = 1.4426950408889634


def pick_shape(n: int) -> tuple[int, int]:
    """(threads per CTA, v4 chunks per thread) with threads * chunks * 4 dividing N."""
    for block, chunks in ((256, 2), (256, 1), (128, 1), (64, 1), (32, 1)):
        if n % (block * chunks * 4) == 0:
            return block, chunks
    raise ValueError(f"N={n} must be a multiple of 128 (4 floats x 32 threads)")


def build_swiglu(N: int = 8192, arch: str = "sm_90a"):
    """silu(G) * U over (B, N) f32 arrays (any number of rows B)."""
    block, chunks = pick_shape(N)
    cols = block * chunks * 4          # values one CTA covers (a divisor of N)

    @kernel(
        in_specs=(Tile("B", N, f32), Tile("B", N, f32)),
        out_specs=(Tile("B", N, f32),),
        grid=lambda B: (B * (N // cols), 1, 1),
        block=(block, 1, 1),
        arch=arch,
    )
    def swiglu(G, U, Y):
        pg, pu, py = ptx.global_ptrs(G, U, Y)
        tid = reg.scalar(u32); ptx.inst.mov.u32(tid, ptx.special.tid.x())
        cta = reg.scalar(u32); ptx.inst.mov.u32(cta, ptx.special.ctaid.x())
        # Byte offset of this thread's first chunk: cta * cols*4 + tid * 16.
        # `.wide` picks the 64-bit mul.wide.u32 product: B * N * 4 may exceed 32 bits.
        off = (cta * (cols * 4)).wide + tid * 16   # cvt.u64.u32 + add.u64
        gp, up, yp = pg + off, pu + off, py + off

        g = reg.array(f32, 4 * chunks)
        u = reg.array(f32, 4 * chunks)
        # All loads first: 2 * chunks 16-byte requests in flight per thread.
        for j in range(chunks):
            ptx.inst.ld.global_.cs.v4.f32(g[4 * j:4 * j + 4], ptx.addr(gp, j * block * 16))
            ptx.inst.ld.global_.cs.v4.f32(u[4 * j:4 * j + 4], ptx.addr(up, j * block * 16))
        for j in range(chunks):
            y = [reg.scalar(f32) for _ in range(4)]
            for k in range(4):
                i = 4 * j + k
                t = reg.scalar(f32)
                ptx.inst.mul.f32(t, g[i], -LOG2E)          # -g * log2(e)
                ptx.inst.ex2.approx.ftz.f32(t, t)          # exp(-g)
                ptx.inst.add.f32(t, t, 1.0)                # 1 + exp(-g)
                ptx.inst.rcp.approx.ftz.f32(t, t)          # sigmoid(g)
                ptx.inst.mul.f32(t, g[i], t)               # silu(g)
                ptx.inst.mul.f32(y[k], t, u[i])            # silu(g) * u
            ptx.inst.st.global_.cs.v4.f32(ptx.addr(yp, j * block * 16), y)

    return swiglu


def reference(g: np.ndarray, u: np.ndarray) -> np.ndarray:
    """float64 silu(g) * u."""
    g64 = g.astype(np.float64)
    return g64 / (1.0 + np.exp(-g64)) * u.astype(np.float64)


def check(B: int, N: int, seed: int = 0) -> float:
    rng = np.random.default_rng(seed)
    g = (rng.standard_normal((B, N)) * 4).astype(np.float32)
    u = rng.standard_normal((B, N)).astype(np.float32)
    g[0, :4] = [-100.0, 100.0, 0.0, -0.0]    # the tails of the sigmoid
    y = run(build_swiglu(N), g, u)
    ref = reference(g, u)
    err = float(np.max(np.abs(y - ref) / (np.abs(ref) + 1e-3)))
    ok = err < 1e-5
    print(f"[{'OK' if ok else 'FAIL'}] swiglu {B} x {N} f32: max relative error {err:.2e}")
    if not ok:
        raise SystemExit(1)
    return err


def gpu_timing(B: int, N: int) -> None:
    """µs and TB/s beside torch (F.silu(g) * u) and a device copy of the same bytes."""
    import torch
    import torch.nn.functional as F
    g = torch.randn(B, N, device="cuda")
    u = torch.randn(B, N, device="cuda")
    y = torch.empty_like(g)
    k = build_swiglu(N)
    # A copy moving the same bytes: 3 * B * N floats of traffic (1.5 arrays read,
    # 1.5 written), the bandwidth a perfect kernel would reach.
    src = torch.empty(3 * B * N // 2, device="cuda")
    dst = torch.empty_like(src)
    report(f"{B}x{N}", 3 * g.numel() * 4, lambda: k(g, u, y),
           "torch F.silu(g)*u", lambda: F.silu(g) * u, lambda: dst.copy_(src))


def main() -> None:
    gpu = on_gpu()
    print(f"swiglu on {'the GPU' if gpu else 'the CPU interpreter'}")
    for B, N in ([(2048, 8192), (4096, 4096), (3, 1024)] if gpu else [(64, 8192), (5, 4096), (7, 128)]):
        check(B, N)
    if gpu:
        try:
            gpu_timing(2048, 8192)
        except ImportError:
            print("  (install torch to see timings beside F.silu(g) * u)")


if __name__ == "__main__":
    main()
