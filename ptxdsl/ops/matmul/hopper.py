"""The Hopper GEMM: persistent, warp-specialized, wgmma fed by TMA through an mbarrier ring.

``C = act(A @ B + bias)``, bf16 or f16, f32 accumulation, bf16 / f16 / f32 output; each
operand read in place in its own major (:mod:`.operands`): A stored ``(M, K)`` row-major
(K-major) or as ``At`` ``(K, M)`` (MN-major), B given as ``Bt`` ``(N, K)`` row-major
(K-major, ``x @ W.T`` of a linear layer) or stored ``(K, N)`` (MN-major). The pictures
below draw the K-major case. M, N, K are run-time parameters; edges are TMA's: loads
past the tensor fill zeros (ragged K adds nothing), stores past it are clipped.

One CTA = 384 threads = three warpgroups, one 128 x 256 output tile at a time (or
128 x 128, m64n128 consumers and a six-stage ring, where :func:`.plan.choose` finds that
twice the tiles keep the grid busier; 128 x 64 with m64n64 consumers for one tile row,
where N / 64 CTAs stream B from more SMs; any width that is a multiple of 16 builds, such
as 128 x 224, whose last 64-column panel of C overlaps the one before it,
:func:`.store.panel_steps`)::

                     full[s] (tx bytes)                     empty[s] (4 arrivals)
    warpgroup 0  ──TMA A 128x64, B 128x64 (x2, multicast)──▶  ring stage s  ──▶ wgmma
    (producer,       waits empty[s], arrive.expect_tx         (A 16 KiB +       warpgroups 1, 2
     40 regs)        full[s] 48 KiB                            B 32 KiB)         (consumers, 232 regs)
                                                                                each m64n256k16 x 4
                                                                                per stage, then
                                                                                arrive empty[s] on
                                                                                both CTAs of the
                                                                                cluster

    epilogue (each consumer, its 64 x 256 rows): acc (+bias, act) → cvt → st.shared into
    a 128-byte-swizzled staging panel → fence.proxy.async → bar.sync → TMA store

Float8 scales beyond one per tensor (row-wise in the epilogue, block-wise promoted per
k-block) are :mod:`.promote`'s; ``grouped=True`` makes the grouped GEMM of
:mod:`.grouped` (tiles over ragged groups, :mod:`.groups`; rows stored by ``st.global``).

Pieces and the instructions they record:

* **Roles.** ``setmaxnreg.dec.sync.aligned.u32 40`` in the producer warpgroup,
  ``setmaxnreg.inc.sync.aligned.u32 232`` in the consumers (128*40 + 256*232 = 64512, the
  384 x 168 the CTA launches with); the kernel carries ``.maxntid 384`` and
  ``.minnctapersm 1`` (``min_ctas_per_sm=1``), without which ptxas ignores setmaxnreg.
  Each consumer keeps a 64 x 256 f32 accumulator: 128 registers per thread.
* **Ring.** ``stages`` slots in dynamic shared memory (1024-byte aligned, the 128-byte
  swizzle's period), each A 128 x 64 and B 256 x 64 elements, written by TMA with the
  128-byte swizzle (one 64-element K row is one 128-byte swizzle row). Two mbarriers per
  slot: ``full`` (count 1: the producer's ``mbarrier.arrive.expect_tx`` of the slot's
  bytes; TMA completes the bytes) and ``empty`` (count consumers x cluster). Slot and
  parity advance together across tiles (:class:`_Ring`); waits are
  ``mbarrier.try_wait.parity`` loops. The producer's first pass waits on parity 1 of a
  fresh barrier, which is already complete, so nobody pre-arrives.
* **Clusters of 2 along M** (``.reqnctapercluster 2, 1, 1``): both CTAs of a cluster
  compute tiles in the same tile column, so they need the same B tile: each CTA loads
  half of it (128 rows) with ``.multicast::cluster`` (mask 0b11) into both CTAs' slot,
  completing bytes on both CTAs' ``full`` barriers. A slot may be refilled only when the
  consumers of *both* CTAs released it: each consumer warpgroup arrives on the ``empty``
  barrier of every CTA of the cluster (``mapa`` + ``mbarrier.arrive.shared::cluster``,
  the default CTA-scope release: the consumers wrote nothing the producer reads, and a
  ``.release.cluster`` arrive costs a ``MEMBAR.ALL.GPU`` per k-block in SASS; with it
  the kernel ran 520 TFLOP/s at 8192^3 on an H100, without it 771).
  The kernel ends with ``barrier.cluster.arrive/wait`` so no CTA exits while its partner
  may still write into it. Clusters along N (``Plan.cluster_n``, one tile row) are the
  mirror: the CTAs compute neighbouring tiles of a tile row and share A the same way.
* **MMA.** Per stage and consumer: ``wgmma.fence``, four
  ``wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16`` whose descriptors step 32
  bytes along K inside the swizzle row (:mod:`.operands`; an MN-major operand steps 16 rows
  and sets wgmma's transpose bit), ``wgmma.commit_group``, then
  ``wgmma.wait_group 1``: the previous stage's group has retired, and that stage is
  released (the ``empty`` arrivals) while this one runs. The first k-block of a tile is peeled and
  passes scale-d = 0 (``D = A*B``), so the accumulator needs no zeroing.
* **Scheduler.** Persistent: at most one CTA per SM, in whole clusters, and no more
  clusters than the tiles' rounds need (:func:`.schedule.persistent_grid`); cluster ``c``
  takes cluster tiles ``c, c + G/2, ...`` in grouped order (:mod:`.schedule`), computed
  from the tile index with a few integer instructions.
* **Epilogue.** Each consumer stores its 64 x 256 result in two halves of 128 columns
  through a 64 x 128 staging buffer of 128-byte-swizzled panels (64 bf16 columns each;
  the swizzle spreads a warp's 8 rows over 8 bank groups): ``st.shared.b32`` of packed
  pairs (``cvt.rn.bf16x2.f32``), ``fence.proxy.async.shared::cta``, ``bar.sync id, 128``
  (a named barrier per consumer), then one thread issues
  ``cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group`` per panel and
  ``cp.async.bulk.commit_group``; before the buffer is written again that thread waits
  ``cp.async.bulk.wait_group.read 0`` and the warpgroup meets at the barrier.
"""
from __future__ import annotations

import itertools

from ... import kernel
from ...dsl import ptx, reg, smem
from ...core.types import PtxType, f32, u8, u16, u32

from .._common.launch_order import after_previous_kernel, pdl_for
from .._common.ring import Ring, wait
from .._common.warpgroup import consumer_index
from .operands import SW128_K_MAJOR, operands, prefetch_run, zero_a_rows
from .config import Plan
from .build_checks import check_build
from .schedule import tile_coords
from .promote import (BlockLoop, BlockOps, BlockScales, RowScales, ScaleBRing, chunk_cols,
                      copy_scale_a, scale_a_bytes)
from .fp8 import SCALE_SUFFIX, mode_of
from .splitk import PartialExchange, init_barriers, k_range
from .groups import GroupCursor, group_tiles
from .overlap import overlapped_tiles
from .pingpong import Turns, skip_stages
from .store import store_rows, store_tile
from .layout import SB_SLOT, Layout, grid_for, mma_instruction, specs, stage_descriptor
from . import streamk

PRODUCER_REGS = 40
CONSUMER_REGS = 232


def build_hopper(p: Plan, dtype: PtxType, out_dtype: PtxType, *, bias: PtxType | None = None,
                 activation: str | None = None, sms: int = 132, arch: str = "sm_90a",
                 a_major: str = "K", b_major: str = "K", b_dtype: PtxType | None = None,
                 scaled=False, grouped: bool = False):
    """The kernel for one (plan, dtypes, operand majors, epilogue); M, N, K are run-time
    parameters. ``a_major`` / ``b_major``: ``"K"`` or ``"MN"`` (:mod:`.operands`: the
    arguments are then A (M, K) or At (K, M), and Bt (N, K) or B (K, N)).

    ``dtype`` is A's element type and ``b_dtype`` B's (default: A's): bf16 / f16, or the
    8-bit floats e4m3 / e5m2 in any mix. 8-bit operands are K-major only (wgmma has no
    transpose for them) and take 128 elements of K per stage. ``scaled`` adds the f32
    arguments ``scale_a`` and ``scale_b``: True or ``"tensor"`` (one value each: the
    epilogue multiplies the accumulator by their product before the bias and the
    activation), ``"row"`` or ``"block"`` (:mod:`.promote`; block-wise needs 8-bit
    operands and a tile of 64 or 128 columns).

    ``grouped``: a grouped GEMM (:mod:`.grouped`): A's M rows cut into groups by the
    int32 argument ``offs`` (G,), B the G matrices stacked (``Bt`` (G*N, K) or ``B``
    (G*K, N), K a multiple of 64 then), C (M, N); tiles from :mod:`.groups`, each
    group's rows stored by :func:`.store.store_rows`; row-wise scales are ``scale_a``
    (M,) and ``scale_b`` (G, N). Clusters along N only (``Plan.cluster_n``: the CTAs of
    a cluster take neighbouring tiles of one tile row, so one group's rows of A, shared
    by multicast); ``Plan.tail_skip``: a consumer whose rows all lie past the group's
    end skips the tile's wgmmas. No clusters along M, split-K, bias or block-wise
    scales."""
    b_dtype = b_dtype or dtype
    mode = mode_of(scaled)
    check_build(p, dtype, b_dtype, out_dtype, mode, grouped, bias, a_major, b_major)
    L = Layout(p, dtype, out_dtype)
    ins, outs, names = specs(dtype, out_dtype, bias, p, a_major, b_major, b_dtype, scaled,
                             grouped)
    opa, opb = operands(p, dtype, a_major, b_major, b_dtype)
    # block-wise 256-column tiles: m64n128 halves or m64n64 chunks (.promote.BlockLoop)
    mma, mma_k = mma_instruction(chunk_cols(p) if mode == "block" else p.bn, dtype, b_dtype)
    # Transpose immediates exist for 16-bit operands only.
    trans = (opa.transpose, opb.transpose) if dtype.bytes == 2 else ()
    S, CL, CN, SK = p.stages, p.cluster, p.cluster_n, p.split
    CLS, MC = p.cluster_ctas, p.multicast
    # Bytes TMA lands per stage: all of B, and A's rows (every CTA of a cluster along N
    # sending its share; with Plan.a_rows only those rows).
    tx_bytes = opa.load_rows * CN * p.bk * dtype.bytes + L.b_stage
    share_b = L.b_stage // CL                  # the part of B each CTA of a cluster loads
    share_a = L.a_stage // CN                  # ... of A, in a cluster along N
    ty = dtype.name if b_dtype == dtype else f"{dtype.name}_{b_dtype.name}"
    ob = out_dtype.bytes
    name = (f"matmul_hopper_{'grouped_' if grouped else ''}{ty}_{out_dtype.name}_n{p.bn}"
            f"_s{S}_c{CL}"
            f"{f'_cn{CN}' if CN > 1 else ''}"
            f"{f'_k{SK}' if SK > 1 else ''}{p.options_tag}{'_ts' if p.tail_skip else ''}"
            f"{'_tmas' if p.tma_store else ''}{f'_eo{p.epi_overlap}' if p.epi_overlap else ''}"
            f"{f'_w{p.m_waves}' if p.m_waves > 1 else ''}{'_kp' if p.kb_pairs else ''}"
            f"{f'_r{p.kb_roll}' if p.kb_roll else ''}{'_ss' if p.smem_scales else ''}"
            f"{'_amn' if a_major == 'MN' else ''}{'_bmn' if b_major == 'MN' else ''}"
            f"{'_bias' if bias else ''}{SCALE_SUFFIX[mode]}"
            f"{'_' + activation if activation else ''}")
    opts = dict(cluster=(CLS, 1, 1), raw_directives=[("explicitcluster", ()),
                                                    ("reqnctapercluster", (CLS, 1, 1))]) \
        if CLS > 1 else {}

    pdl = pdl_for(arch)

    @kernel(in_specs=ins, out_specs=outs, arg_names=names, grid=grid_for(p, sms, grouped),
            block=(p.threads, 1, 1), arch=arch, name=name, min_ctas_per_sm=1, pdl=pdl,
            resident=sms if p.stream_k else None, **opts)
    def matmul_hopper(*args):
        A, B, *rest, C = args
        if p.stream_k:      # the workspace's flags and partials, after the scales
            pflags, pparts = ptx.global_ptrs(*rest[-2:])
            rest = rest[:-2]
        if grouped:
            (poffs,) = ptx.global_ptrs(rest.pop(0))
            (pc,) = ptx.global_ptrs(C)
        if bias is not None:
            (pbias,) = ptx.global_ptrs(rest.pop(0))
        if mode:
            psa, psb = ptx.global_ptrs(*rest)
        labels = itertools.count()
        tma_a, tma_b = A.tma_desc(), B.tma_desc()
        tma_c = C.tma_desc() if not grouped or p.tma_store else None
        m, n, k = ptx.dim("M"), ptx.dim("N"), ptx.dim("K")
        tid = reg.scalar(u32); ptx.inst.mov.u32(tid, ptx.special.tid.x())
        wg = tid >> 7
        lane = tid & 127
        base = smem.alloc(u8, (L.total,), align=1024, dynamic=True).base
        full0, empty0 = base + L.full, base + L.empty
        if p.a_rows:
            zero_a_rows(base + L.a, p, L.a_stage, tid)

        with ptx.if_(tid == 0):
            for s in range(S):
                ptx.inst("mbarrier.init.shared::cta.b64", ptx.addr(full0, 8 * s), 1)
                ptx.inst("mbarrier.init.shared::cta.b64", ptx.addr(empty0, 8 * s),
                         p.stage_readers * MC * (4 if p.smem_scales else 1))
            if SK > 1:
                init_barriers(base + L.xfull, base + L.xfree, p.consumers, SK)
            if p.pingpong:
                Turns.init(base + L.turn)
            ptx.inst("fence.mbarrier_init.release.cluster")
        if CLS > 1:
            ptx.inst("barrier.cluster.arrive.aligned")
            ptx.inst("barrier.cluster.wait.aligned")
            rank = reg.scalar(u32); ptx.inst.mov.u32(rank, ptx.special.cluster_ctarank())
            cid = reg.scalar(u32); ptx.inst.mov.u32(cid, ptx.special.clusterid.x())
            ncl = reg.scalar(u32); ptx.inst.mov.u32(ncl, ptx.special.nclusterid.x())
        else:
            ptx.inst("bar.sync", 0)
            rank = 0
            cid = reg.scalar(u32); ptx.inst.mov.u32(cid, ptx.special.ctaid.x())
            ncl = reg.scalar(u32); ptx.inst.mov.u32(ncl, ptx.special.nctaid.x())
        # The set-up above (barriers, the A rows' zeros) overlaps the previous kernel. A
        # persistent grid, but its shared memory leaves no room for another CTA of this
        # size on an SM: the next kernel's CTAs are placed only as these exit, so the
        # go-ahead is given at once, as in a one-wave grid of one tile per CTA.
        after_previous_kernel(pdl, p.threads)
        tiles_m = (m + (p.bm * CL - 1)) // (p.bm * CL)      # cluster tile rows
        tiles_n = (n + (p.bn * CN - 1)) // (p.bn * CN)      # cluster tile columns
        nk = (k + (p.bk - 1)) // p.bk
        total = group_tiles(poffs, ptx.dim("G"), p.bm, tiles_n) if grouped else tiles_m * tiles_n
        kb_lo, kb_hi = k_range(nk, rank, SK)      # this CTA's k-blocks (all of them unsplit)

        def tile_origin(t):
            row, col = tile_coords(t, tiles_m, tiles_n, p.group_m)
            tm = row * CL + rank if CL > 1 else row   # (split-K ranks share the tile)
            tn = col * CN + rank if CN > 1 else col
            return tm * p.bm, tn * p.bn

        def group_origin(cursor, t):
            """A grouped GEMM's tile ``t``: its first row and column, group, end row."""
            g, m0, end, tn = cursor.locate(t)
            return m0, (tn * CN + rank if CN > 1 else tn) * p.bn, g, end

        with ptx.if_(wg == 0):
            # ---------------------------------------------------- producer
            ptx.inst("setmaxnreg.dec.sync.aligned.u32", PRODUCER_REGS)
            with ptx.if_(lane == 0):
                ring = Ring(S)
                if grouped:
                    cursor = GroupCursor(poffs, p.bm, tiles_n, labels)
                def load_tile(t, k0=None, k1=None):
                    """Tile ``t``'s k-blocks (``[k0, k1)`` of a stream-K segment)."""
                    if grouped:     # group g's matrix of B: rows g*N on (K-major), or g*K
                        m0, n0, g, _ = group_origin(cursor, t)
                        bn0, bk0 = (g * n + n0, 0) if opb.major == "K" else (n0, g * k)
                    else:
                        m0, n0 = tile_origin(t)
                    nb = n0 + rank * (p.bn // CL) if CL > 1 else n0
                    sfa = scale_a_bytes(m, m0, p.bm) if p.smem_scales else 0
                    if p.sb_ring:   # the tile's scale_b into each stage (loaded a k-block ahead)
                        sbr = ScaleBRing(psb, ptx.dim("NB"), ptx.dim("KB"), n0,
                                         -(-p.bn // 128), k0 if k0 is not None else
                                         kb_lo if SK > 1 else 0)
                    for kb in (ptx.range_(k0, k1) if k0 is not None else ptx.range_(kb_lo, kb_hi)
                               if SK > 1 else ptx.range_(nk)):
                        kk = kb * p.bk
                        if p.b_prefetch:    # B's next run of k-blocks into L2 at once
                            end = k1 if k0 is not None else kb_hi if SK > 1 else nk
                            prefetch_run(opb, tma_b, kb, end, p, nb)
                        wait(labels, empty0 + ring.slot * 8, ring.phase ^ 1)
                        fb = full0 + ring.slot * 8
                        if p.sb_ring:   # before the arrive, which releases it to the consumers
                            sbr.store(base + L.sbr + ring.slot * SB_SLOT, kb)
                        ptx.inst("mbarrier.arrive.expect_tx.shared::cta.b64", ptx.sink,
                                 ptx.addr(fb), sfa + tx_bytes if p.smem_scales else tx_bytes)
                        if p.smem_scales:
                            copy_scale_a(psa, m, m0, kb, base + L.sfa + ring.slot * L.sfa_stage,
                                         fb, sfa)
                        sa = base + L.a + ring.slot * L.a_stage
                        if MC > 1:
                            mask16 = reg.scalar(u16, init=(1 << MC) - 1)
                        if CN > 1:          # this CTA's share of A, to every CTA
                            opa.load(tma_a, sa + rank * share_a, m0 + rank * (p.bm // CN),
                                     kk, fb, mask=mask16)
                        else:
                            opa.load(tma_a, sa, m0, kk, fb)
                        sb = base + L.b + ring.slot * L.b_stage
                        if CL > 1 and opb.k_parts > 1:   # this CTA's K-chunk of every atom
                            opb.load(tma_b, sb + rank * share_b, n0, kk + rank * opb.box_k, fb,
                                     mask=mask16)
                        elif CL > 1:
                            opb.load(tma_b, sb + rank * share_b, nb, kk, fb, mask=mask16)
                        elif grouped:
                            opb.load(tma_b, sb, bn0, kk + bk0 if opb.major != "K" else kk, fb)
                        else:
                            opb.load(tma_b, sb, n0, kk, fb)
                        ring.advance()
                if p.stream_k:
                    streamk.segments(cid, total * nk, nk, ncl, load_tile)
                else:
                    for t in ptx.range_(cid, total, ncl):
                        load_tile(t)
        with ptx.else_():
            # ---------------------------------------------------- consumers
            ptx.inst("setmaxnreg.inc.sync.aligned.u32", CONSUMER_REGS)
            cons = consumer_index(wg, p.uniform_cons)
            acc = reg.array(f32, p.bn // 2)
            scale = None
            if mode == "tensor":        # scale_a * scale_b, once per consumer thread
                sab = [reg.scalar(f32) for _ in range(2)]
                for r, ptr in zip(sab, (psa, psb)):
                    ptx.inst.ld.global_.nc.f32(r, ptx.addr(ptr))
                scale = sab[0] * sab[1]
            ring = Ring(S)
            a_off = 0 if p.pingpong else cons * (p.wg_m * p.bk * dtype.bytes)
            stage_c = base + L.a + a_off if p.epi_in_ring else base + L.c + cons * L.c_consumer
            # This thread's place in the m64nN accumulator fragment.
            warp, lw = lane >> 5, lane & 31
            frow = warp * 16 + (lw >> 2)              # rows frow and frow + 8
            fcol = (lw & 3) * 2                       # cols 8j + fcol, + 1
            bar_id = cons + 1
            if p.uniform_cons:
                da0, db0 = opa.descriptor(base + L.a + a_off), opb.descriptor(base + L.b)

            def mma_stage(first: bool, into=None):
                """Wait for the ring's stage, issue its K/16 wgmmas (into ``acc``, or the
                registers ``into``), commit; returns the stage's empty barrier."""
                wait(labels, full0 + ring.slot * 8, ring.phase)
                if p.uniform_cons:      # stage 0's plus the slot's (no masking)
                    da = stage_descriptor(da0, ring.slot, L.a_stage)
                    db = stage_descriptor(db0, ring.slot, L.b_stage)
                else:
                    sa = base + L.a + ring.slot * L.a_stage + a_off
                    sb = base + L.b + ring.slot * L.b_stage
                    da, db = opa.descriptor(sa), opb.descriptor(sb)
                ptx.inst("wgmma.fence.sync.aligned")
                for ks in range(p.bk // mma_k):         # 32-byte K steps inside the stage
                    ptx.inst(mma, list(into or acc), da if ks == 0 else da + ks * opa.k_step,
                             db if ks == 0 else db + opb.k_offset(ks),
                             0 if first and ks == 0 else 1, 1, 1, *trans)
                ptx.inst("wgmma.commit_group.sync.aligned")
                eb = empty0 + ring.slot * 8
                ring.advance()
                return eb

            def release(eb):
                """One thread per consumer (per warp with ``smem_scales``) arrives on the
                stage's empty barrier of every CTA of the cluster."""
                wl = lane & 31 if p.smem_scales else lane
                if p.smem_scales:
                    ptx.inst("bar.warp.sync", -1)
                if MC > 1:
                    with ptx.if_(wl < MC):
                        remote = reg.scalar(u32)
                        ptx.inst("mapa.shared::cluster.u32", remote, eb, wl)
                        ptx.inst("mbarrier.arrive.shared::cluster.b64",
                                 ptx.sink, ptx.addr(remote))
                else:
                    with ptx.if_(wl == 0):
                        ptx.inst("mbarrier.arrive.shared::cta.b64", ptx.sink, ptx.addr(eb))

            prev = reg.scalar(u32)                  # the empty barrier of the stage in flight

            def mainloop(nkr, issued=None):
                """The tile's ``nkr`` k-blocks. The first writes D = A*B (scale-d 0); each
                later one keeps one wgmma group in flight and releases the stage before it.
                ``issued()`` runs once the last stage's wgmmas are issued."""
                ptx.inst.mov.u32(prev, mma_stage(True))
                for kb in ptx.range_(1, nkr):
                    eb = mma_stage(False)
                    ptx.inst("wgmma.wait_group.sync.aligned", 1)
                    release(prev)
                    ptx.inst.mov.u32(prev, eb)
                if issued is not None:
                    issued()
                ptx.inst("wgmma.wait_group.sync.aligned", 0)
                release(prev)

            if mode == "block":
                waves = [acc] + [reg.array(f32, p.bn // 2) for _ in range(p.m_waves - 1)]
                blocks = BlockLoop(BlockOps(p, ring, labels, base, L, a_off, opa, opb, mma,
                                             mma_k, trans, full0, empty0, release, dtype),
                                   waves, BlockScales(psa, psb, m, ptx.dim("NB"),
                                                      2 * p.m_waves, -(-p.bn // 128),
                                                      p.smem_scales,
                                                      p.sb_ring),
                                   p.kb_pairs, p.kb_roll, chunk_cols(p))

            if SK > 1:
                owner = cons if SK >= p.consumers else cons % SK   # gathers and stores
                buf = base + L.partial + (0 if p.one_partial else cons * L.partial_consumer)
                xch = PartialExchange(SK, buf,
                                      base + L.xfull + cons * 8, base + L.xfree + cons * 8,
                                      lane, labels, owner)
                nkr = kb_hi - kb_lo
            pb = pbias if bias is not None else None

            def idle_stages(nkr):
                """Release each of ``nkr`` stages once it is full, computing nothing."""
                for kb in ptx.range_(nkr):
                    wait(labels, full0 + ring.slot * 8, ring.phase)
                    release(empty0 + ring.slot * 8)
                    ring.advance()

            def group_scales(row0, g):
                return RowScales(psa, psb + g * n * 4, row0 + frow, m) if mode == "row" \
                    else scale

            def grouped_tile(row0, n0, g, end):
                """A grouped GEMM's tile: group ``g``'s scales (loaded under the
                k-blocks), the k-blocks, then its epilogue."""
                sc = group_scales(row0, g)
                mainloop(nk)
                grouped_store(acc, row0, n0, g, end, sc)

            def grouped_store(acc, row0, n0, g, end, sc=None):
                """``acc`` with group ``g``'s scales, the rows before ``end`` stored."""
                if sc is None:
                    sc = group_scales(row0, g)
                if p.tma_store:     # all of this consumer's rows in the group: TMA
                    with ptx.if_(row0 + p.wg_m <= end):
                        store_tile(acc, p, L, out_dtype, ob, None, activation, stage_c, lane,
                                   frow, fcol, bar_id, row0, n0, n, tma_c, None, sc)
                    with ptx.else_():
                        store_rows(acc, p, out_dtype, activation, pc,
                                   ptx.dim("sc", kind="stride"), row0 + frow, end, n0, n,
                                   fcol, sc)
                else:
                    store_rows(acc, p, out_dtype, activation, pc, ptx.dim("sc", kind="stride"),
                               row0 + frow, end, n0, n, fcol, sc)

            def block_rows(row0):
                """The thread's accumulator rows: ``frow`` and ``frow + 8`` of each wave."""
                r = row0 + frow
                return [r if w == 0 and h == 0 else r + (128 * w + 8 * h)
                        for w in range(p.m_waves) for h in range(2)]

            def store_at(regs, row0, n0, *_):
                """``regs`` as C's rows from ``row0`` (scales read here), columns from ``n0``."""
                store_tile(regs, p, L, out_dtype, ob, bias, activation, stage_c, lane, frow, fcol,
                           bar_id, row0, n0, n, tma_c, pb, RowScales(psa, psb, row0 + frow, m)
                           if mode == "row" else scale)

            def sk_store(t):
                m0, n0 = tile_origin(t)
                store_at(acc, m0 + cons * p.wg_m, n0)

            def tiles():
                """Each of this CTA's tiles: its k-blocks, then its epilogue."""
                if p.stream_k:
                    fix = streamk.Fixup(p, pflags, pparts, cid, rank, cons, lane, bar_id,
                                        labels)
                    streamk.tiles(fix, cid, total, nk, ncl, mainloop, acc, sk_store)
                    return
                if grouped:
                    cursor = GroupCursor(poffs, p.bm, tiles_n, labels, p.uniform_cons)
                if p.pingpong:      # the other consumer's first tile (.pingpong)
                    skip_stages(ring, cons * nk)
                    turns = Turns(base + L.turn, cons, lane, labels)
                    turns.start()
                for t in (ptx.range_(cid + cons * ncl, total, 2 * ncl) if p.pingpong else
                          ptx.range_(cid, total, ncl)):
                    if grouped:
                        m0, n0, g, end = group_origin(cursor, t)
                        row0 = m0 + cons * p.wg_m
                        if p.tail_skip:     # this consumer's 64 rows past the group's end
                            with ptx.if_(row0 < end):
                                grouped_tile(row0, n0, g, end)
                            with ptx.else_():
                                idle_stages(nk)
                        else:
                            grouped_tile(row0, n0, g, end)
                        continue
                    m0, n0 = tile_origin(t)
                    row0 = m0 if p.pingpong else m0 + cons * p.wg_m
                    sc = RowScales(psa, psb, row0 + frow, m) if mode == "row" else scale
                    if SK == 1:
                        if mode == "block":
                            blocks.run(0, nk, block_rows(row0), n0, False)
                        elif p.pingpong:
                            turns.take()
                            mainloop(nk, turns.give)
                        else:
                            mainloop(nk)
                        store_tile(acc, p, L, out_dtype, ob, bias, activation, stage_c,
                                   lane, frow, fcol, bar_id, row0, n0, n, tma_c, pb, sc)
                        if p.m_waves > 1:        # the consumer's rows in the second half
                            store_tile(waves[1], p, L, out_dtype, ob, bias, activation,
                                       stage_c, lane, frow, fcol, bar_id, row0 + 128, n0, n,
                                       tma_c, pb, sc)
                        if p.pingpong:              # the other consumer's next tile
                            skip_stages(ring, nk)
                    else:
                        with ptx.if_(nkr > 0):
                            if mode == "block":
                                blocks.run(kb_lo, nkr, block_rows(row0), n0, True)
                            else:
                                mainloop(nkr)
                        with ptx.else_():           # more ranks than k-blocks: a zero share
                            for r in acc:
                                ptx.inst.mov.f32(r, 0.0)
                        xch.exchange(acc, rank, row0 + warp * 16 < m)
                        with ptx.if_(rank == owner):
                            store_tile(acc, p, L, out_dtype, ob, bias, activation, stage_c,
                                       lane, frow, fcol, bar_id, row0, n0, n, tma_c, pb, sc)

            if p.epi_overlap:       # a dense tile's (g, end) are unused: (0, m)
                cursor = GroupCursor(poffs, p.bm, tiles_n, labels, p.uniform_cons) \
                    if grouped else None

                def locate(t):
                    m0, n0, *ge = group_origin(cursor, t) if grouped else (*tile_origin(t), 0, m)
                    return m0 + cons * p.wg_m, n0, *ge
                overlapped_tiles(p.epi_overlap, ring, empty0, nk, cid, total, ncl, locate,
                                 mma_stage, release, idle_stages, grouped_store if grouped
                                 else store_at, acc, reg.array(f32, p.bn // 2), p.tail_skip)
            elif p.a_rows and p.a_rows <= p.wg_m:
                # Every row the second consumer owns lies past M (M <= a_rows <= 64): it
                # issues no wgmma, exchanges and stores nothing, and only releases each
                # stage once it is full, which halves the tensor-core work of a stage.
                with ptx.if_(cons == 0):
                    tiles()
                with ptx.else_():
                    for t in ptx.range_(cid, total, ncl):
                        idle_stages(nkr if SK > 1 else nk)
            else:
                tiles()
            with ptx.if_(lane == 0):
                ptx.inst("cp.async.bulk.wait_group", 0)
        if CLS > 1:
            ptx.inst("barrier.cluster.arrive")
            ptx.inst("barrier.cluster.wait")

    matmul_hopper.stream_k_plan = p if p.stream_k else None    # api: its workspace
    return matmul_hopper


__all__ = ["build_hopper", "Layout", "specs", "grid_for", "SW128_K_MAJOR"]
