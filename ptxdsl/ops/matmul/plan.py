"""Which GEMM kernel a call runs: the measured table first, the rules elsewhere.

:func:`choose` returns the :class:`.config.Plan` of an (M, N, K) product of ``dtype``
operands on a device class (:func:`device_class`). ``plans.json`` holds the measured
choices, one row per (device classes, operand dtypes, M range, N, K) with the results
files it came from; the rules here cover every other shape and fit what the table names
to the device:

* Many tile rows (M > 128): 128 x 256 tiles of two m64n256 consumers (a 64 x 256 f32
  accumulator each, the most a warpgroup keeps beside its addresses) in clusters of two
  along M sharing B by multicast; 128 x 128 tiles where twice the tiles fill the
  persistent grid's rounds better by more than 10% (occupancy).
* One tile row (M <= 128): :func:`one_row` picks the tile width and split-K factor from
  the SMs the tiles keep busy.
* Every plan: the deepest ring that fits beside the epilogue's buffer in the 227 KiB an
  SM gives one CTA (:func:`stages_for`); operand majors that a plan cannot read are
  fitted by :func:`for_majors`.

:func:`fallback_plan` sizes the SIMT kernel that takes what TMA cannot describe.
"""
from __future__ import annotations

import dataclasses
import json
import os
from functools import lru_cache

from ...core.types import PtxType
from .config import BARRIER_BYTES, SMEM_PER_CTA, FallbackPlan, Plan

DEVICE_CLASSES = ("H100", "H200")
B_MAJORS = ("K", "MN")     # B's layouts (.operands): K-major for x @ W.T, MN-major for a @ b
HBM3E_BANDWIDTH = 4e12      # bytes/s: the H200's 4.8 TB/s against the H100 SXM's 3.35
SPLITS = (1, 2, 4)          # split-K cluster sizes: whole TPC pairs, so clusters pack GPCs
DSMEM_VS_HBM = 2.0          # assumed: one SM's DSMEM read rate over its 1/132 share of HBM
SPLIT_MARGIN = 1.05         # a split must beat the best unsplit plan's score by this much
MIN_SPLIT_KBLOCKS = 4       # each split-K rank runs at least this many k-blocks
TABLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "plans.json")


def device_class(info) -> str:
    """Which rows of the table a device takes: ``"H200"`` for an sm_90 device whose DRAM
    runs past :data:`HBM3E_BANDWIDTH`, else ``"H100"`` (also for None: no device known)."""
    bw = float(getattr(info, "bandwidth", 0.0) or 0.0) if info is not None else 0.0
    return "H200" if bw > HBM3E_BANDWIDTH else "H100"


@lru_cache(maxsize=None)
def rows() -> tuple:
    """The table's rows (``plans.json``), read once."""
    with open(TABLE, encoding="utf-8") as f:
        return tuple(json.load(f)["rows"])


def row_applies(row: dict, m: int, n: int, k: int, dtype: PtxType, device: str,
                b_major: str = "K", scaling: str | None = None) -> bool:
    """Whether ``row`` holds this call; a row's optional ``b_majors`` names the B layouts
    it was measured for (``"K"``: ``x @ W.T``; ``"MN"``: ``a @ b``), else both, and its
    optional ``scalings`` the float8 scaling modes (``scaling``: :data:`.fp8.MODES`), else
    every one (a width the block-wise kernel cannot take becomes another there)."""
    lo, hi = row["m"]
    return (device in row["devices"] and dtype.name in row["dtypes"] and lo <= m <= hi
            and row["n"] == n and row["k"] == k and b_major in row.get("b_majors", B_MAJORS)
            and (scaling is None or "scalings" not in row or scaling in row["scalings"]))


def measured(m: int, n: int, k: int, dtype: PtxType, device: str,
             b_major: str = "K", scaling: str | None = None) -> dict | None:
    """The row of the table that applies to this call, or None."""
    for row in rows():
        if row_applies(row, m, n, k, dtype, device, b_major, scaling):
            return row
    return None


def bk_for(dtype: PtxType) -> int:
    """K per ring stage: one 128-byte swizzle row (64 bf16/f16, 128 e4m3/e5m2), so a
    stage's bytes, the TMA boxes and the descriptors are the same for every type."""
    return 128 // dtype.bytes


def most_stages(bn: int) -> int:
    """The deepest ring a tile width takes (:func:`stages_for` caps it by the room):
    8 for 128 x 64, 6 for 128 x 128, 4 for 128 x 224 and 128 x 256; widths between, the
    next narrower's."""
    return 8 if bn <= 64 else 6 if bn <= 128 else 5 if bn <= 192 else 4


def stages_for(p: Plan, dtype: PtxType, out_dtype: PtxType, most: int = 6) -> int:
    """The deepest ring (at most ``most``) that fits beside the epilogue buffer."""
    room = SMEM_PER_CTA - p.epilogue_bytes(out_dtype) - p.partial_bytes() - BARRIER_BYTES
    return max(2, min(most, room // p.stage_bytes(dtype)))


MOST_STAGES_M64 = 10     # 64-row tiles (Plan.consumers = 1): the ring as deep as fits, to this


def fitted(p: Plan, dtype: PtxType, out_dtype: PtxType) -> Plan:
    """``p`` with the deepest ring its tile width takes that fits (64-row tiles, also
    ``pingpong``'s: up to :data:`MOST_STAGES_M64`); one stage more with ``epi_in_ring``
    (the staging buffers' room is the ring's)."""
    most = (most_stages(p.bn) if p.bm > 64 else MOST_STAGES_M64) + \
        (1 if p.epi_in_ring else 0)
    return dataclasses.replace(p, stages=stages_for(p, dtype, out_dtype, most))


def choose(m: int, n: int, k: int, dtype: PtxType, out_dtype: PtxType = None,
           sms: int = 132, split: int | None = None, device: str = "H100",
           b_major: str = "K", scaling: str | None = None) -> Plan:
    """The Hopper plan for an (M, N, K) product of ``dtype`` operands on a device of
    class ``device`` with ``sms`` SMs: the rules' plan (the module docstring), with the
    fields of the table's row for this call where one applies, the ring fitted. ``split``
    forces a split-K factor at one tile row (the table's rows for it are then passed over);
    ``b_major``: B's layout, for the rows measured in one layout only; ``scaling``: the
    float8 scaling mode, for the rows measured in some modes only."""
    if device not in DEVICE_CLASSES:
        raise ValueError(f"choose: device must be one of {DEVICE_CLASSES}, got {device!r}")
    out_dtype = out_dtype or dtype
    if m <= 128:
        p = one_row(m, n, k, dtype, out_dtype, sms, split)
    else:
        p = many_rows(m, n, dtype, sms)
    row = None if split is not None and m <= 128 else measured(m, n, k, dtype, device,
                                                               b_major, scaling)
    if row is not None:
        p = dataclasses.replace(p, **row["plan"])
    if p.epi_in_ring and not one_tile_each(p, m, n, sms):
        p = dataclasses.replace(p, epi_in_ring=False)     # the ring is busy between tiles
    return fitted(p, dtype, out_dtype)


def one_tile_each(p: Plan, m: int, n: int, sms: int = 132) -> bool:
    """Whether the persistent grid gives each CTA at most one tile of an M x N output
    (what ``Plan.epi_in_ring`` needs: C staged in ring stages no later tile loads)."""
    tm, tn = p.tiles(m, n)
    cl = p.cluster_ctas
    return -(-tm * tn * p.split // cl) <= max(1, sms // cl)


def many_rows(m: int, n: int, dtype: PtxType, sms: int) -> Plan:
    """128 x 256 tiles in clusters of 2 along M, unless 128 x 128 tiles (twice the tiles)
    keep the persistent grid busier by more than 10% over its rounds: with few tiles the
    last round leaves SMs idle (1024 x 6144: 192 tiles, one full round and one 45% busy).
    ``uniform_cons`` (H200, bench/results/matmul_uniform_h200.json: bf16 +0.4-0.6% at
    4096^3 and 1024 x 14336 x 4096 both layouts, fp8 per tensor +0.9%, block-wise +5.4%).
    The ring is not fitted yet."""
    cluster = 2

    def waves(bn):  # busy fraction of the persistent grid's slots over all its rounds
        t = Plan(bn=bn, cluster=cluster).tiles(m, n)
        tiles, slots = t[0] * t[1] // cluster, max(1, sms // cluster)
        return tiles / (-(-tiles // slots) * slots)
    bn = 128 if waves(128) > 1.1 * waves(256) else 256
    return Plan(cluster=cluster, bn=bn, bk=bk_for(dtype), uniform_cons=True)


MN_BOX = 64  # rows of an MN-major operand one TMA box holds (64 two-byte columns of 128 B)


def for_majors(p: Plan, dtype: PtxType, out_dtype: PtxType, a_major: str = "K",
               b_major: str = "K") -> Plan:
    """``p`` for operands of these majors (:mod:`.operands`). Three choices need K-major
    rows: ``a_rows`` (a box of A's first rows; dropped for an MN-major A), clusters along
    N of more than ``bm / 64`` CTAs (each would load fewer than the 64 rows of an MN-major
    A's box: fewer CTAs share A), and a tile width that is not whole 64-column atoms
    (``bn = 224``: an MN-major B arrives in boxes of 64 columns, 32 with ``b_swizzle =
    64``; the next whole width instead, 256 for 224, the ring re-fitted). ``b_prefetch``
    is a K-major B's only, ``b_swizzle = 64`` an MN-major B's."""
    if p.a_rows and a_major != "K":
        p = dataclasses.replace(p, a_rows=0)
    if a_major != "K" and p.bm // p.cluster_n < MN_BOX:
        p = dataclasses.replace(p, cluster_n=p.bm // MN_BOX)
    atom = p.b_swizzle // 2
    if p.bn % atom and b_major != "K":
        p = fitted(dataclasses.replace(p, bn=-(-p.bn // atom) * atom), dtype, out_dtype)
    if p.b_swizzle != 128 and b_major == "K":
        p = dataclasses.replace(p, b_swizzle=128)
    if p.b_prefetch and b_major != "K":     # an MN-major B's k-block is whole DRAM rows
        p = dataclasses.replace(p, b_prefetch=0)
    return p


def for_scaling(p: Plan, mode, dtype: PtxType, out_dtype: PtxType,
                smem_scales: bool = False, one_row: bool = False) -> Plan:
    """``p`` for a float8 scaling mode (:mod:`.fp8`). Block-wise scales keep a second f32
    accumulator per consumer (the k-block's product before its promotion) and take one
    ``scale_b`` per tile and k-block: tiles of 64 or 128 columns (two 128-column
    accumulators fill the consumer's registers; 128 for any other width, ring re-fitted),
    or 256 as two 128-column halves without a cluster where the plan has 256-column tiles
    in whole tile rows (no split-K, no partial rows of A), and 160 (across two ``scale_b``
    blocks) likewise.
    ``Plan.m_waves = 2`` (256-row tiles: a third accumulator per consumer), ``kb_pairs``
    and ``kb_roll`` are block-wise only: other modes get 1, False and 0; a block-wise plan with
    256-row tiles gets its ring re-fitted to the larger stages. The 256-column halves roll
    four k-blocks (``kb_roll``) and, where the caller's ``smem_scales`` says ``scale_a``
    allows it (M a multiple of 4, a 16-byte aligned base), read ``scale_a`` from the ring;
    256 columns then also take ``scale_b`` from the ring (``sb_ring``) over eight. ``one_row``
    (the caller's M is 65 to 128: one tile row, all A rows loaded): the one-row plan's 64-
    or 128-column tiles without a cluster roll four k-blocks, with ``scale_a`` through the
    ring where allowed and the consumer index in uniform registers."""
    if mode != "block":
        return fitted(dataclasses.replace(p, m_waves=1, kb_pairs=False, kb_roll=0,
                                          kb_stagger=False),
                      dtype, out_dtype) if p.m_waves > 1 or p.kb_pairs or p.kb_roll else p
    if p.bn in (160, 256) and p.split == 1 and not (p.a_rows or p.cluster_n > 1) \
            and p.m_waves == 1:
        # 256 columns as two 128-column halves without a cluster, four k-blocks rolled and
        # scale_a through the ring: the fastest of lab/fp8_block_plans.py's variants
        # (bench/results/fp8_block_rolled_h200.json); 160 (a table row's) the same way.
        # With scale_a in the ring, 256 columns take scale_b there too over eight rolled
        # k-blocks (fp8_block_sbr_h200.json: 1151 -> 1207 TFLOP/s at 4096 x 7168 x 16384)
        sbr = smem_scales and p.bn == 256
        return fitted(dataclasses.replace(p, cluster=1, kb_roll=8 if sbr else 4,
                                          smem_scales=smem_scales, sb_ring=sbr),
                      dtype, out_dtype)
    if one_row and p.bn <= 128 and not 128 % p.bn and p.m_waves == 1 and not p.a_rows \
            and p.cluster == 1 and p.cluster_n == 1 and not p.kb_pairs:
        # lab/fp8_block_plans.py --set onerow (bench/results/fp8_block_onerow_h200.json,
        # TFLOP/s plan before -> this, cuBLAS block-wise): 128 x 8192 x 8192 467 -> 786
        # (585), 128 x 4096 x 14336 468 -> 642 (331), 128 x 14336 x 4096 611 -> 739 (738)
        return fitted(dataclasses.replace(p, kb_roll=4, smem_scales=smem_scales,
                                          uniform_cons=True), dtype, out_dtype)
    if p.bn > 128 or 128 % p.bn or p.m_waves > 1:
        p = fitted(dataclasses.replace(p, bn=128 if p.bn > 128 or 128 % p.bn else p.bn),
                   dtype, out_dtype)
    return p


def one_row(m: int, n: int, k: int, dtype: PtxType, out_dtype: PtxType, sms: int = 132,
            split: int | None = None) -> Plan:
    """The plan for one tile row (M <= 128): split-K when N alone gives too few tiles.

    B (``N K`` elements, read once) bounds the time: its bytes over the bandwidth of the
    *busy* SMs (one SM drew at most about 45 GB/s, so HBM needs about 100 busy). N / 128
    tiles give 32 (N = 4096) to 224 (N = 28672). Splitting K over ``s`` CTAs of a cluster
    gives ``s`` times the CTAs at the cost of exchanging f32 partial sums through
    distributed shared memory (:mod:`.splitk`).

    The choice: ``s`` in :data:`SPLITS` and ``bn`` in (128, 256) (256 only unsplit: its
    partial buffers do not fit beside a ring) maximising the busy fraction of the SMs
    over the persistent grid's rounds, divided by ``1 + x`` for an owner's exchange, ``x``
    its received partial bytes over its streamed B bytes with DSMEM assumed
    :data:`DSMEM_VS_HBM` times one SM's share of HBM. A split must beat the best unsplit
    plan by :data:`SPLIT_MARGIN`; ties go to fewer splits, then wider tiles; each rank
    keeps at least :data:`MIN_SPLIT_KBLOCKS` k-blocks. ``split`` forces the factor. The
    ring is fitted.
    """
    nk = -(-k // bk_for(dtype))
    rows_live = min(64, -(-m // 16) * 16)   # one owner's live rows: what it receives
    best = None
    unsplit = 0.0
    for bn in (256, 128):
        tiles = -(-n // bn)
        for s in SPLITS:
            if split is not None and s != split or s > 1 and (
                    bn != 128 or nk < s * MIN_SPLIT_KBLOCKS and split is None):
                continue
            slots = max(1, sms // s)
            busy = tiles * s / (-(-tiles // slots) * slots * s)
            # f32 partials against B's elements of dtype.bytes
            x = 4 * (s - 1) * s * rows_live / (DSMEM_VS_HBM * max(k, 1) * dtype.bytes)
            score = busy / (1 + x)
            if s == 1:
                unsplit = max(unsplit, score)
            elif split is None and score < SPLIT_MARGIN * unsplit:
                continue
            key = (round(score, 3), -s, bn)
            if best is None or key > best[0]:
                best = (key, bn, s)
    if best is None:       # a forced split that no tile width takes: bn = 128
        best = (None, 128, split)
    _, bn, s = best
    return fitted(Plan(cluster=1, bn=bn, split=s, bk=bk_for(dtype)), dtype, out_dtype)


def fallback_plan() -> FallbackPlan:
    return FallbackPlan()


def tma_ok(ptr: int, row_stride_elems: int, rows: int, dtype: PtxType) -> bool:
    """Whether TMA can describe a 2-D operand: a 16-byte aligned base and a row
    stride that is a multiple of 16 bytes (``cuTensorMapEncodeTiled``'s rules)."""
    es = dtype.bytes
    return ptr % 16 == 0 and (rows <= 1 or (row_stride_elems * es) % 16 == 0)


__all__ = ["Plan", "FallbackPlan", "choose", "one_row", "many_rows", "for_majors", "for_scaling",
           "device_class", "measured", "rows", "row_applies", "stages_for", "most_stages",
           "fitted", "bk_for", "fallback_plan", "tma_ok", "one_tile_each", "SMEM_PER_CTA",
           "SPLITS",
           "DEVICE_CLASSES"]
