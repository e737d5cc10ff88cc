"""Each detector of the interpreter stops a deliberately faulty kernel, naming where;
correct kernels (the seed RMSNorm, barrier-separated shared memory) run silently."""
from __future__ import annotations

import os

import numpy as np
import pytest

from ptxdsl import Tile, kernel, ptx, reg, smem
from ptxdsl.core.types import f32, u32, u64
from seed_kernels import build_rms_norm
import located



HERE = os.path.basename(__file__)
line_of, raises_at = located.for_file(__file__)


def tid_reg():
    t = reg.scalar(u32)
    ptx.inst.mov.u32(t, ptx.special.tid.x())
    return t


# ------------------------------------------------------------------ out of bounds
def make_shift_copy(n, shift):
    @kernel(in_specs=(Tile(n, f32),), out_specs=(Tile(n, f32),), grid=1, block=(n, 1, 1))
    def shift_copy(X, Y):
        px, py = ptx.global_ptrs(X, Y)
        tid = tid_reg()
        v = reg.scalar(f32)
        ptx.inst.ld.global_.f32(v, ptx.addr(px + tid * 4, 4 * shift))  # oob-read
        ptx.inst.st.global_.f32(ptx.addr(py + tid * 4), v)
    return shift_copy


def test_off_by_one_global_read_is_out_of_bounds():
    x = np.arange(64, dtype=np.float32)
    np.testing.assert_array_equal(make_shift_copy(64, 0).interpret(x), x)
    with raises_at("oob-read", "out of bounds", "global read", r"0x7f[0-9a-f]+",
                   "past the end of X", r"thread \(63, 0, 0\)"):
        make_shift_copy(64, 1).interpret(x)


def test_out_of_bounds_shared_write():
    @kernel(in_specs=(), out_specs=(Tile(32, f32),), grid=2, block=(32, 1, 1))
    def smem_oob(Y):
        buf = smem.alloc(f32, (32,))
        tid = tid_reg()
        one = reg.scalar(f32, init=1.0)
        with ptx.if_(tid == 31):
            ptx.inst.st.shared.f32(ptx.addr(buf, 128), one)  # oob-shared
    with raises_at("oob-shared", "out of bounds", "shared write", "smem0",
                   r"CTA \(0, 0, 0\) thread \(31, 0, 0\)"):
        smem_oob.interpret()


def test_null_pointer_faults():
    @kernel(in_specs=(), out_specs=(Tile(32, f32),), grid=1, block=(32, 1, 1))
    def null_store(Y):
        p = reg.scalar(u32, init=0)
        p64 = ptx.cvt(u64, p)
        v = reg.scalar(f32, init=2.0)
        ptx.inst.st.global_.f32(ptx.addr(p64), v)  # null-store
    with raises_at("null-store", "out of bounds", "0x0"):
        null_store.interpret()


# ------------------------------------------------------------------ misaligned
def test_misaligned_v4_load():
    @kernel(in_specs=(Tile(256, f32),), out_specs=(Tile(256, f32),), grid=1, block=(32, 1, 1))
    def v4_copy(X, Y):
        px, py = ptx.global_ptrs(X, Y)
        tid = tid_reg()
        v = [reg.scalar(f32) for _ in range(4)]
        ptx.inst.ld.global_.v4.f32(v, ptx.addr(px + tid * 16, 4))  # misaligned
        ptx.inst.st.global_.v4.f32(ptx.addr(py + tid * 16), v)
    with raises_at("misaligned", "misaligned", "16-byte", "multiple of 16",
                   r"thread \(0, 0, 0\)"):
        v4_copy.interpret(np.zeros(256, np.float32))


# ------------------------------------------------------------------ uninitialised registers
def test_register_written_in_one_branch_read_after_it():
    @kernel(in_specs=(), out_specs=(Tile(64, f32),), grid=1, block=(64, 1, 1))
    def half_init(Y):
        (py,) = ptx.global_ptrs(Y)
        tid = tid_reg()
        v = reg.scalar(f32)
        with ptx.if_(tid < 16):
            ptx.inst.mov.f32(v, 1.0)
        ptx.inst.st.global_.f32(ptx.addr(py + tid * 4), v)  # uninit-read
    with raises_at("uninit-read", "never written", "uninitialised", r"%f\d+",
                   r"thread \(16, 0, 0\)"):
        half_init.interpret()


# ------------------------------------------------------------------ barriers
def test_warps_waiting_at_different_barriers_deadlock():
    """Warp 0 skips barrier 0 and waits at barrier 1; warp 1 waits at barrier 0."""
    @kernel(in_specs=(), out_specs=(Tile(64, f32),), grid=1, block=(64, 1, 1))
    def split_barrier(Y):
        tid = tid_reg()
        skip = ptx.new_label("skip")
        ptx.bra(skip, pred=tid < 32)
        ptx.bar.sync(0)  # partial-barrier
        ptx.place(skip)
        ptx.bar.sync(1)  # other-barrier
    with raises_at("other-barrier", "deadlock", r"warp 0 \(thread \(0, 0, 0\)",
                   f"{HERE}:{line_of('other-barrier')}: bar.sync: barrier 1: 32 of the 64",
                   f"{HERE}:{line_of('partial-barrier')}: bar.sync: barrier 0: 32 of the 64"):
        split_barrier.interpret()


def test_barrier_skipped_by_threads_that_exit_completes():
    """Threads that leave (here: run to the end) no longer count, as on hardware."""
    @kernel(in_specs=(), out_specs=(Tile(64, u32),), grid=1, block=(64, 1, 1))
    def skip_then_exit(Y):
        (py,) = ptx.global_ptrs(Y)
        tid = tid_reg()
        with ptx.if_(tid >= 16):
            ptx.inst.barrier.sync(0)
            ptx.inst.st.global_.u32(ptx.addr(py + tid * 4), tid)
        with ptx.else_():
            ptx.inst.st.global_.u32(ptx.addr(py + tid * 4), tid)
    np.testing.assert_array_equal(skip_then_exit.interpret(), np.arange(64))


def test_aligned_barrier_reached_by_part_of_a_warp():
    @kernel(in_specs=(), out_specs=(Tile(64, f32),), grid=1, block=(64, 1, 1))
    def split_warp(Y):
        tid = tid_reg()
        skip = ptx.new_label("skip")
        ptx.bra(skip, pred=tid < 16)
        ptx.bar.sync(0)  # aligned-split
        ptx.place(skip)
    with raises_at("aligned-split", ".aligned", "every thread of a warp",
                   r"thread \(0, 0, 0\) of this warp is elsewhere"):
        split_warp.interpret()


def test_exited_threads_do_not_block_a_barrier():
    @kernel(in_specs=(), out_specs=(Tile(64, u32),), grid=1, block=(64, 1, 1))
    def early_exit(Y):
        (py,) = ptx.global_ptrs(Y)
        tid = tid_reg()
        with ptx.if_(tid >= 40):
            ptx.exit()
        ptx.bar.sync(0)
        ptx.inst.st.global_.u32(ptx.addr(py + tid * 4), tid)
    y = early_exit.interpret()
    np.testing.assert_array_equal(y, np.where(np.arange(64) < 40, np.arange(64), 0))


# ------------------------------------------------------------------ shared-memory races
def make_neighbour_read(n, with_barrier):
    @kernel(in_specs=(Tile(n, f32),), out_specs=(Tile(n, f32),), grid=1, block=(n, 1, 1))
    def neighbour(X, Y):
        buf = smem.alloc(f32, (n,))
        px, py = ptx.global_ptrs(X, Y)
        tid = tid_reg()
        v = reg.scalar(f32)
        ptx.inst.ld.global_.f32(v, ptx.addr(px + tid * 4))
        buf[tid] = v
        if with_barrier:
            ptx.bar.sync(0)
        nxt = (tid + 1) & (n - 1)
        w = buf[nxt]  # racy-read
        ptx.inst.st.global_.f32(ptx.addr(py + tid * 4), w)
    return neighbour


def test_shared_read_of_a_neighbour_without_barrier_is_a_race():
    x = np.arange(64, dtype=np.float32)
    np.testing.assert_array_equal(make_neighbour_read(64, True).interpret(x), np.roll(x, -1))
    with raises_at("racy-read", "race", "smem0", "reads it", r"thread \(1, 0, 0\)",
                   "no bar.sync"):
        make_neighbour_read(64, False).interpret(x)


def test_two_threads_storing_one_word_is_a_race():
    @kernel(in_specs=(), out_specs=(Tile(32, f32),), grid=1, block=(32, 1, 1))
    def same_word(Y):
        buf = smem.alloc(f32, (4,))
        tid = tid_reg()
        with ptx.if_(tid < 2):
            buf[0] = reg.scalar(f32, init=1.0)  # write-write
    with raises_at("write-write", "race", "writes it"):
        same_word.interpret()


def test_write_after_read_without_barrier_is_a_race():
    @kernel(in_specs=(), out_specs=(Tile(32, f32),), grid=1, block=(32, 1, 1))
    def war(Y):
        (py,) = ptx.global_ptrs(Y)
        buf = smem.alloc(f32, (1,))
        tid = tid_reg()
        with ptx.if_(tid == 0):
            buf[0] = reg.scalar(f32, init=3.0)
        ptx.bar.sync(0)
        v = buf[0]
        ptx.inst.st.global_.f32(ptx.addr(py + tid * 4), v)
        with ptx.if_(tid == 0):
            buf[0] = reg.scalar(f32, init=4.0)  # war
    with raises_at("war", "race", "writes it", "read it"):
        war.interpret()


# ------------------------------------------------------------------ shfl membermask
def make_shuffle(mask):
    @kernel(in_specs=(), out_specs=(Tile(32, u32),), grid=1, block=(32, 1, 1))
    def shuffle(Y):
        (py,) = ptx.global_ptrs(Y)
        tid = tid_reg()
        d = reg.scalar(u32)
        ptx.inst.shfl.sync.bfly.b32(d, tid, 1, 31, mask)  # shfl-mask
        ptx.inst.st.global_.u32(ptx.addr(py + tid * 4), d)
    return shuffle


def test_shfl_lane_outside_membermask():
    np.testing.assert_array_equal(make_shuffle(0xFFFFFFFF).interpret(), np.arange(32) ^ 1)
    with raises_at("shfl-mask", "membermask", r"lane 16", "0x0000ffff"):
        make_shuffle(0x0000FFFF).interpret()


def test_shfl_with_a_membermask_lane_that_does_not_arrive():
    @kernel(in_specs=(), out_specs=(Tile(32, u32),), grid=1, block=(32, 1, 1))
    def partial_shuffle(Y):
        tid = tid_reg()
        d = reg.scalar(u32)
        with ptx.if_(tid < 16):
            ptx.inst.shfl.sync.bfly.b32(d, tid, 1, 31, 0xFFFFFFFF)  # shfl-diverged
    with raises_at("shfl-diverged", "membermask", "do not execute"):
        partial_shuffle.interpret()


# ------------------------------------------------------------------ silent on correct kernels
@pytest.mark.parametrize("B,N", [(3, 128), (2, 4096), (4, 96)])
def test_detectors_are_silent_on_the_seed_rmsnorm(B, N):
    rng = np.random.default_rng(B * N)
    x = rng.standard_normal((B, N)).astype(np.float32)
    w = rng.standard_normal(N).astype(np.float32)
    y = build_rms_norm(B, N).interpret(x, w)
    assert np.all(np.isfinite(y))


# ------------------------------------------------------------------ happens-before (issue 16)
def test_named_barrier_orders_only_its_participants():
    """barrier 1 joins warps 0 and 1; warp 2 reads what warp 0 wrote: still a race."""
    @kernel(in_specs=(), out_specs=(Tile(96, u32),), grid=1, block=(96, 1, 1))
    def pair(Y):
        (py,) = ptx.global_ptrs(Y)
        buf = smem.alloc(u32, (32,))
        tid = tid_reg()
        with ptx.if_(tid < 32):
            buf[tid] = tid
        with ptx.if_(tid < 64):
            ptx.inst.barrier.sync(1, 64)
        with ptx.if_(tid >= 32):
            v = buf[tid & 31]  # pair-read
            ptx.inst.st.global_.u32(ptx.addr(py + tid * 4), v)
    with raises_at("pair-read", "race", r"thread \(64, 0, 0\)", r"thread \(0, 0, 0\) wrote"):
        pair.interpret()


def test_atomic_races_with_a_plain_store():
    @kernel(in_specs=(), out_specs=(Tile(32, u32),), grid=1, block=(64, 1, 1))
    def mixed(Y):
        cell = smem.alloc(u32, (1,))
        tid = tid_reg()
        with ptx.if_(tid == 0):
            cell[0] = tid
        ptx.bar.sync(0)
        with ptx.if_(tid == 40):
            cell[0] = tid  # plain-store
        ptx.inst.red.shared.add.u32(cell.addr(0), 1)  # atomic-add
    with raises_at("atomic-add", "race", "atomically updates", r"thread \(40, 0, 0\) wrote"):
        mixed.interpret()


def test_global_memory_race_between_ctas():
    @kernel(in_specs=(), out_specs=(Tile(32, u32),), grid=2, block=(32, 1, 1))
    def both_write(Y):
        (py,) = ptx.global_ptrs(Y)
        tid = tid_reg()
        ptx.inst.st.global_.u32(ptx.addr(py + tid * 4), tid)  # global-ww
    with raises_at("global-ww", "global-memory data race", "writes it",
                   r"CTA \(0, 0, 0\) thread \(0, 0, 0\) writes"):
        both_write.interpret()


def test_cp_async_destination_read_before_wait_group():
    @kernel(in_specs=(Tile(128, f32),), out_specs=(Tile(128, f32),), grid=1,
            block=(32, 1, 1), arch="sm_90a")
    def early(X, Y):
        px, py = ptx.global_ptrs(X, Y)
        buf = smem.alloc(f32, (128,))
        tid = tid_reg()
        ptx.inst.cp.async_.cg.shared.global_(buf.addr(tid * 4), ptx.addr(px + tid * 16), 16)
        ptx.inst.cp.async_.commit_group()
        v = buf[tid * 4]  # early-read
        ptx.inst.cp.async_.wait_group(0)
        ptx.inst.st.global_.f32(ptx.addr(py + tid * 4), v)
    with raises_at("early-read", "cp.async", "still writing", "wait_group"):
        early.interpret(np.zeros(128, np.float32))


# ------------------------------------------------------------------ uninitialised memory
def test_shared_memory_read_before_any_write():
    @kernel(in_specs=(), out_specs=(Tile(32, f32),), grid=1, block=(32, 1, 1))
    def stale(Y):
        (py,) = ptx.global_ptrs(Y)
        buf = smem.alloc(f32, (64,))
        tid = tid_reg()
        buf[tid] = reg.scalar(f32, init=1.0)
        ptx.bar.sync(0)
        v = buf[tid + 32]  # uninit-shared
        ptx.inst.st.global_.f32(ptx.addr(py + tid * 4), v)
    with raises_at("uninit-shared", "uninitialised memory", "at byte 128 of smem0",
                   r"thread \(0, 0, 0\)"):
        stale.interpret()
    y = stale.interpret(allow_uninitialized=True)
    np.testing.assert_array_equal(y, np.zeros(32, np.float32))


def test_atomic_accumulator_in_an_output_not_passed():
    @kernel(in_specs=(), out_specs=(Tile(1, u32),), grid=1, block=(32, 1, 1))
    def count(Y):
        (py,) = ptx.global_ptrs(Y)
        ptx.inst.red.global_.add.u32(ptx.addr(py), 1)  # uninit-acc
    with raises_at("uninit-acc", "uninitialised memory", "at byte 0 of Y",
                   "outputs the caller does not pass"):
        count.interpret()
    np.testing.assert_array_equal(count.interpret(np.zeros(1, np.uint32)), [32])


@pytest.mark.parametrize("past", [64, 1024, 4096])
def test_shared_overrun_never_lands_in_the_neighbour(past):
    @kernel(in_specs=(), out_specs=(Tile(32, f32),), grid=1, block=(32, 1, 1))
    def overrun(Y):
        a = smem.alloc(f32, (256,))
        b = smem.alloc(f32, (256,))
        tid = tid_reg()
        b[tid] = reg.scalar(f32, init=1.0)
        a[tid] = reg.scalar(f32, init=2.0)
        with ptx.if_(tid == 0):
            a[tid + (255 + past // 4)] = reg.scalar(f32, init=3.0)  # overrun
    with raises_at("overrun", "out of bounds", "past the end of smem0"):
        overrun.interpret()


def test_global_read_4k_past_a_tensor_faults():
    """4 KiB past the end of X: beyond the old 4 KiB guard gap, in Z's bytes."""
    @kernel(in_specs=(Tile(64, f32), Tile(64, f32)), out_specs=(Tile(64, f32),), grid=1,
            block=(64, 1, 1))
    def far(X, Z, Y):
        px, pz, py = ptx.global_ptrs(X, Z, Y)
        tid = tid_reg()
        v = reg.scalar(f32)
        ptx.inst.ld.global_.f32(v, ptx.addr(px + tid * 4, 256 + 4096))  # far-read
        ptx.inst.st.global_.f32(ptx.addr(py + tid * 4), v)
    with raises_at("far-read", "out of bounds global read", "past the end of X"):
        far.interpret(np.zeros(64, np.float32), np.zeros(64, np.float32))


def make_three_readers(released: int):
    """Warps 1, 2, 3 read a shared word one after another (named barriers chain them), each
    then arriving on an mbarrier of ``released`` arrivals; warp 0 waits for its phase and
    overwrites the word. With 3 arrivals every read is ordered before the write (each
    reader's own step is kept, not only the newest); with 2, warp 3's read is not."""
    from ptxdsl.ops._common.ring import wait

    @kernel(in_specs=(), out_specs=(Tile(4, u32),), grid=1, block=(128, 1, 1))
    def three_readers(Y):
        (py,) = ptx.global_ptrs(Y)
        buf = smem.alloc(u32, (4,))
        tid = tid_reg()
        warp, lane = tid >> 5, tid & 31
        done = buf.base + 8
        with ptx.if_(tid == 0):
            buf[0] = reg.scalar(u32, init=1)
            ptx.inst("mbarrier.init.shared::cta.b64", ptx.addr(done), released)
        ptx.bar.sync(0)
        for w in (1, 2, 3):
            with ptx.if_(warp == w):
                if w > 1:
                    ptx.inst.barrier.sync(w - 1, 64)
                with ptx.if_(lane == 0):
                    v = buf[0]  # reader
                    ptx.inst.st.global_.u32(ptx.addr(py + w * 4), v)
                    if w <= released:
                        ptx.inst("mbarrier.arrive.shared::cta.b64", ptx.sink, ptx.addr(done))
                if w < 3:
                    ptx.inst("barrier.arrive", w, 64)
        with ptx.if_(tid == 0):
            wait(iter(range(1)), done, 0)
            buf[0] = reg.scalar(u32, init=2)  # overwrite
            ptx.inst.st.global_.u32(ptx.addr(py), buf[0])
    return three_readers


def test_three_readers_released_at_different_times_are_each_ordered():
    y = make_three_readers(3).interpret()
    assert y.tolist() == [2, 1, 1, 1]


def test_a_third_reader_that_does_not_release_is_a_race():
    with raises_at("overwrite", "race"):
        make_three_readers(2).interpret()
