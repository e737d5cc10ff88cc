"""The transaction-count detector (ptxdsl/interp/transactions.py): expect_tx byte counts
that disagree with the bytes completing on the mbarrier phase are located errors (too
many once the arrivals are in, too few when the kernel ends or a waiter deadlocks); a
tx-count that dips below zero before the phase's arrival (a peer's early copy) is fine."""
from __future__ import annotations

import os

import pytest

from ptxdsl import kernel, ptx, reg, smem
from ptxdsl.core.errors import InterpreterError
from ptxdsl.core.types import b64, pred, u32
import located



HERE = os.path.basename(__file__)
line_of, raises_at = located.for_file(__file__)


def one_thread(body):
    """A 32-thread kernel whose thread 0 inits an mbarrier (count 1) and runs ``body(bar)``."""
    @kernel(block=(32, 1, 1), arch="sm_90a")
    def k():
        bars = smem.alloc(b64, (1,), align=8)
        tid = reg.scalar(u32)
        ptx.inst.mov.u32(tid, ptx.special.tid.x())
        with ptx.if_(tid == 0):
            ptx.inst.mbarrier.init.shared__cta.b64(ptx.addr(bars.base), 1)
            body(ptx.addr(bars.base))
    return k


def _expect(bar, n):
    ptx.inst.mbarrier.arrive.expect_tx.shared__cta.b64(ptx.sink, bar, n)


def _complete(bar, n):
    ptx.inst.mbarrier.complete_tx.relaxed.cta.shared__cta.b64(bar, n)


def _wait(bar):
    done = reg.scalar(pred)
    top = ptx.new_label("w")
    ptx.place(top)
    ptx.inst.mbarrier.try_wait.parity.shared__cta.b64(done, bar, 0)
    ptx.bra(top, pred=~done)


def test_balanced_phase_completes():
    def body(bar):
        _expect(bar, 64)
        _complete(bar, 48)
        _complete(bar, 16)
        _wait(bar)
    one_thread(body).interpret()


def test_early_copy_before_the_arrival_is_fine():
    """A peer's multicast copy may complete before this CTA's arrive.expect_tx."""
    def body(bar):
        _complete(bar, 32)
        _expect(bar, 32)
        _wait(bar)
    one_thread(body).interpret()


def test_more_bytes_after_the_arrivals_are_in():
    def body(bar):
        _expect(bar, 16)
        ptx.inst.mbarrier.complete_tx.relaxed.cta.shared__cta.b64(bar, 32)  # over
    with raises_at("over", "16 more transaction bytes than the mbarrier's phase expects",
                   "after all its arrivals are in", "expect_tx announced 16 bytes",
                   "delivered 32"):
        one_thread(body).interpret()


def test_last_arrival_finds_a_surplus():
    def body(bar):
        _complete(bar, 48)
        ptx.inst.mbarrier.arrive.expect_tx.shared__cta.b64(ptx.sink, bar, 32)  # short-expect
    with raises_at("short-expect", "last arrival", "16 more transaction bytes"):
        one_thread(body).interpret()


def test_bytes_that_never_arrive_are_reported_at_the_end():
    def body(bar):
        ptx.inst.mbarrier.arrive.expect_tx.shared__cta.b64(ptx.sink, bar, 64)  # never-delivered
        _complete(bar, 32)
    with raises_at("never-delivered", "kernel ended", "32 transaction bytes that expect_tx "
                   "announced never arrived", "announced 64 bytes"):
        one_thread(body).interpret()


def test_a_waiter_on_missing_bytes_deadlocks_with_the_counts():
    def body(bar):
        _expect(bar, 64)
        _complete(bar, 32)
        _wait(bar)
    with pytest.raises(InterpreterError) as e:
        one_thread(body).interpret()
    msg = str(e.value)
    assert "deadlock" in msg and "32 announced bytes never arrived" in msg, msg
    assert f"{HERE}:" in msg and "delivered 32" in msg, msg


def test_tx_count_beyond_the_hardware_range():
    def body(bar):
        _expect(bar, 1 << 19)
        ptx.inst.mbarrier.expect_tx.relaxed.cta.shared__cta.b64(bar, 1 << 19)  # too-big
    with raises_at("too-big", r"outside the hardware's range"):
        one_thread(body).interpret()
