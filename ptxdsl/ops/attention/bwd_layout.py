"""What the attention backward's main kernel (:mod:`.bwd`) lays out: the byte offsets of its
dynamic shared memory (:class:`Smem`) and its arguments with their TMA boxes (:func:`specs`),
which the 96-key kernel (:mod:`.bwd_wg3`) shares.

Shared memory (1024-byte aligned, 64-column panels of 128-byte swizzled rows, what a TMA box
of (1, rows, 1, 64) writes): K, V (128 rows a panel), ``stages`` Q and dO (64 rows a
panel), the two warpgroups' dSᵀ (64 x 64), the two warpgroups' dQ stages (dq_tma: 64 x D
f32, as 64-column rows or, dq_swizzle, as 32-column panels of 128-byte swizzled rows),
``stages`` x (-LSE·log2e, D) (64 f32 each, one copy per consumer warpgroup), the barriers."""
from __future__ import annotations

from ... import Tile
from ...core.tensormap import TMA
from ...core.types import PtxType, f32, s32, u32
from .bwd_config import BLOCK_M as BM, BLOCK_N as BN, BwdConfig
from .config import padded

PANEL = 64           # 16-bit elements per 128-byte swizzle row
ROW = 128            # bytes per swizzled panel row


class Smem:
    """Byte offsets in the CTA's dynamic shared memory."""

    def __init__(self, c: BwdConfig, d: int, es: int):
        self.kv_bytes = c.block_n * padded(d) * es    # whole panels (96: the second half)
        self.q_bytes = c.block_m * padded(d) * es
        self.k = 0
        self.v = self.k + self.kv_bytes
        self.q = self.v + self.kv_bytes
        self.do = self.q + c.stages * self.q_bytes
        self.ds = self.do + c.stages * self.q_bytes          # two 64 x 64 dSᵀ tiles
        self.ds_bytes = BM * 64 * es                      # (ds_double: two pairs, by slot;
        # block_m 128: a 128-key panel per 64 queries)
        self.dqs = self.ds + (2 if c.ds_double else 1) * \
            (4 if c.block_m > BM else 2) * self.ds_bytes
        self.dqs_bytes = BM * 64 * 4                      # one 64 x 64 f32 chunk
        # a warpgroup's stage: every dQ column, or (col_split) its half
        self.wg_stage = (d // 2 if c.col_split else d) * BM * 4
        self.lse = self.dqs + (2 * self.wg_stage if c.dq_tma else 0)
        self.dpsum = self.lse + c.stages * 2 * c.block_m * 4
        self.kvfull = self.dpsum + c.stages * 2 * c.block_m * 4
        self.full = self.kvfull + 8
        self.empty = self.full + 8 * c.stages
        self.kvempty = self.empty + 8 * c.stages         # (kv_pair)
        self.total = self.kvempty + (8 if c.kv_pair else 0)


def specs(dtype: PtxType, d: int, deterministic: bool, dq_tma: bool = False,
          dq_swizzle: bool = False, bn: int = BN, varlen: bool = False, bm: int = BM,
          dkv_tma: bool = False, dkv_rows: int = 0):
    """q, do (B, SQ, H, D), k, v (B, SK, HK, D), nlse2 and dpsum (B, H, SQP) through TMA;
    dq_acc (B, H, SQP, D) f32 (added to; a TMA box of 64 columns, or of 32 in 128-byte
    swizzled panels), dk, dv (B, SK, HK, D) [, sem (B, H, NMB)]. ``varlen``: without B,
    TQ / TK packed rows, cu_q and cu_k after dpsum. ``bm``: the rows of a step's Q, dO,
    LSE and D boxes; ``dkv_rows``: dk's and dv's TMA box rows where not ``bn``
    (``dkv_stage``: a warpgroup's 64)."""
    if varlen:
        qt = lambda: Tile("TQ", "H", d, dtype, tma=TMA(box=(BM, 1, PANEL), swizzle=ROW))
        kt = lambda: Tile("TK", "HK", d, dtype, tma=TMA(box=(bn, 1, PANEL), swizzle=ROW))
        rt = lambda: Tile("H", "SQP", f32, tma=TMA(box=(1, BM)))
        dq = Tile("H", "SQP", d, f32, tma=TMA(box=(1, BM, 32), swizzle=ROW))
        outs = [dq, Tile("TK", "HK", d, dtype), Tile("TK", "HK", d, dtype)]
        if deterministic:
            outs.append(Tile("H", "NMB", u32))
        return (qt(), kt(), kt(), qt(), rt(), rt(), Tile("NS1", s32), Tile("NS1", s32)), \
            tuple(outs)
    qt = lambda: Tile("B", "SQ", "H", d, dtype, tma=TMA(box=(1, bm, 1, PANEL), swizzle=ROW))
    kt = lambda: Tile("B", "SK", "HK", d, dtype, tma=TMA(box=(1, bn, 1, PANEL), swizzle=ROW))
    rt = lambda: Tile("B", "H", "SQP", f32, tma=TMA(box=(1, 1, bm)))
    ins = (qt(), kt(), kt(), qt(), rt(), rt())
    dq_box = TMA(box=(1, 1, BM, 32), swizzle=ROW) if dq_swizzle else TMA(box=(1, 1, BM, 64))
    dq = Tile("B", "H", "SQP", d, f32, tma=dq_box) if dq_tma \
        else Tile("B", "H", "SQP", d, f32)
    kvo = (lambda: Tile("B", "SK", "HK", d, dtype, tma=TMA(box=(1, dkv_rows, 1, PANEL),
                                                           swizzle=ROW))) if dkv_rows else kt
    outs = [dq] + [kvo() if dkv_tma else Tile("B", "SK", "HK", d, dtype) for _ in range(2)]
    if deterministic:
        outs.append(Tile("B", "H", "NMB", u32))
    return ins, tuple(outs)


__all__ = ["PANEL", "ROW", "Smem", "specs"]
