"""The asynchronous model (issue #47): TMA copies in flight until their mbarrier phase,
wgmma operands read until wait_group retires their group, wait_group's ordering for the
whole warpgroup, accumulators held by every pending group, wgmma.fence, groups still
pending at exit. Each bug kernel is reported at its line; its correct twin runs clean
with the GPU's numbers."""
from __future__ import annotations

import numpy as np
import pytest

from ptxdsl import Tile, kernel, ptx, reg, smem
from ptxdsl.core.tensormap import TMA
from ptxdsl.core.errors import InterpreterError
from ptxdsl.core.types import b64, bf16, f32, u32
import located

line_of, raises_at = located.for_file(__file__)

BOX = TMA(box=(8, 16), swizzle=0)


def tma_then_read(wait: str):
    """Thread 0 loads an 8 x 16 f32 box; every thread reads one word after ``bar.sync``.
    ``wait``: "all" (every thread waits on the mbarrier), "one" (warp 1 waits, then
    bar.sync hands the data to the rest), "none" (the bar.sync only)."""
    @kernel(in_specs=(Tile(8, 16, f32, tma=BOX),), out_specs=(Tile(128, f32),), grid=1,
            block=(128, 1, 1), arch="sm_90a")
    def k(A, D):
        a_desc = A.tma_desc()
        (pd,) = ptx.global_ptrs(D)
        tile = smem.alloc(f32, (8, 16), align=128)
        bar = smem.alloc(b64, (1,), align=8)
        tid = reg.scalar(u32)
        ptx.inst.mov.u32(tid, ptx.special.tid.x())
        with ptx.if_(tid == 0):
            ptx.mbarrier.init(bar.base, 1)
        ptx.bar.sync(0)
        with ptx.if_(tid == 0):
            ptx.mbarrier.arrive_expect_tx(bar.base, 512)
            ptx.tma.load(tile.base, a_desc, (0, 0), bar.base)  # tma-load
        if wait == "all":
            ptx.mbarrier.wait(bar.base, 0)
        if wait == "one":
            with ptx.if_(tid >> 5 == 1):
                ptx.mbarrier.wait(bar.base, 0)
        ptx.bar.sync(0)
        v = reg.scalar(f32)
        ptx.inst.ld.shared.f32(v, ptx.addr(tile.base + tid * 4))  # box-read
        ptx.inst.st.global_.f32(ptx.addr(pd + tid * 4), v)
    return k


@pytest.mark.parametrize("wait", ["all", "one"])
def test_tma_data_read_after_its_mbarrier_phase_runs(wait):
    a = np.arange(128, dtype=np.float32).reshape(8, 16)
    np.testing.assert_array_equal(tma_then_read(wait).interpret(a), a.reshape(-1))


def test_tma_data_read_after_bar_sync_without_the_mbarrier_is_refused():
    a = np.arange(128, dtype=np.float32).reshape(8, 16)
    with raises_at("box-read", "asynchronous copy at .*:%d" % line_of("tma-load"),
                   "still writing", "mbarrier"):
        tma_then_read("none").interpret(a)


def ring(wait_empty: bool, empty_count: int = 2, readers: int = 2):
    """A one-stage ring: thread 0 loads rows 0-7 then rows 8-15 of A into one stage; warps
    1..``readers`` each wait on "full", copy the stage out and arrive on "empty" (of count
    ``empty_count``). ``wait_empty``: the producer waits for "empty" before the refill."""
    @kernel(in_specs=(Tile(16, 16, f32, tma=BOX),), out_specs=(Tile(2, 16, 16, f32),),
            grid=1, block=(96, 1, 1), arch="sm_90a")
    def k(A, D):
        a_desc = A.tma_desc()
        (pd,) = ptx.global_ptrs(D)
        tile = smem.alloc(f32, (8, 16), align=128)
        bars = smem.alloc(b64, (2,), align=8)
        full, empty = bars.base, bars.base + 8
        tid = reg.scalar(u32)
        ptx.inst.mov.u32(tid, ptx.special.tid.x())
        warp = tid >> 5
        with ptx.if_(tid == 0):
            ptx.mbarrier.init(full, 1)
            ptx.mbarrier.init(empty, empty_count)
        ptx.bar.sync(0)
        with ptx.if_(tid == 0):
            for i in range(2):
                if i and wait_empty:
                    ptx.mbarrier.wait(empty, 0)  # wait-empty
                ptx.mbarrier.arrive_expect_tx(full, 512)
                ptx.tma.load(tile.base, a_desc, (0, 8 * i), full)  # refill
        with ptx.if_((warp >= 1) & (warp <= readers)):
            lane = tid & 31
            for i in range(2):
                ptx.mbarrier.wait(full, i)
                for j in range(4):
                    v = reg.scalar(f32)
                    ptx.inst.ld.shared.f32(v, ptx.addr(tile.base + (lane + 32 * j) * 4))  # stage-read
                    ptx.inst.st.global_.f32(
                        ptx.addr(pd + ((warp - 1) * 256 + i * 128 + lane + 32 * j) * 4), v)
                with ptx.if_(lane == 0):
                    ptx.mbarrier.arrive(empty)  # release
    return k


def test_ring_with_empty_barrier_runs():
    a = np.arange(256, dtype=np.float32).reshape(16, 16)
    d = ring(True).interpret(a)
    np.testing.assert_array_equal(d[0], a)
    np.testing.assert_array_equal(d[1], a)


def test_refill_without_waiting_on_empty_is_refused():
    a = np.arange(256, dtype=np.float32).reshape(16, 16)
    with raises_at("stage-read", "asynchronous copy at .*:%d" % line_of("refill"),
                   "still writing"):
        ring(False).interpret(a)


def test_empty_barrier_counting_too_few_arrivals_is_refused():
    """"empty" (count 1) completes at each reader warp's arrival: the second completion
    comes while the producer, parked on the first, has not yet seen it."""
    a = np.arange(256, dtype=np.float32).reshape(16, 16)
    with raises_at("release", r"while thread \(0, 0, 0\), waiting at .*:%d" % line_of("wait-empty"),
                   "parity that already passed"):
        ring(True, empty_count=1).interpret(a)


# ---------------------------------------------------------------- wgmma
ONES = 0x3F803F80     # two bf16 1.0


def wgmma_kernel(mode: str):
    """A warpgroup fills a 64 x 64 bf16 tile with ones, issues wgmmas (A and B from the
    tile: each adds 16 to every accumulator element, which starts at 1.0) and writes
    acc[0] of each thread. ``mode``:

    * "ok": two wgmmas in two groups, wait_group 0, then read;
    * "read-after-wait-1": reads after wait_group 1 with the second group pending;
    * "overwrite-in-flight": a thread of warp 2 stores into the tile before wait_group
      ("overwrite-in-flight-0": thread 0);
    * "overwrite-after-wait": the same store after wait_group 0, by warp 2 (ordered by
      the wait for every warp of the warpgroup);
    * "no-wait": the kernel ends with the group pending;
    * "write-after-fence": acc[1] is written after wgmma.fence, then accumulated into;
    * "no-fence": no wgmma.fence at all.
    """
    @kernel(in_specs=(), out_specs=(Tile(128, f32),), grid=1, block=(128, 1, 1),
            arch="sm_90a")
    def k(D):
        (pd,) = ptx.global_ptrs(D)
        s = smem.alloc(bf16, (64, 64), swizzle=128)
        tid = reg.scalar(u32)
        ptx.inst.mov.u32(tid, ptx.special.tid.x())
        for i in ptx.range_(tid, 64 * 64 // 2, 128):
            ptx.inst.st.shared.u32(ptx.addr(s.base + i * 4), ONES)
        ptx.inst.fence.proxy.async_.shared__cta()
        ptx.bar.sync(0)
        acc = ptx.wgmma.accumulator(8, f32, init=1.0)
        d = ptx.wgmma.descriptor(s)
        if mode != "no-fence":
            ptx.wgmma.fence()
        if mode == "write-after-fence":
            ptx.inst.mov.f32(acc[1], 0.0)
        ptx.wgmma.mma(acc, d, d, ab_type=bf16)  # mma-1
        ptx.wgmma.commit()
        if mode == "no-wait":
            return
        ptx.wgmma.mma(acc, d, d, ab_type=bf16)  # mma-2
        ptx.wgmma.commit()
        if mode.startswith("overwrite-in-flight"):
            with ptx.if_(tid == (0 if mode.endswith("-0") else 64)):
                ptx.inst.st.shared.u32(ptx.addr(s.base + 16), 0)  # early-store
        ptx.wgmma.wait(1 if mode == "read-after-wait-1" else 0)
        if mode == "overwrite-after-wait":
            with ptx.if_(tid == 64):
                ptx.inst.st.shared.u32(ptx.addr(s.base + 16), 0)
        ptx.inst.st.global_.f32(ptx.addr(pd + tid * 4), acc[0])  # acc-read
    return k


@pytest.mark.parametrize("mode", ["ok", "overwrite-after-wait"])
def test_wgmma_groups_retired_in_order_run(mode):
    np.testing.assert_array_equal(wgmma_kernel(mode).interpret(), np.full(128, 33.0))


def test_accumulator_read_with_a_younger_group_pending_is_refused():
    with raises_at("acc-read", "accumulator of the wgmma at .*:%d" % line_of("mma-2"),
                   "still in flight"):
        wgmma_kernel("read-after-wait-1").interpret()


@pytest.mark.parametrize("mode", ["overwrite-in-flight", "overwrite-in-flight-0"])
def test_operand_overwritten_while_the_wgmma_reads_it_is_refused(mode):
    """By a thread of warp 2, and by thread 0 (whose reads the wgmma's are recorded as)."""
    with raises_at("early-store", "wgmma.mma_async at .*:%d" % line_of("mma-1"),
                   "may still be reading"):
        wgmma_kernel(mode).interpret()


def test_wgmma_pending_when_the_kernel_ends_is_refused():
    with raises_at("mma-1", "still in flight when its warpgroup exits"):
        wgmma_kernel("no-wait").interpret()


def test_accumulator_written_after_the_fence_is_refused():
    with raises_at("mma-1", "written by an ordinary instruction after this warpgroup's "
                            "last wgmma.fence"):
        wgmma_kernel("write-after-fence").interpret()


def test_wgmma_without_a_fence_is_refused():
    with raises_at("mma-1", "no wgmma.fence before"):
        wgmma_kernel("no-fence").interpret()


def tma_into_wgmma_operand(wait_first: bool):
    """Thread 0 refills the wgmma's operand tile through TMA, before or after the
    warpgroup's wait_group 0 (then a bar.sync hands the tile over)."""
    box = TMA(box=(64, 64), swizzle=128)

    @kernel(in_specs=(Tile(64, 64, bf16, tma=box),), out_specs=(Tile(128, f32),), grid=1,
            block=(128, 1, 1), arch="sm_90a")
    def k(A, D):
        a_desc = A.tma_desc()
        (pd,) = ptx.global_ptrs(D)
        s = smem.alloc(bf16, (64, 64), swizzle=128)
        bar = smem.alloc(b64, (1,), align=8)
        tid = reg.scalar(u32)
        ptx.inst.mov.u32(tid, ptx.special.tid.x())
        for i in ptx.range_(tid, 64 * 64 // 2, 128):
            ptx.inst.st.shared.u32(ptx.addr(s.base + i * 4), ONES)
        ptx.inst.fence.proxy.async_.shared__cta()
        with ptx.if_(tid == 0):
            ptx.mbarrier.init(bar.base, 1)
        ptx.bar.sync(0)
        acc = ptx.wgmma.accumulator(8, f32, init=0.0)
        d = ptx.wgmma.descriptor(s)
        ptx.wgmma.fence()
        ptx.wgmma.mma(acc, d, d, ab_type=bf16)  # tma-mma
        ptx.wgmma.commit()
        if wait_first:
            ptx.wgmma.wait(0)
        with ptx.if_(tid == 0):
            ptx.mbarrier.arrive_expect_tx(bar.base, 64 * 64 * 2)
            ptx.tma.load(s.base, a_desc, (0, 0), bar.base)  # tma-refill
        if not wait_first:
            ptx.wgmma.wait(0)
        ptx.mbarrier.wait(bar.base, 0)
        ptx.inst.st.global_.f32(ptx.addr(pd + tid * 4), acc[0])
    return k


def test_tma_refill_after_wait_group_runs():
    a = np.zeros((64, 64), np.uint16)
    np.testing.assert_array_equal(tma_into_wgmma_operand(True).interpret(a),
                                  np.full(128, 16.0))


def test_tma_refill_of_an_operand_in_flight_is_refused():
    a = np.zeros((64, 64), np.uint16)
    with raises_at("tma-refill", "wgmma.mma_async at .*:%d" % line_of("tma-mma"),
                   "may still be reading"):
        tma_into_wgmma_operand(False).interpret(a)


def staged_ring(release_after_wait: bool):
    """Warp-specialized: thread 0 (producer) TMA-loads a 64 x 64 bf16 stage of ones, then,
    once "empty" completes, a stage of twos; warpgroup 1 (consumer) waits on "full", runs
    a wgmma on the stage, and lane 0 of warp 7 (not the warp holding thread 128, whose
    reads the wgmma's are) releases it on "empty", after ``wgmma.wait_group 0`` or (the
    bug) before it. Every accumulator element: 16 + 64."""
    box = TMA(box=(64, 64), swizzle=128)

    @kernel(in_specs=(Tile(128, 64, bf16, tma=box),), out_specs=(Tile(128, f32),), grid=1,
            block=(256, 1, 1), arch="sm_90a")
    def k(A, D):
        a_desc = A.tma_desc()
        (pd,) = ptx.global_ptrs(D)
        s = smem.alloc(bf16, (64, 64), swizzle=128)
        bars = smem.alloc(b64, (2,), align=8)
        full, empty = bars.base, bars.base + 8
        tid = reg.scalar(u32)
        ptx.inst.mov.u32(tid, ptx.special.tid.x())
        with ptx.if_(tid == 0):
            ptx.mbarrier.init(full, 1)
            ptx.mbarrier.init(empty, 1)
        ptx.bar.sync(0)
        with ptx.if_(tid == 0):
            for i in range(2):
                if i:
                    ptx.mbarrier.wait(empty, 0)
                ptx.mbarrier.arrive_expect_tx(full, 64 * 64 * 2)
                ptx.tma.load(s.base, a_desc, (0, 64 * i), full)  # ring-load
        with ptx.if_(tid >> 7 == 1):
            acc = ptx.wgmma.accumulator(8, f32, init=0.0)
            d = ptx.wgmma.descriptor(s)
            for i in range(2):
                ptx.mbarrier.wait(full, i)
                ptx.wgmma.fence()
                ptx.wgmma.mma(acc, d, d, ab_type=bf16)  # ring-mma
                ptx.wgmma.commit()
                if release_after_wait:
                    ptx.wgmma.wait(0)
                with ptx.if_(tid == 224):
                    ptx.mbarrier.arrive(empty)
                if not release_after_wait:
                    ptx.wgmma.wait(0)
            ptx.inst.st.global_.f32(ptx.addr(pd + (tid - 128) * 4), acc[0])
    return k


def _ones_then_twos():
    a = np.zeros((128, 64), np.uint16)
    a[:64], a[64:] = 0x3F80, 0x4000     # bf16 1.0 and 2.0
    return a


def test_stage_released_by_another_warp_after_wait_group_runs():
    np.testing.assert_array_equal(staged_ring(True).interpret(_ones_then_twos()),
                                  np.full(128, 80.0))


def test_stage_released_before_wait_group_is_refused():
    """The consumer's wait_group comes (in this schedule) before the refill, but nothing
    orders the refill after it: the release came first."""
    with raises_at("ring-load", "race", r"thread \(128, 0, 0\) read it through the "
                   r"wgmma\.mma_async.* at .*:%d" % line_of("ring-mma")):
        staged_ring(False).interpret(_ones_then_twos())


# ---------------------------------------------------------------- bulk stores at exit
def tma_store(wait: bool):
    @kernel(in_specs=(), out_specs=(Tile(8, 16, f32, tma=BOX),), grid=1, block=(128, 1, 1),
            arch="sm_90a")
    def k(C):
        c_desc = C.tma_desc()
        tile = smem.alloc(f32, (8, 16), align=128)
        tid = reg.scalar(u32)
        ptx.inst.mov.u32(tid, ptx.special.tid.x())
        v = reg.scalar(f32)
        ptx.inst.cvt.rn.f32.u32(v, tid)
        ptx.inst.st.shared.f32(ptx.addr(tile.base + tid * 4), v)
        ptx.inst.fence.proxy.async_.shared__cta()
        ptx.bar.sync(0)
        with ptx.if_(tid == 0):
            ptx.tma.store(c_desc, (0, 0), tile.base)  # store-exit
            ptx.tma.commit()
            if wait:
                ptx.tma.wait(0, read=True)
    return k


def test_tma_store_retired_before_exit_runs():
    np.testing.assert_array_equal(tma_store(True).interpret().reshape(-1),
                                  np.arange(128, dtype=np.float32))


def test_tma_store_group_not_retired_at_exit_is_refused():
    with raises_at("store-exit", "group is not retired when its thread exits"):
        tma_store(False).interpret()


# ---------------------------------------------------------------- mbarrier.init
def init_then_arrive(sync: bool):
    """Thread 0 initialises an mbarrier of count 2; lane 0 of warps 0 and 1 arrive and
    every thread waits; ``sync``: a bar.sync between the init and the other warp's use."""
    @kernel(in_specs=(), out_specs=(Tile(64, u32),), grid=1, block=(64, 1, 1), arch="sm_90a")
    def k(D):
        (pd,) = ptx.global_ptrs(D)
        bar = smem.alloc(b64, (1,), align=8)
        tid = reg.scalar(u32)
        ptx.inst.mov.u32(tid, ptx.special.tid.x())
        with ptx.if_(tid == 0):
            ptx.mbarrier.init(bar.base, 2)
        if sync:
            ptx.bar.sync(0)
        with ptx.if_((tid & 31) == 0):
            ptx.mbarrier.arrive(bar.base)  # early-arrive
        ptx.mbarrier.wait(bar.base, 0)
        ptx.inst.st.global_.u32(ptx.addr(pd + tid * 4), tid)
    return k


def test_mbarrier_init_ordered_by_bar_sync_runs():
    np.testing.assert_array_equal(init_then_arrive(True).interpret(), np.arange(64))


def test_mbarrier_used_by_another_warp_before_its_init_is_ordered_is_refused():
    with raises_at("early-arrive", r"nothing orders that mbarrier\.init before this use",
                   r"thread \(32, 0, 0\)"):
        init_then_arrive(False).interpret()


# ---------------------------------------------------------------- practical hangs
def test_an_endless_loop_stops_within_the_time_budget():
    import time

    from ptxdsl.core.types import pred

    @kernel(in_specs=(), out_specs=(), grid=1, block=(32, 1, 1))
    def spin():
        # a counter that changes every round: no fixed point (test_simt_model.py), so the
        # time budget stops it
        x, more = reg.scalar(u32, init=0), reg.scalar(pred)
        ptx.label("top")
        # the loop on one line: the budget may run out at any of its three instructions
        # (which one depends on the machine's load), and the error names that one's line
        ptx.inst.add.u32(x, x, 1); ptx.inst.setp.ne.u32(more, x, 0); ptx.bra("top", pred=more)  # spin
    t0 = time.process_time()
    with raises_at("spin", r"CPU seconds", r"max_seconds="):
        spin.interpret(max_seconds=0.5)
    assert time.process_time() - t0 < 20


@pytest.mark.parametrize("grid,block", [((1, 65536, 1), (32, 1, 1)), ((1, 1, 65536), (32, 1, 1)),
                                        ((1, 1, 1), (1, 1, 128)), ((2**31, 1, 1), (32, 1, 1)),
                                        ((1, 1, 1), (64, 32, 1))])
def test_launch_shapes_the_gpu_refuses_are_refused(grid, block):
    from ptxdsl.core.errors import PtxdslError

    # refused where the kernel is defined (a fixed grid and block) or at the latest its run
    with pytest.raises(PtxdslError, match="no CUDA device launches more than"):
        @kernel(in_specs=(), out_specs=(), grid=grid, block=block)
        def empty():
            ptx.inst.exit()
        empty.interpret()


def test_deeply_nested_regions_run():
    import contextlib

    @kernel(in_specs=(), out_specs=(Tile(32, u32),), grid=1, block=(32, 1, 1))
    def deep(D):
        (pd,) = ptx.global_ptrs(D)
        tid = reg.scalar(u32)
        ptx.inst.mov.u32(tid, ptx.special.tid.x())
        x = reg.scalar(u32, init=0)
        with contextlib.ExitStack() as st:
            for i in range(300):
                st.enter_context(ptx.if_(tid < 1000 + i))
                ptx.inst.add.u32(x, x, 1)
        ptx.inst.st.global_.u32(ptx.addr(pd + tid * 4), x)
    np.testing.assert_array_equal(deep.interpret(), np.full(32, 300))


def published_init(fence: bool):
    """Clusters of 2: thread 0 of each CTA initialises an mbarrier (count 1), the cluster
    meets at a ``.relaxed`` cluster barrier, thread 0 of each CTA arrives on its peer's
    mbarrier and every thread waits on its own. ``fence``: fence.mbarrier_init after the
    init (what publishes it to the cluster before a relaxed arrival)."""
    @kernel(in_specs=(), out_specs=(Tile(64, u32),), grid=2, block=(32, 1, 1),
            cluster=(2, 1, 1), arch="sm_90a")
    def k(D):
        (pd,) = ptx.global_ptrs(D)
        bar = smem.mbarrier(1)
        tid, rank = reg.scalar(u32), reg.scalar(u32)
        ptx.inst.mov.u32(tid, ptx.special.tid.x())
        ptx.inst.mov.u32(rank, ptx.special.cluster_ctarank())
        bar.init_all(1, pred=tid == 0)
        if fence:
            ptx.fence.mbarrier_init(pred=tid == 0)
        ptx.cluster.arrive(relaxed=True, aligned=True)
        ptx.cluster.wait(aligned=True)
        ptx.mbarrier.arrive_remote(bar[0], rank ^ 1, pred=tid == 0)  # peer-arrive
        bar[0].wait(0)
        ptx.inst.st.global_.u32(ptx.addr(pd + (rank * 32 + tid) * 4), tid)
        ptx.cluster.sync(aligned=True)
    return k


def test_mbarrier_init_published_with_fence_mbarrier_init_runs():
    np.testing.assert_array_equal(published_init(True).interpret(), np.tile(np.arange(32), 2))


def test_mbarrier_init_unpublished_to_the_cluster_is_refused():
    with raises_at("peer-arrive", r"nothing orders that mbarrier\.init before this use"):
        published_init(False).interpret()


# ---------------------------------------------------------------- roles at named barriers
def roles_at_barriers(shared_id: bool):
    """Two warpgroups each sync their own 128 threads at a counted named barrier (ids 1
    and 2, or both at id 1), then read a neighbour's slot."""
    @kernel(in_specs=(), out_specs=(Tile(256, u32),), grid=1, block=(256, 1, 1))
    def k(D):
        (pd,) = ptx.global_ptrs(D)
        s = smem.alloc(u32, (256,), align=4)
        tid = reg.scalar(u32)
        ptx.inst.mov.u32(tid, ptx.special.tid.x())
        ptx.inst.st.shared.u32(ptx.addr(s.base + tid * 4), tid)
        with ptx.if_(tid >> 7 == 0):
            ptx.named_barrier(1, count=128).sync()  # role-0
        with ptx.else_():
            ptx.named_barrier(1 if shared_id else 2, count=128).sync()  # role-1
        v = reg.scalar(u32)
        ptx.inst.ld.shared.u32(v, ptx.addr(s.base + (tid ^ 1) * 4))
        ptx.inst.st.global_.u32(ptx.addr(pd + tid * 4), v)
    return k


def test_roles_at_their_own_named_barriers_run():
    np.testing.assert_array_equal(roles_at_barriers(False).interpret(), np.arange(256) ^ 1)


def test_roles_sharing_a_named_barrier_id_are_refused():
    with raises_at("role-1", r"warps \[4, 5, 6, 7\] follows one of warps \[0, 1, 2, 3\] "
                             r"\(at .*:%d\)" % line_of("role-0"), "own barrier id"):
        roles_at_barriers(True).interpret()
