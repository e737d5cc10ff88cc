"""Row softmax: ``Y[b, i] = exp(X[b, i] - max_b) / sum_j exp(X[b, j] - max_b)``.

One CTA per row, the row held in registers between the passes, so X is read
from DRAM once and Y written once, every access 16 bytes. The schedule is
RMSNorm's (``docs/rmsnorm.md``): 512 threads per row of 8192 (four 16-byte
loads in flight per thread, registers for several CTAs per SM) and ``.cs``
(streaming, evict-first) loads and stores, since X and Y are touched once.

1. load the thread's slice of the row (``items`` values) with
   ``ld.global.cs.v4.f32``;
2. row max: thread-local ``max.f32`` tree, warp butterfly (``shfl.sync.bfly``),
   per-warp partials through shared memory, one ``bar.sync``, every thread
   reads all partials with ``ld.shared.v4`` (no serial thread, no second
   barrier);
3. ``e = 2^(x*log2(e) - max*log2(e))``: one ``fma.rn`` + one ``ex2.approx.ftz``
   per element, kept in the same registers; row sum reduced the same way;
4. ``y = e * rcp.approx(sum)``, ``st.global.cs.v4.f32``.

The number of rows is a run-time dimension ("B"): one compiled kernel serves
every batch size. N is fixed when the kernel is built.

    python examples/hopper/softmax.py          # run + check (GPU, else interpreter)
    ptxdsl ptx examples/hopper/softmax.py      # read the PTX
    ptxdsl check examples/hopper/softmax.py    # registers / spills (ptxas)
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
LOG2E = 1.4426950408889634  # exp(x) = 2^(x * log2(e))


def pick_block(n: int) -> int:
    """Threads per row: 512 when that leaves 8 to 32 values per thread (RMSNorm's
    tuning on an H200: 512 beat 256 and 1024 from 4096 to 16384 f32), else the
    nearest size that does, else the largest that divides the row.

    N must be a multiple of 4 * threads so every thread loads whole v4 chunks.
    """
    for block in (512, 256, 128, 64, 32, 1024):
        if n % (4 * block) == 0 and 8 <= n // block <= 32:
            return block
    for block in (1024, 512, 256, 128, 64, 32):
        if n % (4 * block) == 0:
            return block
    raise ValueError(f"N={n} must be a multiple of 128 (4 floats x 32 threads)")


def tree(op, vals):
    """Combine registers pairwise (a tree, not a chain: short dependency paths)."""
    vals = list(vals)
    while len(vals) > 1:
        nxt = []
        for i in range(0, len(vals) - 1, 2):
            d = reg.scalar(f32)
            op(d, vals[i], vals[i + 1])
            nxt.append(d)
        if len(vals) % 2:
            nxt.append(vals[-1])
        vals = nxt
    return vals[0]


def block_allreduce(value, partials, warp_id, lane, num_warps, op, warp_reduce):
    """Reduce ``value`` over the CTA; every thread gets the result.

    Warp butterfly, lane 0 of each warp stores its partial, one ``bar.sync``,
    then every thread combines all partials itself (16-byte shared loads).
    """
    warp_reduce(value)
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
    return tree(op, vals)


def build_softmax(N: int = 8192, arch: str = "sm_90a", block: int | None = None):
    """Softmax over rows of N f32 values (any number of rows B); ``block`` threads
    per row (default :func:`pick_block`)."""
    block = block or pick_block(N)
    num_warps = block // WARP_SIZE
    items = N // block           # values per thread
    chunks = items // 4          # v4 loads per thread
    row_bytes = N * 4

    @kernel(
        in_specs=(Tile("B", N, f32),),
        out_specs=(Tile("B", N, f32),),
        grid=lambda B: (B, 1, 1),
        block=(block, 1, 1),
        arch=arch,
    )
    def softmax(X, Y):
        # Separate partials for the two reductions: no barrier between them.
        max_partials = smem.alloc(f32, (num_warps,))
        sum_partials = smem.alloc(f32, (num_warps,))

        px, py = ptx.global_ptrs(X, Y)
        tid = reg.scalar(u32); ptx.inst.mov.u32(tid, ptx.special.tid.x())
        row = reg.scalar(u32); ptx.inst.mov.u32(row, ptx.special.ctaid.x())
        lane = tid & (WARP_SIZE - 1)
        warp_id = tid >> 5
        # Thread t owns chunks t, t + block, t + 2*block ... of the row (coalesced).
        # Products of 32-bit registers become mul.wide.u32 where they meet a
        # 64-bit pointer: byte offsets never overflow 32 bits.
        row_off = row * row_bytes
        thread_off = tid * 16
        xrow = px + row_off + thread_off
        yrow = py + row_off + thread_off

        x = reg.array(f32, items)
        for j in range(chunks):
            # The chunk offset is a constant folded into the address: [%rd+8192*j].
            ptx.inst.ld.global_.cs.v4.f32(
                [x[4 * j], x[4 * j + 1], x[4 * j + 2], x[4 * j + 3]],
                ptx.addr(xrow, j * block * 16))

        # ---- row max
        row_max = tree(ptx.inst.max.f32, x)
        row_max = block_allreduce(row_max, max_partials, warp_id, lane, num_warps,
                                  ptx.inst.max.f32, ptx.warp.reduce_max)

        # ---- e = 2^(x*log2e - max*log2e), in place, and the row sum
        neg_max = reg.scalar(f32)
        ptx.inst.mul.f32(neg_max, row_max, -LOG2E)
        for i in range(items):
            ptx.inst.fma.rn.f32(x[i], x[i], LOG2E, neg_max)
            ptx.inst.ex2.approx.ftz.f32(x[i], x[i])
        row_sum = tree(ptx.inst.add.f32, x)
        row_sum = block_allreduce(row_sum, sum_partials, warp_id, lane, num_warps,
                                  ptx.inst.add.f32, ptx.warp.reduce_sum)

        # ---- y = e / sum
        inv = reg.scalar(f32)
        ptx.inst.rcp.approx.ftz.f32(inv, row_sum)
        for j in range(chunks):
            y = [reg.scalar(f32) for _ in range(4)]
            for k in range(4):
                ptx.inst.mul.f32(y[k], x[4 * j + k], inv)
            ptx.inst.st.global_.cs.v4.f32(ptx.addr(yrow, j * block * 16), y)

    return softmax


def reference(x: np.ndarray) -> np.ndarray:
    """float64 softmax over the last axis."""
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def check(B: int, N: int, seed: int = 0) -> float:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((B, N)) * 3).astype(np.float32)
    y = run(build_softmax(N), x)
    ref = reference(x)
    err = float(np.max(np.abs(y - ref) / ref.max(axis=-1, keepdims=True)))
    ok = err < 1e-5
    print(f"[{'OK' if ok else 'FAIL'}] softmax {B} x {N} f32: max error {err:.2e} "
          f"(relative to the row max)")
    if not ok:
        raise SystemExit(1)
    return err


def gpu_timing(B: int, N: int) -> None:
    """µs and TB/s of the kernel beside torch.softmax and a device copy of the same bytes."""
    import torch
    x = torch.randn(B, N, device="cuda")
    y = torch.empty_like(x)
    k = build_softmax(N)
    report(f"{B}x{N}", 2 * x.numel() * 4, lambda: k(x, y),
           "torch.softmax", lambda: torch.softmax(x, dim=-1), lambda: y.copy_(x))


def main() -> None:
    gpu = on_gpu()
    print(f"softmax on {'the GPU' if gpu else 'the CPU interpreter'}")
    for B, N in ([(2048, 8192), (4096, 4096), (1, 1024)] if gpu else [(64, 8192), (5, 4096), (7, 128)]):
        check(B, N)
    if gpu:
        try:
            gpu_timing(2048, 8192)
        except ImportError:
            print("  (install torch to see timings beside torch.softmax)")


if __name__ == "__main__":
    main()
