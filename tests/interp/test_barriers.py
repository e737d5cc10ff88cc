"""Named CTA barriers on the interpreter (ptxdsl/interp/barriers.py): 16 per CTA, a
per-warpgroup id at one instruction, per-warp arrival counts, happens-before only among
the participants, bar.red reductions, and located errors for misuse."""
from __future__ import annotations


import numpy as np
import pytest

from ptxdsl import Tile, kernel, ptx, reg, smem
from ptxdsl.core.types import pred, u32
import located
from barrier_kernels import (bar_red_kernel, barrier_red_kernel, divergent_barrier_red_kernel,
                             tid_reg)



line_of, raises_at = located.for_file(__file__)


def per_warpgroup_exchange(cross: bool = False):
    """Three warpgroups; warpgroups 1 and 2 each write 128 words, meet at their own
    barrier (id = warpgroup, count 128: one ``bar.sync`` instruction, two ids) and read
    their neighbour's word (``cross``: a word of the *other* warpgroup, unordered)."""
    @kernel(in_specs=(), out_specs=(Tile(384, u32),), grid=1, block=(384, 1, 1))
    def k(Y):
        (py,) = ptx.global_ptrs(Y)
        buf = smem.alloc(u32, (384,))
        tid = tid_reg()
        wg = tid >> 7
        with ptx.if_(wg != 0):
            buf[tid] = tid * 3
            ptx.inst.bar.sync(wg, 128)
            if cross:
                other = tid ^ 128 ^ 256
                nb = (other & 0x180) | ((other + 1) & 127)
            else:
                nb = (tid & 0x180) | ((tid + 1) & 127)
            v = buf[nb]  # cross-read
            ptx.inst.st.global_.u32(ptx.addr(py + tid * 4), v)
    return k


def test_each_warpgroup_meets_at_its_own_barrier():
    y = per_warpgroup_exchange().interpret()
    t = np.arange(384)
    nb = (t & 0x180) | ((t + 1) & 127)
    np.testing.assert_array_equal(y, np.where(t >= 128, nb * 3, 0))


def test_a_warpgroup_barrier_does_not_order_the_other_warpgroup():
    with raises_at("cross-read", "race"):
        per_warpgroup_exchange(cross=True).interpret()


def test_producer_arrives_consumers_sync_on_per_warpgroup_ids():
    """Warpgroup 0 fills two halves and arrives (bar.arrive id, 256) on barriers 1 and 2;
    warpgroups 1 and 2 each wait at theirs (bar.sync id, 256) and read their half."""
    @kernel(in_specs=(), out_specs=(Tile(384, u32),), grid=1, block=(384, 1, 1))
    def k(Y):
        (py,) = ptx.global_ptrs(Y)
        buf = smem.alloc(u32, (256,))
        tid = tid_reg()
        wg = tid >> 7
        with ptx.if_(wg == 0):
            buf[tid] = tid + 1
            buf[tid + 128] = tid + 1001
            ptx.inst.bar.arrive(1, 256)
            ptx.inst.bar.arrive(2, 256)
        with ptx.else_():
            ptx.inst.bar.sync(wg, 256)
            v = buf[tid - 128]
            ptx.inst.st.global_.u32(ptx.addr(py + tid * 4), v)
    y = k.interpret()
    t = np.arange(384)
    np.testing.assert_array_equal(y[128:256], t[:128] + 1)
    np.testing.assert_array_equal(y[256:], t[:128] + 1001)


def test_barrier_id_out_of_range_in_a_register():
    @kernel(in_specs=(), out_specs=(Tile(64, u32),), grid=1, block=(64, 1, 1))
    def k(Y):
        tid = tid_reg()
        bid = reg.scalar(u32, init=16)
        ptx.inst.bar.sync(bid)  # id-16
    with raises_at("id-16", "barrier id 16 is out of range", "0 to 15"):
        k.interpret()


def test_lanes_of_one_warp_naming_different_barriers():
    @kernel(in_specs=(), out_specs=(Tile(64, u32),), grid=1, block=(64, 1, 1))
    def k(Y):
        tid = tid_reg()
        ptx.inst.bar.sync(tid & 1, 64)  # lane-ids
    with raises_at("lane-ids", "lanes of one warp name different barrier ids",
                   "warp-uniform"):
        k.interpret()


def test_thread_count_not_a_multiple_of_32_in_a_register():
    @kernel(in_specs=(), out_specs=(Tile(64, u32),), grid=1, block=(64, 1, 1))
    def k(Y):
        n = reg.scalar(u32, init=48)
        ptx.inst.bar.sync(1, n)  # count-48
    with raises_at("count-48", "thread count 48", "multiple of the warp size"):
        k.interpret()


def test_two_counts_in_one_generation():
    """Warp 0 waits at barrier 1 for 64 threads; warp 1 arrives there counting 128."""
    @kernel(in_specs=(), out_specs=(Tile(128, u32),), grid=1, block=(128, 1, 1))
    def k(Y):
        tid = tid_reg()
        with ptx.if_(tid < 32):
            ptx.inst.bar.sync(1, 64)
        with ptx.if_((tid >= 32) & (tid < 64)):
            ptx.inst.bar.arrive(1, 128)  # count-128
    with raises_at("count-128", "awaited with 64 threads", "arrived at here with 128"):
        k.interpret()


def test_counts_differing_between_warps_at_one_instruction():
    @kernel(in_specs=(), out_specs=(Tile(128, u32),), grid=1, block=(128, 1, 1))
    def k(Y):
        tid = tid_reg()
        n = reg.scalar(u32)
        ptx.inst.selp.u32(n, 64, 128, tid < 32)
        ptx.inst.bar.sync(1, n)  # two-counts
    with raises_at("two-counts", "name different thread counts"):
        k.interpret()


def test_arrivals_beyond_the_count_are_an_error():
    @kernel(in_specs=(), out_specs=(Tile(128, u32),), grid=1, block=(128, 1, 1))
    def k(Y):
        tid = tid_reg()
        with ptx.if_(tid < 96):
            ptx.inst.bar.arrive(3, 64)  # three-warps
    with raises_at("three-warps", "96 threads arrived but it expects 64"):
        k.interpret()


@pytest.mark.parametrize("ones", [0, 1, 37, 128])
def test_bar_red_popc_and_or(ones):
    x = np.zeros(128, np.uint32)
    x[np.random.default_rng(ones).permutation(128)[:ones]] = 7
    y = bar_red_kernel().interpret(x)
    want = ones + (1000 if ones == 128 else 0) + (100000 if ones else 0)
    np.testing.assert_array_equal(y, np.full(128, want))


@pytest.mark.parametrize("ones", [0, 37, 128])
def test_barrier_cta_red_is_bar_red(ones):
    """barrier.cta.red.*.aligned and barrier.red.* (bar.red's later spellings) give what
    bar.red gives."""
    k = barrier_red_kernel()
    assert "barrier.cta.red.popc.aligned.u32" in k.ptx()
    x = np.zeros(128, np.uint32)
    x[np.random.default_rng(ones).permutation(128)[:ones]] = 7
    want = bar_red_kernel().interpret(x)
    np.testing.assert_array_equal(k.interpret(x), want)


def test_barrier_red_without_aligned_takes_a_warp_arriving_apart():
    """Without .aligned the two halves of each warp reach the barrier at different
    instructions: one generation, every thread counted."""
    np.testing.assert_array_equal(divergent_barrier_red_kernel().interpret(), np.full(64, 40))


def test_bar_red_with_a_count_reduces_over_the_warps_that_arrive():
    """Two groups of 64 threads (warps 0-1 and 2-3) each complete their own generation."""
    @kernel(in_specs=(Tile(128, u32),), out_specs=(Tile(128, u32),), grid=1,
            block=(128, 1, 1))
    def k(X, Y):
        px, py = ptx.global_ptrs(X, Y)
        tid = tid_reg()
        x = reg.scalar(u32)
        ptx.inst.ld.global_.u32(x, ptx.addr(px + tid * 4))
        cnt = reg.scalar(u32)
        ptx.inst.bar.red.popc.u32(cnt, 1 + (tid >> 6), 64, x != 0)
        ptx.inst.st.global_.u32(ptx.addr(py + tid * 4), cnt)
    x = np.zeros(128, np.uint32)
    x[:5] = 1
    x[64:64 + 9] = 1
    np.testing.assert_array_equal(k.interpret(x), np.repeat([5, 9], 64))


def test_bar_red_mixed_with_bar_sync_on_one_generation():
    @kernel(in_specs=(), out_specs=(Tile(64, u32),), grid=1, block=(64, 1, 1))
    def k(Y):
        tid = tid_reg()
        with ptx.if_(tid < 32):
            ptx.inst.bar.sync(4, 64)
        with ptx.else_():
            c = reg.scalar(u32)
            ptx.inst.bar.red.popc.u32(c, 4, 64, tid < 40)  # red-mix
    with raises_at("red-mix", "must all be the same reduction"):
        k.interpret()


def test_bar_red_type_must_fit_the_operation():
    from ptxdsl.core.errors import PtxdslError

    with pytest.raises(PtxdslError, match=r"bar\.red\.popc\.u32"):
        @kernel(block=(32, 1, 1))
        def k():
            p = reg.scalar(pred)
            ptx.inst.bar.red.popc.pred(p, 1, p)
        k.program()


def test_barrier_red_aligned_in_a_warp_divergent_branch_is_refused_at_its_line():
    from ptxdsl.core.errors import VerifyError

    @kernel(in_specs=(), out_specs=(Tile(64, u32),), grid=1, block=(64, 1, 1))
    def k(Y):
        tid = tid_reg()
        cnt = reg.scalar(u32)
        with ptx.if_((tid & 31) < 16):
            ptx.inst.barrier.cta.red.popc.aligned.u32(cnt, 0, tid < 40)  # aligned-apart
    with pytest.raises(VerifyError) as e:
        k.interpret()
    assert f":{line_of('aligned-apart')}:" in str(e.value)
    assert "needs whole warps" in str(e.value) and "non-aligned" in str(e.value)
