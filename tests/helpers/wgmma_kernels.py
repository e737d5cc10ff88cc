"""wgmma kernels shared by the interpreter tests and the GPU differential tests.

The host lays out the shared-memory images of A and B itself (``smem_image``) from the
PTX ISA's description of the canonical layouts, written independently of
``ptxdsl.isa.descriptors``: 8-row groups ``stride`` bytes apart, each row ``span`` bytes,
16-byte chunk ``c`` of a row stored at chunk ``c ^ ((row % 8) * span // 128 % (span // 16))``
(the 32/64/128-byte swizzle), or 8 x 16-byte core matrices without swizzle. The kernel
copies the images into shared memory verbatim, builds descriptors with
``ptx.wgmma.descriptor`` and runs one ``wgmma.mma_async`` per K step.
"""
from __future__ import annotations

import functools

import numpy as np

from ptxdsl import Tile, kernel, ptx, reg, smem
from ptxdsl.core.types import bf16, f32, u16, u32


def kmajor_image(mat_bits: np.ndarray, span: int, stride: int, leading: int = 256) -> np.ndarray:
    """uint16 image of a (rows, 16) bf16 operand stored K-major (K contiguous)."""
    rows, k = mat_bits.shape
    size = ((rows + 7) // 8) * stride + leading + 2048
    img = np.zeros(size // 2, np.uint16)
    for r in range(rows):
        for kk in range(k):
            b = kk * 2
            if span:
                chunk = b // 16
                chunk ^= (r % 8) * span // 128 % (span // 16)
                addr = (r // 8) * stride + (r % 8) * span + chunk * 16 + b % 16
            else:
                addr = (r // 8) * stride + (r % 8) * 16 + (b // 16) * leading + b % 16
            img[addr // 2] = mat_bits[r, kk]
    return img


def mnmajor_image(mat_bits: np.ndarray, span: int, stride: int, leading: int) -> np.ndarray:
    """uint16 image of a (rows=N, 16=K) operand stored MN-major (N contiguous)."""
    rows, k = mat_bits.shape
    per = span // 2 if span else 8
    size = (rows // per + 1) * leading + 2 * stride + 8 * max(span, 16) + 2048
    img = np.zeros(size // 2, np.uint16)
    for r in range(rows):
        for kk in range(k):
            if span:
                b = (r % per) * 2
                chunk = b // 16
                chunk ^= (kk % 8) * span // 128 % (span // 16)
                addr = (r // per) * leading + (kk % 8) * span + (kk // 8) * stride + chunk * 16 \
                    + b % 16
            else:
                addr = (r % 8) * 2 + (r // 8) * stride + (kk % 8) * 16 + (kk // 8) * leading
            img[addr // 2] = mat_bits[r, kk]
    return img


def layouts(n: int, swizzle: int, b_mn_major: bool):
    """(leading, stride) byte offsets of A and of B for the images above."""
    # K-major without swizzle: core matrices of 8 rows x 16 bytes, 8-row groups 128 bytes
    # apart (stride), the second K chunk after all of them (leading).
    a = (1024, 128) if not swizzle else (16, 8 * swizzle)
    if b_mn_major:
        # MN-major: a row of `span` bytes along N per k, 8 k-rows per atom; the second 8-k
        # group `stride` bytes on, further N spans `leading` bytes on.
        b = (n // 8 * 128, 128) if not swizzle else (16 * swizzle, 8 * swizzle)
    else:
        b = (n // 8 * 128, 128) if not swizzle else (16, 8 * swizzle)
    return a, b


@functools.lru_cache(maxsize=None)
def build_wgmma(n: int, swizzle: int, b_mn_major: bool, a_words: int, b_words: int):
    """D (64 x n f32) = A (64 x 16 bf16) @ B^T where B is n x 16, one wgmma."""
    (la, sa_), (lb, sb_) = layouts(n, swizzle, b_mn_major)

    @kernel(in_specs=(Tile(a_words, u16), Tile(b_words, u16)), out_specs=(Tile(64, n, f32),),
            block=(128, 1, 1), arch="sm_90a")
    def wgmma_tile(A, B, D):
        pa, pb, pd = ptx.global_ptrs(A, B, D)
        tid = reg.scalar(u32)
        ptx.inst.mov.u32(tid, ptx.special.tid.x())
        sa = smem.alloc(u16, (a_words // 64, 64), swizzle=128)
        sb = smem.alloc(u16, (b_words // 64, 64), swizzle=128)
        for src, dst, words in ((pa, sa, a_words), (pb, sb, b_words)):
            for i in ptx.range_(tid, words, 128):
                x = reg.scalar(u16)
                ptx.inst.ld.global_.u16(x, ptx.addr(src + i * 2))
                ptx.inst.st.shared.u16(ptx.addr(dst.base + i * 2), x)
        ptx.bar.sync(0)
        ptx.inst.fence.proxy.async_.shared__cta()
        acc = ptx.wgmma.accumulator(n, f32)
        da = ptx.wgmma.descriptor(sa, leading=la, stride=sa_, swizzle=swizzle)
        db = ptx.wgmma.descriptor(sb, leading=lb, stride=sb_, swizzle=swizzle)
        ptx.wgmma.fence()
        ptx.wgmma.mma(acc, da, db, ab_type=bf16, accumulate=False,
                      transpose_b=int(b_mn_major))
        ptx.wgmma.commit()
        ptx.wgmma.wait(0)
        w = tid >> 5
        lane = tid & 31
        row0 = (w << 4) + (lane >> 2)
        col0 = (lane & 3) << 1
        base = pd + (row0 * n + col0) * 4
        for (dr, dc), r, _ in acc.items():
            ptx.inst.st.global_.f32(ptx.addr(base, (dr * n + dc) * 4), r)
    return wgmma_tile


def random_case(n: int, swizzle: int, b_mn_major: bool, seed: int = 0):
    """Inputs (A image, B image) and the float64 reference D for build_wgmma."""
    from ptxdsl.core.types import bf16_bits_to_f32, f32_to_bf16_bits
    rng = np.random.default_rng(seed)
    a = f32_to_bf16_bits(rng.standard_normal((64, 16)).astype(np.float32))
    b = f32_to_bf16_bits(rng.standard_normal((n, 16)).astype(np.float32))
    (la, sa_), (lb, sb_) = layouts(n, swizzle, b_mn_major)
    a_img = kmajor_image(a, swizzle, sa_, la)
    b_img = (mnmajor_image(b, swizzle, sb_, lb) if b_mn_major
             else kmajor_image(b, swizzle, sb_, lb))
    pad = lambda x: np.concatenate([x, np.zeros((-len(x)) % 64, np.uint16)])  # noqa: E731
    a_img, b_img = pad(a_img), pad(b_img)
    af, bf = bf16_bits_to_f32(a).astype(np.float64), bf16_bits_to_f32(b).astype(np.float64)
    random_case.abs_sum = np.abs(af) @ np.abs(bf).T     # sum_k |a_ik b_jk|, for error bounds
    return a_img, b_img, af @ bf.T
