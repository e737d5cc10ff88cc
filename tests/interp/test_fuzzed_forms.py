"""Issue #47 item 11: forms the instruction table once refused (``fence.release`` /
``fence.acquire`` with a scope, ``getctarank`` naming a shared variable,
``mbarrier.test_wait.parity``) run on the interpreter with the GPU's numbers; waiting
for the wrong parity is the hang it is on the GPU. (Tracing, reading back and ptxas:
tests/isa/test_false_refusals.py.)"""
from __future__ import annotations

import numpy as np

from ptxdsl import Tile, kernel, ptx, reg, smem
from ptxdsl.types import pred, u32, u64
import located

line_of, raises_at = located.for_file(__file__)


def handoff(parity: int):
    """Clusters of 2 CTAs of 64 threads: thread 32 stores 5, ``fence.release.cta`` and
    arrives on an mbarrier (count 1); every thread polls ``test_wait.parity`` for
    ``parity``, ``fence.acquire.cta``, reads the 5 and adds 100 times its CTA's rank
    (``getctarank`` of the shared variable)."""
    @kernel(in_specs=(), out_specs=(Tile(64, u32),), grid=2, block=(64, 1, 1),
            cluster=(2, 1, 1), arch="sm_90a")
    def k(Y):
        (py,) = ptx.global_ptrs(Y)
        s = smem.alloc(u32, (4,))
        bar = smem.alloc(u64, (1,))
        tid, rank, cta = reg.scalar(u32), reg.scalar(u32), reg.scalar(u32)
        ptx.inst.mov.u32(tid, ptx.special.tid.x())
        ptx.inst.mov.u32(cta, ptx.special.ctaid.x())
        ptx.inst("getctarank.shared::cluster.u32", rank, s)
        with ptx.if_(tid == 0):
            ptx.mbarrier.init(bar, 1)
        ptx.bar.sync(0)
        with ptx.if_(tid == 32):
            s[0] = reg.scalar(u32, init=5)
            ptx.inst("fence.release.cta")
            ptx.mbarrier.arrive(bar.base)
        done = reg.scalar(pred)
        top = ptx.label("poll")
        test = "mbarrier.test_wait.parity.shared::cta.b64"
        ptx.inst(test, done, ptx.addr(bar), parity)  # parity-test
        ptx.bra(top, pred=~done)
        ptx.inst("fence.acquire.cta")
        v = s[0]
        with ptx.if_(tid < 32):
            ptx.inst.st.global_.u32(ptx.addr(py + (cta * 32 + tid) * 4), v + rank * 100)
        ptx.cluster.sync(aligned=True)
    return k


def test_fenced_handoff_through_a_parity_test_runs():
    np.testing.assert_array_equal(handoff(0).interpret(), np.repeat([5, 105], 32))


def test_testing_the_parity_of_the_next_phase_hangs():
    """After the arrival the barrier is in phase 1: a parity-1 test waits for a phase
    nobody completes (the GPU spins forever)."""
    with raises_at("parity-test", "deadlock", "phase with parity 1", "1 more arrivals"):
        handoff(1).interpret()
