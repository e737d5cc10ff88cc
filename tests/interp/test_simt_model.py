"""Issue #47 items 9 and 10: an atomic and a plain store racing on one counter, a
``bar.sync`` skipped by a thread-dependent ``bra``, and loops that make no progress
(polling a flag nobody sets, spinning on nothing), reported at the user's line within
seconds; their correct twins run clean with the GPU's numbers."""
from __future__ import annotations

import time

import numpy as np
import pytest

from ptxdsl import Tile, kernel, ptx, reg, smem
from ptxdsl.core.types import b64, pred, u32, u64
import located

line_of, raises_at = located.for_file(__file__)


def tid_reg():
    t = reg.scalar(u32)
    ptx.inst.mov.u32(t, ptx.special.tid.x())
    return t


# ---------------------------------------------------------------- atomics and plain stores
def counter(mode: str):
    """64 threads; the counter starts at 0 (a bar.sync after thread 0's store). ``mode``:

    * "atomics": every thread adds 1 atomically, a bar.sync, every thread reads it;
    * "reset-in-warp": warp 0 adds, then lane 0 stores 0 with no sync of its warp;
    * "reset-after-syncwarp": the same with bar.warp.sync before the store;
    * "reset-other-warp": warp 0 adds, thread 32 stores 0 with nothing between;
    * "last-resets": every thread adds with atom; the one that saw 63 stores 0.
    """
    @kernel(in_specs=(), out_specs=(Tile(64, u32),), grid=1, block=(64, 1, 1))
    def k(Y):
        (py,) = ptx.global_ptrs(Y)
        c = smem.alloc(u32, (1,))
        tid = tid_reg()
        zero = reg.scalar(u32, init=0)
        with ptx.if_(tid == 0):
            c[0] = zero
        ptx.bar.sync(0)
        if mode in ("atomics", "last-resets"):
            old = reg.scalar(u32)
            ptx.inst.atom.shared.add.u32(old, c.addr(0), 1)
            if mode == "last-resets":
                with ptx.if_(old == 63):
                    c[0] = zero
        else:
            with ptx.if_(tid < 32):
                ptx.inst.red.shared.add.u32(c.addr(0), 1)  # warp-adds
            if mode == "reset-after-syncwarp":
                ptx.inst.bar.warp.sync(0xFFFFFFFF)
            with ptx.if_(tid == (32 if mode == "reset-other-warp" else 0)):
                c[0] = zero  # plain-reset
        ptx.bar.sync(0)
        v = c[0]
        ptx.inst.st.global_.u32(ptx.addr(py + tid * 4), v)
    return k


@pytest.mark.parametrize("mode,value", [("atomics", 64), ("reset-after-syncwarp", 0),
                                        ("last-resets", 0)])
def test_atomic_counters_run(mode, value):
    np.testing.assert_array_equal(counter(mode).interpret(), np.full(64, value))


def test_plain_store_after_atomics_of_its_own_warp_is_refused():
    """The lanes of one warp are not ordered by their atomics: lane 0's store races with
    lane 31's add (the atomics of one instruction apply in lane order)."""
    with raises_at("plain-reset", "race", "writes it", r"thread \(31, 0, 0\) updated it"):
        counter("reset-in-warp").interpret()


def test_plain_store_after_atomics_of_another_warp_is_refused():
    with raises_at("plain-reset", "race", r"thread \(31, 0, 0\) updated it",
                   r"\[CTA \(0, 0, 0\) thread \(32, 0, 0\)\]"):
        counter("reset-other-warp").interpret()


# ---------------------------------------------------------------- bar.sync skipped by bra
def skipped_barrier(mode: str):
    """Every thread writes its slot, then ``@p bra skip`` jumps over a ``bar.sync`` and
    threads read a neighbour's slot. ``mode``:

    * "uniform": p is ctaid.x > 0 (the whole CTA 1 skips both barriers and the read);
    * "meets-later": p is tid >= 32, and a second bar.sync follows the label;
    * "counted-exit": p is tid >= 32 and the barrier is ``bar.sync 1, 64``; the
      skipping threads exit.
    """
    @kernel(in_specs=(), out_specs=(Tile(2, 64, u32),), grid=2, block=(64, 1, 1))
    def k(Y):
        (py,) = ptx.global_ptrs(Y)
        s = smem.alloc(u32, (64,))
        tid = tid_reg()
        cta = reg.scalar(u32)
        ptx.inst.mov.u32(cta, ptx.special.ctaid.x())
        out = ptx.addr(py + (cta * 64 + tid) * 4)
        s[tid] = tid
        skip = ptx.new_label("skip")
        ptx.bra(skip, pred=(cta > 0) if mode == "uniform" else (tid >= 32))  # skip-bra
        if mode == "counted-exit":
            ptx.bar.sync(1, 64)  # counted-barrier
        else:
            ptx.bar.sync(0)  # first-barrier
        if mode != "meets-later":
            ptx.inst.st.global_.u32(out, s[tid ^ 32])
        ptx.place(skip)
        if mode == "meets-later":
            ptx.bar.sync(0)  # second-barrier
            ptx.inst.st.global_.u32(out, s[tid ^ 32])
    return k


def test_barrier_skipped_by_a_uniform_branch_runs():
    y = skipped_barrier("uniform").interpret(np.zeros((2, 64), np.uint32))
    np.testing.assert_array_equal(y[0], np.arange(64) ^ 32)
    np.testing.assert_array_equal(y[1], 0)


def test_barrier_skipped_by_a_thread_dependent_branch_is_refused():
    """Warp 1 jumps past the first bar.sync and arrives at the second one while warp 0
    waits at the first: the GPU pairs them (and then warp 0 waits at the second alone)."""
    with raises_at("second-barrier", "every thread of the CTA must reach the same .aligned",
                   r"warps \[1\] arrive here while warps \[0\] wait at .*:%d"
                   % line_of("first-barrier")):
        skipped_barrier("meets-later").interpret()


def test_counted_barrier_skipped_by_threads_that_exit_deadlocks():
    """A counted barrier is not released by exits (the PTX ISA releases only barriers
    that wait for all threads): the GPU hangs."""
    with raises_at("counted-barrier", "deadlock", "barrier 1: 32 of the 64 threads"):
        skipped_barrier("counted-exit").interpret()


def rounds(uniform: bool):
    """Three rounds of a loop with a bar.sync that round 0 skips (``@p bra``): the whole
    CTA (``uniform``), or warp 1 only (which then meets warp 0 a round late)."""
    @kernel(in_specs=(), out_specs=(Tile(64, u32),), grid=1, block=(64, 1, 1))
    def k(Y):
        (py,) = ptx.global_ptrs(Y)
        s = smem.alloc(u32, (64,))
        tid = tid_reg()
        r, more, v = reg.scalar(u32, init=0), reg.scalar(pred), reg.scalar(u32, init=0)
        ptx.label("round")
        s[tid] = tid + r
        skip = ptx.new_label("skip")
        ptx.bra(skip, pred=(r == 0) if uniform else ((r == 0) & (tid >= 32)))
        ptx.bar.sync(0)  # round-barrier
        ptx.inst.add.u32(v, v, s[tid ^ 32])
        ptx.bar.sync(0)
        ptx.place(skip)
        ptx.inst.add.u32(r, r, 1)
        ptx.inst.setp.lt.u32(more, r, 3)
        ptx.bra("round", pred=more)
        ptx.inst.st.global_.u32(ptx.addr(py + tid * 4), v)
    return k


def test_barrier_skipped_by_the_whole_cta_in_one_round_runs():
    np.testing.assert_array_equal(rounds(True).interpret(), 2 * (np.arange(64) ^ 32) + 3)


def test_barrier_skipped_by_some_warps_in_one_round_is_refused():
    with raises_at("round-barrier", r"warps \[0, 1\] meet", "1 times and others 2 times",
                   "earlier round"):
        rounds(False).interpret()


# ---------------------------------------------------------------- no progress
def flag_poll(mode: str, setter: int = 32):
    """A thread polls Y[0] (``ld.volatile``) until it reads 1, then copies Y[1] to Y[2].
    ``mode``:

    * "set": thread 0 polls; thread ``setter``, in a branch written after the polling
      one, stores 7 to Y[1] and releases 1 to Y[0] (thread 1: a lane of the poller's warp,
      which independent thread scheduling lets run);
    * "unset": thread 0 polls and nobody sets the flag;
    * "after-barrier": thread 32 polls; warp 1 then branches past a bar.sync after which
      thread 0 would set the flag (on the GPU: a hang).
    """
    @kernel(in_specs=(), out_specs=(Tile(64, u32),), grid=1, block=(64, 1, 1))
    def k(Y):
        (py,) = ptx.global_ptrs(Y)
        tid = tid_reg()
        poller = 32 if mode == "after-barrier" else 0
        with ptx.if_(tid == poller):
            v, again = reg.scalar(u32), reg.scalar(pred)
            with ptx.loop("poll", pred=again):  # poll-loop
                ptx.inst.ld.volatile.global_.u32(v, ptx.addr(py))  # poll-load
                ptx.inst.setp.ne.u32(again, v, 1)
            w = reg.scalar(u32)
            ptx.inst.ld.relaxed.gpu.global_.u32(w, ptx.addr(py + 4))
            ptx.inst.st.global_.u32(ptx.addr(py + 8), w)
        if mode == "set":
            with ptx.if_(tid == setter):
                ptx.inst.st.relaxed.gpu.global_.u32(ptx.addr(py + 4), 7)
                ptx.inst.st.release.gpu.global_.u32(ptx.addr(py), 1)
        if mode == "after-barrier":
            done = ptx.new_label("done")
            ptx.bra(done, pred=tid >= 32)
            ptx.bar.sync(0)  # barrier-wait
            with ptx.if_(tid == 0):
                ptx.inst.st.relaxed.gpu.global_.u32(ptx.addr(py + 4), 7)
                ptx.inst.st.release.gpu.global_.u32(ptx.addr(py), 1)
            ptx.place(done)
    return k


@pytest.mark.parametrize("setter", [32, 1])
def test_flag_set_by_a_later_branch_runs(setter):
    y = flag_poll("set", setter).interpret(np.zeros(64, np.uint32))
    np.testing.assert_array_equal(y[:3], [1, 7, 7])


def test_flag_nobody_sets_is_reported_promptly():
    t0 = time.process_time()
    with raises_at("poll-loop", "no progress", "spins", r"ld\.volatile\.global\.u32 at "
                   r".*:%d reads global 0x[0-9a-f]+ \(at byte 0 of Y" % line_of("poll-load"),
                   "which holds 0"):
        flag_poll("unset").interpret(np.zeros(64, np.uint32))
    assert time.process_time() - t0 < 10


def test_flag_set_after_a_barrier_the_poller_skipped_is_reported():
    """Warp 1 polls a flag warp 0 sets after a bar.sync; warp 1 reached the poll by
    branching past that bar.sync (it waits for warp 1's exit, which never comes)."""
    with raises_at("poll-loop", "no progress", r"waits at .*:%d: bar\.sync"
                   % line_of("barrier-wait"), "spins at"):
        flag_poll("after-barrier").interpret(np.zeros(64, np.uint32))


def test_an_empty_endless_loop_is_reported_promptly():
    @kernel(in_specs=(), out_specs=(), grid=1, block=(64, 1, 1))
    def spin():
        ptx.label("top")
        ptx.inst.bra("top")  # empty-spin
    t0 = time.process_time()
    with raises_at("empty-spin", "no progress", "reads no memory at all"):
        spin.interpret()               # the default budget: found long before it
    assert time.process_time() - t0 < 10


def test_try_wait_loop_on_a_barrier_nobody_completes_is_reported_promptly():
    @kernel(in_specs=(), out_specs=(), grid=1, block=(64, 1, 1), arch="sm_90a")
    def k():
        bar = smem.alloc(b64, (1,), align=8)
        tid = tid_reg()
        with ptx.if_(tid == 0):
            ptx.mbarrier.init(bar.base, 1)
        ptx.bar.sync(0)
        ptx.mbarrier.wait(bar.base, 0)  # never-completes
    t0 = time.process_time()
    with raises_at("never-completes", "deadlock", "waiting for 1 more arrivals"):
        k.interpret()
    assert time.process_time() - t0 < 10


def test_deep_mixed_nesting_with_a_barrier_inside_runs():
    """200 levels of alternating ptx.if_ and ptx.range_ with a bar.sync at the bottom (the
    scheduled, generator path)."""
    @kernel(in_specs=(), out_specs=(Tile(64, u32),), grid=1, block=(64, 1, 1))
    def deep(D):
        (pd,) = ptx.global_ptrs(D)
        tid = tid_reg()
        cta = reg.scalar(u32)
        ptx.inst.mov.u32(cta, ptx.special.ctaid.x())
        x = reg.scalar(u32, init=0)

        def nest(d):
            ptx.inst.add.u32(x, x, 1)
            if d == 0:
                ptx.bar.sync(0)
            elif d % 2:
                with ptx.if_(cta < 1000 + d):   # CTA-uniform: bar.sync may be inside
                    nest(d - 1)
            else:
                for _ in ptx.range_(1):
                    nest(d - 1)
        nest(200)
        ptx.inst.st.global_.u32(ptx.addr(pd + tid * 4), x)
    np.testing.assert_array_equal(deep.interpret(), np.full(64, 201))


def turns(first: int, timeout: bool = False):
    """Two CTAs take turns through a semaphore Y[0]: thread 0 of each spins
    (``ld.acquire``) until Y[0] counts its turn, appends its CTA id at Y[1 + turn] and
    passes the turn on (``red.release``). CTA ``first`` goes first (CTA 1 first: the
    batch's earlier CTA waits for the later one). ``timeout``: each spin also reads
    ``%globaltimer`` and traps past a bound (the ops' grid-wait idiom), and the turns
    never come (both CTAs wait for turn 1)."""
    @kernel(in_specs=(), out_specs=(Tile(4, u32),), grid=2, block=(32, 1, 1))
    def k(Y):
        (py,) = ptx.global_ptrs(Y)
        tid = tid_reg()
        cta = reg.scalar(u32)
        ptx.inst.mov.u32(cta, ptx.special.ctaid.x())
        with ptx.if_(tid == 0):
            turn = reg.scalar(u32)
            ptx.inst.xor.b32(turn, cta, first)
            if timeout:
                ptx.inst.mov.u32(turn, 1)
            t0 = reg.scalar(u64)
            ptx.inst.mov.u64(t0, ptx.special.globaltimer())
            top = ptx.label("turn")
            now = reg.scalar(u32)
            ptx.inst.ld.acquire.gpu.global_.u32(now, ptx.addr(py))  # turn-load
            if timeout:
                t = reg.scalar(u64)
                ptx.inst.mov.u64(t, ptx.special.globaltimer())
                ptx.inst.trap(pred=(t - t0) > 10**12)
            ptx.bra(top, pred=now != turn)  # turn-spin
            ptx.inst.st.global_.u32(ptx.addr(py + 4 + turn * 4), cta)
            ptx.inst.red.release.gpu.global_.add.u32(ptx.addr(py), 1)
    return k


@pytest.mark.parametrize("first", [0, 1])
def test_ctas_taking_turns_through_a_semaphore_run(first):
    y = turns(first).interpret(np.zeros(4, np.uint32))
    np.testing.assert_array_equal(y, [2, first, first ^ 1, 0])


def test_a_timed_spin_for_a_turn_that_never_comes_is_reported():
    """The timer keeps changing, but nothing the loop waits for does."""
    with raises_at("turn-spin", "no progress", r"ld\.acquire\.gpu\.global\.u32 at .*:%d"
                   % line_of("turn-load"), "which holds 0"):
        turns(0, timeout=True).interpret(np.zeros(4, np.uint32))


@pytest.mark.parametrize("block", [(1, 1, 64), (1024, 1, 1), (2, 8, 64)])
def test_the_largest_launch_shapes_the_gpu_takes_run(block):
    """The refused shapes are in test_async_model.py; the limits themselves run (and the
    grid's, (2^31 - 1, 65535, 65535), pass the same check without running)."""
    from ptxdsl.core.limits import check_dims

    n = block[0] * block[1] * block[2]

    @kernel(in_specs=(), out_specs=(Tile(n, u32),), grid=1, block=block)
    def k(Y):
        (py,) = ptx.global_ptrs(Y)
        x, y, z = (reg.scalar(u32) for _ in range(3))
        ptx.inst.mov.u32(x, ptx.special.tid.x())
        ptx.inst.mov.u32(y, ptx.special.tid.y())
        ptx.inst.mov.u32(z, ptx.special.tid.z())
        lin = (z * block[1] + y) * block[0] + x
        ptx.inst.st.global_.u32(ptx.addr(py + lin * 4), z)
    np.testing.assert_array_equal(k.interpret(), np.arange(n) // (block[0] * block[1]))
    check_dims((2**31 - 1, 65535, 65535), block, "k", None)


def test_a_delay_loop_on_the_clock_runs():
    """A loop whose closing branch reads %clock64 ends when the time has passed (the
    timer is left out of a loop's state only when it does not decide the loop)."""
    @kernel(in_specs=(), out_specs=(Tile(32, u32),), grid=1, block=(32, 1, 1))
    def delay(Y):
        (py,) = ptx.global_ptrs(Y)
        t0, t = reg.scalar(u64), reg.scalar(u64)
        ptx.inst.mov.u64(t0, ptx.special.clock64())
        top = ptx.label("delay")
        ptx.inst.mov.u64(t, ptx.special.clock64())
        ptx.bra(top, pred=(t - t0) < 5000)
        tid = tid_reg()
        ptx.inst.st.global_.u32(ptx.addr(py + tid * 4), tid)
    np.testing.assert_array_equal(delay.interpret(), np.arange(32))


def test_a_poll_with_a_retry_count_sees_a_flag_set_by_a_later_warp():
    """Thread 0 polls Y[0] at most 100000 times (then gives up and writes 99); warp 1,
    written after it, sets the flag: the GPU runs both, so the poll sees it (the
    interpreter lets a long loop's warp make way for the others)."""
    @kernel(in_specs=(), out_specs=(Tile(64, u32),), grid=1, block=(64, 1, 1))
    def k(Y):
        (py,) = ptx.global_ptrs(Y)
        tid = tid_reg()
        with ptx.if_(tid == 0):
            v, n, again = reg.scalar(u32), reg.scalar(u32, init=0), reg.scalar(pred)
            with ptx.loop("retry", pred=again):
                ptx.inst.ld.volatile.global_.u32(v, ptx.addr(py))
                ptx.inst.add.u32(n, n, 1)
                ptx.inst.setp.ne.and_.u32(again, v, 1, n < 100000)
            ptx.inst.selp.u32(v, 7, 99, v == 1)
            ptx.inst.st.global_.u32(ptx.addr(py + 8), v)
        with ptx.if_(tid == 32):
            ptx.inst.st.release.gpu.global_.u32(ptx.addr(py), 1)
    y = k.interpret(np.zeros(64, np.uint32))
    assert list(y[:3]) == [1, 0, 7]
