"""What a plan fixes about a GEMM kernel: the fields :mod:`.plan` chooses, nothing else.

:class:`Plan` is the Hopper kernel's configuration: the tile width, the ring's depth,
the clusters and split-K. What the kernel never varies is a class constant (groups of 8
tile rows, 256-byte L2 promotion of the TMA loads); what follows from the fields is a
property (the tile's 64, 128 or 256 rows, the epilogue's staging). The SIMT
kernel's :class:`FallbackPlan` has one size.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...core.types import PtxType

SMEM_PER_CTA = 227 * 1024   # Hopper: the most dynamic shared memory one CTA may opt into
BARRIER_BYTES = 1024        # mbarriers and the scheduler's words, rounded up to the swizzle atom


@dataclass(frozen=True)
class Plan:
    """One Hopper kernel configuration (:mod:`.hopper` draws the kernel)."""

    bn: int = 256          # CTA tile columns (N): the wgmma N of each consumer
    bk: int = 64           # K per stage: one 128-byte swizzle row (plan.bk_for)
    stages: int = 4        # depth of the full/empty mbarrier ring
    cluster: int = 2       # CTAs along M sharing B by TMA multicast (1: no cluster)
    cluster_n: int = 1     # CTAs along N sharing A by TMA multicast (one tile row only)
    a_rows: int = 0        # rows of A a stage loads (0: bm): 16, 32 or 64 for one tile row
    #                        of M <= a_rows, K-major A; the stage's other rows stay zero
    split: int = 1         # CTAs along K per tile: a (split, 1, 1) cluster (.splitk)
    one_partial: bool = False  # split 2 only: one partial buffer per CTA, not one per
    #                            consumer (a rank sends one consumer's rows, never the one it
    #                            owns), the other's room to the ring
    b_prefetch: int = 0    # K-major B: every b_prefetch k-blocks the producer asks L2 for
    #                        the next b_prefetch k-blocks of its B rows at once (0: never)
    epi_in_ring: bool = False  # one tile per CTA only: each consumer stages C in its own
    #                            A rows of the first ring stages (idle once its wgmmas retired)
    tail_skip: bool = False  # grouped only: a consumer whose 64 rows all lie past its
    #                          group's end releases the tile's stages without its wgmmas
    tma_store: bool = False  # grouped only: a consumer's 64 rows that lie inside its group
    #                          stored as the dense kernel's (staged, TMA); the others by st.global
    epi_overlap: int = 0   # bn <= 192 (grouped: 128), whole tiles (no split-K, stream_k,
    #                        a_rows): k-blocks of the next tile issued before a tile's
    #                        epilogue (.overlap); 0: none
    m_waves: int = 1       # block-wise fp8 only: m64 accumulators per consumer (2: 256-row
    #                        tiles, each consumer rows c*64 and 128 + c*64 of the tile)
    kb_pairs: bool = False  # block-wise fp8 only, m_waves 1: k-blocks issued two at a time
    #                         into two temporaries, the first promoted under the second
    kb_roll: int = 0       # block-wise fp8 only, m_waves 1: k-blocks per loop iteration (2, 4,
    #                        8) of two temporaries in turn, each promoted under the next's wgmmas
    smem_scales: bool = False  # block-wise fp8 only (M a multiple of 4): scale_a copied into
    #                            each ring stage by the producer, read from shared memory
    stream_k: bool = False  # one CTA per SM, each cluster an equal share of all (cluster)
    #                         tiles' k-blocks, split tiles added up through a global
    #                         workspace (.streamk)
    kb_stagger: bool = False   # kb_roll only: the second consumer takes its first kb_roll / 2
    #                            k-blocks as a rolling iteration of their own, so the two
    #                            consumers' iterations (each ends with its wgmma queue
    #                            drained) interleave
    b_swizzle: int = 128   # an MN-major B's swizzle span in bytes: 128 (atoms of 64 columns)
    #                        or 64 (32-column atoms: widths such as 96; .operands)

    consumers: int = 2     # consumer warpgroups, each m_waves x m64 x bn; 1: 64-row tiles
    #                        (one tile row of M = 128 is two tiles, a cluster along M shares B)
    pingpong: bool = False  # two consumers on alternate 64-row tiles of the CTA's, one's
    #                         epilogue under the other's wgmmas (.pingpong)
    uniform_cons: bool = False  # the consumer index taken from lane 0 (shfl.sync.idx), which
    #                             ptxas then keeps in uniform registers: A's descriptors
    #                             (and all else it offsets) need no R2UR before each wgmma;
    #                             each stage's descriptors stepped from stage 0's; the
    #                             grouped cursor's values through redux.sync (.groups)
    sb_ring: bool = False  # smem_scales only: the producer also stores each stage's scale_b
    #                        (one per 128-column half, 16 bytes a stage beside the barriers),
    #                        so the consumers read it with ld.shared (no ld.global.nc, R2UR)
    group_m = 8            # tile rows per rasterization group (.schedule: L2 reuse of A)
    l2_promotion = 256     # TMA L2 promotion of A and B loads, bytes

    def __post_init__(self):
        if self.b_swizzle not in (64, 128):
            raise ValueError(f"Plan b_swizzle={self.b_swizzle}: an MN-major B's swizzle span, "
                             f"128 or 64 bytes")
        if self.consumers not in (1, 2) or (self.consumers == 1 and (
                self.split > 1 or self.stream_k or self.a_rows or self.one_partial
                or self.m_waves > 1)):
            raise ValueError(f"Plan consumers={self.consumers}: 2, or 1 (64-row tiles) without "
                             f"split-K, one_partial, stream_k, a_rows or m_waves (split="
                             f"{self.split}, stream_k={self.stream_k}, a_rows={self.a_rows})")
        if self.pingpong and (self.consumers != 2 or self.m_waves > 1 or self.split > 1
                              or self.stream_k or self.a_rows or self.epi_in_ring
                              or self.epi_overlap or self.cluster_n > 1):
            raise ValueError(f"Plan pingpong: two consumers on alternate 64-row tiles, without "
                             f"m_waves, split-K, stream_k, a_rows, epi_in_ring, epi_overlap or "
                             f"a cluster along N, got {self}")
        if self.stream_k and (self.cluster_n > 1 or self.split > 1 or self.a_rows
                              or self.epi_in_ring or self.m_waves > 1):
            raise ValueError(f"Plan stream_k: clusters along M only (cluster_n="
                             f"{self.cluster_n}, split={self.split}), no a_rows="
                             f"{self.a_rows}, epi_in_ring or m_waves (the clusters' shares "
                             f"of k-blocks are theirs alone)")
        if self.m_waves not in (1, 2) or (self.m_waves > 1 and (
                self.a_rows or self.split > 1 or self.cluster_n > 1 or self.kb_pairs)):
            raise ValueError(f"Plan m_waves={self.m_waves}: 1 or 2 m64 accumulators per "
                             f"consumer, 2 only without a_rows, split-K, a cluster along N "
                             f"or kb_pairs (a_rows={self.a_rows}, split={self.split}, "
                             f"cluster_n={self.cluster_n}, kb_pairs={self.kb_pairs})")
        if self.kb_roll not in (0, 2, 4, 8) or (self.kb_roll and (self.m_waves > 1
                                                                  or self.kb_pairs)):
            raise ValueError(f"Plan kb_roll={self.kb_roll}: 0, 2, 4 or 8 k-blocks per rolling "
                             f"iteration, and only without m_waves or kb_pairs "
                             f"(m_waves={self.m_waves}, kb_pairs={self.kb_pairs})")
        if self.sb_ring and not self.smem_scales:
            raise ValueError("Plan sb_ring hands scale_b over with scale_a's copy into the "
                             "ring: it needs smem_scales=True")
        if self.kb_stagger and not self.kb_roll:
            raise ValueError("Plan kb_stagger offsets the consumers' rolling iterations: it "
                             "needs kb_roll (2, 4 or 8), got kb_roll=0")
        if self.split < 1 or self.split > 8 or (self.split > 1 and self.cluster != 1):
            raise ValueError(f"Plan split={self.split}: 1 to 8 CTAs along K, and only "
                             f"without a cluster along M (cluster={self.cluster})")
        if self.b_prefetch not in (0, 2, 4, 8, 16):
            raise ValueError(f"Plan b_prefetch={self.b_prefetch}: 0 (none) or a run of 2, 4, "
                             f"8 or 16 k-blocks")
        if self.epi_in_ring and (self.m_waves > 1 or self.tail_skip or self.tma_store
                                 or self.epi_overlap):
            raise ValueError("Plan epi_in_ring: a dense kernel's one tile per CTA, not "
                             "with m_waves, tail_skip, tma_store or epi_overlap")
        if self.one_partial and self.split != self.consumers:
            raise ValueError(f"Plan one_partial: each rank sends exactly one consumer's "
                             f"partial only with split={self.consumers} (one owner per "
                             f"consumer), got split={self.split}")
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
    def options_tag(self) -> str:
        """The kernel name's part for ``one_partial``, ``stream_k``, one consumer,
        ``b_prefetch``, ``epi_in_ring``, ``kb_stagger``, ``b_swizzle``, ``pingpong``,
        ``uniform_cons``."""
        return (("_op" if self.one_partial else "") + ("_sk" if self.stream_k else "")
                + ("_m64" if self.consumers == 1 else "")
                + (f"_pf{self.b_prefetch}" if self.b_prefetch else "")
                + ("_er" if self.epi_in_ring else "") + ("_stg" if self.kb_stagger else "")
                + ("_sw64" if self.b_swizzle == 64 else "") + ("_pp" if self.pingpong else "")
                + ("_uc" if self.uniform_cons else "") + ("_sbr" if self.sb_ring else ""))

    @property
    def epi_cols(self) -> int:
        """Columns of C staged in shared memory per epilogue step: 128, or 64 for
        tiles narrower than that."""
        return 128 if self.bn >= 128 else 64

    @property
    def stmatrix(self) -> bool:
        """16-bit outputs staged with ``stmatrix.x4``; the split-K kernel keeps
        ``st.shared.b32`` (with stmatrix beside the exchange ptxas spills)."""
        return self.split == 1

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
    def bm(self) -> int:
        """CTA tile rows: ``consumers`` warpgroups of ``m_waves`` m64 accumulators (one
        warpgroup's 64 with ``pingpong``)."""
        return 64 * (1 if self.pingpong else self.consumers) * self.m_waves

    @property
    def stage_readers(self) -> int:
        """Consumer warpgroups that read (and release) each ring stage."""
        return 1 if self.pingpong else self.consumers

    @property
    def wg_m(self) -> int:
        """Rows of one consumer accumulator (one wgmma m64)."""
        return 64

    def stage_bytes(self, dtype: PtxType) -> int:
        """A ring stage: A's and B's elements (and ``scale_a`` with ``smem_scales``)."""
        return (self.bm + self.bn) * self.bk * dtype.bytes + self.scale_stage_bytes()

    def check_staging(self, out_dtype: PtxType) -> bool:
        """Whether C is staged in the ring (``epi_in_ring``), checked: each consumer's
        epilogue step of ``epi_cols`` columns is one 128-byte panel per ring stage."""
        if self.epi_in_ring and self.stages * 128 < self.epi_cols * out_dtype.bytes:
            raise ValueError(f"Plan epi_in_ring stages C's {self.epi_cols}-column step of "
                             f"{out_dtype.name} in {self.epi_cols * out_dtype.bytes // 128} "
                             f"ring stages, got stages={self.stages}")
        return self.epi_in_ring

    def epilogue_bytes(self, out_dtype: PtxType) -> int:
        """The consumers' staging buffers for C (none of its own with ``epi_in_ring``)."""
        return 0 if self.epi_in_ring else self.consumers * self.wg_m * self.epi_cols * \
            out_dtype.bytes

    def partial_bytes(self) -> int:
        """The split-K partial buffers (f32 accumulators of every consumer, or of the one
        consumer a rank sends with ``one_partial``), if split."""
        if self.split == 1:
            return 0
        return (self.wg_m if self.one_partial else self.bm) * self.bn * 4

    def scale_stage_bytes(self) -> int:
        """A ring stage's f32 ``scale_a`` of the tile's rows (``smem_scales``), else 0."""
        return self.bm * 4 if self.smem_scales else 0

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


__all__ = ["Plan", "FallbackPlan", "SMEM_PER_CTA", "BARRIER_BYTES"]
