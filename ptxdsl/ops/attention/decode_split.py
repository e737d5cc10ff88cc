"""The split-KV pass of the decode forward (flash-decoding): one CTA per (tile, split), a
tile being the query heads of one K/V head (a GQA group of ``G`` heads) for ``64 / G``
query positions of one batch, packed as the 64 rows of one wgmma ``m64`` tile, so every
K/V byte of a split is read once for the whole group.

::

    warpgroup 0 (one thread)                       warpgroup 1 (consumer)
    TMA Q: box (1, 64/G, G, 64) per panel ─▶ qfull  wait qfull; per K/V block j of the split:
    per block j of the split:                        wait kfull[s]; S(j) = Q·Kᵀ (wgmma, smem)
      wait kempty[s]; TMA K (block_n x D) ─▶ kfull   O += P(j-1)·V(j-1) (P from registers)
      wait vempty[s]; TMA V (block_n x D) ─▶ vfull   wait_group 1: arrive kempty; masks (the
                                                      boundary blocks only); online softmax
                                                      (warps holding query rows only)
                                                    wait_group 0: arrive vempty; O *= alpha
                                                    epilogue: O / l (f32) and the split's LSE
                                                      into the partials (NS, B, H, SQ, ·)

The partials are merged by :mod:`.decode_combine` (built with ``cluster``: the tile's
splits are one cluster and merge through distributed shared memory, with no partials:
:mod:`.decode_cluster`). A split with no key of the tile (past
the mask's range) writes 0 and an LSE of -inf. The shared-memory tiles are the forward's
(64-column panels of 128-byte swizzled rows, see :mod:`.fwd`); the box of Q writes its
64 / G positions x G heads as 64 consecutive rows (rows past SQ read as zeros).
"""
from __future__ import annotations

import itertools

from ... import Tile, kernel
from ...core.tensormap import TMA
from ...core.types import PtxType, b32, f32, s32, u8, u32
from ...dsl import ptx, reg, smem
from .._common.launch_order import after_previous_kernel, pdl_for
from .._common.ring import Ring, wait
from .config import Mask
from . import decode_cluster
from .decode_combine import last_merges
from .steps import mask_keys, mma_pv, mma_qk, release as release_stage
from .softmax import (LOG2E, NEG_INF, online_softmax, p_registers, pack_p,
                      quad_reduce, rescale, row_inverse, row_lse)

ROWS = 64            # rows of the packed query tile: one wgmma m64
PANEL = 64           # 16-bit elements per 128-byte swizzle row
ROW = 128            # bytes per swizzled panel row
THREADS = 256        # a producer warpgroup (one thread works) and a consumer warpgroup


def smem_bytes(block_n: int, stages: int, d: int, es: int = 2) -> int:
    """Q (64 rows) + ``stages`` x (K + V blocks) + the mbarriers (1 + 4 per stage)."""
    return ROWS * d * es + stages * 2 * block_n * d * es + 8 * (1 + 4 * stages)


def _s32(x):
    r = reg.scalar(s32)
    ptx.inst.cvt.s32.u32(r, x)
    return r


def specs(dtype: PtxType, d: int, group: int, block_n: int, fused: bool = False,
          cluster: int = 0):
    """q (B, SQ, H, D), k and v (B, SK, HK, D) through TMA; the partials: o (NS, B, H, SQ, D)
    and lse (NS, B, H, SQ), f32; ``fused``: then out (B, SQ, H, D), lse (B, H, SQ) and the
    tiles' tickets (TILES words, zero before the launch and after it); ``cluster``: out
    and lse only (the splits merge in the cluster)."""
    q = Tile("B", "SQ", "H", d, dtype, tma=TMA(box=(1, ROWS // group, group, PANEL),
                                               swizzle=ROW))
    kv = [Tile("B", "SK", "HK", d, dtype, tma=TMA(box=(1, block_n, 1, PANEL), swizzle=ROW))
          for _ in range(2)]
    if cluster:
        return (q, *kv), (Tile("B", "SQ", "H", d, dtype), Tile("B", "H", "SQ", f32))
    outs = (Tile("NS", "B", "H", "SQ", d, f32), Tile("NS", "B", "H", "SQ", f32))
    if fused:
        outs += (Tile("B", "SQ", "H", d, dtype), Tile("B", "H", "SQ", f32), Tile("TILES", b32))
    return (q, *kv), outs


def build_split(block_n: int, stages: int, dtype: PtxType, d: int, group: int,
                mask: Mask = Mask(), *, scale: float, softcap: float = 0.0,
                arch: str = "sm_90a", fused: bool = False, l2_ahead: int = 0,
                late_go: bool = False, tmap_prefetch: bool = False, cluster: int = 0,
                max_rows: int = ROWS):
    """The split pass for one (block_n, stages, dtype, head dim, GQA group size ``group``
    (a divisor of 64), mask, scale, softcap); the grid is NS x tiles CTAs, NS read from
    the partials' leading dim. ``fused``: the last split of each tile to finish merges
    the tile's partials into out and the LSE (:func:`.decode_combine.last_merges`), so
    the combine needs no launch of its own. ``l2_ahead``: the split's first blocks of K
    and V whose L2 prefetch is issued before the wait for the previous kernel (L2 is
    where every SM's writes land, so a line fetched early is still current; the TMA
    loads after the wait then find it there). ``late_go``: the producer gives the next
    kernel its go-ahead after issuing its last K/V load (else every CTA gives it once
    past the wait: the next launch's CTAs then take the SMs left idle at once, and
    their L2 prefetches run a whole launch early). ``tmap_prefetch``: the three tensor
    maps are prefetched into the TMA unit before the wait (the first loads after it
    then skip the descriptor fetch). ``cluster``: the tile's ``cluster`` splits (NS, no
    partials) run as one cluster and merge through distributed shared memory
    (:mod:`.decode_cluster`), for tiles of at most ``max_rows`` query rows."""
    if d % PANEL or not PANEL <= d <= 128:
        raise ValueError(f"head dim {d}: the decode kernel takes 64 or 128")
    if ROWS % group:
        raise ValueError(f"GQA group of {group} heads: the decode kernel packs a divisor of "
                         f"{ROWS} heads into its rows")
    es, BN, S, P = dtype.bytes, block_n, stages, d // PANEL
    R = ROWS // group                       # query positions per tile
    q_bytes, kv_bytes = ROWS * d * es, BN * d * es
    o_k, o_v = q_bytes, q_bytes + S * kv_bytes
    o_bar = o_v + S * kv_bytes
    total = smem_bytes(BN, S, d, es)
    cm = decode_cluster.ClusterMerge(cluster, d, max_rows) if cluster else None
    if cm is not None:                      # its mbarrier, then its receive area
        o_rbar = total
        o_recv = -(-(o_rbar + 8) // 16) * 16
        total = o_recv + cm.nbytes
    scale_log2 = float(softcap if softcap else scale) * LOG2E
    ins, outs = specs(dtype, d, group, BN, fused, cluster)
    s_mma = f"wgmma.mma_async.sync.aligned.m64n{BN}k16.f32.{dtype.name}.{dtype.name}"
    o_mma = f"wgmma.mma_async.sync.aligned.m64n{d}k16.f32.{dtype.name}.{dtype.name}"
    pdl = pdl_for(arch)
    name = (f"attention_decode_{dtype.name}_d{d}_g{group}_n{BN}_s{S}_{mask.tag}"
            f"{'_cap' if softcap else ''}{'_fused' if fused else ''}"
            f"{f'_l2a{l2_ahead}' if l2_ahead else ''}{'_lg' if late_go else ''}"
            f"{'_tp' if tmap_prefetch else ''}{f'_cl{cluster}r{max_rows}' if cluster else ''}")
    names = ("q", "k", "v", "opart", "lpart") + (("out", "lse", "tickets") if fused else ())
    if cluster:
        names = ("q", "k", "v", "out", "lse")

    def grid(B, SQ, HK, NS=cluster):
        return (NS * B * HK * ((SQ + R - 1) // R), 1, 1)

    def body(q, k, v, op, lp, merged):
        labels = itertools.count()
        tq, tk, tv = q.tma_desc(), k.tma_desc(), v.tma_desc()
        sq, nh, sk, nhk = ptx.dim("SQ"), ptx.dim("H"), ptx.dim("SK"), ptx.dim("HK")
        nb, ns = ptx.dim("B"), cluster or ptx.dim("NS")
        tid = reg.scalar(u32); ptx.inst.mov.u32(tid, ptx.special.tid.x())
        wg, lane = tid >> 7, tid & 127
        cta = reg.scalar(u32); ptx.inst.mov.u32(cta, ptx.special.ctaid.x())
        # CTA -> (split, tile); tile -> (query chunk, K/V head, batch)
        split, t = cta % ns, cta // ns
        nchunk = (sq + (R - 1)) // R
        chunk, rest = t % nchunk, t // nchunk
        hkv, batch = rest % nhk, rest // nhk
        sq0 = chunk * R
        base = smem.alloc(u8, (total,), align=1024, dynamic=True).base
        qfull = base + o_bar
        kfull, vfull = qfull + 8, qfull + 8 + 8 * S
        kempty, vempty = vfull + 8 * S, vfull + 16 * S
        with ptx.if_(tid == 0):
            ptx.inst("mbarrier.init.shared::cta.b64", ptx.addr(qfull), 1)
            for s in range(S):
                for bars in (kfull, vfull, kempty, vempty):
                    ptx.inst("mbarrier.init.shared::cta.b64", ptx.addr(bars, 8 * s), 1)
            if cm is not None:
                ptx.inst("mbarrier.init.shared::cta.b64", ptx.addr(base + o_rbar), 1)
                decode_cluster.arm(cm, base + o_rbar, split,
                                   ptx.min(sq - sq0, R) * group)
            ptx.inst("fence.mbarrier_init.release.cluster")
        ptx.inst("bar.sync", 0)
        if cm is not None:          # waited for before the first push (decode_cluster)
            ptx.cluster.arrive(relaxed=True, aligned=True)
        if tmap_prefetch:
            with ptx.if_(tid == 0):
                for tmap in (tq, tk, tv):
                    ptx.inst("prefetch.tensormap", ptx.addr(tmap))
        go = 0 if late_go else THREADS          # late_go: the producer gives it below
        if not l2_ahead:
            after_previous_kernel(pdl, go)

        # The tile's key blocks (keys aligned bottom-right, off = SK - SQ), then this
        # split's even share of them.
        off = _s32(sk) - _s32(sq)
        first_q = _s32(sq0)
        last_q = ptx.min(_s32(sq0 + (R - 1)), _s32(sq) - 1)
        nblk = _s32((sk + (BN - 1)) // BN)
        n_hi = nblk
        if mask.right >= 0:
            top = ptx.max(last_q + off + (mask.right + BN), reg.scalar(s32, init=0))
            n_hi = ptx.min(top // BN, nblk)
        n_lo = reg.scalar(s32, init=0)
        if mask.left >= 0:
            lo_key = ptx.max(first_q + off - mask.left, n_lo)
            ptx.inst.min.s32(n_lo, lo_key // BN, n_hi)
        nss = reg.scalar(s32, init=ns) if cluster else _s32(ns)
        per = (n_hi - n_lo + nss - 1) // nss
        lo = n_lo + _s32(split) * per
        hi = ptx.min(lo + per, n_hi)
        if l2_ahead:
            with ptx.if_(tid == 0):
                for i in range(l2_ahead):
                    with ptx.if_(lo + i < hi):
                        for tmap in (tk, tv):
                            for p in range(P):
                                ptx.inst("cp.async.bulk.prefetch.tensor.4d.L2.global",
                                         ptx.addr(tmap, coords=[p * PANEL, hkv, (lo + i) * BN,
                                                                batch]))
            after_previous_kernel(pdl, go)

        with ptx.if_(wg == 0):
            with ptx.if_(tid == 0):
                ptx.inst("mbarrier.arrive.expect_tx.shared::cta.b64", ptx.sink,
                         ptx.addr(qfull), q_bytes)
                for p in range(P):
                    ptx.tma.load(base + p * ROWS * ROW, tq, [p * PANEL, hkv * group, sq0, batch],
                                 qfull)
                ring = Ring(S)
                for j in ptx.range_(lo, hi):
                    for full, free, tmap, dst in ((kfull, kempty, tk, o_k),
                                                  (vfull, vempty, tv, o_v)):
                        wait(labels, free + ring.slot * 8, ring.phase ^ 1)
                        fb = full + ring.slot * 8
                        ptx.inst("mbarrier.arrive.expect_tx.shared::cta.b64", ptx.sink,
                                 ptx.addr(fb), kv_bytes)
                        at = base + dst + ring.slot * kv_bytes
                        for p in range(P):
                            ptx.tma.load(at + p * BN * ROW if p else at, tmap,
                                         [p * PANEL, hkv, j * BN, batch], fb)
                    ring.advance()
                if late_go and pdl:
                    ptx.inst.griddepcontrol.launch_dependents()
            if cm is not None:      # the start's phase, for a clean exit
                ptx.cluster.wait()
        with ptx.else_():
            warp, lw = lane >> 5, lane & 31
            fcol = (lw & 3) * 2
            trow = warp * 16 + (lw >> 2)              # tile rows trow and trow + 8
            trows = [trow, trow + 8]
            # Only the warps holding a query row do the softmax: rows past SQ (zeros from
            # the box) keep P = 0, so their share of P·V adds nothing.
            used = ptx.min(sq - sq0, R) * group
            active = warp * 16 < used
            qrows = [_s32(sq0 + r // group) for r in trows]
            s_acc = ptx.wgmma.accumulator(BN)
            o_acc = ptx.wgmma.accumulator(d, init=0.0)
            p_regs = p_registers(BN)
            for regs in p_regs:
                for r in regs:
                    ptx.inst.mov.b32(r, 0)
            m = [reg.scalar(f32, init=NEG_INF) for _ in range(2)]
            l = [reg.scalar(f32, init=0.0) for _ in range(2)]
            alphas = [reg.scalar(f32, init=1.0) for _ in range(2)]
            ring = Ring(S)
            vslot, vphase = reg.scalar(u32), reg.scalar(u32)
            sk_s = _s32(sk)
            q_desc = ptx.wgmma.descriptor(base, leading=16, stride=1024, swizzle=128)

            def s_gemm():
                wait(labels, kfull + ring.slot * 8, ring.phase)
                mma_qk(s_mma, s_acc, q_desc, base + o_k + ring.slot * kv_bytes, d, ROWS, BN)

            def pv_gemm():
                wait(labels, vfull + vslot * 8, vphase)
                mma_pv(o_mma, o_acc, p_regs, base + o_v + vslot * kv_bytes, BN)

            def release(bars, slot):
                release_stage(lane, bars, slot)

            def scores(j):
                """S of block j -> P in place (active warps only); sets the rows' alpha."""
                with ptx.if_(active):
                    if softcap:
                        for x in s_acc:
                            ptx.inst.mul.f32(x, x, float(scale) / float(softcap))
                            ptx.inst("tanh.approx.f32", x, x)
                    _mask(s_acc, j, BN, qrows, fcol, off, sk_s, mask, first_q, last_q)
                    for a, new in zip(alphas, online_softmax(list(s_acc), m, l, scale_log2)):
                        ptx.inst.mov.f32(a, new)

            def next_stage():
                ptx.inst.mov.u32(vslot, ring.slot)
                ptx.inst.mov.u32(vphase, ring.phase)
                ring.advance()

            wait(labels, qfull, 0)
            with ptx.if_(lo < hi):
                s_gemm()
                ptx.inst("wgmma.wait_group.sync.aligned", 0)
                release(kempty, ring.slot)
                scores(lo)
                with ptx.if_(active):
                    pack_p(list(s_acc), p_regs, dtype.name)
                next_stage()
                for j in ptx.range_(lo + 1, hi):
                    s_gemm()
                    pv_gemm()
                    ptx.inst("wgmma.wait_group.sync.aligned", 1)
                    release(kempty, ring.slot)
                    scores(j)
                    ptx.inst("wgmma.wait_group.sync.aligned", 0)
                    release(vempty, vslot)
                    with ptx.if_(active):
                        rescale(list(o_acc), alphas)
                        pack_p(list(s_acc), p_regs, dtype.name)
                    next_stage()
                pv_gemm()
                ptx.inst("wgmma.wait_group.sync.aligned", 0)
                release(vempty, vslot)
            if cm is not None:
                pout, plse = ptx.global_ptrs(*merged)
                decode_cluster.push(cm, o_acc, m, l, trows, used, fcol, lw, split,
                                    base + o_recv, base + o_rbar)
                wait(labels, base + o_rbar, 0)
                decode_cluster.merge(cm, dtype, lane, split, base + o_recv,
                                     (batch, hkv, group, sq0, used), (nh, sq), pout, plse)
                return
            po, pl = ptx.global_ptrs(op, lp)
            _epilogue(o_acc, m, l, trows, used, fcol, lw, po, pl,
                      ((split * nb + batch) * nh + hkv * group) * sq + sq0, sq, group, d)
            if fused:
                pout, plse, ptk = ptx.global_ptrs(*merged)
                last_merges(dtype, d, group, ns, lane, ptk + t * 4, po, pl, pout, plse,
                            (batch, hkv, sq0, used), (nb, nh, sq))

    launch = kernel(in_specs=ins, out_specs=outs, arg_names=names, grid=grid,
                    block=(THREADS, 1, 1), arch=arch, name=name, min_ctas_per_sm=1, pdl=pdl,
                    **({"cluster": (cluster, 1, 1)} if cluster else {}))
    if cluster:
        def attention_decode_cluster(q, k, v, o, lse):
            body(q, k, v, None, None, (o, lse))
        return launch(attention_decode_cluster)
    if fused:
        def attention_decode_fused(q, k, v, op, lp, o, lse, tk):
            body(q, k, v, op, lp, (o, lse, tk))
        return launch(attention_decode_fused)

    def attention_decode(q, k, v, op, lp):
        body(q, k, v, op, lp, ())
    return launch(attention_decode)


def _mask(s_acc, j, BN, qrows, fcol, off, sk, mask: Mask, first_q, last_q) -> None:
    """Mask block ``j`` where it crosses a boundary for some row of the tile: past the last
    key, past ``row + off + right`` or before ``row + off - left``."""
    key0 = j * BN
    end = key0 + BN
    need = end > sk
    if mask.right >= 0:
        need = need | (end - 1 > first_q + off + mask.right)
    if mask.left >= 0:
        need = need | (key0 < last_q + off - mask.left)
    with ptx.if_(need):
        mask_keys(s_acc, key0, fcol, qrows, off, sk, mask)


def _epilogue(o_acc, m, l, trows, used, fcol, lw, po, pl, row0, sq, group, d) -> None:
    """O / l (f32 pairs, ``st.global.v2.f32``) and the LSE ``(m + lg2 l) ln 2`` of each row
    of the tile that holds a query row. Tile row ``r`` is position ``r / G``, head ``r % G``
    of the tile: partial row ``row0 + (r % G) * SQ + r / G``; a row with no key gives 0
    and -inf."""
    for r in range(2):
        quad_reduce(l[r], "add")
        inv, some = row_inverse(l[r])
        with ptx.if_(trows[r] < used):
            row = row0 + (trows[r] % group) * sq + trows[r] // group
            ptr = po + (row * d + fcol) * 4
            elems = list(o_acc)
            for g in range(0, len(elems), 4):    # g, g + 1: row trow; g + 2, g + 3: trow + 8
                i = g + 2 * r
                lo, hi = elems[i], elems[i + 1]
                ptx.inst.mul.f32(lo, lo, inv)
                ptx.inst.mul.f32(hi, hi, inv)
                ptx.inst("st.global.v2.f32", ptx.addr(ptr, 4 * 8 * (i // 4)), [lo, hi])
            with ptx.if_((lw & 3) == 0):
                val = row_lse(l[r], m[r], some)
                ptx.inst("st.global.f32", ptx.addr(pl + row * 4), val)


__all__ = ["build_split", "specs", "smem_bytes", "ROWS", "THREADS"]
