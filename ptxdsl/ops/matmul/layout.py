"""What one Hopper GEMM CTA (:mod:`.hopper`) lays out: the byte offsets of its dynamic
shared memory (:class:`Layout`), its arguments with their TMA boxes (:func:`specs`), its
``wgmma`` opcode (:func:`mma_instruction`) and its persistent grid (:func:`grid_for`)."""
from __future__ import annotations

from ... import Tile
from ...core.types import PtxType, b32, f32, s32, u64
from ...dsl import ptx, reg
from . import streamk
from .config import Plan
from .fp8 import mode_of, scale_specs
from .operands import operands
from .schedule import persistent_grid
from .splitk import partial_bytes


SB_SLOT = 64    # Plan.sb_ring: a stage's scale_b, 8 bytes (two halves) per consumer warp


# ---------------------------------------------------------------- shared-memory map
class Layout:
    """Byte offsets in the dynamic shared memory of one CTA."""

    def __init__(self, p: Plan, dtype: PtxType, out_dtype: PtxType):
        es = dtype.bytes
        self.a_stage = p.bm * p.bk * es
        self.b_stage = p.bn * p.bk * es
        self.a = 0
        self.b = self.a + p.stages * self.a_stage
        self.c = self.b + p.stages * self.b_stage
        self.panel_cols = 128 // out_dtype.bytes          # one swizzle row of C
        self.c_consumer = p.wg_m * p.epi_cols * out_dtype.bytes
        # a consumer's C panel j: its own staging, or its A rows of stage j (epi_in_ring)
        self.panel_stride = self.a_stage if p.check_staging(out_dtype) else p.wg_m * 128
        self.sfa, self.sfa_stage = self.c + p.epilogue_bytes(out_dtype), p.scale_stage_bytes()
        self.partial = self.sfa + p.stages * self.sfa_stage     # split-K partial sums
        self.partial_consumer = partial_bytes(p.wg_m, p.bn)
        self.full = self.partial + p.partial_bytes()
        self.empty = self.full + 8 * p.stages
        self.xfull = self.empty + 8 * p.stages              # split-K exchange barriers
        self.turn = self.xfull              # pingpong's turns (.pingpong; no split-K then)
        self.xfree = self.xfull + 8 * p.consumers
        self.total = self.xfree + 8 * p.consumers
        # Plan.sb_ring: each stage's scale_b, a copy per consumer warp (.promote.ScaleBRing),
        # in BARRIER_BYTES' room
        self.sbr = -(-self.total // 16) * 16
        if p.sb_ring:
            self.total = self.sbr + SB_SLOT * p.stages


def specs(dtype: PtxType, out_dtype: PtxType, bias: PtxType | None, p: Plan,
          a_major: str = "K", b_major: str = "K", b_dtype: PtxType | None = None,
          scaled=False, grouped: bool = False):
    """(in_specs, out_specs, names): A and B through TMA in their majors
    (:mod:`.operands`: A (M, K) or At (K, M), Bt (N, K) or B (K, N)), [bias (N,)],
    [scale_a, scale_b with ``scaled``: :func:`.simt.scale_specs`], C (M, N)."""
    from ...core.tensormap import TMA
    a, b = operands(p, dtype, a_major, b_major, b_dtype)
    if grouped:     # B stacked (G*N, K) or (G*K, N), offs (G,); C stored by st.global
        c = Tile("M", "N", out_dtype, stride="sc", tma=TMA(
            box=(p.wg_m, 128 // out_dtype.bytes), swizzle=128) if p.tma_store else None)
        bt = b.tile("sb", ("GN", "K") if b_major == "K" else ("N", "GK"))
        ins = (a.tile("sa"), bt, Tile("G", s32)) + scale_specs(mode_of(scaled), True)
        names = (a.arg_name, b.arg_name, "offs") + (("scale_a", "scale_b") if scaled else ())
        return ins, (c,), names + ("C",)
    c = Tile("M", "N", out_dtype, stride="sc",
             tma=TMA(box=(p.wg_m, 128 // out_dtype.bytes), swizzle=128))
    sk = (Tile("SKF", b32), Tile("SKP", f32)) if p.stream_k else ()   # .streamk's workspace
    ins = (a.tile("sa"), b.tile("sb")) + ((Tile("N", bias),) if bias is not None else ()) \
        + scale_specs(mode_of(scaled)) + sk
    names = (a.arg_name, b.arg_name) + (("bias",) if bias is not None else ()) \
        + (("scale_a", "scale_b") if scaled else ()) + (("sk_flags", "sk_partials")
                                                        if sk else ()) + ("C",)
    return ins, (c,), names


def mma_instruction(bn: int, dtype: PtxType, b_dtype: PtxType) -> tuple[str, int]:
    """The consumers' ``wgmma.mma_async`` opcode and its K: one instruction covers 32
    bytes of K (16 bf16/f16, 32 e4m3/e5m2)."""
    kk = 32 // dtype.bytes
    return (f"wgmma.mma_async.sync.aligned.m64n{bn}k{kk}.f32.{dtype.name}.{b_dtype.name}",
            kk)


def grid_for(p: Plan, sms: int, grouped: bool = False):
    """The persistent grid as a function of the named dims (whole clusters; a grouped
    GEMM's tiles are at most ``ceil(M / bm) + G`` tile rows, :mod:`.groups`)."""
    cl = p.cluster_ctas

    def grid_grouped(M, N, G):
        tm, tn = p.tiles(M, N)
        return (persistent_grid((tm + G) * tn, sms, cl), 1, 1)
    if grouped:
        return grid_grouped

    def grid(M, N, K):
        if p.a_rows and M > p.a_rows:
            raise ValueError(f"this kernel loads {p.a_rows} rows of A (Plan.a_rows): M = {M} "
                             f"needs a plan with a_rows=0 or >= M (plan.choose picks one)")
        if p.smem_scales and M % 4:
            raise ValueError(f"Plan.smem_scales: M = {M} must be a multiple of 4 (16-byte copies)")
        if p.stream_k:
            return (streamk.grid(p, M, N, K, sms), 1, 1)
        tm, tn = p.tiles(M, N)
        return (persistent_grid(tm * tn * p.split, sms, cl, p.epi_in_ring), 1, 1)
    return grid


def stage_descriptor(d0, slot, stage_bytes: int, extra_bytes: int = 0):
    """The wgmma descriptor of ring stage ``slot`` (a ``.u32``) from ``d0``, stage 0's
    (``Plan.uniform_cons``): ``d0 + slot * stage_bytes / 16`` in one ``mad.wide.u32``
    (``+ extra_bytes / 16``). The start address field counts 16-byte units of the CTA's
    shared window (under 256 KiB), so the sum never carries out of its 14 bits."""
    d = reg.scalar(u64)
    ptx.inst("mad.wide.u32", d, slot, stage_bytes >> 4, d0)
    return d + (extra_bytes >> 4) if extra_bytes else d


__all__ = ["Layout", "specs", "mma_instruction", "grid_for", "stage_descriptor"]
