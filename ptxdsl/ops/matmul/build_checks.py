"""Which (plan, dtypes, majors, epilogue) combinations the Hopper GEMM kernel builds: each
refusal says what the plan asked for and what would be right (:func:`.hopper.build_hopper`
calls :func:`check_build` before it traces)."""
from __future__ import annotations

from ...core.types import PtxType
from .config import SMEM_PER_CTA, Plan


def check_build(p: Plan, dtype: PtxType, b_dtype: PtxType, out_dtype: PtxType, mode,
                grouped: bool, bias, a_major: str, b_major: str) -> None:
    """Raise ValueError where ``build_hopper`` cannot build ``p`` for these operands;
    ``mode``: the scale mode (:func:`.fp8.mode_of`)."""
    if grouped and (p.cluster > 1 or p.split > 1 or p.a_rows or p.epi_in_ring or p.b_prefetch
                    or bias is not None or mode == "block"):
        raise ValueError(f"build_hopper: a grouped GEMM takes a plan without clusters "
                         f"along M, split-K, a_rows, epi_in_ring or b_prefetch, no bias and "
                         f"per-tensor or row-wise scales, got {p}, bias {bias}, scales {mode}")
    if p.consumers == 1 and (grouped or mode == "block"):
        raise ValueError(f"build_hopper: one consumer (64-row tiles) is the dense kernel's "
                         f"without block-wise scales, got {p}"
                         f"{' (grouped)' if grouped else ''}, scales {mode}")
    if p.pingpong and (grouped or mode == "block"):
        raise ValueError(f"build_hopper: Plan.pingpong is the dense kernel's without "
                         f"block-wise scales, got {p}{' (grouped)' if grouped else ''}, "
                         f"scales {mode}")
    if p.stream_k and (grouped or mode == "block"):
        raise ValueError(f"build_hopper: Plan.stream_k is the dense kernel's without "
                         f"block-wise scales, got {p}{' (grouped)' if grouped else ''}, "
                         f"scales {mode}")
    if (p.tail_skip or p.tma_store) and not grouped:
        raise ValueError(f"build_hopper: Plan.tail_skip and tma_store are the grouped GEMM's, "
                         f"got {p} for a dense GEMM")
    if p.epi_overlap and not grouped and (p.split > 1 or p.stream_k or p.a_rows
                                          or mode == "block"):
        raise ValueError(f"build_hopper: a dense Plan.epi_overlap takes whole tiles of every "
                         f"row (no split-K, stream_k or a_rows) and no block-wise scales, got "
                         f"{p}, scales {mode}")
    cap = 128 if grouped else 192       # the widths ptxas -v was shown to fit
    if p.epi_overlap and (p.bn > cap or p.stages <= p.epi_overlap):
        raise ValueError(f"build_hopper: Plan.epi_overlap keeps two accumulators (tiles of "
                         f"at most {cap} columns) and needs more ring stages than the "
                         f"k-blocks it issues early, got {p}")
    if (p.m_waves > 1 or p.kb_pairs or p.kb_roll or p.smem_scales or p.sb_ring) and (
            mode != "block" or grouped):
        raise ValueError(f"build_hopper: Plan.m_waves={p.m_waves} (256-row tiles), "
                         f"kb_pairs={p.kb_pairs}, kb_roll={p.kb_roll} and smem_scales="
                         f"{p.smem_scales} are the dense block-wise fp8 kernel's, got scales "
                         f"{mode}{' in a grouped GEMM' if grouped else ''}")
    if mode == "block" and (dtype.bytes != 1 or p.bn not in (64, 128, 160, 256) or (
            p.bn in (160, 256) and (p.m_waves > 1 or p.kb_pairs or p.split > 1))):
        raise ValueError(f"build_hopper: block-wise scales take 8-bit operands (a ring "
                         f"stage is one 128-long K block) and 64- or 128-column tiles, or "
                         f"256 (two 128-column halves) without m_waves, kb_pairs or split-K "
                         f"(plan.for_scaling), as 160 (two scale_b blocks), got {dtype.name} "
                         f"and {p}")
    if b_dtype.bytes != dtype.bytes:
        raise ValueError(f"build_hopper: A and B elements must have one size, got "
                         f"{dtype.name} and {b_dtype.name}")
    if dtype.bytes == 1 and (a_major, b_major) != ("K", "K"):
        raise ValueError(f"build_hopper: 8-bit operands ({dtype.name}, {b_dtype.name}) must "
                         f"both be K-major (wgmma cannot transpose them), got A {a_major}, "
                         f"B {b_major}")
    if p.bn % 16 or not 64 <= p.bn <= 256 or p.bk * dtype.bytes != 128:
        raise ValueError(f"build_hopper is written for 128 x bn tiles (bn a multiple of 16 from "
                         f"64 to 256) and 128-byte K rows, got {p}")
    if p.b_swizzle != 128 and (b_major != "MN" or dtype.bytes != 2 or mode == "block"):
        raise ValueError(f"build_hopper: Plan.b_swizzle={p.b_swizzle} is an MN-major 16-bit "
                         f"B's (atoms of 32 columns), got B {b_major}-major {b_dtype.name}"
                         f"{' with block-wise scales' if mode == 'block' else ''} (use 128)")
    if p.a_rows and a_major != "K":
        raise ValueError(f"build_hopper: Plan.a_rows={p.a_rows} loads part of A's K-major "
                         f"rows; A is {a_major}-major here (use a_rows=0)")
    if p.smem_bytes(dtype, out_dtype) > SMEM_PER_CTA:
        raise ValueError(f"{p} needs {p.smem_bytes(dtype, out_dtype)} bytes of shared memory "
                         f"for {dtype.name} -> {out_dtype.name}, more than {SMEM_PER_CTA}")
