"""wgmma on the interpreter: descriptors decoded as the hardware does (every swizzle, both
B majors, several N) against float64 numpy, and accumulators unreadable while in flight."""
from __future__ import annotations

import numpy as np
import pytest

from wgmma_kernels import build_wgmma, random_case
from ptxdsl import Tile, kernel, ptx, reg, smem
from ptxdsl.errors import InterpreterError
from ptxdsl.interp.hopper import operand_offsets
from ptxdsl.isa.descriptors import SmemDescriptor
from ptxdsl.types import bf16, f32


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
        early.interpret()


def test_expect_tx_and_complete_tx_complete_a_phase():
    from ptxdsl.types import b64, pred, u32

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
    from ptxdsl.types import b64, u32

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
    from ptxdsl.types import b64, u32

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
