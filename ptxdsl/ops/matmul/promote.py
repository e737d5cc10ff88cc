"""Float8 scales beyond one per tensor in the Hopper kernel (:mod:`.fp8` has the modes).

* **Row-wise** (:class:`RowScales`): ``scale_a[row] * scale_b[col]`` multiplies each
  accumulator value in the epilogue (:mod:`.store`): the thread's two rows' ``scale_a``
  are loaded once per tile, ``scale_b`` per column pair beside the bias (predicated
  ``ld.global.nc``, cached in L1).
* **Block-wise** (:class:`BlockLoop`, DeepGEMM's recipe): a ring stage of 8-bit operands
  is 128 elements of K, one scale block. Each consumer runs the stage's wgmmas into a
  temporary f32 accumulator (``part``, scale-d 0 on the first), waits for them
  (``wgmma.wait_group``), releases the stage and promotes: ``acc = fma(part, scale_a *
  scale_b, acc)`` with ``scale_a[kb, row]`` of its rows and ``scale_b[kb, n0 / 128]`` of
  the tile, which lies in one 128-column block (:func:`.plan.for_scaling`). The other
  consumer's wgmmas keep the tensor cores busy while one promotes. The scales
  (:class:`BlockScales`) load one k-block ahead and are multiplied only after the
  wgmmas they scale retired. Plans vary it: ``m_waves = 2`` (256-row tiles: each
  consumer promotes two m64 accumulators in turn through one ``part``, so a stage's B
  serves twice the rows), ``bn = 256`` (the mirror: two 128-column halves, each in one
  ``scale_b`` block, promoted in turn into one m64n256 accumulator) and ``kb_pairs`` (two
  ``part`` accumulators: a k-block's promotion runs under the next k-block's wgmmas of
  the same consumer), ``kb_roll`` (2, 4 or 8 k-blocks an iteration through two
  temporaries in turn) and ``kb_stagger`` (the second consumer leads with an iteration
  of ``kb_roll / 2`` k-blocks, so the two consumers' drained wgmma queues, one per
  iteration, do not coincide).
"""
from __future__ import annotations

from ...dsl import ptx, reg
from ...core.types import f32, u32, u64
from .._common.ring import wait
from .._common.rowio import load_chunk
from .layout import SB_SLOT, stage_descriptor

STRADDLING = 160   # the block-wise tile width that is no multiple of 128 (two scale_b blocks)


def _wide(x, scale):
    d = reg.scalar(u64)
    ptx.inst.mul.wide.u32(d, x, scale)
    return d


def _load(ptr, index, ok=None):
    """f32 ``ptr[index]`` (0 where ``ok`` is false; unguarded without it)."""
    return load_chunk(ptr + _wide(index, 4), 0, f32, 1, pred=ok)[0]


class RowScales:
    """A tile's row-wise factors: ``rows[h]`` is ``scale_a`` of the thread's row ``frow +
    8h`` (0 past M); :meth:`column` loads ``scale_b`` of one column (0 past N)."""

    def __init__(self, psa, psb, row, m):
        self.psb = psb
        self.rows = [_load(psa, row if h == 0 else row + 8, (row if h == 0 else row + 8) < m)
                     for h in range(2)]

    def column(self, col, n):
        return _load(self.psb, col, col < n)


class BlockScales:
    """Block-wise scales of one consumer thread: ``scale_a`` as ``(KB, M)`` and
    ``scale_b`` as ``(KB, NB)``, both row-major f32, for ``count`` accumulator rows of
    the thread (two per m64 accumulator: ``frow`` and ``frow + 8``) and ``halves``
    128-column blocks of the tile (a 256-column tile spans two).

    The raw values live in fixed registers (:meth:`load` writes them, :meth:`factors`
    reads them): a k-block's scales are loaded after the previous k-block's promotion and
    multiplied after this k-block's wgmmas retired, so the load's latency hides under
    the wgmmas. A product taken as soon as the load is issued waits for it there.

    With ``smem`` (``Plan.smem_scales``: the producer copies the tile's ``scale_a`` into
    each ring stage beside A, :func:`copy_scale_a`) :meth:`load` loads ``scale_b`` only
    and :meth:`read` takes ``scale_a`` from the stage once it is full (before it is
    released)."""

    def __init__(self, psa, psb, m, nb, count: int, halves: int = 1, smem: bool = False,
                 ring_b: bool = False):
        self.psa, self.psb, self.m, self.nb, self.smem = psa, psb, m, nb, smem
        self.ring_b = ring_b    # Plan.sb_ring: scale_b from the stage's slot (ScaleBRing)
        # A row (block) past M (N) is never loaded: its register keeps 0 or an earlier
        # tile's scale, which multiplies TMA's zero fill and is never stored.
        self.sa = [reg.scalar(f32, init=0.0) for _ in range(count)]
        self.sb = [reg.scalar(f32, init=0.0 if h else None) for h in range(halves)]

    def load(self, kb, rows, n0) -> None:
        """Start loading k-block ``kb``'s ``scale_a`` of each of ``rows`` and ``scale_b[kb,
        n0 / 128 + h]`` of each 128-column half ``h`` of the tile (nothing with
        ``Plan.sb_ring``: :meth:`read` takes both from the stage)."""
        if self.ring_b:
            return
        col = kb * self.nb + (n0 >> 7)
        for h, r in enumerate(self.sb):
            ptx.inst("ld.global.nc.f32", r, ptx.addr(self.psb + _wide(col + h if h else col, 4)),
                     pred=(n0 >> 7) + h < self.nb if h else None)
        if self.smem:
            return
        base = kb * self.m
        for r, row in zip(self.sa, rows):
            ptx.inst("ld.global.nc.f32", r, ptx.addr(self.psa + _wide(base + row, 4)),
                     pred=row < self.m)

    def read(self, stage, rows, sb_at=None) -> None:
        """``scale_a`` of each of ``rows`` (``frow`` and ``frow + 8`` of each wave) from the
        ring stage's copy at ``stage`` (rows past M keep their register). The tile starts
        at a multiple of 128 rows: the first row's place in it is ``rows[0] & 127``. With
        ``Plan.sb_ring`` also ``scale_b`` of each half, from the stage's slot ``sb_at``."""
        at = stage + (rows[0] & 127) * 4
        for i, (r, row) in enumerate(zip(self.sa, rows)):
            ptx.inst("ld.shared.f32", r, ptx.addr(at, 4 * (128 * (i >> 1) + 8 * (i & 1))),
                     pred=row < self.m)
        if self.ring_b:         # this warp's copy of the producer's scale_b (ScaleBRing):
            at = sb_at + ((rows[0] & 127) >> 4) * 8    # (warp 0 .. 7 of the consumers)
            if len(self.sb) == 2:
                ptx.inst("ld.shared.v2.f32", list(self.sb), ptx.addr(at))
            else:
                ptx.inst("ld.shared.f32", self.sb[0], ptx.addr(at))

    def factors(self, wave: int = 0, half: int = 0) -> list:
        """``scale_a * scale_b`` of accumulator ``wave``'s two rows (r = 0, 1) in the
        tile's 128-column ``half``."""
        return [self.sa[2 * wave + r] * self.sb[half] for r in range(2)]


class ScaleBRing:
    """``Plan.sb_ring``, the producer's part: the tile's ``scale_b[kb, n0 / 128 + h]`` of
    each 128-column half ``h`` stored (``st.shared``) into the stage's slot (``Layout.sbr``)
    before the stage's ``full`` arrive (release: the consumers' wait sees it), once per
    consumer warp (8 bytes each, :meth:`BlockScales.read`): each warp's reads are then its
    own bytes, which its own ``empty`` arrive hands back (the interpreter's race detector
    orders bytes that several warps read only after the last of those reads). Each value
    is loaded one k-block ahead, so the stores never wait for a global load's latency in
    front of the stage's TMA copies. A half past N keeps 0 or an earlier tile's value: it
    multiplies TMA's zero fill, never stored."""

    def __init__(self, psb, nb, kbs, n0, halves: int, first):
        self.psb, self.nb, self.last = psb, nb, kbs - 1
        self.col = n0 >> 7
        self.v = [reg.scalar(f32, init=0.0) for _ in range(halves)]
        self._load(first)

    def _load(self, kb):
        """k-block ``kb``'s values (clamped to the last k-block: always in bounds)."""
        at = ptx.min(kb, self.last) * self.nb + self.col
        for h, r in enumerate(self.v):
            ptx.inst("ld.global.nc.f32", r, ptx.addr(self.psb + _wide(at + h if h else at, 4)),
                     pred=self.col + h < self.nb if h else None)

    def store(self, dst, kb) -> None:
        """Store k-block ``kb``'s values (loaded before) at ``dst``; load ``kb + 1``'s."""
        two = self.v * 2 if len(self.v) == 2 else self.v * 4    # two warps' copies a store
        for j in range(SB_SLOT // 16):
            ptx.inst("st.shared.v4.f32", ptx.addr(dst, 16 * j) if j else ptx.addr(dst), two)
        self._load(kb + 1)


def scale_a_bytes(m, m0, bm: int):
    """Bytes of ``scale_a`` per k-block of the tile at row ``m0``: its rows before M (a
    multiple of 16 where M is a multiple of 4, :func:`.layout.grid_for` checks), 0 for
    a tile past M (a cluster's padding)."""
    nbytes = reg.scalar(u32)
    ptx.inst.selp.u32(nbytes, ptx.min(m - m0, bm) * 4, 0, m0 < m)
    return nbytes


def copy_scale_a(psa, m, m0, kb, dst, full, nbytes) -> None:
    """The producer's bulk copy of ``scale_a[kb, m0 ..]`` (``nbytes``, contiguous in the
    ``(KB, M)`` layout) into a ring stage at ``dst``, completing on its ``full``
    barrier beside A's and B's bytes."""
    with ptx.if_(nbytes > 0):
        ptx.inst("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes",
                 ptx.addr(dst), ptx.addr(psa + _wide(kb * m + m0, 4)), nbytes, ptx.addr(full))


def promote(acc, part, factors) -> None:
    """``acc += part * factor`` of each value's row (fragment value ``i`` of an m64nN
    accumulator lies in row ``frow + 8 * ((i >> 1) & 1)``)."""
    for i, (a, p) in enumerate(zip(acc, part)):
        ptx.inst.fma.rn.f32(a, p, factors[(i >> 1) & 1], a)


class BlockLoop:
    """A consumer's k-blocks under block-wise scales: each k-block's wgmmas into a
    temporary accumulator (scale-d 0 first), waited, the ring stage released, then
    promoted into the accumulator of its rows (``accs``: one per m64 wave of the tile).

    A 256-column tile is two 128-column halves (each in one ``scale_b`` block): the
    k-block's m64n128 wgmmas of each half go through the temporary in turn and are
    promoted into the half's 64 values of the m64n256 accumulator (values ``64h ..``).

    ``ops`` draws the kernel's parts: ``wait_full()`` (the current ring slot), ``issue(
    dst, wave, half)`` (fence, the slot's wgmmas of A's rows of ``wave`` and B's columns
    of ``half`` into ``dst``, commit), ``slot_empty()`` (its empty barrier),
    ``advance()`` and ``release(eb)``.

    With ``pairs`` (one wave only) k-blocks go two at a time into two temporaries: the
    second's wgmmas are issued before the first's are waited (``wgmma.wait_group 1``), so
    the first's promotion runs under them; the second's follows ``wait_group 0``. Every
    temporary read was written in the same loop iteration (ptxas cannot tell that a
    wgmma issued before a back edge has retired, :mod:`.overlap`)."""

    def __init__(self, ops, accs, scales, pairs: bool, roll: int = 0, chunk: int = 128):
        self.ops, self.accs, self.pairs, self.roll = ops, accs, pairs, roll
        self.chunks = 2 * len(accs[0]) // chunk         # wgmma column chunks of the tile
        self.cw = chunk
        self.n = chunk // 2                             # a chunk's values per thread
        self.parts = [reg.array(f32, self.n) for _ in range(2 if pairs or roll else 1)]
        sets = roll or (2 if pairs else 1)
        self.scales = [scales] + [BlockScales(scales.psa, scales.psb, scales.m, scales.nb,
                                              len(scales.sa), len(scales.sb), scales.smem,
                                              scales.ring_b)
                                  for _ in range(sets - 1)]
        self.rows = None
        self.phase = None       # a 160-column tile's (n0 >> 5) & 3 (_promote_straddling)

    def _full(self, scales):
        """Wait for the current ring stage; ``scale_a`` from it (``Plan.smem_scales``)."""
        self.ops.wait_full()
        if scales.smem:
            scales.read(self.ops.scale_slot(), self.rows,
                        self.ops.sb_slot() if scales.ring_b else None)

    def _promote(self, w, part, c, scales):
        """Chunk ``c``'s temporary into its values of wave ``w``'s accumulator, with the
        ``scale_b`` of the 128-column block it lies in (:meth:`_promote_straddling` for
        160-column tiles)."""
        n = self.n
        dst = self.accs[w][c * n:(c + 1) * n]
        if self.phase is not None:
            self._promote_straddling(dst, part, c * self.cw, scales.factors(w, 0),
                                     scales.factors(w, 1))
            return
        promote(dst, part, scales.factors(w, c * self.cw >> 7))

    def _promote_straddling(self, dst, part, col0, f0, f1):
        """A 160-column tile (``Plan.bn = 160``) starts at a multiple of 32 and spans two
        ``scale_b`` blocks: its first ``4 - phase`` 32-column quarters (``phase = (n0 >>
        5) & 3``) lie in the first. A value's factor is ``f0`` or ``f1`` of its row by its
        quarter (fragment value ``i`` of a chunk from column ``col0`` lies in column
        ``col0 + 8 * (i >> 2) + ..``); quarters 1 to 3 pick one with ``selp``, once per
        row and chunk."""
        picked = {}
        for i, (a, p) in enumerate(zip(dst, part)):
            q, r = (col0 + 8 * (i >> 2)) >> 5, (i >> 1) & 1
            if (q, r) not in picked:
                if q == 0 or q >= 4:
                    picked[q, r] = f0[r] if q == 0 else f1[r]
                else:
                    picked[q, r] = reg.scalar(f32)
                    ptx.inst.selp.f32(picked[q, r], f0[r], f1[r], self.phase < 4 - q)
            ptx.inst.fma.rn.f32(a, p, picked[q, r], a)

    def _one(self, scales):
        """A k-block of every wave, one after the other, through ``parts[0]``."""
        ops, part = self.ops, self.parts[0]
        self._full(scales)
        eb = ops.slot_empty()
        for w, dst in enumerate(self.accs):
            for c in range(self.chunks):
                ops.issue(part, w, c)
                ptx.inst("wgmma.wait_group.sync.aligned", 0)
                if w == len(self.accs) - 1 and c == self.chunks - 1:
                    ops.release(eb)
                self._promote(w, part, c, scales)
        ops.advance()

    def _rolling(self, kb, last, rows, n0, count: int = 0):
        """``roll`` (or ``count``) k-blocks from ``kb`` (one wave), chunk after chunk
        through the two temporaries in turn: each step's wgmmas are issued before the
        step before is waited (``wait_group 1``) and promoted, so the wgmma queue drains
        once per iteration; a k-block's stage is released, and its scales reloaded for
        ``kb + count`` on, after its last chunk's promotion."""
        ops, C = self.ops, self.chunks
        count = count or self.roll
        steps = [(i, c) for i in range(count) for c in range(C)]
        ebs = []

        def retire(t, pending):
            i, c = steps[t]
            ptx.inst("wgmma.wait_group.sync.aligned", pending)
            if c == C - 1:
                ops.release(ebs[i])
            self._promote(0, self.parts[t % 2], c, self.scales[i])
            if c == C - 1:
                self.scales[i].load(ptx.min(kb + (count + i), last), rows, n0)

        for s, (i, c) in enumerate(steps):
            if c == 0:
                self._full(self.scales[i])
                ebs.append(ops.slot_empty())
            ops.issue(self.parts[s % 2], 0, c)
            if c == C - 1:
                ops.advance()
            if s:
                retire(s - 1, 1)
        retire(len(steps) - 1, 0)

    def _lead(self, kb0, nkr, last, rows, n0):
        """``Plan.kb_stagger``: the second consumer (rows 64 .. 127 of the tile: bit 6 of
        its first row, the tile starting at a multiple of 128) takes its first ``h = roll
        / 2`` k-blocks (where there are that many) as one rolling iteration of ``h``, so
        its full iterations, and the wgmma queue drained at the end of each, fall halfway
        between the first consumer's. Set ``i < h`` then holds k-block ``kb0 + h + i``'s
        scales, as the iterations after want. Returns the k-blocks left: ``(kb0 + lead,
        nkr - lead)``."""
        h = self.roll >> 1
        whole = reg.scalar(u32)
        ptx.inst.selp.u32(whole, h, 0, nkr >= h)
        lead = ptx.min(((rows[0] >> 6) & 1) << (h.bit_length() - 1), whole)
        for i in range(1, h):
            self.scales[i].load(ptx.min(kb0 + i, last), rows, n0)
        with ptx.if_(lead > 0):
            self._rolling(kb0, last, rows, n0, h)
        return kb0 + lead, nkr - lead

    def _two(self, kb, last, rows, n0):
        """k-blocks ``kb`` and ``kb + 1`` (one wave): both issued, then each waited,
        released and promoted; their scales reloaded for ``kb + 2`` and ``kb + 3``."""
        ops, acc = self.ops, self.accs[0]
        ebs = []
        for part, sc in zip(self.parts, self.scales):
            self._full(sc)
            ebs.append(ops.slot_empty())
            ops.issue(part, 0, 0)
            ops.advance()
        for i, (part, sc, eb) in enumerate(zip(self.parts, self.scales, ebs)):
            ptx.inst("wgmma.wait_group.sync.aligned", 1 - i)
            ops.release(eb)
            promote(acc, part, sc.factors(0))
            sc.load(ptx.min(kb + (2 + i), last), rows, n0)

    def run(self, kb0, nkr, rows, n0, split: bool) -> None:
        """The ``nkr`` k-blocks from ``kb0`` (a split-K rank's share with ``split``); the
        accumulators start at 0. A k-block's scales load after the promotion before it
        (:class:`BlockScales`)."""
        for dst in self.accs:
            for r in dst:
                ptx.inst.mov.f32(r, 0.0)
        self.rows = rows
        if self.ops.p.bn == STRADDLING:
            self.phase = (n0 >> 5) & 3
        last = kb0 + nkr - 1
        first = self.scales[0]
        first.load(kb0, rows, n0)
        stagger = self.roll and self.ops.p.kb_stagger
        if stagger:
            kb0, nkr = self._lead(kb0, nkr, last, rows, n0)    # ``first`` holds kb0's
        if self.roll:
            r = self.roll
            for i in range(1, r):
                self.scales[i].load(ptx.min(kb0 + i, last), rows, n0)
            if stagger:     # the iteration's first k-block as the counter (no kb0 + r * j)
                for kb in ptx.range_(kb0, kb0 + (nkr & -r), r):
                    self._rolling(kb, last, rows, n0)
            else:
                for j in ptx.range_(nkr >> (r.bit_length() - 1)):
                    self._rolling(kb0 + r * j if split else r * j, last, rows, n0)
            rem = nkr & (r - 1)     # the last k-blocks, one at a time (set i has kb + i)
            for i in range(r - 1):
                with ptx.if_(rem > i):
                    self._one(self.scales[i])
            return
        if not self.pairs:
            for kb in ptx.range_(kb0, kb0 + nkr) if split else ptx.range_(nkr):
                self._one(first)
                first.load(ptx.min(kb + 1, last), rows, n0)
            return
        self.scales[1].load(ptx.min(kb0 + 1, last), rows, n0)
        for j in ptx.range_(nkr >> 1):
            self._two(kb0 + 2 * j if split else 2 * j, last, rows, n0)
        with ptx.if_((nkr & 1) == 1):           # an odd count's last k-block
            self._one(first)


def chunk_cols(p) -> int:
    """Columns of one block-wise wgmma (m64nX): the tile's, 128 for a 256-column tile
    (two halves), 64 for a rolling 256-column tile (two 32-value temporaries beside the
    128-value accumulator fit a consumer's registers; two 64-value ones do not); a
    160-column tile's, or its 80-column halves rolling."""
    if p.bn == STRADDLING:
        return p.bn // 2 if p.kb_roll else p.bn
    return 64 if p.kb_roll and p.bn > 128 else min(p.bn, 128)


class BlockOps:
    """The Hopper kernel's ring stages as :class:`BlockLoop` draws them (:mod:`.hopper`
    passes its pieces); ``release`` is the consumer's (every CTA of the cluster)."""

    def __init__(self, p, ring, labels, base, L, a_off, opa, opb, mma, mma_k, trans, full0,
                 empty0, release, dtype):
        self.p, self.ring, self.labels = p, ring, labels
        self.base, self.L, self.a_off = base, L, a_off
        self.opa, self.opb, self.mma, self.mma_k, self.trans = opa, opb, mma, mma_k, trans
        self.full0, self.empty0, self.release = full0, empty0, release
        self.wave_bytes = 128 * p.bk * dtype.bytes   # A's next 128 rows in a stage
        self.chunk_bytes = chunk_cols(p) * p.bk * dtype.bytes   # B's next chunk's rows
        if p.uniform_cons:      # stage 0's descriptors (.layout.stage_descriptor)
            self.da0, self.db0 = opa.descriptor(base + L.a + a_off), opb.descriptor(base + L.b)

    def wait_full(self):
        wait(self.labels, self.full0 + self.ring.slot * 8, self.ring.phase)

    def scale_slot(self):
        """The current ring stage's copy of ``scale_a`` (``Plan.smem_scales``)."""
        return self.base + self.L.sfa + self.ring.slot * self.L.sfa_stage

    def sb_slot(self):
        """The current ring stage's ``scale_b`` (``Plan.sb_ring``)."""
        return self.base + self.L.sbr + self.ring.slot * SB_SLOT

    def slot_empty(self):
        return self.empty0 + self.ring.slot * 8

    def advance(self):
        self.ring.advance()

    def issue(self, dst, wave, chunk):
        """Fence, the slot's wgmmas of A's rows of ``wave`` and B's columns of ``chunk``
        (:func:`chunk_cols` wide) into ``dst`` (scale-d 0 on the first), commit."""
        slot = self.ring.slot
        if self.p.uniform_cons:
            da = stage_descriptor(self.da0, slot, self.L.a_stage, wave * self.wave_bytes)
            db = stage_descriptor(self.db0, slot, self.L.b_stage, chunk * self.chunk_bytes)
        else:
            sa = self.base + self.L.a + slot * self.L.a_stage + self.a_off
            da = self.opa.descriptor(sa + wave * self.wave_bytes if wave else sa)
            sb = self.base + self.L.b + slot * self.L.b_stage
            db = self.opb.descriptor(sb + chunk * self.chunk_bytes if chunk else sb)
        ptx.inst("wgmma.fence.sync.aligned")
        for ks in range(self.p.bk // self.mma_k):
            ptx.inst(self.mma, list(dst), da if ks == 0 else da + ks * self.opa.k_step,
                     db if ks == 0 else db + ks * self.opb.k_step, 0 if ks == 0 else 1, 1, 1,
                     *self.trans)
        ptx.inst("wgmma.commit_group.sync.aligned")


__all__ = ["RowScales", "BlockScales", "ScaleBRing", "BlockLoop", "BlockOps", "chunk_cols", "promote",
           "scale_a_bytes", "copy_scale_a"]
