"""A wide K-major wgmma tile (rows of 256 bytes: two 128-byte swizzled stripes) filled by
TMA one stripe at a time and multiplied; shared by tests/dsl/test_wgmma_operand.py (the
interpreter) and tests/gpu/test_wgmma_gpu.py (an H100/H200)."""
from __future__ import annotations

import functools

import numpy as np

from ptxdsl import Tile, kernel, ptx, reg, smem
from ptxdsl.core.types import bf16, f32, u16, u32


def box_image(bits: np.ndarray) -> np.ndarray:
    """uint16 image of a row-major (rows, cols) 16-bit tile as a swizzled TMA box writes it
    (rows of span = cols * 2 bytes; 16-byte rows unswizzled)."""
    rows, cols = bits.shape
    span = cols * 2
    img = np.zeros(rows * cols, np.uint16)
    for r in range(rows):
        for c in range(cols):
            b = c * 2
            chunk = b // 16
            if span > 16:
                chunk ^= (r % 8) * span // 128 % (span // 16)
            img[(r * span + chunk * 16 + b % 16) // 2] = bits[r, c]
    return img


@functools.lru_cache(maxsize=None)
def build_wide_tma(n: int = 16):
    """A (64, 128) bf16 K-major A tile filled by two TMA boxes of 64 x 64 (128-byte
    swizzle), one per stripe at ``k_step(4 * s)``, times a (128, n) MN-major B: eight
    wgmma K steps through both stripes."""
    @kernel(in_specs=(Tile.wgmma_a(64, 128, bf16, tile_m=64, tile_k=64), Tile(128 * n, u16)),
            out_specs=(Tile(64, n, f32),), block=(128, 1, 1), arch="sm_90a")
    def wide(A, B, D):
        pb, pd = ptx.global_ptrs(B, D)
        tid = reg.scalar(u32)
        ptx.inst.mov.u32(tid, ptx.special.tid.x())
        sa = smem.wgmma_tile(bf16, (64, 128), major="K")
        sb = smem.wgmma_tile(bf16, (128, n), major="MN")
        bar = smem.mbarrier(1)
        with ptx.if_(tid == 0):
            ptx.mbarrier.init(bar[0], 1)
            ptx.fence.mbarrier_init()
        ptx.bar.sync(0)
        with ptx.if_(tid == 0):
            ptx.mbarrier.arrive_expect_tx(bar[0], 64 * 128 * 2)
            for s in range(2):       # box (rows 0..63, K 64s..64s+63): coords innermost first
                ptx.tma.load(sa.k_step(4 * s), A.tma_desc(), (64 * s, 0), bar[0])
        for i in ptx.range_(tid, 128 * n, 128):
            x = reg.scalar(u16)
            ptx.inst.ld.global_.u16(x, ptx.addr(pb + i * 2))
            ptx.inst.st.shared.u16(ptx.addr(sb.base + i * 2), x)
        ptx.inst.fence.proxy.async_.shared__cta()
        ptx.bar.sync(0)
        ptx.mbarrier.wait(bar[0], 0)
        acc = reg.array(f32, n // 2)
        ptx.wgmma.fence()
        for kk in range(8):
            ptx.wgmma.mma(acc, sa.k_step(kk), sb.k_step(kk), ab_type=bf16, accumulate=kk > 0)
        ptx.wgmma.commit()
        ptx.wgmma.wait(0)
        frag = ptx.wgmma.WgmmaFragment(ptx.wgmma.WgmmaLayout(n), list(acc))
        w = tid >> 5
        lane = tid & 31
        base = pd + (((w << 4) + (lane >> 2)) * n + ((lane & 3) << 1)) * 4
        for (dr, dc), r, _ in frag.items():
            ptx.inst.st.global_.f32(ptx.addr(base, (dr * n + dc) * 4), r)
    return wide


def wide_case(n: int = 16, seed: int = 11):
    """(A's bf16 bits, B's swizzled image, the float64 product) for :func:`build_wide_tma`."""
    from ptxdsl.core.types import bf16_bits_to_f32, f32_to_bf16_bits
    rng = np.random.default_rng(seed)
    a = f32_to_bf16_bits(rng.standard_normal((64, 128)).astype(np.float32))
    b = f32_to_bf16_bits(rng.standard_normal((128, n)).astype(np.float32))
    ref = bf16_bits_to_f32(a).astype(np.float64) @ bf16_bits_to_f32(b).astype(np.float64)
    return a, box_image(b), ref
