"""How the Hopper GEMM's operands travel: global memory --TMA--> a swizzled ring stage
--descriptor--> wgmma, for either storage order of each operand.

An operand tile is ``rows`` (M for A, N for B) by ``bk`` (K) elements per ring stage,
with ``bk`` one 128-byte swizzle row (64 bf16/f16, 128 e4m3/e5m2). Its global storage is
one of (8-bit operands: K-major only, as wgmma reads them):

* **K-major** (``major="K"``): K contiguous. A stored (M, K) row-major, B given as its
  transpose ``Bt`` (N, K) row-major (``x @ w.T`` of a linear layer). TMA boxes of
  ``box_rows x bk`` land as ``box_rows`` rows of 128 bytes, one after the other; wgmma
  reads them with transpose 0 and the K-major 128-byte-swizzle descriptor: 8-row core
  groups 1024 bytes apart (SBO), LBO unused (16). One k16 wgmma step is 32 bytes along
  the row.
* **MN-major** (``major="MN"``): M or N contiguous. B stored (K, N) row-major (a plain
  ``a @ b``), A given as its transpose ``At`` (K, M) row-major (a column-major ``a``).
  TMA boxes are ``bk x 64``: 64 K-rows of one 128-byte swizzle row of M/N elements
  (8 KiB, an *atom*); a ``rows``-wide tile is ``rows / 64`` atoms one after the other.
  wgmma reads them with transpose 1 (``imm-trans-a/b``) and the MN-major 128-byte
  descriptor: 8-K-row groups 1024 bytes apart (SBO), atoms along M/N ``8 KiB`` apart
  (LBO; CuTe writes this canonical layout ``((8T, m), (8, k)) : ((1, LBO), (8T, SBO))``
  under ``Swizzle<3,4,3>``, T = 8 elements). One k16 step is 16 rows: 2048 bytes.

An MN-major B may take the 64-byte swizzle instead (``Plan.b_swizzle = 64``): atoms of
32 columns (64 bytes by ``bk`` K-rows, 4 KiB), so tile widths in multiples of 32 (96),
as CUTLASS picks the widest swizzle whose atom divides the tile; the descriptor's 8-K-row
groups are then 512 bytes apart and a k16 step is 1024 bytes. Where a cluster along M
shares such a B and its CTAs' shares are not whole atoms (96 / 2 = 48 columns), each CTA
loads every atom's ``bk / cluster`` K-rows instead (``k_parts``): the stage is
``k_parts`` K-chunks one after the other, each holding all the atoms' rows of that chunk.

Either way a stage holds ``rows * bk`` elements and a consumer's 64 rows of A start
``64 * bk * elem`` bytes after the previous consumer's (64 K-major rows, or one MN-major
atom), so the ring's map (:class:`.layout.Layout`) does not depend on the majors.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...core.specs import Tile
from ...dsl import ptx, reg
from ...isa.descriptors import SmemDescriptor
from ...core.tensormap import TMA
from ...core.types import PtxType, u32

ATOM = 64          # elements of one 128-byte swizzle row (16-bit types)
ROW_BYTES = 128    # the swizzle span: one K-major row / one MN-major atom row
MAJORS = ("K", "MN")

# K-major, 128-byte swizzle: 8-row core groups 1024 bytes apart; LBO unused (16).
SW128_K_MAJOR = SmemDescriptor(leading=16, stride=1024, swizzle=128)


@dataclass(frozen=True)
class Operand:
    """One GEMM operand as the kernel reads it (see the module docstring).

    ``which``: ``"A"`` or ``"B"``; ``major``: ``"K"`` or ``"MN"``; ``rows``: the tile's
    M (A) or N (B) extent per stage; ``load_rows``: the part one CTA loads per stage
    (``rows / cluster`` for a multicast B); ``box_rows``: the M/N extent of one K-major
    TMA box (MN-major boxes are one 64-wide atom)."""

    which: str
    major: str
    rows: int
    load_rows: int
    box_rows: int
    bk: int
    dtype: PtxType
    l2_promotion: int = 0
    swizzle: int = ROW_BYTES    # an MN-major operand's swizzle span: 128, or 64
    k_parts: int = 1            # MN-major: K-chunks of a stage, one per CTA of a cluster

    def __post_init__(self):
        if self.swizzle not in (64, ROW_BYTES) or (self.major == "K" and (
                self.swizzle != ROW_BYTES or self.k_parts != 1)) or \
                self.bk % (8 * self.k_parts):
            raise ValueError(f"operand {self.which}: a K-major operand takes the 128-byte "
                             f"swizzle whole, an MN-major one the 128- or 64-byte swizzle in "
                             f"K-chunks of whole 8-row groups, got {self.major}-major, "
                             f"swizzle {self.swizzle}, k_parts {self.k_parts}")
        if self.major not in MAJORS:
            raise ValueError(f"operand {self.which}: major must be 'K' or 'MN', got "
                             f"{self.major!r}")
        if self.bk * self.dtype.bytes != ROW_BYTES:
            raise ValueError(f"operand {self.which}: K per stage must be one 128-byte row, "
                             f"got {self.bk} {self.dtype.name}")
        box = self.box_mn
        if self.load_rows % box or self.rows % self.load_rows or box > 256:
            raise ValueError(f"operand {self.which}: {self.load_rows} rows per CTA do not "
                             f"split into boxes of {box}")

    # ---------------------------------------------------------------- the argument
    @property
    def mn(self) -> str:
        return "M" if self.which == "A" else "N"

    @property
    def arg_name(self) -> str:
        """The kernel argument: A / Bt (K-major), At / B (MN-major)."""
        transposed = (self.which == "B") == (self.major == "K")
        return self.which + ("t" if transposed else "")

    @property
    def box_mn(self) -> int:
        return self.box_rows if self.major == "K" else self.swizzle // self.dtype.bytes

    @property
    def box_k(self) -> int:
        """K-rows of one box: ``bk``, or one K-chunk of an MN-major stage."""
        return self.bk // self.k_parts

    def tile(self, stride: str, names: tuple | None = None) -> Tile:
        """The argument's Tile: (M|N, K) for K-major, (K, M|N) for MN-major, read by TMA
        with the 128-byte swizzle in boxes of ``box_mn`` M/N by ``bk`` K elements.
        ``names``: the (M|N, K) dim names where they are not those (a grouped GEMM's
        stacked B: ``("GN", "K")`` or ``("N", "GK")``)."""
        mn, kn = names or (self.mn, "K")
        if self.major == "K":
            return Tile(mn, kn, self.dtype, stride=stride,
                        tma=TMA(box=(self.box_rows, self.bk), swizzle=ROW_BYTES,
                                l2_promotion=self.l2_promotion))
        return Tile(kn, mn, self.dtype, stride=stride,
                    tma=TMA(box=(self.box_k, self.box_mn), swizzle=self.swizzle,
                            l2_promotion=self.l2_promotion))

    # ---------------------------------------------------------------- shared memory
    @property
    def stage_bytes(self) -> int:
        return self.rows * self.bk * self.dtype.bytes

    @property
    def box_bytes(self) -> int:
        return self.box_mn * self.box_k * self.dtype.bytes

    @property
    def transpose(self) -> int:
        """wgmma's ``imm-trans-a`` / ``imm-trans-b``: 1 for MN-major."""
        return 1 if self.major == "MN" else 0

    @property
    def fields(self) -> SmemDescriptor:
        """The descriptor's fields but the start address."""
        if self.major == "K":
            return SW128_K_MAJOR
        return SmemDescriptor(leading=self.box_bytes, stride=8 * self.swizzle,
                              swizzle=self.swizzle)

    @property
    def k_step(self) -> int:
        """Descriptor increment (16-byte units) per wgmma K step (32 bytes of K: k16 of a
        16-bit type, k32 of an 8-bit one): 32 bytes along a K-major row, 16 rows (2048
        bytes) down an MN-major atom (16-bit types only)."""
        kk = 32 // self.dtype.bytes
        return (kk * self.dtype.bytes if self.major == "K" else kk * self.swizzle) >> 4

    def k_offset(self, ks: int) -> int:
        """Descriptor increment (16-byte units) of the ``ks``-th wgmma K step of a stage:
        ``ks * k_step``, or with K-chunks the step's place in its chunk (chunks
        ``rows * box_k`` elements apart)."""
        if self.k_parts == 1:
            return ks * self.k_step
        per = self.box_k // (32 // self.dtype.bytes)        # K steps per chunk
        chunk = self.rows * self.box_k * self.dtype.bytes
        return ((ks // per) * chunk >> 4) + (ks % per) * self.k_step

    def descriptor(self, addr):
        """The wgmma descriptor of the tile at shared address ``addr`` (a ``.u32``, 1024-byte
        aligned): :func:`ptx.wgmma.descriptor` with this operand's :attr:`fields`.

        Its 14-bit mask of the start address matters here: on sm_90 a ``shared::cta``
        address carries the CTA's rank in its cluster above bit 24 (it is also that CTA's
        ``shared::cluster`` address), so ``addr >> 4`` of rank 1 has bit 20 set, which
        would land in the LBO field (bits 16-29) and move an MN-major operand's later
        64-wide atoms 256 bytes (two K rows) on. K-major 128-byte-swizzled operands
        ignore LBO, which is why only MN-major failed without it."""
        f = self.fields
        return ptx.wgmma.descriptor(addr, leading=f.leading, stride=f.stride,
                                    swizzle=f.swizzle, base_offset=f.base_offset)

    # ---------------------------------------------------------------- TMA
    def load(self, tmap, dst, mn0, kk, bar, *, mask=None) -> None:
        """This CTA's ``load_rows`` M/N rows from ``mn0`` (K from ``kk``: with
        ``k_parts``, the first row of this CTA's K-chunk, ``box_k`` rows) into shared
        ``dst``: one ``cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::
        complete_tx::bytes`` per box (``.multicast::cluster`` with ``mask``, a ``.u16``
        register, to the same offset of every CTA in it), completing on ``bar``."""
        op = ("cp.async.bulk.tensor.2d.shared::cluster.global.tile."
              "mbarrier::complete_tx::bytes")
        if mask is not None:
            op += ".multicast::cluster"
        box = self.box_mn
        for j in range(self.load_rows // box):
            row = mn0 if j == 0 else mn0 + j * box
            coords = [kk, row] if self.major == "K" else [row, kk]
            at = ptx.addr(dst, j * self.box_bytes) if j else ptx.addr(dst)
            args = [at, ptx.addr(tmap, coords=coords), ptx.addr(bar)]
            ptx.inst(op, *args, *([mask] if mask is not None else []))

    def prefetch(self, tmap, mn0, kk) -> None:
        """Ask L2 for the boxes :meth:`load` would land from ``mn0`` and ``kk`` (one
        ``cp.async.bulk.prefetch.tensor.2d.L2.global.tile`` per box; nothing waits)."""
        box = self.box_mn
        for j in range(self.load_rows // box):
            row = mn0 if j == 0 else mn0 + j * box
            coords = [kk, row] if self.major == "K" else [row, kk]
            ptx.inst("cp.async.bulk.prefetch.tensor.2d.L2.global.tile",
                     ptx.addr(tmap, coords=coords))


def prefetch_run(op: Operand, tmap, kb, hi, p, mn0) -> None:
    """At each k-block ``kb`` that is a multiple of ``run = p.b_prefetch``,
    :meth:`Operand.prefetch` of the ``run`` k-blocks after this run, where they all lie
    before ``hi``: each row's next ``run * 128`` bytes are asked of DRAM together, where
    the ring's loads would ask for them 128 (256 with L2 promotion) at a time, one
    k-block apart."""
    run, bk = p.b_prefetch, p.bk
    with ptx.if_((kb & (run - 1)) == 0):
        with ptx.if_(kb + 2 * run <= hi):
            for j in range(run):
                op.prefetch(tmap, mn0, (kb + (run + j)) * bk)


def k_parts(p, b_major: str) -> int:
    """K-chunks of an MN-major B's stage (:class:`Operand`): the cluster along M where
    its CTAs' shares of the tile are not whole atoms of ``p.b_swizzle`` bytes, else 1."""
    if b_major == "K" or p.cluster == 1 or (p.bn // p.cluster) % (p.b_swizzle // 2) == 0:
        return 1
    return p.cluster


def operands(p, dtype: PtxType, a_major: str = "K", b_major: str = "K",
             b_dtype: PtxType | None = None) -> tuple:
    """(A, B) of a :class:`.config.Plan`: A ``bm`` rows, each CTA of a cluster along N
    loading ``bm / cluster_n`` of them (multicast) in one K-major box, or only the first
    ``a_rows``; B ``bn`` rows, each CTA of a cluster along M loading ``bn / cluster`` of
    them (multicast), in K-major boxes of ``bn / 2`` rows (an MN-major B in atoms of
    ``p.b_swizzle`` bytes, shared along K where they do not divide: :func:`k_parts`).
    ``b_dtype``: B's element type where it differs from A's (an e4m3 / e5m2 mix)."""
    if p.b_prefetch and b_major != "K":
        raise ValueError(f"Plan.b_prefetch is for a K-major B (rows of B read 128 bytes at a "
                         f"time), got B {b_major}-major")
    ar = p.a_rows or p.bm // p.cluster_n             # rows of A this CTA loads per stage
    a = Operand("A", a_major, p.bm, ar, ar, p.bk, dtype, p.l2_promotion)
    kp = k_parts(p, b_major)
    b = Operand("B", b_major, p.bn, p.bn // p.cluster if kp == 1 else p.bn, p.bn // 2, p.bk,
                b_dtype or dtype, p.l2_promotion,
                p.b_swizzle if b_major != "K" else ROW_BYTES, kp)
    return a, b


def zero_a_rows(a0, p, a_stage: int, tid) -> None:
    """Zero the A rows ``a_rows .. bm`` of every ring stage (16-byte ``st.shared.v4.b32``),
    then ``fence.proxy.async.shared::cta``: TMA never writes them, and wgmma (the async
    proxy) reads them as zeros, so those rows of the product are zero and past M, never
    stored. Before the start barrier that orders it. The producer warpgroup does it:
    it fences nothing else later, so this fence stays its latest (the interpreter's
    proxy detector keeps one per warp; the consumers fence again in every epilogue)."""
    per = (p.bm - p.a_rows) * 128 // 16                 # 16-byte chunks per stage
    zero = reg.scalar(u32, init=0)
    with ptx.if_(tid < 128):
        for i in ptx.range_(tid, per * p.stages, 128):
            s = i // per
            at = a0 + s * a_stage + (i - s * per) * 16
            ptx.inst("st.shared.v4.b32", ptx.addr(at, p.a_rows * 128), [zero] * 4)
        ptx.inst("fence.proxy.async.shared::cta")


__all__ = ["Operand", "operands", "k_parts", "prefetch_run", "SW128_K_MAJOR", "ATOM", "MAJORS",
           "zero_a_rows"]
