"""Vector add, the first kernel: ``C[i] = A[i] + B[i]`` for any length N.

Each thread adds four neighbouring elements with 16-byte accesses
(``ld.global.v4.f32`` twice, four ``add.f32``, one ``st.global.v4.f32``).
N is a run-time dimension (a ``.u32`` kernel parameter), so one compiled
kernel serves every length; the last thread's group may run past N, and
that thread falls back to guarded scalar accesses (``ptx.if_`` / ``ptx.else_``).

Start with ``docs/first-kernel.md``, which builds this file up from nothing.

    python examples/hopper/vector_add.py          # run + check (GPU, else interpreter)
    ptxdsl ptx examples/hopper/vector_add.py      # read the PTX
    ptxdsl check examples/hopper/vector_add.py    # registers / spills (ptxas)
"""
from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

from _harness import on_gpu, report, run  # noqa: E402,F401
from ptxdsl import Tile, kernel, ptx, reg  # noqa: E402
from ptxdsl.types import f32, u32  # noqa: E402

BLOCK = 256   # threads per CTA
VEC = 4       # elements per thread: one 16-byte access per array


# --8<-- [start:build]
def build_vector_add(arch: str = "sm_90a"):
    """``C = A + B`` over f32 vectors of any length N."""

    @kernel(
        in_specs=(Tile("N", f32), Tile("N", f32)),
        out_specs=(Tile("N", f32),),
        grid=lambda N: ((N + BLOCK * VEC - 1) // (BLOCK * VEC), 1, 1),
        block=(BLOCK, 1, 1),
        arch=arch,
    )
    def vector_add(A, B, C):
        pa, pb, pc = ptx.global_ptrs(A, B, C)
        n = ptx.dim("N")                                  # ld.param.u32
        cta = reg.scalar(u32); ptx.inst.mov.u32(cta, ptx.special.ctaid.x())
        tid = reg.scalar(u32); ptx.inst.mov.u32(tid, ptx.special.tid.x())
        i = (cta * BLOCK + tid) * VEC                     # first element of this thread
        off = i * 4                                       # bytes: mul.wide.u32 (64-bit)
        a_ptr, b_ptr, c_ptr = pa + off, pb + off, pc + off

        with ptx.if_(i + VEC <= n):                       # the whole group is in range
            a = reg.array(f32, VEC)
            b = reg.array(f32, VEC)
            ptx.inst.ld.global_.v4.f32(list(a), ptx.addr(a_ptr))
            ptx.inst.ld.global_.v4.f32(list(b), ptx.addr(b_ptr))
            c = [x + y for x, y in zip(a, b)]             # add.f32, four times
            ptx.inst.st.global_.v4.f32(ptx.addr(c_ptr), c)
        with ptx.else_():                                 # the ragged end (< 4 left)
            for k in range(VEC):
                with ptx.if_((i + k if k else i) < n):
                    x = reg.scalar(f32); ptx.inst.ld.global_.f32(x, ptx.addr(a_ptr, 4 * k))
                    y = reg.scalar(f32); ptx.inst.ld.global_.f32(y, ptx.addr(b_ptr, 4 * k))
                    ptx.inst.st.global_.f32(ptx.addr(c_ptr, 4 * k), x + y)

    return vector_add
# --8<-- [end:build]


def reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a.astype(np.float64) + b.astype(np.float64)


def check(N: int, seed: int = 0) -> float:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(N).astype(np.float32)
    b = rng.standard_normal(N).astype(np.float32)
    c = run(build_vector_add(), a, b)
    err = float(np.max(np.abs(c - reference(a, b)))) if N else 0.0
    # One f32 rounding of an exact sum: within half an ulp of the float64 result.
    ok = err <= 1e-6 * max(1.0, float(np.max(np.abs(reference(a, b)))))
    print(f"[{'OK' if ok else 'FAIL'}] vector_add N={N}: max error {err:.2e}")
    if not ok:
        raise SystemExit(1)
    return err


def gpu_timing(N: int) -> None:
    """µs and TB/s beside torch.add and a device copy of the same bytes."""
    import torch
    a = torch.randn(N, device="cuda")
    b = torch.randn(N, device="cuda")
    c = torch.empty_like(a)
    k = build_vector_add()
    # A copy moving the same bytes (1.5 N floats read, 1.5 N written).
    src = torch.empty(3 * N // 2, device="cuda")
    dst = torch.empty_like(src)
    report(f"N={N}", 3 * N * 4, lambda: k(a, b, c),
           "torch.add", lambda: torch.add(a, b, out=c), lambda: dst.copy_(src))


def main() -> None:
    gpu = on_gpu()
    print(f"vector_add on {'the GPU' if gpu else 'the CPU interpreter'}")
    # 1027 and 5 end mid-group: they take the guarded path.
    for N in ([2048 * 8192, 1 << 20, 1027, 5] if gpu else [1 << 20, 1027, 5]):
        check(N)
    if gpu:
        try:
            gpu_timing(2048 * 8192)
        except ImportError:
            print("  (install torch to see timings beside torch.add)")


if __name__ == "__main__":
    main()
