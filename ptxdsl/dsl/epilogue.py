"""Epilogue helpers: accumulator fragments to shared memory.

``stmatrix_x4_trans_f32_bf16(frag=, smem_base=, lane=, row_stride=)`` stores a wgmma
``m64nN`` f32 accumulator fragment (``N/2`` registers per thread, in the order the
``wgmma`` consumed them) to a shared tile of bf16, transposed, ``row_stride`` elements
between rows; pyptx's Hopper GEMM epilogue. It records, once::

    and.b32 l, lane, 31;  shr.u32 w, lane, 5
    mad.lo.s32 o, w, 16, 0;  and.b32 t, l, 7;   mad.lo.s32 o, t, row_stride, o
    shr.u32 t2, l, 4;        mad.lo.s32 o, t2, 8*row_stride, o
    and.b32 t3, l, 8;        add.s32 o, o, t3
    shl.b32 o2, o, 1;        add.u32 base, smem_base, o2

and per group of 8 registers ``g``: 8 ``cvt.rn.bf16.f32``, 4 ``mov.b32 {lo, hi}`` and
``stmatrix.sync.aligned.m8n8.x4.trans.shared::cta.b16 [base + g*32*row_stride],
{p0, p1, p2, p3}``.
"""
from __future__ import annotations

from ..core.errors import TraceError, user_location
from ..core.trace import current
from ..core.types import bf16, b32, u32

__all__ = ["stmatrix_x4_trans_f32_bf16"]


def stmatrix_x4_trans_f32_bf16(*, frag, smem_base, lane, row_stride: int, tmp_bf16=None,
                               tmp_pack=None) -> None:
    """See the module docstring. ``tmp_bf16`` (8 16-bit registers) and ``tmp_pack`` (4
    32-bit) are scratch registers to reuse (fresh ones when not given)."""
    from ..core import ir
    from .reg import as_reg
    b = current("ptx.stmatrix_x4_trans_f32_bf16")
    regs = list(frag.__ptx_regs__() if hasattr(frag, "__ptx_regs__") else frag)
    if not regs or len(regs) % 8:
        raise TraceError(f"stmatrix_x4_trans_f32_bf16: frag holds a multiple of 8 registers, "
                         f"got {len(regs)}", user_location())
    if isinstance(row_stride, bool) or not isinstance(row_stride, int) or row_stride < 1:
        raise TraceError(f"row_stride is a positive int (elements), got {row_stride!r}",
                         user_location())
    rs = list(tmp_bf16) if tmp_bf16 is not None else [b.new_reg(bf16) for _ in range(8)]
    pack = list(tmp_pack) if tmp_pack is not None else [b.new_reg(b32) for _ in range(4)]
    if len(rs) != 8 or len(pack) != 4:
        raise TraceError("tmp_bf16 holds 8 registers and tmp_pack 4", user_location())
    lane = as_reg(lane)
    l32 = lane & 31
    warp = lane >> 5
    off = b.new_reg(u32)
    b.inst(["mad", "lo", "s32"], (off, warp, 16, 0))
    b.inst(["mad", "lo", "s32"], (off, l32 & 7, row_stride, off))
    b.inst(["mad", "lo", "s32"], (off, l32 >> 4, row_stride * 8, off))
    b.inst(["add", "s32"], (off, off, l32 & 8))
    base = smem_base + (off << 1)
    group_bytes = row_stride * 16 * 2
    for g in range(len(regs) // 8):
        for k in range(8):
            b.inst(["cvt", "rn", "bf16", "f32"], (rs[k], regs[g * 8 + k]))
        for k in range(4):
            b.inst(["mov", "b32"], (pack[k], [rs[2 * k], rs[2 * k + 1]]))
        b.inst(["stmatrix", "sync", "aligned", "m8n8", "x4", "trans", "shared::cta", "b16"],
               (ir.Addr(base, g * group_bytes), pack))
