"""The RMSNorm backward's dW sum: the per-CTA partial rows of dW (an f32 ``(G, N)``
buffer) added down their columns in a fixed order, so the same inputs give the same
bits on every run (no float atomics).

* :func:`late_arrivals` then :func:`sum_partials`: the last CTAs to arrive wait for the
  others, then share the sum, a column tile each, while the earlier ones exit;
* :func:`last_arrival` then :func:`sum_partials_by_warp`: grids of no more CTAs than a
  CTA has warps, where the last CTA to arrive sums alone and nobody waits (a plain
  launch);
* :func:`cluster_dw`: grids of at most :data:`MAX_DW_CLUSTER` CTAs (calls of a few rows)
  launched as one cluster, whose CTAs keep their partials in shared memory and sum them
  through distributed shared memory; a grid of one CTA stores its dW as it is;
* :func:`build_dw_reduce`: the sum as a launch of its own, for grids too large to sum
  in the same launch.

The workspace ``WS`` holds two u32: the arrival counter of :func:`last_arrival` (zero
before first use, left so by every launch) and the word of :func:`late_arrivals` (its
low 31 bits zero before first use, left so by every launch; its top bit flips at each
launch).
"""
from __future__ import annotations

from ... import Tile, kernel
from ...dsl import ptx, reg, smem
from ...core.types import PtxType, f32, u32, u64

from .._common.launch_order import after_previous_kernel, pdl_for
from .._common.rowio import load_chunk, narrow, store_chunk
from .fwd import WARP

# A late arrival's wait longer than this means the workspace was not zero before the launch
# (or CTAs were lost): trap, so the launch fails with an error instead of hanging.
BARRIER_TIMEOUT_NS = 20_000_000_000


def last_arrival(pws, tid, G: int):
    """Whether this CTA is the last of ``G`` to arrive (a predicate, the same for all its
    threads): thread 0 adds one to the arrival counter ``[pws]`` (acq_rel: the CTAs
    before it released their partial rows, this one acquires them) and the last
    arrival resets it to zero for the next launch; the answer goes round the CTA
    through shared memory, behind one ``bar.sync``."""
    flag = smem.alloc(u32, (1,))
    with ptx.if_(tid == 0):
        old = reg.scalar(u32)
        ptx.inst.atom.acq_rel.gpu.global_.add.u32(old, ptx.addr(pws), 1)
        is_last = reg.scalar(u32)
        ptx.inst.selp.u32(is_last, 1, 0, old == G - 1)
        flag[0] = is_last
        with ptx.if_(is_last != 0):
            ptx.inst.st.relaxed.gpu.global_.u32(ptx.addr(pws), 0)
    ptx.bar.sync(0)
    return flag[0] != 0


def late_arrivals(pws, tid, cta, G: int, K: int):
    """The last ``K`` of ``G`` CTAs to arrive wait for the others; the rest go on at once.
    Returns the CTA's slot, a ``.u32`` register (the same for all its threads): ``0 ..
    K-1`` for the last ``K`` arrivals, in order of arrival, once every CTA has arrived;
    ``K`` or more for the others, which need not wait. Call it after a ``bar.sync``
    that follows the CTA's writes to publish (``cta``: this CTA's index).

    One word, ``[pws+4]``, whose low 31 bits are zero between launches: thread 0 of each
    CTA adds 1 to it, except CTA 0's, which adds ``2^31 - (G - 1)``, so the ``G``
    additions together add exactly ``2^31``. Its top bit flips when the last CTA's
    addition lands, whichever that is, and the low bits are zero again for the next
    launch. The value an addition returns says how many CTAs came before (below ``G``
    while CTA 0 has not arrived; past ``2^31 - G`` once it has, counting it as one); a
    late arrival waits until the top bit differs from the one its addition returned
    (acq_rel: the addition releases the CTA's writes, and the RMWs' chain carries
    everyone's to the loads that see the flip).

    Only late arrivals wait, and each waits only for CTAs that arrive after it: the
    CTAs that did not arrive yet are running, or will find an SM when an early arrival
    exits. With at most ``K - 1`` CTAs waiting, no launch can fill the device with
    waiters while a CTA is still to run, as long as the device holds ``K`` of them at
    once (``@kernel(resident=K)``); so the launch need not be cooperative (slower per
    call: ``bench/results/rmsnorm_bwd_late_arrivals_h100.json``).

    Before: every CTA waited at a grid barrier whose last arrival reset a count and
    published a generation word (two more trips to L2 on the path from the last
    arrival to the others' departure: the generation's read before arriving, and the
    last CTA's store after its atomic came back), and the launch was cooperative.
    """
    slot = smem.alloc(u32, (1,))
    with ptx.if_(tid == 0):
        add = reg.scalar(u32)
        ptx.inst.selp.u32(add, FLIP - (G - 1), 1, cta == 0)
        old = reg.scalar(u32)
        ptx.inst.atom.acq_rel.gpu.global_.add.u32(old, ptx.addr(pws, 4), add)
        low = old & (FLIP - 1)
        before = reg.scalar(u32)  # CTAs that arrived before this one
        ptx.inst.selp.u32(before, low - (FLIP - G), low, low >= G)
        mine = reg.scalar(u32)
        ptx.inst.sub.u32(mine, before, G - K)  # wraps past K for the early arrivals
        slot[0] = mine
        with ptx.if_(mine < K):
            t0 = reg.scalar(u64)
            ptx.inst.mov.u64(t0, ptx.special.globaltimer())
            spin = ptx.label("grid_wait")
            now = reg.scalar(u32)
            ptx.inst.ld.acquire.gpu.global_.u32(now, ptx.addr(pws, 4))
            go = ptx.new_label("grid_go")
            ptx.bra(go, pred=((now ^ old) & FLIP) != 0)
            t = reg.scalar(u64)
            ptx.inst.mov.u64(t, ptx.special.globaltimer())
            ptx.inst.trap(pred=(t - t0) > BARRIER_TIMEOUT_NS)
            ptx.bra(spin)
            ptx.place(go)
    ptx.bar.sync(0)
    return slot[0]


def dw_summers(N: int, G: int, thin: bool) -> int:
    """CTAs that sum dW after :func:`late_arrivals`: one per column tile of
    :func:`sum_partials`, at most the grid."""
    return min(G, -(-N // (32 * _tile_vec(N, thin))))


def _tile_vec(N: int, thin: bool) -> int:
    """Columns per lane of a :func:`sum_partials` tile (a tile is 32 lanes wide)."""
    return 4 if N % 4 == 0 and not thin else 1


# The arrival word's top bit (see :func:`late_arrivals`).
FLIP = 1 << 31


def dw_narrow(N: int, G: int) -> bool:
    """Whether the fused dW sum takes 32-column tiles: where 128-column ones would leave
    it to fewer than one CTA in :data:`NARROW_DW_SHARE` of the grid (N = 1000 and G = 396:
    8 CTAs, each warp some 99 partial rows at 8 loads in flight)."""
    return N % 4 == 0 and -(-N // 128) * NARROW_DW_SHARE < G


NARROW_DW_SHARE = 8


def sum_partials(N: int, G: int, S: int, stride: int, wdtype, pdwp, pdw, tid, cta,
                  thin: bool = False):
    """dW[j] = sum over g < G of DWP[g, j], in a fixed order, spread over the grid.

    A column tile is 32 lanes x ``vec`` columns, taken by CTAs ``cta, cta+stride,
    ...``; the CTA's ``S`` warps are slices that each sum every ``S``-th partial row
    (``UNROLL`` loads in flight at a time), then warp 0 adds the slices in order.
    ``thin``: one column per lane (four times the tiles, so the CTAs) and twice the
    loads in flight; the order of the additions, so the bits, are the same.

    The partial rows stay in the L2 after they are read (dirty, to be written back to
    DRAM some time): dropping each line once read (``discard.global.L2``) did not pay
    (docs/rmsnorm.md).
    """
    vec = _tile_vec(N, thin)
    unroll = 2 * UNROLL if thin else UNROLL
    cols = 32 * vec
    tiles = -(-N // cols)
    lane = tid & (WARP - 1)
    sl = tid >> 5
    red = smem.alloc(f32, (S, cols))
    row_bytes = N * 4
    for tile in ptx.range_(cta, tiles, stride):
        col = tile * cols + lane * vec
        ok = col < N
        acc = [reg.scalar(f32, init=0.0) for _ in range(vec)]
        base = pdwp + col * 4 + sl * row_bytes

        def add_rows(start, count, last_partial):
            # partial rows start + i*S (i < count) of this thread's slice, ascending
            for i in range(count):
                g_ok = ok
                if last_partial and i == count - 1:
                    g_ok = ok & (sl < G - (start + i * S))
                # .cg: the partials were written by other SMs; read them from L2.
                vals = load_chunk(base, (start + i * S) * row_bytes, f32, vec, pred=g_ok,
                                  hints=("cg",))
                for a, v in zip(acc, vals):
                    ptx.inst.add.f32(a, a, v)

        groups = G // (S * unroll)
        if groups > 1:
            cursor = reg.scalar(u64)
            ptx.inst.mov.u64(cursor, base)
            for _ in ptx.range_(0, groups):
                for i in range(unroll):
                    vals = load_chunk(cursor, i * S * row_bytes, f32, vec, pred=ok,
                                      hints=("cg",))
                    for a, v in zip(acc, vals):
                        ptx.inst.add.f32(a, a, v)
                ptx.inst.add.u64(cursor, cursor, S * unroll * row_bytes)
            done = groups * S * unroll
        else:
            done = 0
        rest = G - done
        if rest:
            count = -(-rest // S)
            add_rows(done, count, rest % S != 0)
        for j in range(vec):
            red[sl, lane * vec + j] = acc[j]
        ptx.bar.sync(0)
        with ptx.if_(sl == 0):
            with ptx.if_(ok):
                out = []
                for j in range(vec):
                    s = reg.scalar(f32, init=0.0)
                    for t in range(S):
                        ptx.inst.add.f32(s, s, red[t, lane * vec + j])
                    out.append(s)
                store_chunk(pdw + col * wdtype.bytes, 0, wdtype, narrow(out, wdtype))
        ptx.bar.sync(0)  # red is rewritten by the next tile


UNROLL = 8  # partial-row loads a thread keeps in flight in the dW reduction

# Most CTAs of a grid that sums dW as one cluster (:func:`cluster_dw`): the portable
# cluster size, so no launch needs the non-portable opt-in.
MAX_DW_CLUSTER = 8
# Past this many bytes a CTA's dw partials are dynamic shared memory (a kernel declares
# at most 48 KiB statically; RowSum's partials and the dW sum's tiles take the rest).
STATIC_GROUP_SMEM = 40 * 1024


def shared_vec(op: str, at, regs, *, space: str = "shared", pred=None) -> None:
    """``ld`` / ``st`` of ``regs`` (f32; 1, 2 or 4) at shared address ``at`` (``space``:
    ``shared``, or ``shared::cluster`` for a peer's through ``mapa``)."""
    vt = "f32" if len(regs) == 1 else f"v{len(regs)}.f32"
    val = regs if len(regs) > 1 else regs[0]
    if op == "ld":
        ptx.inst(f"ld.{space}.{vt}", val, at, pred=pred)
    else:
        ptx.inst(f"st.{space}.{vt}", at, val, pred=pred)


def cluster_dw(p, wdtype, dw, lane, preds, cta, pdw):
    """dW of a grid of ``p.grid`` <= :data:`MAX_DW_CLUSTER` one-row CTAs launched as one
    cluster, from each CTA's partial ``dw`` (its registers: chunk ``k`` of thread ``lane``
    holds columns ``(k*T + lane)*V ...``, guarded by ``preds[k]``).

    The global partial rows, the ``fence.acq_rel.gpu`` that publishes them, the arrival
    counter's atomic and the last CTA's read back were a chain of four L2 round trips
    after the row's own work (several times the time of a copy of the row's bytes,
    bench/results/rmsnorm_bwd_ktime_few_h100.json). Here one CTA stores its
    dW straight from registers; a cluster puts each CTA's partial row in its own shared
    memory, meets at one cluster barrier (release / acquire), and CTA ``c`` sums columns
    ``c*T*w ...`` of every pass of ``G*T*w`` columns over the CTAs' rows in rank order
    (``ld.shared::cluster`` through ``mapa``): the additions, so the bits, of
    :func:`sum_partials_by_warp`. A second cluster barrier keeps every CTA's shared
    memory alive until its peers have read it."""
    N, T, V, K, G = p.n, p.threads, p.vec, p.per_thread, p.grid
    wes = wdtype.bytes
    if G == 1:
        for k in range(K):
            store_chunk(pdw + lane * (V * wes), k * T * V * wes, wdtype,
                        narrow(dw[k * V:(k + 1) * V], wdtype), pred=preds[k])
        return
    cols = K * T * V
    part = smem.alloc(f32, (cols,), dynamic=cols * 4 > STATIC_GROUP_SMEM)
    sv = min(V, 4)  # widest shared-memory vector of a chunk's values
    for k in range(K):
        at = part.base + (lane * V + k * T * V) * 4
        for j in range(0, V, sv):
            shared_vec("st", ptx.addr(at, 4 * j), dw[k * V + j:k * V + j + sv], pred=preds[k])
    ptx.cluster.arrive(aligned=True)
    ptx.cluster.wait(aligned=True)
    w = 4 if N % 4 == 0 else 1   # rows keep 16-byte alignment: four columns a thread
    for c0 in range(0, N, G * T * w):
        c = (cta * T + lane) * w + c0
        with ptx.if_(c < N):
            mine = part.base + c * 4
            acc = None
            for g in range(G):
                vals = [reg.scalar(f32) for _ in range(w)]
                shared_vec("ld", ptx.addr(ptx.cluster.map_shared(mine, g)), vals,
                           space="shared::cluster")
                if acc is None:
                    acc = vals
                    continue
                for a, v in zip(acc, vals):
                    ptx.inst.add.f32(a, a, v)
            store_chunk(pdw + c * wes, 0, wdtype, narrow(acc, wdtype))
    ptx.cluster.arrive(aligned=True)
    ptx.cluster.wait(aligned=True)


def sum_partials_by_warp(N: int, G: int, S: int, wdtype, pdwp, pdw, tid):
    """dW[j] = sum over g < G of DWP[g, j], rows ascending, by one CTA (the last to
    arrive, :func:`last_arrival`), for grids of no more CTAs (partial rows) than a CTA
    has warps (``G <= S``): the grids of few rows.

    :func:`sum_partials` there would walk ``N / (32 vec)`` column tiles one after
    another, each behind two CTA barriers (64 of them for 8192 columns). Here each warp
    takes column tiles of its own (warp ``w``, then every ``S``-th tile) and sums all
    ``G`` rows of each itself, :data:`UNROLL` loads in flight at a time; no shared
    memory, no barriers.
    """
    vec = 4 if N % 4 == 0 else 1
    cols = 32 * vec
    tiles = -(-N // cols)
    lane = tid & (WARP - 1)
    warp = tid >> 5
    row_bytes = N * 4
    for tile in ptx.range_(warp, tiles, S):
        col = tile * cols + lane * vec
        ok = col < N
        base = pdwp + col * 4
        acc = None
        for first in range(0, G, UNROLL):  # UNROLL loads in flight, then their sum
            # .cg: the partials were written by other SMs; read them from L2.
            rows = [load_chunk(base, g * row_bytes, f32, vec, pred=ok, hints=("cg",))
                    for g in range(first, min(G, first + UNROLL))]
            if acc is None:
                acc = rows.pop(0)
            for vals in rows:
                for a, v in zip(acc, vals):
                    ptx.inst.add.f32(a, a, v)
        store_chunk(pdw + col * wdtype.bytes, 0, wdtype, narrow(acc, wdtype), pred=ok)


def build_dw_reduce(n: int, g: int, wdtype: PtxType, *, arch: str = "sm_90a",
                    slices: int = 8):
    """dW[j] = sum over g of DWP[g, j], in a fixed order (f32 accumulation): the
    fused kernel's second phase (:func:`sum_partials`) as a launch of its own, one
    CTA of ``slices`` warps per column tile."""
    tiles = -(-n // (32 * (4 if n % 4 == 0 else 1)))

    pdl = pdl_for(arch)

    @kernel(in_specs=(Tile(g, n, f32),), out_specs=(Tile(n, wdtype),),
            grid=(tiles, 1, 1), block=(WARP * slices, 1, 1), arch=arch,
            name=f"rms_norm_dw_{wdtype.name}_{n}", pdl=pdl)
    def rms_norm_dw(DWP, DW):
        after_previous_kernel(pdl, WARP * slices)
        pp, pd = ptx.global_ptrs(DWP, DW)
        tid = reg.scalar(u32); ptx.inst.mov.u32(tid, ptx.special.tid.x())
        cta = reg.scalar(u32); ptx.inst.mov.u32(cta, ptx.special.ctaid.x())
        sum_partials(n, g, slices, tiles, wdtype, pp, pd, tid, cta)

    return rms_norm_dw
