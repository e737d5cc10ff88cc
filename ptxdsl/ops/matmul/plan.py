"""Which GEMM kernel a call runs, and with which tile shape, pipeline depth and cluster.

A :class:`Plan` fixes everything that changes the Hopper kernel's PTX apart from
the operand layouts and the epilogue: the CTA tile ``bm x bn x bk``, the
shared-memory ring's depth, the cluster size (CTAs along M that share one B
tile through TMA multicast) and the rasterization group of the tile scheduler.
:func:`choose` picks one per (M, N, K, dtype, device); :func:`fallback_plan`
sizes the SIMT kernel that takes what TMA cannot describe.

Where the numbers come from:

* 128x256x64 with two consumer warpgroups of m64n256k16: each consumer holds a
  64x256 f32 accumulator (128 registers per thread), the most one warpgroup can
  keep beside its addresses once the producer gives its registers away
  (setmaxnreg 240/40). A 128x256 tile reads 128+256 rows of K per 128*256 outputs:
  the arithmetic intensity that keeps the tensor cores fed from L2 at 8192^3
  (the anchors of issue 19: pyptx's kernel of this shape ran 697 TFLOP/s on an
  H100, cuBLAS 687).
* Stages: as many 48 KiB (A 16 KiB + B 32 KiB, bf16) stages as fit beside the
  epilogue's staging buffer in the 227 KiB an SM gives one CTA (:func:`stages_for`):
  4 for bf16/f16 output, 3 for f32 output.
* Clusters of 2 along M: the pair shares its B tile (32 KiB per stage), so L2 to
  SM traffic per tile drops from 48 to 32 KiB. Shapes with a single tile row
  (M <= 128) run without a cluster.
* Groups of 8 cluster tile rows for the rasterized order (:mod:`.schedule`): 16 A
  panels of 128 rows (16 x 128 x K x 2 bytes = 32 MiB at K = 8192) stay in the 50 MiB L2
  while the group sweeps N.

Measured (``bench/results/matmul_h100.json`` and ``matmul_h200.json``: one full
``bench/matmul.py`` run each, same tree, 2026-11-25, contenders in alternating 2 ms
slices; ``bench/results/matmul_tune_h100.json``, ``lab/matmul_tune.py``): 697 / 723 /
716 TFLOP/s at 4096^3 / 8192^3 / 16384^3 on an H100 beside cuBLAS's 692 / 706 / 704, and
662 / 707 / 680 on an H200 beside 660 / 691 / 670. Rasterization groups of 4 and 16
were within 2% of 8; waiting for each stage's wgmmas before releasing it
(``in_flight=0``) lost 10%; L2 promotion of 256 bytes gained 6% (H100). At 8192^3 three
stages ran 806 against four stages' 791 in one run (not yet repeated: the plan keeps
four).

Chosen from measurements (``lab/matmul_plans.py``: candidate plans per shape, each
validated, timed beside cuBLAS in one run; ``bench/results/matmul_plans_h100.json``):
one tile row (M <= 128) at the LLM shapes takes :data:`ONE_ROW_MEASURED` (128 x 64 tiles
where N <= 8192 at M = 128), and :data:`MEASURED` overrides the many-row plan where a
knob beat it by more than the run's noise. ``bench/results/matmul_tune_small_h100.json``
(``lab/matmul_tune.py --small``) has the split 1 / 2 / 4 sweep at M in {1, 16, 128}.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...core.types import PtxType, f32

SMEM_PER_CTA = 227 * 1024   # Hopper: the most dynamic shared memory one CTA may opt into
BARRIER_BYTES = 1024        # mbarriers and the scheduler's words, rounded up to the swizzle atom


@dataclass(frozen=True)
class Plan:
    """One Hopper kernel configuration (see the module docstring for each choice)."""

    bm: int = 128          # CTA tile rows (M)
    bn: int = 256          # CTA tile columns (N): the wgmma N of each consumer
    bk: int = 64           # K per stage: one 128-byte swizzle row (bk_for: 64 bf16/f16,
    #                        128 e4m3/e5m2)
    stages: int = 4        # depth of the full/empty mbarrier ring
    consumers: int = 2     # consumer warpgroups, each m64 x bn
    cluster: int = 2       # CTAs along M sharing B by TMA multicast (1: no cluster)
    cluster_n: int = 1     # CTAs along N sharing A by TMA multicast (one tile row: A is
    #                        most of what each CTA reads; with cluster == 1 and split 1)
    a_rows: int = 0        # rows of A a stage loads (0: bm): 16, 32 or 64 for one tile row
    #                        of M <= a_rows, K-major A; the stage's other A rows stay zero
    #                        (written once), so no stage pays for out-of-bounds fill (with
    #                        or without split-K, not in a cluster along M or N)
    group_m: int = 8       # tile rows per rasterization group (L2 reuse of A)
    epi_cols: int = 128    # columns of C staged in shared memory per epilogue step
    in_flight: int = 1     # wgmma groups a consumer keeps in flight (1: release a stage
    #                        after the next one's wgmmas are issued; 0: wait for each)
    l2_promotion: int = 0  # TMA L2 promotion of A and B loads (bytes: 0, 64, 128, 256)
    split: int = 1         # CTAs along K per tile: a (split, 1, 1) cluster; rank c adds
    #                        the others' partials of consumer c (.splitk; cluster == 1)
    stmatrix: bool = True  # 16-bit outputs staged with stmatrix.x4 (else st.shared.b32)
    overlap: bool = False  # plain 16-bit epilogues, split 1: pack the accumulator, issue
    #                        the next tile's first k-block, then store under that wgmma.
    #                        More work per clock at 4096^3 (+1.7%), but at the power cap
    #                        no faster (bench/results/matmul_power_h100.json): off
    balance: bool = True   # launch the fewest clusters that keep the persistent grid's
    #                        rounds (schedule.persistent_grid): idle SMs draw less power

    def __post_init__(self):
        if self.split < 1 or self.split > 8 or (self.split > 1 and self.cluster != 1):
            raise ValueError(f"Plan split={self.split}: 1 to 8 CTAs along K, and only "
                             f"without a cluster along M (cluster={self.cluster})")
        if self.a_rows not in (0, 16, 32, 64) or (self.a_rows and (
                self.cluster > 1 or self.cluster_n > 1)):
            raise ValueError(f"Plan a_rows={self.a_rows}: 0 (all of bm) or 16, 32, 64 rows "
                             f"of A per stage, and only without clusters along M or N "
                             f"(cluster={self.cluster}, cluster_n={self.cluster_n})")
        if self.cluster_n not in (1, 2, 4) or (self.cluster_n > 1 and
                                               (self.cluster > 1 or self.split > 1)):
            raise ValueError(f"Plan cluster_n={self.cluster_n}: 1, 2 or 4 CTAs along N, and "
                             f"only without a cluster along M or K (cluster={self.cluster}, "
                             f"split={self.split})")

    @property
    def cluster_ctas(self) -> int:
        """CTAs per cluster: ``cluster`` along M, ``cluster_n`` along N, ``split`` along K
        (at most one of them above 1)."""
        return self.cluster * self.cluster_n * self.split

    @property
    def multicast(self) -> int:
        """CTAs that write into each other's ring stages (and so release each other's
        slots): the cluster along M or along N."""
        return self.cluster * self.cluster_n

    @property
    def threads(self) -> int:
        """One producer warpgroup and the consumers."""
        return 128 * (1 + self.consumers)

    @property
    def wg_m(self) -> int:
        """Rows of the tile each consumer warpgroup owns (one wgmma m64 per 64)."""
        return self.bm // self.consumers

    def stage_bytes(self, dtype: PtxType) -> int:
        return (self.bm + self.bn) * self.bk * dtype.bytes

    def epilogue_bytes(self, out_dtype: PtxType) -> int:
        return self.bm * self.epi_cols * out_dtype.bytes

    def partial_bytes(self) -> int:
        """The split-K partial buffers (f32 accumulators of every consumer), if split."""
        return self.bm * self.bn * 4 if self.split > 1 else 0

    def smem_bytes(self, dtype: PtxType, out_dtype: PtxType) -> int:
        """Dynamic shared memory: the ring, the epilogue buffer, the split-K partials,
        the barriers."""
        return (self.stages * self.stage_bytes(dtype) + self.epilogue_bytes(out_dtype)
                + self.partial_bytes() + BARRIER_BYTES)

    def tiles(self, m: int, n: int) -> tuple[int, int]:
        """Tiles along M and along N (each in whole clusters)."""
        tm = -(-m // self.bm)
        tm = -(-tm // self.cluster) * self.cluster
        tn = -(-n // self.bn)
        return tm, -(-tn // self.cluster_n) * self.cluster_n


def bk_for(dtype: PtxType) -> int:
    """K per ring stage: one 128-byte swizzle row (64 bf16/f16, 128 e4m3/e5m2), so a
    stage's bytes, the TMA boxes and the descriptors are the same for every type."""
    return 128 // dtype.bytes


def stages_for(p: Plan, dtype: PtxType, out_dtype: PtxType, most: int = 6) -> int:
    """The deepest ring (at most ``most``) that fits beside the epilogue buffer."""
    room = SMEM_PER_CTA - p.epilogue_bytes(out_dtype) - p.partial_bytes() - BARRIER_BYTES
    return max(2, min(most, room // p.stage_bytes(dtype)))


SPLITS = (1, 2, 4)        # split-K cluster sizes: whole TPC pairs, so clusters pack GPCs
# Whether choose() splits K by itself (one_row() and choose(split=) plan it either way).
# On: the split-K kernel ran bit-exact and deterministic on an H100
# (tests/gpu/test_ops_matmul_gpu.py::test_split_k_kernel, 12 cases, with main 7c81122);
# its speed is lab/matmul_tune.py --small's to tell.
SPLIT_K = True
DSMEM_VS_HBM = 2.0        # assumed: one SM's DSMEM read rate over its 1/132 share of HBM
SPLIT_MARGIN = 1.05       # a split must beat the best unsplit plan's score by this much
MIN_SPLIT_KBLOCKS = 4     # each split-K rank runs at least this many k-blocks


# Measured one-tile-row plans, (M class, N, K) -> (bn, split, a_rows, cluster_n): the
# fastest validated candidate of lab/matmul_plans.py (b = W.T, bf16; TFLOP/s beside
# cuBLAS in the same run). M class 128 is 17 <= M <= 128, class 16 is M <= 16.
#   M = 128, on an H100 (bench/results/matmul_plans_h100.json; for 16-bit operands the
#   last three rows are ONE_ROW_MEASURED_16's, from matmul_plans_h100_4.json to _6, three
#   runs that also timed clusters along N)
#                              ptxdsl   cuBLAS   (the plan before)
#   4096 x 4096:   n64  s1      235      255      (n128 s4: 128)
#   4096 x 14336:  n64  s2      303      279      (n128 s4: 203)
#   6144 x 4096:   n64  s1      279      284      (n128 s2: 238)
#   8192 x 8192:   n64  s1      331      330      (n128 s2: 307)
#   14336 x 4096:  n128 s1      318      318      (the same)
#     16-bit:      n128 cn4     330      318-319  (n128 s1: 321-322)
#   28672 x 8192:  n128 s1      361      350      (n256 s1: 360)
#     16-bit:      n128 cn4     365-366  351-352  (n128 s1: 354-355; n256 s1: 360-361),
#                  then n224 s1 365-366 beside n128 cn4's 364-365 (ONE_ROW_MEASURED_16)
#   8192 x 28672:  n64  s1      356      329      (n128 s2: 352)
#     16-bit:      n128 s2      353-355  328-331  (n64 s1: 341-342)
# At M = 128, 128 x 64 tiles (N / 64 CTAs: 64 to 128 busy SMs for N <= 8192, each
# re-reading A's 128 rows from L2) beat splitting K at K = 4096 and 8192. Sharing A's
# 128 rows by multicast in clusters of four along N ("cn4") pays once N gives 112 or
# more tiles of 128 columns (N = 14336, 28672), on both devices; at N <= 8192 it did not
# (bench/results/matmul_plans_h200_5.json: e.g. 8192 x 8192 n64 cn2 401 against 425).
# The H200's runs agree (matmul_plans_h200_6.json to _9: 14336 x 4096 n128 cn4 422-426
# against n128 s1's 406-410, cuBLAS 414-417; 28672 x 8192 468-479 against 440-450,
# cuBLAS 437-445), but for 4096 x 4096 (ONE_ROW_DEVICE_MEASURED, below); at 28672 x
# 8192 128 x 224 tiles without a cluster later beat both (ONE_ROW_MEASURED_16).
#   M = 16, on an H100 / an H200 (bench/results/matmul_plans_rows_h100.json, _h200.json;
#   M = 1 ran the same choices fastest in those runs; "cn4" is the plan before: clusters
#   of four along N sharing A, which had beaten every plan without them,
#   matmul_plans_small_h100.json / _h200.json)
#                              H100 ptxdsl cuBLAS (cn4)    H200 ptxdsl cuBLAS (cn4)
#   4096 x 4096:   n64  a16     27     31     (26)          30     38     (27)
#   4096 x 14336:  n64  a16     36     41     (31)          41     57     (34)
#   6144 x 4096:   n64  a16     33     36     (31)          41     47     (33)
#   8192 x 8192:   n64  a16     41     44     (39)          54     61     (49)
#   14336 x 4096:  n128 a16     41     42     (41)          54     59     (47)
#   28672 x 8192:  n128 a16     46     44     (45)          65     67     (52)
#   8192 x 28672:  n64  a16     46     45     (42)          65     64     (54)
# At M <= 16 the A box of 128 rows is almost all out-of-bounds fill, which the TMA unit
# pays for every stage (a quarter of it per CTA, in clusters of four, already ran up to
# 1.6x faster). Plan.a_rows = 16 loads A's first 16 rows only: no cluster is needed, and
# 128 x 64 tiles (N / 64 CTAs) then stream B fastest. 8-bit operands keep a_rows 0
# (untimed).
ONE_ROW_MEASURED = {
    (128, 4096, 4096): (64, 1, 0, 1), (128, 4096, 14336): (64, 2, 0, 1),
    (128, 6144, 4096): (64, 1, 0, 1), (128, 8192, 8192): (64, 1, 0, 1),
    (128, 14336, 4096): (128, 1, 0, 1), (128, 28672, 8192): (128, 1, 0, 1),
    (128, 8192, 28672): (64, 1, 0, 1),
    (16, 4096, 4096): (64, 1, 16, 1), (16, 4096, 14336): (64, 1, 16, 1),
    (16, 6144, 4096): (64, 1, 16, 1), (16, 8192, 8192): (64, 1, 16, 1),
    (16, 14336, 4096): (128, 1, 16, 1), (16, 28672, 8192): (128, 1, 16, 1),
    (16, 8192, 28672): (64, 1, 16, 1),
}
# 16-bit operands (bf16 measured, f16 alike) on every device, over ONE_ROW_MEASURED (e4m3
# keeps that table: split 2 at 28672 x 8192 ran 579 TFLOP/s against 685 unsplit there,
# matmul_plans_fp8_h100.json; clusters along N were not timed with it). M <= 16 at
# 4096 x 14336: A's 16 rows with K split over two CTAs (128 CTAs stream B, not 64), in
# two runs on each device (matmul_plans_rows_h100_2.json, _3; rows_h200_2, _3): H100 41
# against the table's 39 TFLOP/s (cuBLAS 41), H200 56 against 44 (33.5 against 42.5 us;
# cuBLAS 58); M = 1 alike (rows_h200_4: 32.9 against 42.4 us, cuBLAS 31.8). N = 28672,
# K = 8192: 128 x 224 tiles, 128 of them (one round on 132 SMs, where 128 x 128 takes
# 224 tiles in two). At M <= 16 with A's 16 rows: H200 112.8 / 112.7 us against the old
# entry's 123.3 / 122.9 (cuBLAS 113.8 / 113.0), H100 157.5 / 157.8 against 160.6 / 161.0
# (cuBLAS 164.6 / 164.1): matmul_plans_rows_h200_5.json, _6, rows_h100_4, _5. At
# M = 128 unsplit, no cluster: H200 128.2 / 127.6 against clusters of 4 along N's 131.5 /
# 130.8 (cuBLAS 139.2 / 138.0), H100 164.1 / 164.7 against 164.6 / 165.2
# (matmul_plans_h200_10.json, _11, h100_7, _8).
ONE_ROW_MEASURED_16 = {
    (128, 14336, 4096): (128, 1, 0, 4), (128, 28672, 8192): (224, 1, 0, 1),
    (128, 8192, 28672): (128, 2, 0, 1), (16, 4096, 14336): (64, 2, 16, 1),
    (16, 28672, 8192): (224, 1, 16, 1),
}
# One-tile-row plans of the tables above that an H200 (device_class "H200") runs
# differently, bf16, both K split over two CTAs: 128 x 4096 x 4096, by the geometric mean
# of five H200 runs (bench/results/matmul_plans_h200.json, _2, _3, _5, _6) 0.996 of each
# run's fastest plan against n64 s1's 0.961 (last run: 302 against 285 TFLOP/s, cuBLAS
# 278); and M <= 16 at 4096 x 4096 with A's 16 rows (matmul_plans_rows_h200_2.json, _3:
# 13.3 against 14.2 us, cuBLAS 13.9; M = 1, rows_h200_4: 13.0 against 14.1). On an H100
# both lost (matmul_plans_h100.json: 219 against 235, _4 to _6: 240 against 252-253;
# rows_h100_2 and _3: 31-32 against 33-34 TFLOP/s).
ONE_ROW_DEVICE_MEASURED = {"H200": {(128, 4096, 4096): (64, 2, 0, 1),
                                    (16, 4096, 4096): (64, 2, 16, 1)}}
# Measured many-row overrides, (M, N, K) -> Plan fields (bench/results/matmul_plans_h100.json):
# 1024 x 6144 x 4096 ran 711 TFLOP/s without a cluster (128 x 128 tiles, 6 stages) against
# 662 with clusters of 2 and 665 for cuBLAS; every cluster-2 variant (group 2/4/16, 5
# stages, st.shared) stayed at or under 680 and 128 x 192 without a cluster ran 705.
# Elsewhere no knob beat the plan by more than the run's noise (about 2%): at
# 16384 x 28672 x 8192 the plan ran 748 (cuBLAS 743; 128 x 192: 722, no cluster: 724,
# group 4: 729, st.shared: 732), at 16384 x 8192 x 28672 725 (cuBLAS 721).
# 2048^3 (a single round of 128 x 256 tiles) ran 128 x 128 tiles without a cluster
# at 634 TFLOP/s on an H100 (cluster-2 128 x 256: 576, cuBLAS 623) and 632 on an H200
# (599, cuBLAS 629): bench/results/matmul_plans_h100_2.json, matmul_plans_h200.json.
MEASURED = {(1024, 6144, 4096): {"cluster": 1}, (2048, 2048, 2048): {"bn": 128, "cluster": 1}}
# Overrides measured on one device class only (:func:`device_class`), over MEASURED.
# H200, 4096^3: 128 x 128 tiles in clusters of 2 ran 712 and 715 TFLOP/s in two runs
# against 691 and 710 for 128 x 256 (cuBLAS 668 and 684); on an H100 the two tied (713,
# 714; cuBLAS 717): bench/results/matmul_plans_h200.json, matmul_plans_h100_2.json.
DEVICE_MEASURED = {"H200": {(4096, 4096, 4096): {"bn": 128}}}
# e4m3 operands (MEASURED is bf16's: at 1024 x 6144 x 4096 e4m3 ran 1279 TFLOP/s with the
# rule's cluster of 2 against 1252 without). 2048^3 without a cluster: 1041 against the
# rule's 843 (cuBLAS fp8 736); bench/results/matmul_plans_fp8_h100.json.
MEASURED_FP8 = {(2048, 2048, 2048): {"cluster": 1}}
HBM3E_BANDWIDTH = 4e12   # bytes/s: the H200's 4.8 TB/s against the H100 SXM's 3.35


def device_class(info) -> str:
    """Which measured tables a device takes: ``"H200"`` for an sm_90 device whose DRAM
    runs past :data:`HBM3E_BANDWIDTH`, else ``"H100"`` (also for None: no device known)."""
    bw = float(getattr(info, "bandwidth", 0.0) or 0.0) if info is not None else 0.0
    return "H200" if bw > HBM3E_BANDWIDTH else "H100"


def measured_one_row(m: int, n: int, k: int, dtype: PtxType, out_dtype: PtxType,
                     device: str = "H100"):
    """The :data:`ONE_ROW_MEASURED` plan of a measured (M class, N, K), else None. 16-bit
    operands take :data:`ONE_ROW_MEASURED_16`'s entry where it has one, and on a ``device``
    of a class in :data:`ONE_ROW_DEVICE_MEASURED` that class's.

    e4m3 operands take the same table: at M = 128 its plan was within 4% of the fastest
    e4m3 candidate at each of the seven shapes, and 1.0-1.6x the rule's plan
    (``lab/matmul_plans.py --fp8``, ``bench/results/matmul_plans_fp8_h100.json``:
    e.g. 128 x 4096 x 14336 n64 s2 526 TFLOP/s against the rule's 328, cuBLAS fp8 567);
    M = 16 follows it untimed, loading all of A's rows (a_rows was timed with bf16 only)."""
    key = (16 if m <= 16 else 128, n, k)
    got = ONE_ROW_MEASURED.get(key)
    if dtype.bytes == 2:
        got = ONE_ROW_MEASURED_16.get(key, got)
        got = ONE_ROW_DEVICE_MEASURED.get(device, {}).get(key, got)
    if got is None:
        return None
    bn, s, ar, cn = got
    p = Plan(cluster=1, cluster_n=cn, bn=bn, split=s, a_rows=ar if dtype.bytes == 2 else 0,
             l2_promotion=256, stmatrix=s == 1, epi_cols=min(bn, 128), bk=bk_for(dtype))
    return Plan(**{**p.__dict__, "stages": stages_for(p, dtype, out_dtype, most_stages(bn))})


def choose(m: int, n: int, k: int, dtype: PtxType, out_dtype: PtxType = None,
           sms: int = 132, split: int | None = None, device: str = "H100") -> Plan:
    """The Hopper plan for an (M, N, K) product of ``dtype`` operands on a ``device``
    of that class (:func:`device_class`).

    A measured shape takes its measured plan (:data:`ONE_ROW_MEASURED`, for 16-bit
    operands :data:`ONE_ROW_MEASURED_16` and the device's :data:`ONE_ROW_DEVICE_MEASURED`;
    :data:`MEASURED`, then the device's :data:`DEVICE_MEASURED`); the rules below cover
    the others.

    128 x 256 tiles unless 128 x 128 tiles (m64n128 consumers, twice the tiles, a deeper
    ring) keep the persistent grid busier by more than 10% over its rounds: with few tiles
    the last round leaves SMs idle (1024 x 6144: 192 tiles, one full round and one 45%
    busy). TMA loads promote 256-byte L2 lines (H100, ``lab/matmul_tune.py``: +6% at
    4096^3 and 8192^3 over none). ``sms`` sizes only the launch, except for these
    tile-count rules. One tile row (M <= 128): :func:`one_row` (split-K where
    :data:`SPLIT_K` allows, or as ``split`` forces: ``lab/matmul_tune.py``).
    """
    out_dtype = out_dtype or dtype
    if m <= 128:
        got = measured_one_row(m, n, k, dtype, out_dtype, device) if split is None else None
        if got is not None:
            return got
        return one_row(m, n, k, dtype, out_dtype, sms, split if split or SPLIT_K else 1)
    cluster = 2

    def waves(bn):  # busy fraction of the persistent grid's slots over all its rounds
        t = Plan(bn=bn, cluster=cluster).tiles(m, n)
        tiles, slots = t[0] * t[1] // cluster, max(1, sms // cluster)
        return tiles / (-(-tiles // slots) * slots)
    bn = 128 if waves(128) > 1.1 * waves(256) else 256
    p = Plan(cluster=cluster, bn=bn, l2_promotion=256, bk=bk_for(dtype))
    if dtype.bytes == 2:        # the overrides were measured with bf16 operands
        p = Plan(**{**p.__dict__, **MEASURED.get((m, n, k), {}),
                    **DEVICE_MEASURED.get(device, {}).get((m, n, k), {})})
    else:
        p = Plan(**{**p.__dict__, **MEASURED_FP8.get((m, n, k), {})})
    return Plan(**{**p.__dict__, "stages": stages_for(p, dtype, out_dtype, most_stages(p.bn))})


def for_majors(p: Plan, dtype: PtxType, out_dtype: PtxType, a_major: str = "K",
               b_major: str = "K") -> Plan:
    """``p`` for operands of these majors (:mod:`.operands`). Two choices need K-major
    rows: ``a_rows`` (a box of A's first rows; dropped for an MN-major A), and a tile
    width that is not whole 64-column atoms (``bn = 224``: an MN-major B arrives in
    boxes of 64 columns; the next whole width instead, 256 for 224, the ring re-sized)."""
    if p.a_rows and a_major != "K":
        p = Plan(**{**p.__dict__, "a_rows": 0})
    if p.bn % 64 and b_major != "K":
        bn = -(-p.bn // 64) * 64
        p = Plan(**{**p.__dict__, "bn": bn, "epi_cols": min(p.epi_cols, bn)})
        p = Plan(**{**p.__dict__, "stages": stages_for(p, dtype, out_dtype, most_stages(bn))})
    return p


def most_stages(bn: int) -> int:
    """The deepest ring a tile width takes (:func:`stages_for` caps it by the room):
    8 for 128 x 64, 6 for 128 x 128, 4 for 128 x 224 and 128 x 256; widths between, the
    next narrower's."""
    return 8 if bn <= 64 else 6 if bn <= 128 else 5 if bn <= 192 else 4


def one_row(m: int, n: int, k: int, dtype: PtxType, out_dtype: PtxType, sms: int = 132,
            split: int | None = None) -> Plan:
    """The plan for one tile row (M <= 128): split-K when N alone gives too few tiles.

    The reasoning, in bytes and tiles per SM (H100: 132 SMs, about 3 TB/s of HBM):

    * What bounds it. B is ``N K`` elements read once; A (``M K``, at most 128 rows) and C
      are small beside it, and TMA fetches nothing for A's rows past M (zero fill). The
      tensor cores do ``2 * 128 * bn * 64`` flops per stage of ``bn * 128`` B bytes:
      0.28 us of one SM's 7.5 TFLOP/s against 0.7 us to receive 16 KiB at its 1/128 share
      of HBM. So the time is B's bytes over the bandwidth the *busy* SMs draw.
    * How many SMs must stream. One SM drew at most about 45 GB/s in our measurements
      (an earlier ``bench/matmul.py`` run on an H100: 16 x 4096 x 14336 ran 81 us on 32
      SMs, 1.45 TB/s), so HBM's 3 TB/s needs about 100 SMs busy; N / 128 tiles gives 32 (N =
      4096), 48 (6144), 64 (8192), 112 (14336), 224 (28672).
    * Narrower tiles (bn = 32 for N = 4096) would give the SMs, but every CTA re-reads
      A: at M = 128 that is 128 x K bytes per 32 x K of B, four times B's traffic from L2;
      at M = 16 still half. Splitting K over ``s`` CTAs of a cluster instead divides each
      CTA's A and B alike (A stays 1/8 of B at M = 16, equal at M = 128), at the cost of
      exchanging partial sums: ``(s - 1)`` x (live rows) x ``bn`` x 4 bytes through
      distributed shared memory into the rank that owns a consumer's 64 rows (rank 0 for
      the first, rank 1 for the second), 24 KiB per tile at M = 16 (rows past M are not
      sent), 96 KiB per owner at M = 128 with s = 4 (:mod:`.splitk`).
    * The choice: ``s`` in (1, 2, 4) and ``bn`` in (128, 256) (bn = 256 only unsplit: its
      partial buffers do not fit beside a ring) maximising the busy fraction of the SMs
      over the rounds of the persistent grid, ``tiles * s / (rounds * sms)``, divided by
      ``1 + x`` for an owner's exchange: ``x`` = its received partial bytes over its
      streamed B bytes, with distributed shared memory assumed ``DSMEM_VS_HBM`` times
      one SM's share of HBM (not measured: the tune bench says), ``x = 2 (s-1) s rows /
      (DSMEM_VS_HBM K)`` with ``rows`` the live rows of one consumer (at most 64). A
      split must beat the best unsplit plan by ``SPLIT_MARGIN`` (the model is not
      measured; an unsplit kernel that already matches cuBLAS is kept); ties go to fewer
      splits, then wider tiles; each rank keeps at least ``MIN_SPLIT_KBLOCKS`` k-blocks
      so the ring's fill is amortised. At M = 16: N = 4096 and 28672 split 4 (128 CTAs;
      896 over 7 rounds), 6144 / 8192 split 2, 14336 unsplit (112 tiles: every split
      gives 85% too). At M = 128: 28672 x 8192 stays unsplit at 128 x 256 (the split's
      4% gain is inside the margin), 4096 x 4096 still splits 4.
    * The ring: as deep as fits (6 stages unsplit at bn = 128, 4 beside the split-K
      buffers): 64 KiB of B in flight per SM or more, well past the ~25 KiB that Little's
      law asks of one SM at 1/128 of 3 TB/s and ~1 us latency.

    Not timed yet: the split-K kernel (``lab/matmul_tune.py --small`` times split 1,
    2 and 4 at the small-M shapes against cuBLAS). Robust to the unknowns: where it
    splits 4 ways (N = 4096) even a DSMEM four times slower than assumed, or a GPU that
    holds only 30 clusters of 4 (two rounds), beats the 32 busy SMs of the unsplit
    kernel.
    """
    nk = -(-k // bk_for(dtype))
    rows = min(64, -(-m // 16) * 16)        # one owner's live rows: what it receives
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
            # f32 partials against B's elements of dtype.bytes (2: the docstring's form)
            x = 4 * (s - 1) * s * rows / (DSMEM_VS_HBM * max(k, 1) * dtype.bytes)
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
    # The split-K kernel keeps the st.shared epilogue: with stmatrix beside the 4-way
    # exchange ptxas spills 3 registers (the kernel has 168 for every role), and an owner
    # stores 64 rows (few live at small M) per K/split of streaming.
    p = Plan(cluster=1, bn=bn, split=s, l2_promotion=256, stmatrix=s == 1, bk=bk_for(dtype))
    return Plan(**{**p.__dict__, "stages": stages_for(p, dtype, out_dtype, most_stages(bn))})


@dataclass(frozen=True)
class FallbackPlan:
    """The SIMT kernel: each of 16x16 threads computes ``per x per`` outputs of a
    ``16*per`` square CTA tile with f32 ``fma``, reading the operands straight from
    global memory (any strides, any alignment). Correct everywhere, never fast: it is
    what runs when TMA cannot describe an operand (a row stride that is not a multiple
    of 16 bytes, an unaligned base) and what the interpreter runs for numpy arrays."""

    per: int = 4

    @property
    def tile(self) -> int:
        return 16 * self.per


def fallback_plan() -> FallbackPlan:
    return FallbackPlan()


def tma_ok(ptr: int, row_stride_elems: int, rows: int, dtype: PtxType) -> bool:
    """Whether TMA can describe a 2-D operand: a 16-byte aligned base and a row
    stride that is a multiple of 16 bytes (``cuTensorMapEncodeTiled``'s rules)."""
    es = dtype.bytes
    return ptr % 16 == 0 and (rows <= 1 or (row_stride_elems * es) % 16 == 0)


__all__ = ["Plan", "choose", "one_row", "ONE_ROW_MEASURED", "ONE_ROW_MEASURED_16",
           "ONE_ROW_DEVICE_MEASURED", "MEASURED", "DEVICE_MEASURED", "MEASURED_FP8",
           "device_class", "SPLITS", "SPLIT_K", "stages_for", "most_stages", "for_majors",
           "bk_for", "FallbackPlan",
           "fallback_plan", "tma_ok", "SMEM_PER_CTA", "f32"]
