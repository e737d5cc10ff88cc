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

Measured (``bench/results/matmul_h100.json``, one full ``bench/matmul.py`` run on an
H100; ``bench/results/matmul_tune_h100.json``, ``bench/matmul_tune.py``): this plan
runs 703 / 771 / 710 TFLOP/s at 4096^3 / 8192^3 / 16384^3 beside cuBLAS's 710 / 744 /
722. Rasterization groups of 4 and 16 were within 2% of 8; waiting for each stage's
wgmmas before releasing it (``in_flight=0``) lost 10%; L2 promotion of 256 bytes gained
6%. At 8192^3 three stages ran 806 against four stages' 791 in one run (not yet repeated:
the plan keeps four). The H200 has not been measured.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...types import PtxType, f32

SMEM_PER_CTA = 227 * 1024   # Hopper: the most dynamic shared memory one CTA may opt into
BARRIER_BYTES = 1024        # mbarriers and the scheduler's words, rounded up to the swizzle atom


@dataclass(frozen=True)
class Plan:
    """One Hopper kernel configuration (see the module docstring for each choice)."""

    bm: int = 128          # CTA tile rows (M)
    bn: int = 256          # CTA tile columns (N): the wgmma N of each consumer
    bk: int = 64           # K per stage: one 128-byte swizzle row of bf16/f16
    stages: int = 4        # depth of the full/empty mbarrier ring
    consumers: int = 2     # consumer warpgroups, each m64 x bn
    cluster: int = 2       # CTAs along M sharing B by TMA multicast (1: no cluster)
    group_m: int = 8       # tile rows per rasterization group (L2 reuse of A)
    epi_cols: int = 128    # columns of C staged in shared memory per epilogue step
    in_flight: int = 1     # wgmma groups a consumer keeps in flight (1: release a stage
    #                        after the next one's wgmmas are issued; 0: wait for each)
    l2_promotion: int = 0  # TMA L2 promotion of A and B loads (bytes: 0, 64, 128, 256)

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

    def smem_bytes(self, dtype: PtxType, out_dtype: PtxType) -> int:
        """Dynamic shared memory: the ring, the epilogue buffer, the barriers."""
        return (self.stages * self.stage_bytes(dtype) + self.epilogue_bytes(out_dtype)
                + BARRIER_BYTES)

    def tiles(self, m: int, n: int) -> tuple[int, int]:
        """Tiles along M (whole clusters) and along N."""
        tm = -(-m // self.bm)
        tm = -(-tm // self.cluster) * self.cluster
        return tm, -(-n // self.bn)


def stages_for(p: Plan, dtype: PtxType, out_dtype: PtxType, most: int = 6) -> int:
    """The deepest ring (at most ``most``) that fits beside the epilogue buffer."""
    room = SMEM_PER_CTA - p.epilogue_bytes(out_dtype) - BARRIER_BYTES
    return max(2, min(most, room // p.stage_bytes(dtype)))


def choose(m: int, n: int, k: int, dtype: PtxType, out_dtype: PtxType = None,
           sms: int = 132) -> Plan:
    """The Hopper plan for an (M, N, K) product of ``dtype`` operands.

    128 x 256 tiles unless 128 x 128 tiles (m64n128 consumers, twice the tiles, a deeper
    ring) keep the persistent grid busier by more than 10% over its rounds: with few tiles
    the last round leaves SMs idle (128 x 8192 x 8192: 32 tiles of 128 x 256 for 132 SMs;
    1024 x 6144: 192 tiles, one full round and one 45% busy). One tile
    row (M <= 128) has nothing to share along M: no cluster. TMA loads promote 256-byte
    L2 lines (H100, ``bench/matmul_tune.py``: +6% at 4096^3 and 8192^3 over none).
    ``sms`` sizes only the launch, except for that tile-count rule.
    """
    out_dtype = out_dtype or dtype
    cluster = 1 if m <= 128 else 2

    def waves(bn):  # busy fraction of the persistent grid's slots over all its rounds
        t = Plan(bn=bn, cluster=cluster).tiles(m, n)
        tiles, slots = t[0] * t[1] // cluster, max(1, sms // cluster)
        return tiles / (-(-tiles // slots) * slots)
    bn = 128 if waves(128) > 1.1 * waves(256) else 256
    p = Plan(cluster=cluster, bn=bn, l2_promotion=256)
    most = 4 if p.bn == 256 else 6
    return Plan(**{**p.__dict__, "stages": stages_for(p, dtype, out_dtype, most)})


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


__all__ = ["Plan", "choose", "stages_for", "FallbackPlan", "fallback_plan", "tma_ok",
           "SMEM_PER_CTA", "f32"]
