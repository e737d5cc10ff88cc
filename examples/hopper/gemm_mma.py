"""bf16 GEMM on the warp tensor cores: ``C = A @ B`` with cp.async, ldmatrix and mma.sync.

A (M, K), B (K, N) and C (M, N) are row-major bf16; accumulation is f32. One CTA of
four warps computes a 128 x 128 tile of C; each warp a 64 x 64 quarter as 4 x 8
``mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32`` per 16-wide K step. K is
walked in 32-wide tiles through a four-stage ring of shared memory filled by
``cp.async.cg`` (16 bytes per copy, three tiles in flight), read by ``ldmatrix.x4``
(A) and ``ldmatrix.x4.trans`` (B, whose rows are K). Both tiles are stored XOR-
swizzled by 16-byte chunk so that the eight rows one ldmatrix phase reads fall in
distinct banks. M, N and K are run-time dims (one compiled kernel serves every shape):
rows and columns past the edges are zero-filled by ``cp.async``'s source size and
never stored; N and K must be multiples of 8 (16-byte rows for ``cp.async``).

The accumulators are :class:`ptxdsl.dsl.tensorcore.Fragment` objects: ``ptx.mma(acc, a, b)``
reads its shape and types from them, and the epilogue places each element by the
offsets its layout gives (no hand-derived lane arithmetic).

    python examples/hopper/gemm_mma.py            # run + check (GPU, else interpreter)
    ptxdsl ptx examples/hopper/gemm_mma.py        # read the PTX
    ptxdsl check examples/hopper/gemm_mma.py      # registers / spills (ptxas)
"""
from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

from _harness import on_gpu, run, time_us  # noqa: E402
from ptxdsl import Tile, kernel, ptx, reg, smem  # noqa: E402
from ptxdsl.dsl.tensorcore import fragment, layout  # noqa: E402
from ptxdsl.types import bf16, bf16x2, f32_to_bf16_bits, pred, u32  # noqa: E402

BM, BN, BK = 128, 128, 32     # CTA tile
WM, WN = 64, 64               # warp tile (2 x 2 warps)
STAGES = 4                    # shared-memory ring: STAGES - 1 tiles in flight
THREADS = 128
A_STAGE = BM * BK * 2         # 8 KiB: 128 rows of 64 bytes (4 chunks of 16)
B_STAGE = BK * BN * 2         # 8 KiB: 32 rows of 256 bytes (16 chunks)
SMEM = STAGES * (A_STAGE + B_STAGE)
MF, NF = WM // 16, WN // 8    # mma tiles per warp: 4 x 8


def _cdiv(a, b):
    return (a + b - 1) // b


# --8<-- [start:build]
def build_gemm(arch: str = "sm_90a"):
    """``C = A @ B`` (bf16 in and out, f32 accumulation) for any M, N, K (N, K % 8 == 0)."""

    @kernel(in_specs=(Tile("M", "K", bf16), Tile("K", "N", bf16)),
            out_specs=(Tile("M", "N", bf16),),
            grid=lambda M, N: (_cdiv(N, BN), _cdiv(M, BM), 1),
            block=(THREADS, 1, 1), arch=arch)
    def gemm_mma(A, B, C):
        ring = smem.alloc(bf16, (SMEM // 2,), align=128, dynamic=True)
        pa, pb, pc = ptx.global_ptrs(A, B, C)
        M, N, K = ptx.dim("M"), ptx.dim("N"), ptx.dim("K")
        tid = reg.scalar(u32); ptx.inst.mov.u32(tid, ptx.special.tid.x())
        bx = reg.scalar(u32); ptx.inst.mov.u32(bx, ptx.special.ctaid.x())
        by = reg.scalar(u32); ptx.inst.mov.u32(by, ptx.special.ctaid.y())
        m0, n0 = by * BM, bx * BN
        lane, warp = tid & 31, tid >> 5
        wm, wn = warp >> 1, warp & 1
        base = ring.base                              # shared address of the ring
        a_ring, b_ring = base, base + STAGES * A_STAGE

        # ---- cp.async: each thread copies 4 chunks of A and 4 of B per K tile.
        # A chunk (row r, chunk c) lives at r*64 + (c ^ ((r >> 1) & 3))*16 of its stage;
        # B chunk (row k, chunk c) at k*256 + (c ^ (k & 7))*16.
        ar, ac = tid >> 2, tid & 3
        a_dst = a_ring + (ar * 64 + (ac ^ ((ar >> 1) & 3)) * 16)
        br, bc = tid >> 4, tid & 15
        b_dst = b_ring + (br * 256 + (bc ^ (br & 7)) * 16)
        a_src = pa + ((m0 + ar) * K + ac * 8) * 2      # row ar of this CTA's A rows
        b_src = pb + (br * N + n0 + bc * 8) * 2        # row br of B, this CTA's columns
        a_row_ok = [m0 + ar + 32 * j < M for j in range(4)]
        b_col_ok = n0 + bc * 8 < N
        a_step_rows = K * (32 * 2)                     # bytes between A rows ar, ar + 32
        b_step_rows = N * (8 * 2)                      # bytes between B rows br, br + 8
        b_step_tile = N * (BK * 2)                     # bytes B advances per K tile
        kload = reg.scalar(u32, init=0)                # first K column of the next load
        zero = reg.scalar(u32, init=0)

        def issue(stage: int) -> None:
            """cp.async of the K tile starting at kload into ring stage ``stage``."""
            nonlocal a_src, b_src, kload
            a_k_ok = kload + ac * 8 < K
            for j in range(4):
                ok = a_row_ok[j] & a_k_ok
                src = a_src + a_step_rows * j if j else a_src
                ptx.cp.async_.cg(ptx.addr(a_dst, stage * A_STAGE + j * 32 * 64),
                                 ptx.addr(ptx.select(ok, src, pa)), 16,
                                 ptx.select(ok, 16, zero))
            for j in range(4):
                ok = (kload + br + 8 * j < K) & b_col_ok
                src = b_src + b_step_rows * j if j else b_src
                ptx.cp.async_.cg(ptx.addr(b_dst, stage * B_STAGE + j * 8 * 256),
                                 ptx.addr(ptx.select(ok, src, pb)), 16,
                                 ptx.select(ok, 16, zero))
            ptx.cp.async_.commit_group()
            a_src += BK * 2                            # add.u64 in place
            b_src += b_step_tile                       # (mul.wide of N once, add.u64)
            kload += BK

        # ---- ldmatrix addresses: lane l names row l % 16 of a 16 x 16 block, chunk l // 16.
        lr, lh = lane & 15, lane >> 4
        a_row = a_ring + (wm * WM + lr) * 64
        a_ld = [a_row + (((kk * 2) | lh) ^ ((lr >> 1) & 3)) * 16 for kk in range(2)]
        b_row = b_ring + lr * 256 + wn * 128           # + warp's 8 chunks of 16 bytes
        b_ld = [b_row + (((p * 2) | lh) ^ (lane & 7)) * 16 for p in range(NF // 2)]

        acc = [[fragment("c", "m16n8k16", "f32", init=0.0) for _ in range(NF)]
               for _ in range(MF)]
        a_fr = [[fragment("a", "m16n8k16", "bf16") for _ in range(MF)] for _ in range(2)]
        b_fr = [[fragment("b", "m16n8k16", "bf16") for _ in range(NF)] for _ in range(2)]

        def load_frags(stage: int, kk: int) -> None:
            """ldmatrix.x4 per 16 x 16 block of A, ldmatrix.x4.trans per two n8 tiles of B."""
            for mf in range(MF):
                ptx.ldmatrix(a_fr[kk][mf], ptx.addr(a_ld[kk], stage * A_STAGE + mf * 1024))
            for p in range(NF // 2):   # matrices: (k 0-7 | 8-15) x (n tile 2p | 2p + 1)
                lo, hi = b_fr[kk][2 * p], b_fr[kk][2 * p + 1]
                ptx.ldmatrix([lo[0], lo[1], hi[0], hi[1]],
                             ptx.addr(b_ld[p], stage * B_STAGE + kk * 16 * 256), trans=True)

        def mma_all(kk: int) -> None:
            for mf in range(MF):
                for i in range(NF):
                    nf = NF - 1 - i if mf & 1 else i   # serpentine: reuse one B operand
                    ptx.mma(acc[mf][nf], a_fr[kk][mf], b_fr[kk][nf])

        # ---- the pipeline: STAGES - 1 tiles ahead; the loop body is unrolled over the
        # ring so every stage index is a constant. Tiles past K are zero-filled.
        for s in range(STAGES - 1):
            issue(s)
        tiles = (K + (BK * STAGES - 1)) // (BK * STAGES) * STAGES
        for kt in ptx.range_(0, tiles, STAGES):
            for s in range(STAGES):
                ptx.cp.async_.wait_group(STAGES - 2)
                ptx.bar.sync(0)                         # stage s landed; s - 1 is free
                issue((s + STAGES - 1) % STAGES)
                load_frags(s, 0)
                load_frags(s, 1)
                mma_all(0)
                mma_all(1)
        ptx.cp.async_.wait_all()

        # ---- epilogue: C[row, col] for each accumulator element, by its layout offsets
        lay = layout("c", "m16n8k16", "f32")
        row0, col0 = acc[0][0].origin(lane)
        row = m0 + wm * WM + row0
        col = n0 + wn * WN + col0
        c_base = pc + (row * N + col) * 2
        row8 = N * (8 * 2)                             # bytes between rows r and r + 8
        pairs = [(i, j) for i, (dr, dc) in enumerate(lay.offsets()) for j, (dr2, dc2)
                 in enumerate(lay.offsets()) if dr2 == dr and dc2 == dc + 1]
        col_ok = [col + nf * 8 < N for nf in range(NF)]
        for mf in range(MF):
            for i, j in pairs:
                dr = mf * 16 + lay.offsets()[i][0]
                ptr = c_base + row8 * (dr // 8) if dr else c_base
                row_ok = row + dr < M if dr else row < M
                for nf in range(NF):
                    frag = acc[mf][nf]
                    v = reg.scalar(bf16x2)
                    ptx.inst.cvt.rn.bf16x2.f32(v, frag[j], frag[i])  # high half: col + 1
                    ok = reg.scalar(pred)
                    ptx.inst.and_.pred(ok, row_ok, col_ok[nf])
                    ptx.inst.st.global_.b32(ptx.addr(ptr, nf * 16), v, pred=ok)

    return gemm_mma
# --8<-- [end:build]


def KERNELS():
    """What ``ptxdsl ptx/check`` show."""
    return {"gemm_mma": build_gemm()}


def _bf16(x: np.ndarray) -> np.ndarray:
    return f32_to_bf16_bits(x.astype(np.float32))


def _f(bits: np.ndarray) -> np.ndarray:
    return (np.asarray(bits).astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def check(M: int, N: int, K: int, seed: int = 0) -> float:
    rng = np.random.default_rng(seed)
    a, b = _bf16(rng.standard_normal((M, K))), _bf16(rng.standard_normal((K, N)))
    c = run(build_gemm(), a, b)
    ref = _f(a) @ _f(b)
    err = float(np.max(np.abs(_f(c) - ref) / (np.sqrt(K) + np.abs(ref)))) if M * N else 0.0
    ok = err <= 2 ** -7        # one bf16 rounding of the f32 sum
    print(f"[{'OK' if ok else 'FAIL'}] gemm_mma {M}x{N}x{K}: max scaled error {err:.2e}")
    if not ok:
        raise SystemExit(1)
    return err


def gpu_timing(size: int = 4096) -> None:
    """TFLOP/s at size^3 beside cuBLAS (torch.matmul), same inputs."""
    import torch
    a = torch.randn((size, size), device="cuda", dtype=torch.bfloat16)
    b = torch.randn((size, size), device="cuda", dtype=torch.bfloat16)
    c = torch.empty((size, size), device="cuda", dtype=torch.bfloat16)
    k = build_gemm()
    k(a, b, c)
    ref = a.float() @ b.float()
    err = float(((c.float() - ref).abs() / (ref.abs() + size ** 0.5)).max())
    flop = 2 * size ** 3
    t_ours = time_us(lambda: k(a, b, c), 20)
    t_cublas = time_us(lambda: torch.matmul(a, b, out=c), 20)
    ours, cublas = flop / t_ours / 1e6, flop / t_cublas / 1e6
    print(f"  {size}^3 bf16 on {torch.cuda.get_device_name()}: ptxdsl gemm_mma {ours:.0f} "
          f"TFLOP/s ({t_ours:.0f} µs, {100 * ours / cublas:.0f}% of cuBLAS) | cuBLAS "
          f"{cublas:.0f} TFLOP/s ({t_cublas:.0f} µs) | max scaled error {err:.1e}")


def main() -> None:
    gpu = on_gpu()
    print(f"gemm_mma on {'the GPU' if gpu else 'the CPU interpreter'}")
    shapes = [(64, 64, 64), (100, 72, 40)] if not gpu else \
        [(64, 64, 64), (100, 72, 40), (1000, 1032, 520), (2048, 2048, 2048)]
    for M, N, K in shapes:
        check(M, N, K)
    if gpu:
        try:
            gpu_timing(4096)
        except ImportError:
            print("  (install torch to see TFLOP/s beside cuBLAS)")


if __name__ == "__main__":
    main()
