"""Small cluster kernels (sm_90a), shared by the interpreter tests
(tests/interp/test_cluster.py) and the GPU differential tests
(tests/gpu/test_cluster_interp_gpu.py). Every mbarrier wait loops on try_wait.parity
(``ptx.mbarrier.wait``, or ``.acquire.cluster`` where peer CTAs delivered the bytes): a
single try_wait may return false on hardware. Barriers are
initialised, fenced (``fence.mbarrier_init.release.cluster``) and published with a
cluster barrier before a peer uses them.
"""
from __future__ import annotations

import itertools

import numpy as np

from ptxdsl import Tile, kernel, ptx, reg, smem
from ptxdsl.core.tensormap import TMA
from ptxdsl.core.types import b64, f32, pred, u16, u32, u64

SPECIALS = ("ctaid.x", "ctaid.y", "ctaid.z", "clusterid.x", "clusterid.y", "clusterid.z",
            "nclusterid.x", "nclusterid.y", "nclusterid.z", "cluster_ctaid.x",
            "cluster_ctaid.y", "cluster_ctaid.z", "cluster_nctaid.x", "cluster_nctaid.y",
            "cluster_nctaid.z", "cluster_ctarank", "cluster_nctarank", "is_explicit_cluster")


def _u32(src) -> object:
    r = reg.scalar(u32)
    ptx.inst.mov.u32(r, src)
    return r


def _rank():
    return _u32(ptx.special.cluster_ctarank())


_LABELS = itertools.count()


def _wait_cluster(bar, phase: int = 0) -> None:
    """Loop until the phase of parity ``phase`` of the mbarrier at ``bar`` (a shared
    address register) completed, acquiring at cluster scope (the bytes came from peer
    CTAs): ``L: mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [bar], phase;
    not.pred q, p; @q bra L``."""
    name = f"wait_cluster{next(_LABELS)}"
    ptx.label(name)
    done, again = reg.scalar(pred), reg.scalar(pred)
    ptx.inst("mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64", done, ptx.addr(bar),
             phase)
    ptx.inst("not.pred", again, done)
    ptx.bra(name, pred=again)


def build_specials(grid=(4, 2, 1), cluster=(2, 2, 1)):
    """Thread 0 of each CTA writes the cluster special registers (``SPECIALS``, in that
    order) to row ``ctaid.x + ctaid.y * nctaid.x + ...`` of the output."""
    n = len(SPECIALS)

    @kernel(out_specs=(Tile("G", n, u32),), grid=grid, block=(64, 1, 1), arch="sm_90a",
            cluster=cluster)
    def specials(D):
        (pd,) = ptx.global_ptrs(D)
        tid = _u32(ptx.special.tid.x())
        cx, cy, cz = (_u32(getattr(ptx.special.ctaid, a)()) for a in "xyz")
        nx, ny = _u32(ptx.special.nctaid.x()), _u32(ptx.special.nctaid.y())
        row = (cz * ny + cy) * nx + cx
        with ptx.if_(tid == 0):
            for i, name in enumerate(SPECIALS):
                v = reg.scalar(u32)
                if name == "is_explicit_cluster":
                    p = reg.scalar(pred)
                    ptx.inst.mov.pred(p, ptx.sreg("%" + name))
                    ptx.inst.selp.u32(v, 1, 0, p)
                else:
                    ptx.inst.mov.u32(v, ptx.sreg("%" + name))
                ptx.inst.st.global_.u32(ptx.addr(pd + (row * n + i) * 4), v)
    return specials


MAPA_FIELDS = 7


def build_mapa(n: int = 4, threads: int = 64):
    """Clusters of ``n`` along x. Each CTA fills ``buf[t] = 100000 * cluster + 1000 *
    rank + t``; after a cluster barrier each thread reads its element in the CTA of rank
    ``rank + 1 (mod n)`` through ``mapa`` + ``ld.shared::cluster`` and through a generic
    address (``cvta.shared`` + ``mapa.u64`` + ``ld``). Per thread the output holds
    (the value read, getctarank of the mapped address, getctarank of the plain
    shared::cta address, mapa(buf + 4t) - mapa(buf), the generic read, getctarank of the
    generic mapped address, the read of the mapped address of the CTA's own rank)."""

    @kernel(out_specs=(Tile("G", threads * MAPA_FIELDS, u32),), grid=lambda G: (G, 1, 1),
            block=(threads, 1, 1), arch="sm_90a", cluster=(n, 1, 1))
    def mapa_kernel(D):
        (pd,) = ptx.global_ptrs(D)
        buf = smem.alloc(u32, (threads,), align=16)
        tid = _u32(ptx.special.tid.x())
        rank = _rank()
        cid = _u32(ptx.special.clusterid.x())
        cta = _u32(ptx.special.ctaid.x())
        mine = buf.base + tid * 4
        ptx.inst.st.shared.u32(ptx.addr(mine), cid * 100000 + rank * 1000 + tid)
        ptx.cluster.sync()
        peer = (rank + 1) % n
        remote = ptx.cluster.map_shared(mine, peer)
        v = reg.scalar(u32)
        ptx.inst.ld.shared__cluster.u32(v, ptx.addr(remote))
        gr, own = reg.scalar(u32), reg.scalar(u32)
        ptx.inst.getctarank.shared__cluster.u32(gr, remote)
        ptx.inst.getctarank.shared__cluster.u32(own, mine)
        diff = remote - ptx.cluster.map_shared(buf.base, peer)
        gen, gmap = reg.scalar(u64), reg.scalar(u64)
        wide = reg.scalar(u64)
        ptx.inst.cvt.u64.u32(wide, mine)
        ptx.inst.cvta.shared.u64(gen, wide)
        ptx.inst.mapa.u64(gmap, gen, peer)
        v2, gr2 = reg.scalar(u32), reg.scalar(u32)
        ptx.inst.ld.u32(v2, ptx.addr(gmap))
        ptx.inst.getctarank.u64(gr2, gmap)
        self_map = ptx.cluster.map_shared(mine, rank)
        v3 = reg.scalar(u32)
        ptx.inst.ld.shared__cluster.u32(v3, ptx.addr(self_map))
        base = (cta * threads + tid) * MAPA_FIELDS
        for i, x in enumerate((v, gr, own, diff, v2, gr2, v3)):
            ptx.inst.st.global_.u32(ptx.addr(pd + (base + i) * 4), x)
        ptx.cluster.sync()          # peers read this CTA's buffer: stay until they are done
    return mapa_kernel


def build_reduce(mode: str, n: int = 4, threads: int = 128):
    """Clusters of ``n`` CTAs reduce ``X`` (one row of ``threads`` per CTA) into rank 0:
    ``out[cluster, t] = sum over ranks of X[cluster * n + rank, t]`` (f32, summed in rank
    order). ``mode``:

    * ``"st"``: each CTA stores its row into rank 0's ``parts[rank]`` with ``mapa`` +
      ``st.shared::cluster``; a cluster barrier; rank 0 adds.
    * ``"async"``: ranks 1.. ``st.async`` their rows into rank 0's ``parts``, completing
      the bytes on rank 0's mbarrier (expect_tx of ``(n - 1) * threads * 4``); rank 0
      stores its own row, waits on the mbarrier and adds.
    """
    nb = (n - 1) * threads * 4

    @kernel(in_specs=(Tile("R", threads, f32),), out_specs=(Tile("C", threads, f32),),
            grid=lambda R: (R, 1, 1), block=(threads, 1, 1), arch="sm_90a",
            cluster=(n, 1, 1))
    def reduce_kernel(X, Y):
        px, py = ptx.global_ptrs(X, Y)
        parts = smem.alloc(f32, (n, threads), align=16)
        bar = smem.alloc(b64, (1,), align=8)
        tid = _u32(ptx.special.tid.x())
        rank = _rank()
        cid = _u32(ptx.special.clusterid.x())
        cta = _u32(ptx.special.ctaid.x())
        v = reg.scalar(f32)
        ptx.inst.ld.global_.f32(v, ptx.addr(px + (cta * threads + tid) * 4))
        slot = parts.base + (rank * threads + tid) * 4
        if mode == "st":
            ptx.inst.st.shared__cluster.f32(ptx.addr(ptx.cluster.map_shared(slot, 0)), v)
            ptx.cluster.sync()
        else:
            with ptx.if_((rank == 0) & (tid == 0)):
                ptx.mbarrier.init(ptx.addr(bar.base), 1)
                ptx.mbarrier.arrive_expect_tx(ptx.addr(bar.base), nb)
                ptx.fence.mbarrier_init()
            ptx.cluster.sync()      # rank 0's barrier is initialised before peers use it
            with ptx.if_(rank != 0):
                rb = ptx.cluster.map_shared(bar.base, 0)
                ptx.inst("st.async.shared::cluster.mbarrier::complete_tx::bytes.f32",
                         ptx.addr(ptx.cluster.map_shared(slot, 0)), v, ptx.addr(rb))
        with ptx.if_(rank == 0):
            if mode != "st":
                ptx.inst.st.shared.f32(ptx.addr(slot), v)
                _wait_cluster(bar.base)
            acc = reg.scalar(f32)
            ptx.inst.ld.shared.f32(acc, ptx.addr(parts.base + tid * 4))
            for r in range(1, n):
                x = reg.scalar(f32)
                ptx.inst.ld.shared.f32(x, ptx.addr(parts.base + (r * threads + tid) * 4))
                ptx.inst.add.f32(acc, acc, x)
            ptx.inst.st.global_.f32(ptx.addr(py + (cid * threads + tid) * 4), acc)
    return reduce_kernel


def build_atomics(n: int = 4, threads: int = 64):
    """Integer reductions into rank 0 of each cluster of ``n``: ``acc[t]`` (set to 0
    before a cluster barrier) gets ``X[cta, t]`` of every CTA through
    ``atom.shared::cluster.add`` (even ranks) or ``red.shared::cluster.add`` (odd), and
    ``mx[t]`` their maximum through ``red.shared::cluster.max``; ``red.async.add`` from
    ranks 1.. into ``asum[t]`` (rank 0 stores its own value first; expect_tx of
    ``(n - 1) * threads * 4`` bytes on rank 0's mbarrier). Output per cluster:
    ``[acc (threads), mx (threads), asum (threads)]``."""

    @kernel(in_specs=(Tile("R", threads, u32),), out_specs=(Tile("C", 3 * threads, u32),),
            grid=lambda R: (R, 1, 1), block=(threads, 1, 1), arch="sm_90a",
            cluster=(n, 1, 1))
    def atomics(X, Y):
        px, py = ptx.global_ptrs(X, Y)
        acc = smem.alloc(u32, (threads,), align=16)
        mx = smem.alloc(u32, (threads,), align=16)
        asum = smem.alloc(u32, (threads,), align=16)
        bar = smem.alloc(b64, (1,), align=8)
        tid = _u32(ptx.special.tid.x())
        rank = _rank()
        cid = _u32(ptx.special.clusterid.x())
        cta = _u32(ptx.special.ctaid.x())
        v = reg.scalar(u32)
        ptx.inst.ld.global_.u32(v, ptx.addr(px + (cta * threads + tid) * 4))
        with ptx.if_(rank == 0):
            ptx.inst.st.shared.u32(ptx.addr(acc.base + tid * 4), 0)
            ptx.inst.st.shared.u32(ptx.addr(mx.base + tid * 4), 0)
            ptx.inst.st.shared.u32(ptx.addr(asum.base + tid * 4), v)
            with ptx.if_(tid == 0):
                ptx.mbarrier.init(ptx.addr(bar.base), 1)
                ptx.mbarrier.arrive_expect_tx(ptx.addr(bar.base), (n - 1) * threads * 4)
                ptx.fence.mbarrier_init()
        ptx.cluster.sync()
        a = ptx.cluster.map_shared(acc.base + tid * 4, 0)
        with ptx.if_((rank & 1) == 1):
            ptx.inst.red.shared__cluster.add.u32(ptx.addr(a), v)
        with ptx.if_((rank & 1) == 0):
            old = reg.scalar(u32)
            ptx.inst.atom.shared__cluster.add.u32(old, ptx.addr(a), v)
        ptx.inst.red.shared__cluster.max.u32(ptx.addr(ptx.cluster.map_shared(mx.base + tid * 4,
                                                                               0)), v)
        with ptx.if_(rank != 0):
            ptx.inst("red.async.relaxed.cluster.shared::cluster.mbarrier::complete_tx::bytes."
                     "add.u32", ptx.addr(ptx.cluster.map_shared(asum.base + tid * 4, 0)), v,
                     ptx.addr(ptx.cluster.map_shared(bar.base, 0)))
        ptx.cluster.sync()
        with ptx.if_(rank == 0):
            _wait_cluster(bar.base)
            for i, arr in enumerate((acc, mx, asum)):
                x = reg.scalar(u32)
                ptx.inst.ld.shared.u32(x, ptx.addr(arr.base + tid * 4))
                ptx.inst.st.global_.u32(ptx.addr(py + ((cid * 3 + i) * threads + tid) * 4), x)
    return atomics


MC_BOX = (8, 32)          # each CTA loads half of a 16 x 32 f32 tile (128-byte rows)


def build_multicast(swizzle: int = 128):
    """Clusters of 2 along x share a 16 x 32 f32 tile of ``A``: rank ``r`` loads rows
    ``16 * cluster + 8r ..`` (a box of 8 x 32) with ``.multicast::cluster`` (ctaMask
    0b11) into ``tile + r * 1024`` of both CTAs; each CTA expects the whole tile's bytes
    on its own mbarrier, waits, and dumps its raw shared tile to ``D[cta]``."""
    br, bc = MC_BOX
    half = br * bc * 4
    words = 2 * half // 4

    @kernel(in_specs=(Tile("M", "N", f32, tma=TMA(box=MC_BOX, swizzle=swizzle)),),
            out_specs=(Tile("G", words, u32),), grid=lambda G: (G, 1, 1),
            block=(128, 1, 1), arch="sm_90a", cluster=(2, 1, 1))
    def multicast(A, D):
        a_desc = A.tma_desc()
        (pd,) = ptx.global_ptrs(D)
        tile = smem.alloc(f32, (2 * br, bc), swizzle=swizzle, align=1024)
        bar = smem.alloc(b64, (1,), align=8)
        tid = _u32(ptx.special.tid.x())
        rank = _rank()
        cid = _u32(ptx.special.clusterid.x())
        cta = _u32(ptx.special.ctaid.x())
        with ptx.if_(tid == 0):
            ptx.mbarrier.init(ptx.addr(bar.base), 1)
            ptx.fence.mbarrier_init()
        ptx.cluster.sync()          # both barriers exist before either CTA's copy lands
        with ptx.if_(tid == 0):
            ptx.mbarrier.arrive_expect_tx(ptx.addr(bar.base), 2 * half)
            ptx.tma.load(tile.base + rank * half, a_desc, (0, cid * (2 * br) + rank * br),
                         bar.base, multicast=reg.scalar(u16, init=3))
        ptx.mbarrier.wait(ptx.addr(bar.base), 0)
        for j in range(0, words, 128):
            w = reg.scalar(u32)
            ptx.inst.ld.shared.u32(w, ptx.addr(tile.base + (tid + j) * 4))
            ptx.inst.st.global_.u32(ptx.addr(pd + (cta * words + tid + j) * 4), w)
    return multicast


def build_bulk(words: int = 64):
    """1-D bulk copies in clusters of 2 (``words`` u32 per row): rank 0 copies
    ``X[2 * cluster]`` from global into ``a`` of both CTAs (``cp.async.bulk`` with
    ``.multicast::cluster``); rank 1 writes ``b[t] = 3 * X[2 * cluster + 1, t] + 1`` and
    copies ``b`` into rank 0's ``b`` (shared::cta -> shared::cluster); each CTA waits on
    its mbarrier and stores ``a`` to ``Y[cta]`` with a bulk_group copy; rank 0 also
    stores ``b`` to ``Z[cluster]``."""
    nb = words * 4

    @kernel(in_specs=(Tile("R", words, u32),),
            out_specs=(Tile("G", words, u32), Tile("C", words, u32)),
            grid=lambda G: (G, 1, 1), block=(words, 1, 1), arch="sm_90a",
            cluster=(2, 1, 1))
    def bulk(X, Y, Z):
        px, py, pz = ptx.global_ptrs(X, Y, Z)
        a = smem.alloc(u32, (words,), align=128)
        b = smem.alloc(u32, (words,), align=128)
        bar = smem.alloc(b64, (1,), align=8)
        tid = _u32(ptx.special.tid.x())
        rank = _rank()
        cid = _u32(ptx.special.clusterid.x())
        cta = _u32(ptx.special.ctaid.x())
        with ptx.if_(tid == 0):
            ptx.mbarrier.init(ptx.addr(bar.base), 1)
            ptx.fence.mbarrier_init()
        ptx.cluster.sync()
        with ptx.if_(tid == 0):
            with ptx.if_(rank == 0):
                ptx.mbarrier.arrive_expect_tx(ptx.addr(bar.base), 2 * nb)
                ptx.inst("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes."
                         "multicast::cluster", ptx.addr(a.base),
                         ptx.addr(px + cid * (2 * nb)), nb, ptx.addr(bar.base),
                         reg.scalar(u16, init=3))
            with ptx.if_(rank == 1):
                ptx.mbarrier.arrive_expect_tx(ptx.addr(bar.base), nb)
        with ptx.if_(rank == 1):
            v = reg.scalar(u32)
            ptx.inst.ld.global_.u32(v, ptx.addr(px + (cid * (2 * words) + words + tid) * 4))
            ptx.inst.st.shared.u32(ptx.addr(b.base + tid * 4), v * 3 + 1)
            ptx.fence.proxy_async_shared_cta()     # the threads' writes, to the bulk copy
            ptx.bar.sync(1, words)
            with ptx.if_(tid == 0):
                ptx.inst("cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::"
                         "bytes", ptx.addr(ptx.cluster.map_shared(b.base, 0)),
                         ptx.addr(b.base), nb, ptx.addr(ptx.cluster.map_shared(bar.base, 0)))
        _wait_cluster(bar.base)
        with ptx.if_(tid == 0):
            ptx.inst("cp.async.bulk.global.shared::cta.bulk_group",
                     ptx.addr(py + cta * nb), ptx.addr(a.base), nb)
            with ptx.if_(rank == 0):
                ptx.inst("cp.async.bulk.global.shared::cta.bulk_group",
                         ptx.addr(pz + cid * nb), ptx.addr(b.base), nb)
            ptx.tma.commit()
            ptx.tma.wait(0)
        ptx.cluster.sync()          # rank 1's copy reads its b until rank 0's barrier fills
    return bulk


# ---------------------------------------------------------------- shared addresses
def build_cluster_addresses(cluster: int, grid: int):
    """Per CTA: %ctaid.x, %cluster_ctarank, %clusterid.x and the shared address of a
    dynamic shared array (``mov.u32 r, smem``); rows of 4 words (shared with
    tests/gpu/test_cluster_interp_gpu.py)."""
    from ptxdsl.core.types import b32, u8, u32
    opts = dict(cluster=(cluster, 1, 1)) if cluster > 1 else {}

    @kernel(in_specs=(), out_specs=(Tile(grid * 4, b32),), grid=(grid, 1, 1),
            block=(32, 1, 1), arch="sm_90a", name=f"cluster_addr_c{cluster}_g{grid}", **opts)
    def cluster_addresses(O):
        (po,) = ptx.global_ptrs(O)
        tid = reg.scalar(u32); ptx.inst.mov.u32(tid, ptx.special.tid.x())
        cta = reg.scalar(u32); ptx.inst.mov.u32(cta, ptx.special.ctaid.x())
        base = smem.alloc(u8, (2048,), align=1024, dynamic=True).base
        addr = reg.scalar(u32); ptx.inst.mov.u32(addr, base)
        rank = reg.scalar(u32); ptx.inst.mov.u32(rank, ptx.special.cluster_ctarank())
        cid = reg.scalar(u32); ptx.inst.mov.u32(cid, ptx.special.clusterid.x())
        with ptx.if_(tid == 0):
            row = po + cta * 16
            for i, v in enumerate((cta, rank, cid, addr)):
                ptx.inst.st.global_.u32(ptx.addr(row, 4 * i) if i else ptx.addr(row), v)
    return cluster_addresses


def expected_specials(grid, cluster, explicit=True):
    rows = []
    for z in range(grid[2]):
        for y in range(grid[1]):
            for x in range(grid[0]):
                c = (x, y, z)
                cid = [c[i] // cluster[i] for i in range(3)]
                ncl = [grid[i] // cluster[i] for i in range(3)]
                rid = [c[i] % cluster[i] for i in range(3)]
                rank = rid[0] + rid[1] * cluster[0] + rid[2] * cluster[0] * cluster[1]
                rows.append([*c, *cid, *ncl, *rid, *cluster, rank,
                             cluster[0] * cluster[1] * cluster[2], int(explicit)])
    return np.array(rows, np.uint32)
