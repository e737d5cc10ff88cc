"""Clusters on the interpreter: cluster special registers, barrier.cluster, mapa /
getctarank, distributed shared memory (ld/st/atom/red.shared::cluster, st.async,
red.async, remote mbarrier arrive), TMA multicast, checked against numpy; deadlocks,
bad ranks, DSMEM overruns and early exits refused with located errors."""
from __future__ import annotations

import numpy as np
import pytest

from ptxdsl import Tile, kernel, ptx, reg, smem
from ptxdsl.core.errors import InterpreterError, LaunchError
from ptxdsl.core.types import b64, u32

import cluster_kernels as ck
from cluster_kernels import expected_specials
from swizzle import swizzled_image


def _rank():
    r = reg.scalar(u32)
    ptx.inst.mov.u32(r, ptx.special.cluster_ctarank())
    return r


def _tid():
    r = reg.scalar(u32)
    ptx.inst.mov.u32(r, ptx.special.tid.x())
    return r


@pytest.mark.parametrize("grid,cluster", [((4, 2, 1), (2, 2, 1)), ((2, 2, 2), (1, 1, 2)),
                                          ((6, 1, 1), (3, 1, 1))])
def test_cluster_special_registers(grid, cluster):
    k = ck.build_specials(grid, cluster)
    d = k.interpret(G=grid[0] * grid[1] * grid[2])
    np.testing.assert_array_equal(d, expected_specials(grid, cluster))


def test_without_clusters_every_cta_is_a_cluster_of_one():
    k = ck.build_specials((3, 2, 1), None)
    d = k.interpret(G=6)
    np.testing.assert_array_equal(d, expected_specials((3, 2, 1), (1, 1, 1), explicit=False))


def test_reqnctapercluster_alone_gives_the_cluster_shape():
    from ptxdsl.core.entry import entry_options
    opts = entry_options(cluster=None, raw_directives=[("reqnctapercluster", (2,))],
                         extern_smem=None, smem=None, raw_params=None, block=(32, 1, 1),
                         arch="sm_90a", dim_names=(), maxntid=False, min_ctas_per_sm=None,
                         loc=None)
    assert opts.cluster_shape == (2, 1, 1)


def test_a_grid_that_is_no_whole_number_of_clusters_is_refused():
    k = ck.build_specials((3, 2, 1), (2, 1, 1))
    with pytest.raises(LaunchError, match=r"not a whole number of clusters"):
        k.interpret(G=6)


@pytest.mark.parametrize("n", [2, 4])
def test_mapa_getctarank_and_dsmem_loads(n):
    threads = 64
    k = ck.build_mapa(n, threads)
    clusters = 2
    d = k.interpret(G=clusters * n).reshape(clusters * n, threads, ck.MAPA_FIELDS)
    t = np.arange(threads)
    for cta in range(clusters * n):
        cid, rank = divmod(cta, n)
        peer = (rank + 1) % n
        got = d[cta]
        np.testing.assert_array_equal(got[:, 0], cid * 100000 + peer * 1000 + t)  # ld
        np.testing.assert_array_equal(got[:, 1], peer)             # getctarank(mapa)
        np.testing.assert_array_equal(got[:, 2], rank)             # getctarank(own cta addr)
        np.testing.assert_array_equal(got[:, 3], 4 * t)            # offsets kept
        np.testing.assert_array_equal(got[:, 4], got[:, 0])        # generic mapa + ld
        np.testing.assert_array_equal(got[:, 5], peer)             # getctarank.u64
        np.testing.assert_array_equal(got[:, 6], cid * 100000 + rank * 1000 + t)


@pytest.mark.parametrize("mode", ["st", "async"])
def test_dsmem_reduction_across_a_cluster_of_4(mode):
    rng = np.random.default_rng(4)
    clusters, threads = 3, 128
    x = rng.standard_normal((4 * clusters, threads)).astype(np.float32)
    y = ck.build_reduce(mode, 4, threads).interpret(x, C=clusters)
    want = np.zeros((clusters, threads), np.float32)
    for c in range(clusters):
        acc = x[4 * c].copy()
        for r in range(1, 4):
            acc = (acc + x[4 * c + r]).astype(np.float32)
        want[c] = acc
    np.testing.assert_array_equal(y, want)


def test_atom_red_and_red_async_into_rank_0():
    rng = np.random.default_rng(5)
    n, clusters, threads = 4, 2, 64
    x = rng.integers(0, 1 << 20, (n * clusters, threads), dtype=np.uint32)
    y = ck.build_atomics(n, threads).interpret(x, C=clusters).reshape(clusters, 3, threads)
    for c in range(clusters):
        rows = x[n * c:n * (c + 1)].astype(np.uint64)
        np.testing.assert_array_equal(y[c, 0], rows.sum(0))
        np.testing.assert_array_equal(y[c, 1], rows.max(0))
        np.testing.assert_array_equal(y[c, 2], rows.sum(0))


@pytest.mark.parametrize("swizzle", [0, 128])
def test_tma_multicast_across_a_cluster_of_2(swizzle):
    rng = np.random.default_rng(swizzle)
    br, bc = ck.MC_BOX
    m = 2 * (2 * br) - 3                       # the last cluster's tile runs 3 rows past M
    a = rng.standard_normal((m, bc)).astype(np.float32)
    d = ck.build_multicast(swizzle).interpret(a, G=4)
    for cta in range(4):
        cid = cta // 2
        tile = np.zeros((2 * br, bc), np.float32)
        blk = a[cid * 2 * br:(cid + 1) * 2 * br]
        tile[:len(blk)] = blk
        want = swizzled_image(tile, swizzle).view(np.uint32)
        np.testing.assert_array_equal(d[cta], want, err_msg=f"CTA {cta}")


def test_bulk_copies_multicast_peer_and_store():
    rng = np.random.default_rng(6)
    words, clusters = 64, 2
    x = rng.integers(0, 1 << 30, (2 * clusters, words), dtype=np.uint32)
    y, z = ck.build_bulk(words).interpret(x, G=2 * clusters, C=clusters)
    for c in range(clusters):
        np.testing.assert_array_equal(y[2 * c], x[2 * c])
        np.testing.assert_array_equal(y[2 * c + 1], x[2 * c])
        np.testing.assert_array_equal(z[c], x[2 * c + 1] * 3 + 1)


# ---------------------------------------------------------------------- barrier semantics
def _exchange(relaxed=False, barrier=True, threads=32):
    """Rank 1 writes rank 0's buffer through mapa + st.shared::cluster; rank 0 reads it
    after a cluster barrier (arrive[.relaxed] / wait)."""

    @kernel(out_specs=(Tile(threads, u32),), grid=(2, 1, 1), block=(threads, 1, 1),
            arch="sm_90a", cluster=(2, 1, 1))
    def exchange(D):
        (pd,) = ptx.global_ptrs(D)
        buf = smem.alloc(u32, (threads,))
        tid, rank = _tid(), _rank()
        with ptx.if_(rank == 1):
            ptx.inst.st.shared__cluster.u32(
                ptx.addr(ptx.cluster.map_shared(buf.base + tid * 4, 0)), tid * 7)
        if barrier:
            ptx.cluster.arrive(relaxed=relaxed)
            ptx.cluster.wait()
        with ptx.if_(rank == 0):
            v = reg.scalar(u32)
            ptx.inst.ld.shared.u32(v, ptx.addr(buf.base + tid * 4))
            ptx.inst.st.global_.u32(ptx.addr(pd + tid * 4), v)
    return exchange


def test_cluster_barrier_orders_remote_stores_before_local_loads():
    np.testing.assert_array_equal(_exchange().interpret(), np.arange(32) * 7)


def test_relaxed_arrive_does_not_order_the_remote_store():
    with pytest.raises(InterpreterError, match=r"shared-memory data race.*rank 1"):
        _exchange(relaxed=True).interpret()


def test_remote_store_without_barrier_is_a_race_or_uninitialised():
    with pytest.raises(InterpreterError, match=r"data race|uninitialised"):
        _exchange(barrier=False).interpret()


def test_remote_mbarrier_arrive_releases_the_peer_writes():
    """Rank 1 stores into rank 0 and arrives on rank 0's mbarrier (count 32) through
    ptx.cluster.arrive_remote; rank 0 waits on it and reads (no cluster barrier in
    between); a final cluster barrier keeps rank 0 alive while rank 1 arrives."""

    @kernel(out_specs=(Tile(32, u32),), grid=(2, 1, 1), block=(32, 1, 1), arch="sm_90a",
            cluster=(2, 1, 1))
    def remote_arrive(D):
        (pd,) = ptx.global_ptrs(D)
        buf = smem.alloc(u32, (32,))
        bar = smem.alloc(b64, (1,), align=8)
        tid, rank = _tid(), _rank()
        with ptx.if_(tid == 0):
            ptx.mbarrier.init(ptx.addr(bar.base), 32)
            ptx.fence.mbarrier_init()
        ptx.cluster.sync()
        with ptx.if_(rank == 1):
            ptx.inst.st.shared__cluster.u32(
                ptx.addr(ptx.cluster.map_shared(buf.base + tid * 4, 0)), tid + 5)
            ptx.cluster.arrive_remote(bar.base, 0)
        with ptx.if_(rank == 0):
            ptx.mbarrier.wait(ptx.addr(bar.base), 0)
            v = reg.scalar(u32)
            ptx.inst.ld.shared.u32(v, ptx.addr(buf.base + tid * 4))
            ptx.inst.st.global_.u32(ptx.addr(pd + tid * 4), v)
        ptx.cluster.sync()
    np.testing.assert_array_equal(remote_arrive.interpret(), np.arange(32) + 5)


def test_cluster_barrier_counts_exited_threads_as_gone():
    """Warp 1 of every CTA exits early: the cluster barrier completes with warp 0s."""

    @kernel(out_specs=(Tile(2, u32),), grid=(2, 1, 1), block=(64, 1, 1), arch="sm_90a",
            cluster=(2, 1, 1))
    def early(D):
        (pd,) = ptx.global_ptrs(D)
        tid, rank = _tid(), _rank()
        with ptx.if_(tid >= 32):
            ptx.inst.exit()
        ptx.cluster.sync()
        with ptx.if_(tid == 0):
            ptx.inst.st.global_.u32(ptx.addr(pd + rank * 4), rank + 1)
    np.testing.assert_array_equal(early.interpret(), [1, 2])


# ---------------------------------------------------------------------- errors
def _one(body, n=2, threads=32, grid=None):
    @kernel(out_specs=(Tile(threads, u32),), grid=grid or (n, 1, 1), block=(threads, 1, 1),
            arch="sm_90a", cluster=(n, 1, 1))
    def k(D):
        body(D)
    return k


def test_deadlock_across_a_cluster_names_each_ctas_wait():
    """Rank 1 waits on an mbarrier nobody arrives at, so it never reaches the cluster
    barrier rank 0 waits at: a deadlock naming both waits, never a hang."""
    def body(D):
        bar = smem.alloc(b64, (1,), align=8)
        tid, rank = _tid(), _rank()
        with ptx.if_(tid == 0):
            ptx.mbarrier.init(ptx.addr(bar.base), 1)
        ptx.bar.sync(0)
        with ptx.if_(rank == 1):
            ptx.mbarrier.wait(ptx.addr(bar.base), 0)
        ptx.cluster.sync()
    with pytest.raises(InterpreterError) as e:
        _one(body, threads=64).interpret()
    msg = str(e.value)
    assert "deadlock" in msg
    assert "rank 0 of its cluster" in msg and "rank 1 of its cluster" in msg
    assert "barrier.cluster.wait" in msg and "mbarrier.try_wait" in msg
    assert "cluster barrier (generation 0)" in msg and "rank 1: 0 of 64" in msg
    assert "test_cluster.py" in msg


def test_wait_without_arrive_and_arrive_twice_are_errors():
    def no_arrive(D):
        ptx.cluster.wait()

    def twice(D):
        ptx.cluster.arrive()
        ptx.cluster.arrive()
    with pytest.raises(InterpreterError, match=r"without having arrived"):
        _one(no_arrive).interpret()
    with pytest.raises(InterpreterError, match=r"again without having waited"):
        _one(twice).interpret()


def test_mapa_to_a_rank_outside_the_cluster():
    def body(D):
        buf = smem.alloc(u32, (32,))
        ptx.cluster.map_shared(buf.base, 2)
        ptx.cluster.sync()
    with pytest.raises(InterpreterError, match=r"test_cluster.py:\d+: mapa.*rank 2, "
                                               r"but the cluster has 2 CTA"):
        _one(body).interpret()


def test_dsmem_access_past_the_peer_allocation():
    def body(D):
        buf = smem.alloc(u32, (32,))
        tid = _tid()
        ptx.inst.st.shared.u32(ptx.addr(buf.base + tid * 4), tid)
        ptx.cluster.sync()
        v = reg.scalar(u32)
        ptx.inst.ld.shared__cluster.u32(
            v, ptx.addr(ptx.cluster.map_shared(buf.base + (tid + 1) * 4, 1)))
        ptx.cluster.sync()
    with pytest.raises(InterpreterError, match=r"test_cluster.py:\d+: ld.*out of "
                                               r"bounds shared read.*CTA of rank 1.*past "
                                               r"the end of smem0"):
        _one(body).interpret()


def test_a_cluster_address_in_a_shared_cta_access():
    def body(D):
        buf = smem.alloc(u32, (32,))
        tid = _tid()
        ptx.inst.st.shared.u32(ptx.addr(ptx.cluster.map_shared(buf.base + tid * 4, 1)), tid)
    with pytest.raises(InterpreterError, match=r"address 0x1000400 is in the shared memory "
                                               r"of the cluster's CTA of rank 1 \(this "
                                               r"thread's CTA is rank 0\): a \.shared::cta "
                                               r"access reaches this CTA only"):
        _one(body).interpret()


def test_exit_while_a_peer_reads_your_shared_memory():
    """Rank 1 reads rank 0's buffer after the only cluster barrier; rank 0 exits right
    after that barrier: its shared memory may be gone before the read."""
    def body(D):
        (pd,) = ptx.global_ptrs(D)
        buf = smem.alloc(u32, (32,))
        tid, rank = _tid(), _rank()
        ptx.inst.st.shared.u32(ptx.addr(buf.base + tid * 4), tid)
        ptx.cluster.sync()
        with ptx.if_(rank == 1):
            v = reg.scalar(u32)
            ptx.inst.ld.shared__cluster.u32(
                v, ptx.addr(ptx.cluster.map_shared(buf.base + tid * 4, 0)))
            ptx.inst.st.global_.u32(ptx.addr(pd + tid * 4), v)
    with pytest.raises(InterpreterError, match=r"rank 0 exits while the CTA of rank 1 may "
                                               r"still access its shared memory \(the "
                                               r"access at .*test_cluster.py"):
        _one(body).interpret()


def test_multicast_mask_and_tensor_copy_into_a_peer_need_matching_barriers():
    """A plain (non-multicast) TMA load into a peer CTA must complete on that CTA's
    mbarrier."""
    from ptxdsl.core.tensormap import TMA
    from ptxdsl.core.types import f32

    @kernel(in_specs=(Tile("M", "N", f32, tma=TMA(box=(8, 8))),), grid=(2, 1, 1),
            block=(32, 1, 1), arch="sm_90a", cluster=(2, 1, 1))
    def k(A):
        d = A.tma_desc()
        tile = smem.alloc(f32, (8, 8), align=128)
        bar = smem.alloc(b64, (1,), align=8)
        tid = _tid()
        with ptx.if_(tid == 0):
            ptx.mbarrier.init(ptx.addr(bar.base), 1)
            ptx.tma.load(ptx.cluster.map_shared(tile.base, 1), d, (0, 0), bar.base)
    with pytest.raises(InterpreterError, match=r"destination is in the CTA of rank 1 but "
                                               r"the mbarrier in the CTA of rank 0"):
        k.interpret(np.ones((8, 8), np.float32))
