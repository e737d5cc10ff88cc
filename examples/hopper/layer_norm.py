"""LayerNorm over rows: ``Y = (X - mean) / sqrt(var + eps) * W + Bias``.

One CTA per row with the row held in registers, so X is read from DRAM once.
The schedule is RMSNorm's (``docs/rmsnorm.md``): 512 threads per row of 8192
(four 16-byte loads of X in flight per thread) and ``.cs`` (streaming,
evict-first) loads of X and stores of Y, which are touched once; W and Bias,
shared by every row, keep the default caching so they stay in L2.

1. v4 loads of the thread's slice of X (``ld.global.cs.v4.f32``), then of W
   (issued before the reductions so its latency hides behind them);
2. row mean: thread-local ``add.f32`` tree, warp butterfly, per-warp partials
   in shared memory, one ``bar.sync``, every thread sums the partials;
3. ``d = x - mean`` in place, then the row sum of ``d*d`` (four independent
   ``fma.rn`` chains) reduced the same way: the two-pass variance is as
   accurate as Welford's and costs one extra barrier, not an extra DRAM pass;
4. ``rstd = rsqrt.approx(var + eps)``, Bias loaded (see below),
   ``y = fma(d * rstd, w, b)``, ``st.global.cs.v4.f32``.

Bias is loaded after the reductions, not before: holding X, W and Bias
(48 values) through them takes ptxas to 72 registers, so only one 512-thread
CTA fits on an SM and its loads stop while it reduces; with X and W alone it
needs 58 (two CTAs per SM, one loading while the other reduces). The late
load costs one L2 round trip: Bias is one row read by every CTA, so it stays
in L2.

The number of rows is a run-time dimension ("B"); N is fixed when the kernel
is built.

    python examples/hopper/layer_norm.py         # run + check (GPU, else interpreter)
    ptxdsl ptx examples/hopper/layer_norm.py     # read the PTX
    ptxdsl check examples/hopper/layer_norm.py   # registers / spills (ptxas)
"""
from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

from _harness import on_gpu, report, run  # noqa: E402,F401
from ptxdsl import Tile, kernel, ptx, reg, smem  # noqa: E402
from ptxdsl.types import f32, u32  # noqa: E402

WARP_SIZE = 32
EPS = 1e-5


def pick_block(n: int) -> int:
    """Threads per row: 512 when that leaves 8 to 32 values of X per thread
    (RMSNorm's tuning on an H200: 512 beat 256 and 1024 from 4096 to 16384 f32),
    else the nearest size that does, else the largest that divides the row."""
    for block in (512, 256, 128, 64, 32, 1024):
        if n % (4 * block) == 0 and 8 <= n // block <= 32:
            return block
    for block in (1024, 512, 256, 128, 64, 32):
        if n % (4 * block) == 0:
            return block
    raise ValueError(f"N={n} must be a multiple of 128 (4 floats x 32 threads)")


def tree_add(vals):
    """Sum registers pairwise (a tree: log2(n) dependent adds, not n)."""
    vals = list(vals)
    while len(vals) > 1:
        nxt = []
        for i in range(0, len(vals) - 1, 2):
            d = reg.scalar(f32)
            ptx.inst.add.f32(d, vals[i], vals[i + 1])
            nxt.append(d)
        if len(vals) % 2:
            nxt.append(vals[-1])
        vals = nxt
    return vals[0]


def block_sum(value, partials, warp_id, lane, num_warps):
    """Sum ``value`` over the CTA; every thread gets the total (one ``bar.sync``)."""
    ptx.warp.reduce_sum(value)
    if num_warps == 1:
        return value
    with ptx.if_(lane == 0):
        partials[warp_id] = value
    ptx.bar.sync(0)
    vals = []
    for i in range(0, num_warps, 4):
        n = min(4, num_warps - i)
        regs = [reg.scalar(f32) for _ in range(n)]
        if n == 4:
            ptx.inst.ld.shared.v4.f32(regs, partials.addr(i))
        else:
            for k in range(n):
                ptx.inst.ld.shared.f32(regs[k], partials.addr(i + k))
        vals += regs
    return tree_add(vals)


def build_layer_norm(N: int = 8192, eps: float = EPS, arch: str = "sm_90a",
                     block: int | None = None):
    """LayerNorm over rows of N f32 values (any number of rows B); ``block``
    threads per row (default :func:`pick_block`)."""
    block = block or pick_block(N)
    num_warps = block // WARP_SIZE
    items = N // block
    chunks = items // 4
    row_bytes = N * 4

    @kernel(
        in_specs=(Tile("B", N, f32), Tile(N, f32), Tile(N, f32)),
        out_specs=(Tile("B", N, f32),),
        grid=lambda B: (B, 1, 1),
        block=(block, 1, 1),
        arch=arch,
    )
    def layer_norm(X, W, Bias, Y):
        # One partials array per reduction: the second never overwrites what a
        # slow warp may still be reading from the first, so no extra barrier.
        mean_partials = smem.alloc(f32, (num_warps,))
        var_partials = smem.alloc(f32, (num_warps,))

        px, pw, pb, py = ptx.global_ptrs(X, W, Bias, Y)
        tid = reg.scalar(u32); ptx.inst.mov.u32(tid, ptx.special.tid.x())
        row = reg.scalar(u32); ptx.inst.mov.u32(row, ptx.special.ctaid.x())
        lane = tid & (WARP_SIZE - 1)
        warp_id = tid >> 5
        row_off = row * row_bytes          # mul.wide.u32: 64-bit byte offsets
        thread_off = tid * 16
        xrow = px + row_off + thread_off
        yrow = py + row_off + thread_off
        wcol = pw + thread_off             # W and Bias: one row shared by all rows
        bcol = pb + thread_off

        x = reg.array(f32, items)
        w = reg.array(f32, items)
        b = reg.array(f32, items)
        for j in range(chunks):
            ptx.inst.ld.global_.cs.v4.f32(x[4 * j:4 * j + 4], ptx.addr(xrow, j * block * 16))
        for j in range(chunks):
            ptx.inst.ld.global_.v4.f32(w[4 * j:4 * j + 4], ptx.addr(wcol, j * block * 16))

        inv_n = 1.0 / N
        # ---- mean
        total = block_sum(tree_add(x), mean_partials, warp_id, lane, num_warps)
        neg_mean = reg.scalar(f32)
        ptx.inst.mul.f32(neg_mean, total, -inv_n)

        # ---- centred values and variance
        for i in range(items):
            ptx.inst.add.f32(x[i], x[i], neg_mean)
        acc = [reg.scalar(f32, init=0.0) for _ in range(4)]
        for i in range(items):
            ptx.inst.fma.rn.f32(acc[i % 4], x[i], x[i], acc[i % 4])
        sq = block_sum(tree_add(acc), var_partials, warp_id, lane, num_warps)
        var_eps = reg.scalar(f32)
        ptx.inst.fma.rn.f32(var_eps, sq, inv_n, eps)
        rstd = reg.scalar(f32)
        ptx.inst.rsqrt.approx.ftz.f32(rstd, var_eps)

        # ---- y = d * rstd * w + b (Bias from L2: see the module docstring)
        for j in range(chunks):
            ptx.inst.ld.global_.v4.f32(b[4 * j:4 * j + 4], ptx.addr(bcol, j * block * 16))
        for j in range(chunks):
            y = [reg.scalar(f32) for _ in range(4)]
            for k in range(4):
                i = 4 * j + k
                ptx.inst.mul.f32(y[k], x[i], rstd)
                ptx.inst.fma.rn.f32(y[k], y[k], w[i], b[i])
            ptx.inst.st.global_.cs.v4.f32(ptx.addr(yrow, j * block * 16), y)

    return layer_norm


def reference(x, w, b, eps: float = EPS) -> np.ndarray:
    """float64 LayerNorm over the last axis."""
    x64 = x.astype(np.float64)
    mean = x64.mean(-1, keepdims=True)
    var = ((x64 - mean) ** 2).mean(-1, keepdims=True)
    return (x64 - mean) / np.sqrt(var + eps) * w.astype(np.float64) + b.astype(np.float64)


def check(B: int, N: int, seed: int = 0) -> float:
    rng = np.random.default_rng(seed)
    # An offset mean makes the variance a difference of large numbers: the
    # two-pass kernel must still get it right.
    x = (rng.standard_normal((B, N)) * 2 + 5).astype(np.float32)
    w = (rng.standard_normal(N) * 0.1 + 1).astype(np.float32)
    b = (rng.standard_normal(N) * 0.1).astype(np.float32)
    y = run(build_layer_norm(N), x, w, b)
    ref = reference(x, w, b)
    err = float(np.max(np.abs(y - ref)))
    ok = err < 1e-4
    print(f"[{'OK' if ok else 'FAIL'}] layer_norm {B} x {N} f32: max abs error {err:.2e}")
    if not ok:
        raise SystemExit(1)
    return err


def gpu_timing(B: int, N: int) -> None:
    """µs and TB/s beside F.layer_norm and a device copy of the same bytes."""
    import torch
    import torch.nn.functional as F
    x = torch.randn(B, N, device="cuda")
    w = torch.randn(N, device="cuda") * 0.1 + 1
    b = torch.randn(N, device="cuda") * 0.1
    y = torch.empty_like(x)
    k = build_layer_norm(N)
    report(f"{B}x{N}", 2 * x.numel() * 4, lambda: k(x, w, b, y),
           "F.layer_norm", lambda: F.layer_norm(x, (N,), w, b, EPS), lambda: y.copy_(x))


def main() -> None:
    gpu = on_gpu()
    print(f"layer_norm on {'the GPU' if gpu else 'the CPU interpreter'}")
    for B, N in ([(2048, 8192), (4096, 4096), (1, 1024)] if gpu else [(64, 8192), (5, 4096), (7, 128)]):
        check(B, N)
    if gpu:
        try:
            gpu_timing(2048, 8192)
        except ImportError:
            print("  (install torch to see timings beside F.layer_norm)")


if __name__ == "__main__":
    main()
