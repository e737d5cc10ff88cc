"""Thread semantics of the interpreter: divergence and reconvergence, loops, branches,
warp instructions, barriers with counts, atomics, cp.async, mbarrier, special registers."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ptxdsl import Tile, kernel, ptx, reg, smem
from ptxdsl.core import ir
from ptxdsl.core.errors import InterpreterError
from ptxdsl.core.types import f32, pred, s32, u32, u64
from control_kernels import discard_kernel


def tid_reg():
    t = reg.scalar(u32)
    ptx.inst.mov.u32(t, ptx.special.tid.x())
    return t


def store(py, tid, v, t="u32"):
    ptx.inst(f"st.global.{t}", ptx.addr(py + tid * 4), v)


def one_output(n=32, grid=1, block=None, t=u32):
    def deco(fn):
        return kernel(in_specs=(), out_specs=(Tile(n * grid, t),), grid=grid,
                      block=(block or n, 1, 1))(fn)
    return deco


def test_if_else_reconverges():
    @one_output(64)
    def k(Y):
        (py,) = ptx.global_ptrs(Y)
        tid = tid_reg()
        v = reg.scalar(u32)
        with ptx.if_((tid & 1) == 0):
            ptx.inst.mov.u32(v, 100)
        with ptx.else_():
            ptx.inst.add.u32(v, tid, 1000)
        ptx.inst.add.u32(v, v, 1)
        store(py, tid, v)
    t = np.arange(64)
    np.testing.assert_array_equal(k.interpret(), np.where(t % 2 == 0, 101, t + 1001))


@settings(max_examples=10, deadline=None)
@given(n=st.integers(0, 70))
def test_divergent_loop_trip_counts(n):
    """Thread t sums 0..t-1 (register bound): each leaves the loop on its own iteration."""
    @one_output(64)
    def k(Y):
        (py,) = ptx.global_ptrs(Y)
        tid = tid_reg()
        acc = reg.scalar(u32, init=0)
        for i in ptx.range_(0, tid, 1):
            ptx.inst.add.u32(acc, acc, i)
        store(py, tid, acc)
    t = np.arange(64)
    np.testing.assert_array_equal(k.interpret(), t * (t - 1) // 2)


def test_forward_and_backward_branches_with_divergence():
    @one_output(32)
    def k(Y):
        (py,) = ptx.global_ptrs(Y)
        tid = tid_reg()
        acc = reg.scalar(u32, init=0)
        i = reg.scalar(u32, init=0)
        top = ptx.label("top")
        ptx.inst.add.u32(acc, acc, 3)
        ptx.inst.add.u32(i, i, 1)
        more = i < (tid & 7)
        ptx.bra(top, pred=more)              # backward, divergent
        done = ptx.new_label("done")
        ptx.bra(done, pred=tid > 20)         # forward, divergent
        ptx.inst.add.u32(acc, acc, 1000)
        ptx.place(done)
        store(py, tid, acc)
    t = np.arange(32)
    want = 3 * np.maximum(t & 7, 1) + np.where(t > 20, 0, 1000)
    np.testing.assert_array_equal(k.interpret(), want)


def test_branch_out_of_a_region_resumes_at_the_enclosing_label():
    @one_output(32)
    def k(Y):
        (py,) = ptx.global_ptrs(Y)
        tid = tid_reg()
        v = reg.scalar(u32, init=1)
        out = ptx.new_label("out")
        with ptx.if_(tid < 20):
            with ptx.if_(tid < 4):
                ptx.bra(out)          # two regions out
            ptx.inst.mov.u32(v, 2)
        ptx.inst.add.u32(v, v, 10)
        ptx.place(out)
        store(py, tid, v)
    np.testing.assert_array_equal(k.interpret(),
                                  np.select([np.arange(32) < 4, np.arange(32) < 20], [1, 12], 11))


def test_branch_out_of_a_range_loop_leaves_the_loop():
    @one_output(32)
    def k(Y):
        (py,) = ptx.global_ptrs(Y)
        tid = tid_reg()
        v = reg.scalar(u32, init=0)
        out = ptx.new_label("out")
        for _ in ptx.range_(0, 10, 1):
            with ptx.if_(v == tid):
                ptx.bra(out)          # after tid iterations
            ptx.inst.add.u32(v, v, 1)
        ptx.inst.mov.u32(v, 99)
        ptx.place(out)
        store(py, tid, v)
    np.testing.assert_array_equal(k.interpret(), np.where(np.arange(32) < 10, np.arange(32), 99))


def test_guarded_instructions_and_exit():
    @one_output(32)
    def k(Y):
        (py,) = ptx.global_ptrs(Y)
        tid = tid_reg()
        v = reg.scalar(u32, init=7)
        odd = (tid & 1) == 1
        ptx.inst.mov.u32(v, 9, pred=odd)
        store(py, tid, v)
        ptx.exit()
    np.testing.assert_array_equal(k.interpret(), np.where(np.arange(32) % 2, 9, 7))


def test_special_registers():
    @kernel(in_specs=(), out_specs=(Tile(6 * 64, u32),), grid=(3, 2, 1), block=(8, 4, 2))
    def k(Y):
        (py,) = ptx.global_ptrs(Y)
        regs = {}
        for name in ("tid.x", "tid.y", "tid.z", "ctaid.x", "ctaid.y", "ntid.x", "nctaid.y",
                     "laneid", "warpid"):
            r = reg.scalar(u32)
            base, _, axis = name.partition(".")
            sp = getattr(ptx.special, base)
            ptx.inst.mov.u32(r, getattr(sp, axis)() if axis else sp())
            regs[name] = r
        lin = regs["tid.x"] + regs["tid.y"] * 8 + regs["tid.z"] * 32
        cta = regs["ctaid.x"] + regs["ctaid.y"] * 3
        idx = cta * 64 + lin
        code = (regs["laneid"] + regs["warpid"] * 100 + regs["ntid.x"] * 1000
                + regs["nctaid.y"] * 10000)
        store(py, idx, code)
    y = k.interpret().reshape(6, 64)
    lin = np.arange(64)
    np.testing.assert_array_equal(y, np.broadcast_to(lin % 32 + (lin // 32) * 100 + 8000
                                                     + 20000, (6, 64)))


# ------------------------------------------------------------------ warp instructions
@pytest.mark.parametrize("mode,b,c", [("up", 3, 0), ("down", 5, 31), ("bfly", 6, 31),
                                      ("idx", 9, 31), ("idx", 5, 0x1C1F), ("down", 2, 0x181F),
                                      ("up", 1, 0x1800)])
def test_shfl_modes_match_the_ptx_pseudocode(mode, b, c):
    @one_output(64)
    def k(Y):
        (py,) = ptx.global_ptrs(Y)
        tid = tid_reg()
        src = reg.scalar(u32)
        ptx.inst.mul.lo.u32(src, tid, 10)
        d = reg.scalar(u32)
        ptx.inst(f"shfl.sync.{mode}.b32", d, src, b, c, 0xFFFFFFFF)
        store(py, tid, d)
    lane = np.arange(64) % 32
    seg, cval = (c >> 8) & 31, c & 31
    max_lane = (lane & seg) | (cval & ~seg)
    min_lane = lane & seg
    j = {"up": lane - b, "down": lane + b, "bfly": lane ^ b, "idx": min_lane | (b & ~seg)}[mode]
    ok = j >= max_lane if mode == "up" else j <= max_lane
    j = np.where(ok, j, lane)
    want = (np.arange(64) - lane + j) * 10
    np.testing.assert_array_equal(k.interpret(), want)


def test_vote_match_redux_elect():
    @kernel(in_specs=(), out_specs=(Tile(64, u32),) * 6, grid=1, block=(64, 1, 1), arch="sm_90a")
    def k(B, A, M, R, E, L):
        pb, pa, pm, pr, pe, pl = ptx.global_ptrs(B, A, M, R, E, L)
        tid = tid_reg()
        p = (tid % 3) == 0
        ballot = reg.scalar(u32)
        ptx.inst.vote.sync.ballot.b32(ballot, p, 0xFFFFFFFF)
        store(pb, tid, ballot)
        q = reg.scalar(pred)
        ptx.inst.vote.sync.any.pred(q, p, 0xFFFFFFFF)
        v = reg.scalar(u32)
        ptx.inst.selp.u32(v, 1, 0, q)
        store(pa, tid, v)
        key = tid & 3
        mm = reg.scalar(u32)
        ptx.inst.match.sync.any.b32(mm, key, 0xFFFFFFFF)
        store(pm, tid, mm)
        r = reg.scalar(u32)
        ptx.inst.redux.sync.add.u32(r, tid, 0xFFFFFFFF)
        store(pr, tid, r)
        leader = reg.scalar(u32, init=99)
        is_leader = key == 99
        ptx.inst.elect.sync(leader, is_leader, 0xFFFFFFFE, pred=(tid & 31) != 0)
        store(pe, tid, leader)
        lv = reg.scalar(u32)
        ptx.inst.selp.u32(lv, 1, 0, is_leader)
        store(pl, tid, lv)
    b, a, m, r, e, lead = k.interpret()
    t = np.arange(64)
    lane = t % 32
    bits = sum(1 << i for i in range(32) if i % 3 == 0)
    bits_hi = sum(1 << i for i in range(32) if (i + 32) % 3 == 0)
    np.testing.assert_array_equal(b, np.where(t < 32, bits, bits_hi))
    assert np.all(a == 1)
    np.testing.assert_array_equal(m, [sum(1 << i for i in range(32) if i % 4 == x % 4)
                                      for x in lane])
    np.testing.assert_array_equal(r, np.where(t < 32, sum(range(32)), sum(range(32, 64))))
    np.testing.assert_array_equal(e, np.where(lane == 0, 99, 1))
    np.testing.assert_array_equal(lead, lane == 1)


def test_redux_min_max_signed_and_bitwise():
    @kernel(in_specs=(Tile(32, s32),), out_specs=(Tile(32, s32),) * 3, grid=1, block=(32, 1, 1))
    def k(X, Mn, Mx, Xr):
        px, p1, p2, p3 = ptx.global_ptrs(X, Mn, Mx, Xr)
        tid = tid_reg()
        x = reg.scalar(s32)
        ptx.inst.ld.global_.s32(x, ptx.addr(px + tid * 4))
        for chain, p in (("redux.sync.min.s32", p1), ("redux.sync.max.s32", p2),
                         ("redux.sync.xor.b32", p3)):
            d = reg.scalar(s32)
            ptx.inst(chain, d, x, 0x0000FFFF, pred=tid < 16)
            with ptx.if_(tid < 16):
                store(p, tid, d, "s32")
    x = np.random.default_rng(3).integers(-2 ** 31, 2 ** 31, 32).astype(np.int32)
    mn, mx, xr = k.interpret(x)
    assert np.all(mn[:16] == x[:16].min()) and np.all(mx[:16] == x[:16].max())
    assert np.all(xr[:16] == np.bitwise_xor.reduce(x[:16]))


# ------------------------------------------------------------------ barriers with counts
def test_producer_consumer_named_barrier():
    @one_output(64)
    def k(Y):
        (py,) = ptx.global_ptrs(Y)
        buf = smem.alloc(u32, (32,))
        tid = tid_reg()
        with ptx.if_(tid < 32):
            buf[tid] = tid * 7
            ptx.inst.barrier.arrive(1, 64)
        with ptx.else_():
            ptx.inst.barrier.sync(1, 64)
            v = buf[tid - 32]
            store(py, tid, v)
    y = k.interpret()
    np.testing.assert_array_equal(y[32:], np.arange(32) * 7)


def test_barrier_count_mismatch_is_reported():
    @one_output(128)
    def k(Y):
        tid = tid_reg()
        with ptx.if_(tid < 32):
            ptx.inst.barrier.arrive(1, 96)
        with ptx.if_((tid >= 32) & (tid < 64)):
            ptx.inst.barrier.sync(1, 96)
    with pytest.raises(InterpreterError, match="deadlock(.|\n)*barrier 1: 64 of the 96 threads"):
        k.interpret()


def test_barrier_count_beyond_the_cta_is_refused():
    @one_output(64)
    def k(Y):
        ptx.inst.barrier.sync(1, 96)  # too-many
    with pytest.raises(InterpreterError, match="count 96 is more than the CTA's 64 threads"):
        k.interpret()


# ------------------------------------------------------------------ atomics
def test_atomics_are_deterministic_and_return_old_values():
    @kernel(in_specs=(), out_specs=(Tile(4, u32), Tile(64, u32), Tile(1, f32), Tile(64, u32),
                                    Tile(1, u32)),
            grid=2, block=(64, 1, 1))
    def k(C, Old, S, Cas, Cell):
        pc, po, ps, pk, pcell = ptx.global_ptrs(C, Old, S, Cas, Cell)
        tid = tid_reg()
        slot = tid & 3
        old = reg.scalar(u32)
        ptx.inst.atom.global_.add.u32(old, ptx.addr(pc + slot * 4), 1)
        cta = reg.scalar(u32)
        ptx.inst.mov.u32(cta, ptx.special.ctaid.x())
        with ptx.if_(cta == 0):
            store(po, tid, old)
        one = reg.scalar(f32, init=0.5)
        ptx.inst.red.global_.add.f32(ptx.addr(ps), one)
        prev = reg.scalar(u32)
        ptx.inst.atom.global_.cas.b32(prev, ptx.addr(pcell), tid, tid + 1)
        with ptx.if_(cta == 0):
            store(pk, tid, prev)
    c, old, s, cas, _ = k.interpret(np.zeros(4, np.uint32), np.zeros(64, np.uint32),
                                    np.zeros(1, np.float32), np.zeros(64, np.uint32),
                                    np.zeros(1, np.uint32))
    np.testing.assert_array_equal(c, [32, 32, 32, 32])
    np.testing.assert_array_equal(old, np.arange(64) // 4)   # thread order
    assert s[0] == 64.0
    # the chain 0->1->2... succeeds once per thread in order within CTA 0
    assert cas[0] == 0 and np.all(cas[1:] >= 0)


def test_shared_atomics_min_max_inc_exch():
    @kernel(in_specs=(Tile(32, u32),), out_specs=(Tile(4, u32),), grid=1, block=(32, 1, 1))
    def k(X, Y):
        px, py = ptx.global_ptrs(X, Y)
        cell = smem.alloc(u32, (4,))
        tid = tid_reg()
        with ptx.if_(tid == 0):
            cell[0] = reg.scalar(u32, init=0xFFFFFFFF)
            cell[1] = reg.scalar(u32, init=0)
            cell[2] = reg.scalar(u32, init=0)
            cell[3] = reg.scalar(u32, init=0)
        ptx.bar.sync(0)
        x = reg.scalar(u32)
        ptx.inst.ld.global_.u32(x, ptx.addr(px + tid * 4))
        ptx.inst.red.shared.min.u32(cell.addr(0), x)
        ptx.inst.red.shared.max.u32(cell.addr(1), x)
        ptx.inst.red.shared.inc.u32(cell.addr(2), 9)
        o = reg.scalar(u32)
        ptx.inst.atom.shared.exch.b32(o, cell.addr(3), x)
        ptx.bar.sync(0)
        with ptx.if_(tid == 0):
            for i in range(4):
                store(py, i, cell[i])
    x = np.random.default_rng(0).integers(0, 1000, 32).astype(np.uint32)
    y = k.interpret(x)
    np.testing.assert_array_equal(y, [x.min(), x.max(), 32 % 10, x[-1]])


# ------------------------------------------------------------------ cp.async and mbarrier
def test_cp_async_lands_after_wait_group():
    @kernel(in_specs=(Tile(128, f32),), out_specs=(Tile(128, f32),), grid=1, block=(32, 1, 1),
            arch="sm_90a")
    def k(X, Y):
        px, py = ptx.global_ptrs(X, Y)
        buf = smem.alloc(f32, (128,))
        tid = tid_reg()
        ptx.inst.cp.async_.cg.shared.global_(buf.addr(tid * 4), ptx.addr(px + tid * 16), 16)
        ptx.inst.cp.async_.commit_group()
        ptx.inst.cp.async_.wait_group(0)
        ptx.bar.sync(0)
        v = [reg.scalar(f32) for _ in range(4)]
        ptx.inst.ld.shared.v4.f32(v, buf.addr(((tid + 1) & 31) * 4))
        ptx.inst.st.global_.v4.f32(ptx.addr(py + tid * 16), v)
    x = np.arange(128, dtype=np.float32)
    np.testing.assert_array_equal(k.interpret(x), np.roll(x, -4))


def _bulk_prefetch_kernel(offset, size, hint=False):
    @kernel(in_specs=(Tile(256, f32),), out_specs=(Tile(256, f32),), grid=1,
            block=(32, 1, 1), arch="sm_90a")
    def k(X, Y):
        px, py = ptx.global_ptrs(X, Y)
        tid = tid_reg()
        with ptx.if_(tid == 0):
            if hint:
                pol = reg.scalar(u64)
                ptx.inst("createpolicy.fractional.L2::evict_last.b64", pol)
                ptx.inst("cp.async.bulk.prefetch.L2.global.L2::cache_hint",
                         ptx.addr(px, offset), size, pol)
            else:
                ptx.inst.cp.async_.bulk.prefetch.L2.global_(ptx.addr(px, offset), size)
        v = [reg.scalar(f32) for _ in range(8)]
        ptx.inst.ld.global_.v4.f32(v[:4], ptx.addr(px + tid * 16))
        ptx.inst.ld.global_.v4.f32(v[4:], ptx.addr(px + tid * 16, 512))
        ptx.inst.st.global_.v4.f32(ptx.addr(py + tid * 16), v[:4])
        ptx.inst.st.global_.v4.f32(ptx.addr(py + tid * 16, 512), v[4:])
    return k


@pytest.mark.parametrize("hint", [False, True])
def test_bulk_prefetch_leaves_memory_as_it_was(hint):
    x = np.arange(256, dtype=np.float32)
    k = _bulk_prefetch_kernel(0, 1024, hint)
    assert "cp.async.bulk.prefetch.L2.global" in k.ptx()
    np.testing.assert_array_equal(k.interpret(x), x)


@pytest.mark.parametrize("offset, size, what", [
    (512, 1024, "reaches outside its allocation"),   # the last 512 bytes are past X
    (8, 256, "must be 16-byte aligned"),
])
def test_bulk_prefetch_range_is_checked(offset, size, what):
    with pytest.raises(InterpreterError, match=what):
        _bulk_prefetch_kernel(offset, size).interpret(np.zeros(256, np.float32))


def test_bulk_prefetch_size_must_be_a_multiple_of_16():
    from ptxdsl.core.errors import PtxdslError
    with pytest.raises(PtxdslError, match="positive multiple of 16 bytes, got 100"):
        _bulk_prefetch_kernel(0, 100).ptx()


def test_mbarrier_phases():
    @kernel(in_specs=(), out_specs=(Tile(32, u32),), grid=1, block=(32, 1, 1), arch="sm_90a")
    def k(Y):
        (py,) = ptx.global_ptrs(Y)
        bar = smem.alloc(u64, (1,))
        tid = tid_reg()
        with ptx.if_(tid == 0):
            ptx.inst.mbarrier.init.shared.b64(bar.addr(0), 32)
        ptx.bar.sync(0)
        tok = reg.scalar(u64)
        ptx.inst.mbarrier.arrive.shared.b64(tok, bar.addr(0))
        done = reg.scalar(pred)
        ptx.inst.mbarrier.test_wait.shared.b64(done, bar.addr(0), tok)
        par = reg.scalar(pred)
        ptx.inst.mbarrier.try_wait.parity.shared.b64(par, bar.addr(0), 0)
        v = reg.scalar(u32)
        ptx.inst.selp.u32(v, 1, 0, done)
        w = reg.scalar(u32)
        ptx.inst.selp.u32(w, 2, 0, par)
        store(py, tid, v + w)
    np.testing.assert_array_equal(k.interpret(), np.full(32, 3))


def _generic_shared(buf):
    """The generic (u64) address of shared array ``buf``, through cvta.shared."""
    base = reg.scalar(u32)
    ptx.inst.mov.u32(base, ir.Symbol(buf.decl.name, "shared"))
    gen = reg.scalar(u64)
    ptx.inst.cvta.shared.u64(gen, ptx.cvt(u64, base))
    return gen


def test_cvta_shared_round_trip_and_generic_access():
    @one_output(32, t=f32)
    def k(Y):
        (py,) = ptx.global_ptrs(Y)
        buf = smem.alloc(f32, (32,))
        tid = tid_reg()
        gen = _generic_shared(buf)
        addr = gen + tid * 4
        v = ptx.cvt(f32, tid)
        ptx.inst.st.f32(ptx.addr(addr), v)        # generic store into shared memory
        ptx.bar.sync(0)
        w = buf[tid]
        store(py, tid, w, "f32")
    np.testing.assert_array_equal(k.interpret(), np.arange(32, dtype=np.float32))


def test_set_vote_all_uni_match_all_and_clock():
    @kernel(in_specs=(), out_specs=(Tile(32, u32),) * 5, grid=1, block=(32, 1, 1))
    def k(S, A, U, M, C):
        ps, pa, pu, pm, pc = ptx.global_ptrs(S, A, U, M, C)
        tid = tid_reg()
        sv = reg.scalar(u32)
        ptx.inst.set.lt.u32.u32(sv, tid, 5)
        store(ps, tid, sv)
        p = tid < 40
        for chain, ptr in (("vote.sync.all.pred", pa), ("vote.sync.uni.pred", pu)):
            q = reg.scalar(pred)
            ptx.inst(chain, q, p if ptr is pa else tid < 3, 0xFFFFFFFF)
            v = reg.scalar(u32)
            ptx.inst.selp.u32(v, 1, 0, q)
            store(ptr, tid, v)
        mm = reg.scalar(u32)
        ptx.inst.match.sync.all.b32(mm, tid >> 6, 0xFFFFFFFF)
        store(pm, tid, mm)
        c0, c1 = reg.scalar(u32), reg.scalar(u32)
        ptx.inst.mov.u32(c0, ptx.special.clock())
        ptx.inst.mov.u32(c1, ptx.special.clock())
        store(pc, tid, c1 - c0)
    s_, a, u, m, c = k.interpret()
    np.testing.assert_array_equal(s_, np.where(np.arange(32) < 5, 0xFFFFFFFF, 0))
    assert np.all(a == 1) and np.all(u == 0) and np.all(m == 0xFFFFFFFF)
    assert np.all((c > 0) & (c < 1000))


def test_atomic_inc_dec_wrap_in_thread_order():
    @kernel(in_specs=(), out_specs=(Tile(2, u32), Tile(32, u32)), grid=1, block=(32, 1, 1))
    def k(C, Old):
        pc, po = ptx.global_ptrs(C, Old)
        tid = tid_reg()
        old = reg.scalar(u32)
        ptx.inst.atom.global_.inc.u32(old, ptx.addr(pc), 4)
        store(po, tid, old)
        ptx.inst.red.global_.dec.u32(ptx.addr(pc, 4), 6)
    c, old = k.interpret(np.zeros(2, np.uint32), np.zeros(32, np.uint32))
    np.testing.assert_array_equal(old, np.arange(32) % 5)
    assert c[0] == 32 % 5
    # dec from 0 wraps to 6, then counts down: 32 decrements from 0 over a cycle of 7
    assert c[1] == (-32) % 7


def test_instruction_without_cpu_semantics_is_refused(monkeypatch):
    from ptxdsl.interp import semantics
    monkeypatch.setattr(semantics, "NO_CPU_SEMANTICS", frozenset({"popc"}))

    @one_output(32)
    def k(Y):
        (py,) = ptx.global_ptrs(Y)
        tid = tid_reg()
        n = reg.scalar(u32)
        ptx.inst.popc.b32(n, tid)
        store(py, tid, n)
    with pytest.raises(InterpreterError, match="popc.b32 has no CPU semantics"):
        k.interpret()


def test_discard_leaves_the_line_undefined():
    """discard.global.L2 prints as PTX has it; the interpreter poisons the line (its
    contents are undefined on the GPU), so a read after the discard shows NaN."""
    k = discard_kernel(0)
    assert "discard.global.L2 [" in k.ptx() and "], 128;" in k.ptx()
    # the launcher asks for the line's alignment (the table's extent), not the type's
    from ptxdsl.runtime.args import vector_alignment
    assert vector_alignment(k.program())["W"] == (128, "discard.global.L2")
    y, z = k.interpret(np.zeros(64, np.float32))
    np.testing.assert_array_equal(y, np.arange(32, dtype=np.float32))
    assert np.isnan(z).all()


def test_discard_checks_alignment_and_size():
    with pytest.raises(InterpreterError, match="multiple of 128"):
        discard_kernel(64).interpret(np.zeros(64, np.float32))
    with pytest.raises(InterpreterError, match="outside|out of bounds|beyond"):
        discard_kernel(256).interpret(np.zeros(64, np.float32))
    # without the warp barrier, nothing orders lane 0's discard after the other lanes'
    # stores: a race (bar.warp.sync orders memory among its lanes)
    with pytest.raises(InterpreterError, match="data race"):
        discard_kernel(0, sync=False).interpret(np.zeros(64, np.float32))

    with pytest.raises(Exception, match="immediate 128"):
        @kernel(in_specs=(Tile(64, f32),), out_specs=(), grid=1, block=(32, 1, 1),
                arch="sm_90a")
        def bad(W):
            (pw,) = ptx.global_ptrs(W)
            ptx.inst.discard.global_.L2(ptx.addr(pw), 64)
        bad.ptx()


def test_discard_of_a_generic_shared_address_is_refused():
    """discard.L2 without .global takes a generic address, which must be global memory."""
    @one_output(32, t=f32)
    def k(Y):
        (py,) = ptx.global_ptrs(Y)
        buf = smem.alloc(f32, (32,))
        tid = tid_reg()
        gen = _generic_shared(buf)
        with ptx.if_(tid == 0):
            ptx.inst.discard.L2(ptx.addr(gen), 128)
        store(py, tid, ptx.cvt(f32, tid), "f32")
    with pytest.raises(InterpreterError, match="in .shared memory"):
        k.interpret()
