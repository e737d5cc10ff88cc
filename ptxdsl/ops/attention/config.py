"""What the forward plan chooses, and what a call asks for, as frozen records."""
from __future__ import annotations

from dataclasses import dataclass

HEAD_DIMS = (64, 96, 128, 192, 256)   # 96: the second 64-column panel half filled
BLOCK_M = 128                      # query rows per CTA: two consumer warpgroups of m64


def register_pool(consumers: int) -> int:
    """The registers a thread slot of each warpgroup can hold at once, summed over the
    producer and the consumers: the launch gives every thread 65536 / threads, rounded
    down to 8 (168 for three warpgroups, 128 for four), and ``setmaxnreg.inc`` only takes
    what ``setmaxnreg.dec`` gave back, so asking for more waits forever (24 + 2 x 240 =
    3 x 168 fits; 32 + 2 x 240 does not)."""
    warpgroups = 1 + consumers
    return warpgroups * (65536 // (128 * warpgroups) // 8 * 8)


def padded(head_dim: int) -> int:
    """The head dim in whole 64-column panels (one 128-byte swizzle row of 16-bit
    elements): what shared memory holds per row."""
    return -(-head_dim // 64) * 64


@dataclass(frozen=True)
class Config:
    """The kernel's tile shape: ``block_n`` keys/values per block, ``stages`` K/V blocks in
    the shared-memory ring, whether the two consumers take turns at the tensor cores
    (``pingpong``), whether the grid is one CTA per SM looping over the tiles
    (``persistent``; else one CTA per tile), the register budgets the warpgroups ask
    ``setmaxnreg`` for (``producer_regs`` 0: 24, or 32 with ``dynamic``, whose producer
    spills at 24 beside three consumers; ``consumer_regs`` 0: the most that fits beside
    the producer's, 240 for two consumers, 160 for three, either way), whether O leaves
    through a shared-memory staging buffer and TMA stores (``tma_store``; else
    ``st.global`` from registers; the dense layout only), and how many consumer
    warpgroups of 64 query rows a tile has (``consumers``: 2 or 3, a tile of ``block_m =
    64 * consumers`` rows). ``lazy_rescale``: the row max moves only when a block's max
    exceeds it by more than 8 (log2 units), and O is rescaled only in warps where it
    moved, after a branch that keeps the wait for P·V behind the softmax (see
    ``fwd_uniform.wait_and_rescale``). ``head_sections``: the causal longest-first order runs
    within sections of K/V heads (under GQA, their groups of query heads) whose K/V fit
    ``section_mb`` MiB (0: :data:`.tiles.L2_KV_BYTES`, 24 MiB), one section after another
    (:meth:`.tiles.Dense.locate`; the dense and packed layouts). ``dynamic`` (with
    ``persistent``): a CTA's first tile is its index, each later one the next number of
    a global tile counter (one atomic add by the producer, passed to the consumers
    through shared memory), so CTAs that finish early take more tiles, in the layout's
    order (the snake of the static schedule no longer applies); the kernel takes the
    counter as its last argument (a 32-bit word), zero before the launch and left zero
    by it (dense and packed layouts; varlen keeps the static order). ``store_wait_once``
    (with ``tma_store``): lane 0 of each consumer waits for its TMA stores to have read
    the staging buffer once, before the CTA ends, instead of after every tile (where the
    next tile's first wgmma then waits for it; each tile's epilogue waits before it
    writes the buffer again either way). ``late_epilogue`` (persistent or dynamic grids;
    dense and packed layouts, else no effect): a tile's epilogue (O / l out, the LSE) runs
    in the next tile, after that tile's first Q·Kᵀ is issued, so the tensor cores have
    that wgmma while the consumer writes out (and the last tile's at the end); O, m and l
    are then one set of registers the epilogue reads before they are zeroed for the tile
    under way. ``o_in_q`` (with ``tma_store``): O is staged in the rows of Q's buffer that
    the consumer's own Q·Kᵀ read (FA4's sm90 choice), not in a buffer of its own (what
    head dim 256 lacks the shared memory for); Q is then released once the tile's TMA
    stores have read O, not after its last Q·Kᵀ, so the next tile's Q load waits for the
    epilogue. ``uniform_cons``: a consumer's warpgroup index comes through ``shfl.sync.idx`` from
    lane 0 (CUTLASS's way to tell ptxas it is the same in the warp), so ptxas keeps what
    derives from it in uniform registers: Q's wgmma descriptors (else two ``R2UR`` a Q·Kᵀ
    wgmma). ``q_double`` (without ``o_in_q``): Q has two buffers that
    the tiles of a CTA take in turn (the second after the other buffers, with its own full /
    empty mbarriers), so the producer loads the next tile's Q, and its first K/V blocks
    as ring stages free, while the current tile runs, not once its last Q·Kᵀ retired:
    the load latency at each tile's start leaves the consumers' path (a cost paid per
    tile, twice as often per key under the causal mask, whose tiles are half as long on
    average); with ``dynamic`` each buffer has its own tile-number words. ``suspend_ns``:
    the mbarrier waits' suspend-time hint (0: none; CUTLASS waits with 10 ms), so that a
    waiting warp retries its ``try_wait`` less often. ``k_ahead``: the producer loads K's
    block j + 1 before V's block j (FA3's order), so K's next load does not queue behind
    the wait for V's slot, which frees last (after P·V)."""

    block_n: int = 128
    stages: int = 2
    pingpong: bool = False
    persistent: bool = False
    producer_regs: int = 0
    consumer_regs: int = 0
    tma_store: bool = False
    consumers: int = 2
    lazy_rescale: bool = False
    head_sections: bool = False
    dynamic: bool = False
    section_mb: int = 0
    store_wait_once: bool = False
    late_epilogue: bool = False
    o_in_q: bool = False
    uniform_cons: bool = False
    q_double: bool = False
    suspend_ns: int = 0
    k_ahead: bool = False

    def __post_init__(self):
        if self.consumers not in (2, 3):
            raise ValueError(f"consumers is 2 or 3 warpgroups of 64 rows, got {self.consumers}")
        if not self.producer_regs:          # the next tile's number and the counter's
            object.__setattr__(self, "producer_regs", 32 if self.dynamic else 24)  # address
        if not self.consumer_regs:          # setmaxnreg takes multiples of 8
            object.__setattr__(self, "consumer_regs",
                               (register_pool(self.consumers) - self.producer_regs)
                               // self.consumers // 8 * 8)
        if self.block_n % 16 or not 16 <= self.block_n <= 256:
            raise ValueError(f"block_n is a multiple of 16 from 16 to 256 (a wgmma N of S "
                             f"and the K of P·V in k16 steps), got {self.block_n}")
        if not 0 <= self.suspend_ns < 2 ** 32:
            raise ValueError(f"suspend_ns is try_wait's u32 hint in nanoseconds, got "
                             f"{self.suspend_ns}")
        if self.stages < 1:
            raise ValueError(f"stages >= 1, got {self.stages}")
        if not 0 <= self.section_mb < 4096 or (self.section_mb and not self.head_sections):
            raise ValueError(f"section_mb sizes head_sections' sections (MiB of K/V below "
                             f"4096, 0: the default), got {self.section_mb} with "
                             f"head_sections={self.head_sections}")
        if self.store_wait_once and not self.tma_store:
            raise ValueError("store_wait_once moves the wait of the TMA-store epilogue: "
                             "give tma_store=True with it")
        if self.o_in_q and (not self.tma_store or self.store_wait_once
                            or self.late_epilogue):
            raise ValueError("o_in_q stages O in Q's buffer of the TMA-store epilogue and "
                             "waits for its reads every tile: give tma_store=True, with "
                             "store_wait_once and late_epilogue off")
        if self.q_double and self.o_in_q:
            raise ValueError("q_double takes the tiles' Q buffers in turn, o_in_q stages O "
                             "in Q's buffer: give one of them")
        if self.dynamic and not self.persistent:
            raise ValueError("dynamic schedules a persistent grid's tiles: give "
                             "persistent=True with dynamic=True")
        pool = register_pool(self.consumers)
        if self.producer_regs + self.consumers * self.consumer_regs > pool:
            raise ValueError(f"producer_regs + consumers x consumer_regs = {self.producer_regs}"
                             f" + {self.consumers} x {self.consumer_regs} exceeds the "
                             f"{pool} a thread slot of the {1 + self.consumers} warpgroups "
                             f"holds at launch: setmaxnreg.inc would wait forever")

    @property
    def block_m(self) -> int:
        """Query rows per tile: 64 per consumer warpgroup (one m64 wgmma each)."""
        return 64 * self.consumers

    def smem_bytes(self, head_dim: int, elem_bytes: int = 2) -> int:
        """Q (``block_m`` rows) + ``stages`` x (K + V blocks) + the mbarriers (2 + 4 per
        stage; ``dynamic``: 16 more for the tile numbers, 32 with ``q_double``), with
        ``tma_store`` O's staging buffer (``block_m`` rows; ``o_in_q``: none), and with
        ``q_double`` two more mbarriers and a second Q, each 1024-byte aligned."""
        q = self.block_m * padded(head_dim) * elem_bytes
        kv = 2 * self.block_n * padded(head_dim) * elem_bytes
        words = 2 * self.dynamic * (1 + self.q_double)       # the tile numbers
        total = q + self.stages * kv + 8 * (2 + 4 * self.stages + words)
        if self.tma_store and not self.o_in_q:
            total = -(-total // 1024) * 1024 + q
        if self.q_double:               # its mbarriers, then the second Q
            total = -(-(total + 16) // 1024) * 1024 + q
        return total


@dataclass(frozen=True)
class Mask:
    """Which keys a query row sees, with keys aligned bottom-right (``off = Sk - Sq``):
    row ``i`` sees key ``j`` iff ``i + off - left <= j <= i + off + right``; ``-1`` is
    unbounded on that side. Causal is ``right = 0``."""

    left: int = -1
    right: int = -1

    @property
    def any(self) -> bool:
        return self.left >= 0 or self.right >= 0

    @property
    def tag(self) -> str:
        if not self.any:
            return "full"
        if self.left < 0 and self.right == 0:
            return "causal"
        # an unbounded side (-1) is "inf": the tag is part of a PTX identifier
        side = lambda n: "inf" if n < 0 else str(n)  # noqa: E731
        return f"win{side(self.left)}_{side(self.right)}"


__all__ = ["Config", "Mask", "HEAD_DIMS", "BLOCK_M", "padded"]
