"""wgmma on the interpreter: descriptors decoded as the hardware does (every swizzle, both
B majors, several N) against float64 numpy, and accumulators unreadable while in flight."""
from __future__ import annotations

import numpy as np
import pytest

from cluster_kernels import build_cluster_addresses
from wgmma_kernels import build_wgmma, random_case
from ptxdsl import Tile, kernel, ptx, reg, smem
from ptxdsl.core.errors import InterpreterError
from ptxdsl.interp.semantics.wgmma import operand_offsets
from ptxdsl.isa.descriptors import SmemDescriptor
from ptxdsl.core.types import bf16, f32


@pytest.mark.parametrize("n,swizzle,mn", [
    (8, 0, False), (16, 32, False), (32, 64, False), (64, 128, False),
    (16, 0, True), (32, 32, True), (64, 64, True), (64, 128, True), (256, 128, False),
    (128, 128, True)])
def test_wgmma_matches_numpy(n, swizzle, mn):
    a_img, b_img, ref = random_case(n, swizzle, mn)
    k = build_wgmma(n, swizzle, mn, len(a_img), len(b_img))
    d = k.interpret(a_img, b_img)
    d = d[0] if isinstance(d, (list, tuple)) else d
    np.testing.assert_allclose(np.asarray(d, np.float64), ref, rtol=1e-5, atol=1e-5)


def test_operand_offsets_k_major_128():
    d = SmemDescriptor(start=0, leading=16, stride=1024, swizzle=128)
    off = operand_offsets(d, 16, 16, 2, False)
    assert off[0, 0] == 0 and off[0, 8] == 16             # row 0: chunks in order
    assert off[1, 0] == 128 + 16 and off[1, 8] == 128      # row 1: chunks swapped
    assert off[8, 0] == 1024                               # next 8-row group: stride


def test_accumulator_is_unreadable_until_wait_group():
    @kernel(block=(128, 1, 1), arch="sm_90a")
    def early():
        s = smem.alloc(bf16, (64, 64), swizzle=128)
        acc = ptx.wgmma.accumulator(8, f32, init=0.0)
        d = ptx.wgmma.descriptor(s)
        ptx.wgmma.fence()
        ptx.wgmma.mma(acc, d, d, ab_type=bf16)
        ptx.wgmma.commit()
        x = reg.scalar(f32)
        ptx.inst.mov.f32(x, acc[0])                         # read before wait_group
        ptx.wgmma.wait(0)
    with pytest.raises(InterpreterError, match=r"still in flight"):
        early.interpret(allow_uninitialized=True)   # (the operands are never written)


def test_expect_tx_and_complete_tx_complete_a_phase():
    from ptxdsl.core.types import b64, pred, u32

    @kernel(out_specs=(Tile(2, u32),), block=(128, 1, 1), arch="sm_90a")
    def tx(Y):
        (py,) = ptx.global_ptrs(Y)
        bars = smem.alloc(b64, (1,), align=8)
        bar = bars.base
        tid = reg.scalar(u32)
        ptx.inst.mov.u32(tid, ptx.special.tid.x())
        with ptx.if_(tid == 0):
            ptx.inst.mbarrier.init.shared__cta.b64(ptx.addr(bar), 1)
            ptx.inst.mbarrier.expect_tx.relaxed.cta.shared__cta.b64(ptx.addr(bar), 64)
            st = reg.scalar(b64)
            ptx.inst.mbarrier.arrive.shared__cta.b64(st, ptx.addr(bar))
            early, done = reg.scalar(pred), reg.scalar(pred)
            ptx.inst.mbarrier.test_wait.shared__cta.b64(early, ptx.addr(bar), st)
            ptx.inst.mbarrier.complete_tx.relaxed.cta.shared__cta.b64(ptx.addr(bar), 64)
            ptx.inst.mbarrier.try_wait.parity.shared__cta.b64(done, ptx.addr(bar), 0, 1000)
            for i, p in enumerate((early, done)):
                v = reg.scalar(u32)
                ptx.inst.selp.u32(v, 1, 0, p)
                ptx.inst.st.global_.u32(ptx.addr(py + i * 4), v)
            ptx.inst.prefetch.global_.L2(ptx.addr(reg.scalar(b64, init=0)))
        ptx.inst.setmaxnreg.dec.sync.aligned.u32(40)
        ptx.inst.griddepcontrol.launch_dependents()
    # before complete_tx the phase still waits for 64 bytes; after it, it is complete
    np.testing.assert_array_equal(tx.interpret(), [0, 1])


def test_complete_tx_beyond_the_expected_bytes_is_an_error():
    from ptxdsl.core.types import b64, u32

    @kernel(block=(32, 1, 1), arch="sm_90a")
    def over():
        bars = smem.alloc(b64, (1,), align=8)
        tid = reg.scalar(u32)
        ptx.inst.mov.u32(tid, ptx.special.tid.x())
        with ptx.if_(tid == 0):
            ptx.inst.mbarrier.init.shared__cta.b64(ptx.addr(bars.base), 1)
            ptx.inst.mbarrier.expect_tx.relaxed.cta.shared__cta.b64(ptx.addr(bars.base), 16)
            ptx.inst.mbarrier.complete_tx.relaxed.cta.shared__cta.b64(ptx.addr(bars.base), 32)
    with pytest.raises(InterpreterError, match=r"16 more transaction bytes"):
        over.interpret()


def test_arrive_into_the_sink():
    from ptxdsl.core.types import b64, u32

    @kernel(block=(32, 1, 1), arch="sm_90a")
    def sink():
        bars = smem.alloc(b64, (1,), align=8)
        tid = reg.scalar(u32)
        ptx.inst.mov.u32(tid, ptx.special.tid.x())
        with ptx.if_(tid == 0):
            ptx.inst.mbarrier.init.shared__cta.b64(ptx.addr(bars.base), 1)
            ptx.inst.mbarrier.arrive.shared__cta.b64(ptx.sink, ptx.addr(bars.base))
    sink.interpret()
    assert "mbarrier.arrive.shared::cta.b64 _, [" in sink.ptx()


# ---------------------------------------------------------------- clusters
@pytest.mark.parametrize("cluster", [1, 2, 4])
def test_shared_addresses_carry_the_cluster_rank(cluster):
    """As an H100 gives them: a shared symbol's address is 0x400 with the CTA's rank in its
    cluster at bit 24 (0x400, 0x1000400, 0x2000400, 0x3000400 in a cluster of 4; 0x400 in
    every CTA of a launch without clusters, whose CTAs are clusters of one)."""
    grid = 8
    out = build_cluster_addresses(cluster, grid).interpret().reshape(grid, 4).view(np.uint32)
    cta = np.arange(grid)
    assert out[:, 0].tolist() == cta.tolist()
    assert out[:, 1].tolist() == (cta % cluster).tolist()
    assert out[:, 2].tolist() == (cta // cluster).tolist()
    assert out[:, 3].tolist() == (0x400 + ((cta % cluster) << 24)).tolist()


def test_another_ctas_shared_address_is_refused_by_a_shared_cta_store():
    """Rank 0 storing through rank 1's address (what mapa would give) with st.shared (a
    .shared::cta access, which reaches this CTA only): refused by name instead of writing
    its own memory (st.shared::cluster reaches rank 1: tests/interp/test_cluster.py)."""
    from ptxdsl.core.types import u8, u32

    @kernel(in_specs=(), out_specs=(Tile(2, f32),), grid=(2, 1, 1), block=(32, 1, 1),
            arch="sm_90a", cluster=(2, 1, 1))
    def poke(O):
        base = smem.alloc(u8, (64,), align=16).base
        other = reg.scalar(u32)
        ptx.inst.add.u32(other, base, 1 << 24)
        ptx.inst.st.shared.u32(ptx.addr(other), 7)

    with pytest.raises(InterpreterError, match=r"CTA of rank 1 \(this thread's CTA is rank "
                                               r"0\): a \.shared::cta access"):
        poke.interpret()


def test_accumulator_is_unwritable_until_wait_group():
    @kernel(block=(128, 1, 1), arch="sm_90a")
    def early_write():
        s = smem.alloc(bf16, (64, 64), swizzle=128)
        acc = ptx.wgmma.accumulator(8, f32, init=0.0)
        d = ptx.wgmma.descriptor(s)
        ptx.wgmma.fence()
        ptx.wgmma.mma(acc, d, d, ab_type=bf16)
        ptx.wgmma.commit()
        ptx.inst.mov.f32(acc[3], 1.0)                       # written while in flight
        ptx.wgmma.wait(0)
    with pytest.raises(InterpreterError, match=r"%f\d+ is written here, but it is an "
                                               r"accumulator of the wgmma at .*still in flight"):
        early_write.interpret(allow_uninitialized=True)


def test_another_warpgroups_accumulator_copy_is_free():
    """Warpgroup 0's wgmma holds its threads' copies only: warpgroup 1 (no wgmma) uses
    the same registers freely."""
    from ptxdsl import Tile
    from ptxdsl.core.types import u32

    @kernel(in_specs=(), out_specs=(Tile(256, f32),), block=(256, 1, 1), arch="sm_90a")
    def two(D):
        (pd,) = ptx.global_ptrs(D)
        s = smem.alloc(bf16, (64, 64), swizzle=128)
        tid = reg.scalar(u32)
        ptx.inst.mov.u32(tid, ptx.special.tid.x())
        acc = ptx.wgmma.accumulator(8, f32, init=2.0)
        with ptx.if_(tid < 128):
            d = ptx.wgmma.descriptor(s)
            ptx.wgmma.fence()
            ptx.wgmma.mma(acc, d, d, ab_type=bf16)
            ptx.wgmma.commit()
        with ptx.if_(tid >= 128):
            ptx.inst.add.f32(acc[0], acc[0], 1.0)
        with ptx.if_(tid < 128):
            ptx.wgmma.wait(0)
        ptx.inst.st.global_.f32(ptx.addr(pd + tid * 4), acc[0])
    d = two.interpret(allow_uninitialized=True)
    np.testing.assert_array_equal(d[128:], 3.0)


def _roles(consumer_regs=232, producer_regs=40, split=False, again=None):
    """Three warpgroups: warpgroup 0 lowers its budget, 1 and 2 raise theirs; ``split``
    gives warp 3 of warpgroup 0 its own setmaxnreg; ``again`` a second setmaxnreg
    (action, count) in the consumers."""
    from ptxdsl.core.types import u32

    @kernel(block=(384, 1, 1), arch="sm_90a")
    def roles():
        tid = reg.scalar(u32)
        ptx.inst.mov.u32(tid, ptx.special.tid.x())
        with ptx.if_(tid < 128):
            if split:
                with ptx.if_(tid < 96):
                    ptx.inst.setmaxnreg.dec.sync.aligned.u32(producer_regs)  # split-wg
                with ptx.else_():
                    ptx.inst.setmaxnreg.dec.sync.aligned.u32(producer_regs)
            else:
                ptx.inst.setmaxnreg.dec.sync.aligned.u32(producer_regs)
        with ptx.else_():
            ptx.inst.setmaxnreg.inc.sync.aligned.u32(consumer_regs)  # consumers-inc
            if again:
                getattr(ptx.inst.setmaxnreg, again[0]).sync.aligned.u32(again[1])  # again
    return roles


def test_setmaxnreg_roles_run():
    _roles().interpret()


def test_setmaxnreg_split_across_a_warpgroup_is_refused():
    with pytest.raises(InterpreterError, match=r"setmaxnreg.*all 128 threads of a warpgroup"):
        _roles(split=True).interpret()


@pytest.mark.parametrize("again,words", [
    (("inc", 200), r"setmaxnreg\.inc to 200 would lower this warpgroup's budget of 232"),
    (("dec", 240), r"setmaxnreg\.dec to 240 would raise this warpgroup's budget of 232")])
def test_setmaxnreg_direction(again, words):
    with pytest.raises(InterpreterError, match=words):
        _roles(again=again).interpret()


def test_setmaxnreg_budgets_beyond_the_pool_wait_forever():
    with pytest.raises(InterpreterError, match=r"inc to 256 \(warpgroup 2\) waits forever"
                                               r".*40 \+ 256 \+ 256 = 552 a thread slot"):
        _roles(consumer_regs=256).interpret()
