"""Whole-program checks (ptxdsl.core.verify): def-before-use, labels, barrier placement, types.

Errors name this file and the line of the offending call (``# <- name`` markers).
"""
from __future__ import annotations

import os

import pytest

import located
from ptxdsl import kernel, ptx, reg
from ptxdsl.core import ir
from ptxdsl.core.errors import PtxdslError, SourceLoc, VerifyError
from ptxdsl.isa import resolve
from ptxdsl.core.trace import Builder
from ptxdsl.core.types import f32, pred, u32
from ptxdsl.core.verify import verify

HERE = os.path.abspath(__file__)


line_of = located.marked_lines(HERE, "# <- ")


def fails_at(fn, marker, *phrases, arch="sm_90a"):
    with pytest.raises(VerifyError) as info:
        kernel(arch=arch)(fn).ptx()
    text = str(info.value)
    assert text.startswith(f"{HERE}:{line_of(marker)}: "), text
    for p in phrases:
        assert p in text, text
    return info.value


def passes(fn, arch="sm_90a") -> str:
    return kernel(arch=arch)(fn).ptx()


# ---------------------------------------------------------------- definitions
def test_read_before_write():
    def body():
        a = reg.scalar(f32)
        b = a + 1.0  # <- undefined
        ptx.inst.mov.f32(a, b)
    # b is %f0: registers are numbered in the order the PTX mentions them
    fails_at(body, "undefined", "register %f1 (.f32) is read here before any instruction writes it",
             "reg.scalar(..., init=...)")


def test_read_of_a_register_defined_in_a_branch_is_fine():
    def body():
        tid = reg.scalar(u32)
        ptx.inst.mov.u32(tid, ptx.special.tid.x())
        a = reg.scalar(u32)
        with ptx.if_(tid < 4):
            ptx.inst.mov.u32(a, 1)
        with ptx.else_():
            ptx.inst.mov.u32(a, 2)
        ptx.inst.add.u32(a, a, 1)
    assert "add.u32" in passes(body)


def test_guard_predicate_must_be_written():
    def body():
        p = reg.scalar(pred)
        a = reg.scalar(u32, init=0)
        ptx.inst.add.u32(a, a, 1, pred=p)  # <- guard
    fails_at(body, "guard", "%p0 (.pred) is read here before")


def test_loop_bound_must_be_written():
    def body():
        n = reg.scalar(u32)
        for _ in ptx.range_(n):  # <- loop-bound
            pass
    fails_at(body, "loop-bound", "is read here before")


# ---------------------------------------------------------------- labels
def test_label_never_placed():
    def body():
        end = ptx.new_label("L_end")
        ptx.bra(end)  # <- unplaced
    fails_at(body, "unplaced", "branch to label 'L_end', which is never placed",
             "ptx.place(label)")


def test_branch_to_a_placed_label():
    def body():
        end = ptx.new_label("L_end")
        ptx.bra(end)
        ptx.place(end)
    text = passes(body)
    assert "\tbra L_end;" in text and "\nL_end:\n" in text


# ---------------------------------------------------------------- barriers
def test_bar_sync_inside_a_thread_dependent_if():
    def body():
        tid = reg.scalar(u32)
        ptx.inst.mov.u32(tid, ptx.special.tid.x())
        with ptx.if_(tid < 32):  # <- divergent-if
            ptx.bar.sync(0)  # <- bar-in-if
    err = fails_at(body, "bar-in-if", "bar.sync inside a branch or loop that depends on the "
                   "thread index", f"opened at {HERE}:{line_of('divergent-if')}",
                   "Move the barrier out of the branch")
    assert isinstance(err, PtxdslError)


def test_bar_sync_after_a_lane_dependent_value():
    """Thread dependence flows through arithmetic: lane = tid & 31, then lane == 0."""
    def body():
        tid = reg.scalar(u32)
        ptx.inst.mov.u32(tid, ptx.special.tid.x())
        lane = tid & 31
        with ptx.if_(lane == 0):
            ptx.bar.sync(1)  # <- bar-lane
    fails_at(body, "bar-lane", "bar.sync inside a branch")


def test_bar_sync_inside_a_thread_dependent_loop():
    def body():
        tid = reg.scalar(u32)
        ptx.inst.mov.u32(tid, ptx.special.tid.x())
        for _ in ptx.range_(tid):
            ptx.bar.sync(0)  # <- bar-loop
    fails_at(body, "bar-loop", "bar.sync inside a branch or loop")


def test_bar_sync_in_a_uniform_branch_is_fine():
    """ctaid is the same for every thread of a CTA: the whole block takes the branch."""
    def body():
        cta = reg.scalar(u32)
        ptx.inst.mov.u32(cta, ptx.special.ctaid.x())
        with ptx.if_(cta == 0):
            ptx.bar.sync(0)
        for _ in ptx.range_(cta):
            ptx.bar.sync(0)
    assert passes(body).count("bar.sync 0;") == 2


def test_bar_sync_in_a_branch_on_the_cluster_rank_is_fine():
    """%cluster_ctarank is the same for every thread of a CTA (%clusterid for every CTA
    of a cluster): a CTA-wide barrier may sit in a branch on either, not in one that
    mixes in the thread index."""
    def body():
        rank, cid, tid = reg.scalar(u32), reg.scalar(u32), reg.scalar(u32)
        ptx.inst.mov.u32(rank, ptx.special.cluster_ctarank())
        ptx.inst.mov.u32(cid, ptx.special.clusterid.x())
        ptx.inst.mov.u32(tid, ptx.special.tid.x())
        with ptx.if_(rank == 1):
            ptx.bar.sync(0)
        with ptx.if_(cid == 0):
            ptx.bar.sync(0)
        with ptx.if_(rank + tid == 1):
            ptx.bar.sync(1)  # <- bar-rank-tid
    fails_at(body, "bar-rank-tid", "bar.sync inside a branch")


def test_unaligned_barrier_may_diverge():
    """barrier.sync (not .aligned) is the PTX form for divergent code."""
    def body():
        tid = reg.scalar(u32)
        ptx.inst.mov.u32(tid, ptx.special.tid.x())
        with ptx.if_(tid < 32):
            ptx.inst.barrier.sync(1, 32)
    assert "barrier.sync 1, 32;" in passes(body)


# ---------------------------------------------------------------- types (a hand-built program)
def test_types_are_rechecked():
    """Trace-time checks make this unreachable from the DSL; verify still guards the IR."""
    b = Builder("k", "sm_90a")
    a, c = b.new_reg(f32), b.new_reg(u32)
    loc = SourceLoc(HERE, 7)
    b.body.append(ir.Instr(resolve(["mov", "f32"]), (a, ir.Imm(1.0, f32)), loc))
    b.body.append(ir.Instr(resolve(["mov", "u32"]), (c, ir.Imm(1, u32)), loc))
    b.body.append(ir.Instr(resolve(["add", "f32"]), (a, a, c), loc))
    with pytest.raises(VerifyError, match=r"add\.f32: %r0 is \.u32, the instruction needs \.f32"):
        verify(b.finish())


def test_counted_barrier_may_sit_in_a_role_branch():
    def ok():
        t = reg.scalar(u32)
        ptx.inst.mov.u32(t, ptx.special.tid.x())
        with ptx.if_(t >= 128):
            ptx.named_barrier(1, count=128).sync()
    ok_k = kernel(block=(256, 1, 1))(ok)
    ok_k.ptx()

    def bad():
        t = reg.scalar(u32)
        ptx.inst.mov.u32(t, ptx.special.tid.x())
        with ptx.if_(t >= 128):
            ptx.bar.sync(0)
    with pytest.raises(PtxdslError, match="deadlocks"):
        kernel(block=(256, 1, 1))(bad).ptx()


# ---------------------------------------------------------------- uniformity lattice
def _tid():
    tid = reg.scalar(u32)
    ptx.inst.mov.u32(tid, ptx.special.tid.x())
    return tid


@pytest.mark.parametrize("cond", ["shr7", "div128", "lt128", "ge256"])
def test_counted_barrier_in_a_warpgroup_branch_is_accepted(cond):
    """Warp specialization: one warpgroup's named barrier inside its role's branch."""
    def body():
        tid = _tid()
        p = {"shr7": lambda: (tid >> 7) == 1, "div128": lambda: (tid // 128) == 0,
             "lt128": lambda: tid < 128, "ge256": lambda: tid >= 256}[cond]()
        with ptx.if_(p):
            ptx.bar.sync(1, 128)
            ptx.inst.bar.arrive(2, 256)
    assert "bar.sync 1, 128;" in passes(body)


def test_counted_barrier_in_a_warp_branch_is_accepted_uncounted_is_not():
    def body(counted):
        tid = _tid()
        with ptx.if_((tid >> 5) == 3):   # <- warp-branch
            if counted:
                ptx.bar.sync(1, 64)
            else:
                ptx.bar.sync(0)  # <- cta-bar
    assert "bar.sync 1, 64;" in passes(lambda: body(True))
    fails_at(lambda: body(False), "cta-bar", "differs between the warps",
             f"opened at {HERE}:{line_of('warp-branch')}")


def test_counted_barrier_in_a_lane_branch_is_refused():
    def body():
        tid = _tid()
        with ptx.if_((tid & 31) < 16):
            ptx.bar.sync(1, 64)  # <- lane-bar
    fails_at(body, "lane-bar", "differs between the threads of one warp", "whole warps")


@pytest.mark.parametrize("sreg", ["clusterid", "nclusterid", "cluster_ctarank"])
def test_cluster_registers_are_uniform_over_the_cta(sreg):
    """A loop over %clusterid / %nclusterid (a persistent cluster kernel's tile loop) and a
    branch on %cluster_ctarank hold warp-aligned instructions; %tid.x still does not."""
    def body(name):
        v = reg.scalar(u32)
        src = {"clusterid": lambda: ptx.special.clusterid.x(),
               "nclusterid": lambda: ptx.special.nclusterid.x(),
               "cluster_ctarank": lambda: ptx.special.cluster_ctarank(),
               "tid": lambda: ptx.special.tid.x()}[name]()
        ptx.inst.mov.u32(v, src)
        with ptx.if_(v == 0):
            ptx.bar.sync(0)  # <- cluster-bar
    assert "bar.sync 0;" in passes(lambda: body(sreg))
    fails_at(lambda: body("tid"), "cluster-bar", "bar.sync inside a branch")


def test_register_written_in_a_lane_branch_is_not_uniform_after_it():
    def body():
        tid = _tid()
        w = reg.scalar(u32, init=0)
        with ptx.if_((tid & 1) == 0):
            ptx.inst.mov.u32(w, 1)
        with ptx.if_(w == 0):
            ptx.bar.sync(0)  # <- merged
    fails_at(body, "merged", "bar.sync inside a branch")


@pytest.mark.parametrize("src, lane, clamp, cta_bar, ok", [
    ("wg", 0, 31, False, True), ("tid", 5, 31, False, True), ("ctaid", 0, 31, True, True),
    ("tid", None, 31, False, False), ("tid", 0, 15, False, False),
    ("wg", 0, 31, True, False)])
def test_shfl_idx_from_one_lane_is_uniform(src, lane, clamp, cta_bar, ok):
    """``shfl.sync.idx`` from an immediate lane of the whole warp gives every lane one
    value (warp-uniform; as uniform as its source where that is more: ``tid >> 7`` stays
    a warpgroup's, ``%ctaid`` the CTA's); from a per-thread lane, or in 16-lane segments,
    it differs between lanes."""
    def body():
        tid = _tid()
        v = reg.scalar(u32)
        if src == "wg":
            ptx.inst.shr.u32(v, tid, 7)
        else:
            ptx.inst.mov.u32(v, tid if src == "tid" else ptx.special.ctaid.x())
        u = reg.scalar(u32)
        ptx.inst("shfl.sync.idx.b32", u, v, tid & 31 if lane is None else lane, clamp,
                 0xFFFFFFFF)
        with ptx.if_(u == 1):
            ptx.bar.sync(*((0,) if cta_bar else (1, 64)))  # <- shfl-bar
    if ok:
        assert "bar.sync" in passes(body)
    else:
        fails_at(body, "shfl-bar", "inside a branch")


# ---------------------------------------------------------------- polling waits
def test_try_wait_whose_result_is_ignored_is_refused():
    """One try_wait is not a wait: the GPU may give up before the phase completes."""
    from ptxdsl import smem
    from ptxdsl.core.types import b64

    def body():
        bar = smem.alloc(b64, (1,), align=8)
        ptx.inst.mbarrier.init.shared__cta.b64(ptx.addr(bar.base), 1)
        ptx.inst.mbarrier.arrive.shared__cta.b64(ptx.sink, ptx.addr(bar.base))
        done = reg.scalar(pred)
        ptx.inst.mbarrier.try_wait.parity.shared__cta.b64(done, ptx.addr(bar.base), 0)  # <- poll
    fails_at(body, "poll", "mbarrier.try_wait", "is never read", "ptx.mbarrier.wait")


def test_try_wait_in_a_loop_and_test_wait_that_is_read_pass():
    from ptxdsl import smem
    from ptxdsl.core.types import b64

    def body():
        bar = smem.alloc(b64, (1,), align=8)
        ptx.inst.mbarrier.init.shared__cta.b64(ptx.addr(bar.base), 1)
        tok = reg.scalar(b64)
        ptx.inst.mbarrier.arrive.shared__cta.b64(tok, ptx.addr(bar.base))
        ptx.mbarrier.wait(ptx.addr(bar.base), 0)
        done = reg.scalar(pred)
        ptx.inst.mbarrier.test_wait.shared__cta.b64(done, ptx.addr(bar.base), tok)
        v = reg.scalar(u32)
        ptx.inst.selp.u32(v, 1, 0, done)
    text = passes(body)
    assert "mbarrier.try_wait.parity" in text and "mbarrier.test_wait" in text
