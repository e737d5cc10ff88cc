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
* Group of 8 tile rows for the rasterized order (:mod:`.schedule`): 8 A tile rows
  (8 x 128 x K x 2 bytes = 16 MiB at K = 8192) stay in the 50 MiB L2 while the
  group sweeps N.

No GEMM result is in ``bench/results`` yet (``bench/matmul.py`` writes
``bench/results/matmul_<device>.json``); the choices above are the issue's anchors
and the shared-memory arithmetic, to be revisited against the first sweep.
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


def stages_for(p: Plan, dtype: PtxType, out_dtype: PtxType, most: int = 4) -> int:
    """The deepest ring (at most ``most``) that fits beside the epilogue buffer."""
    room = SMEM_PER_CTA - p.epilogue_bytes(out_dtype) - BARRIER_BYTES
    return max(2, min(most, room // p.stage_bytes(dtype)))


def choose(m: int, n: int, k: int, dtype: PtxType, out_dtype: PtxType = None,
           sms: int = 132) -> Plan:
    """The Hopper plan for an (M, N, K) product of ``dtype`` operands.

    One tile row (M <= 128) has nothing to share along M: no cluster. Everything
    else runs 2-CTA clusters. ``sms`` (the persistent grid) does not change the
    plan, only the launch.
    """
    out_dtype = out_dtype or dtype
    p = Plan(cluster=1 if m <= 128 else 2)
    return Plan(**{**p.__dict__, "stages": stages_for(p, dtype, out_dtype)})


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
