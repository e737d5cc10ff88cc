"""RMSNorm ops on the CPU interpreter against float64 numpy (forward and backward)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import ptxdsl.interp  # noqa: F401  (the package's own interpreter: a broken one fails here)
from ptxdsl.core.errors import InterpreterError, LaunchError
from ptxdsl.ops import rms_norm, rms_norm_backward
from ptxdsl.ops.rmsnorm import plan as choice
from ptxdsl.ops.rmsnorm.bwd import build_backward, plan_backward
from ptxdsl.ops.rmsnorm.bwd_dw import build_dw_reduce, dw_narrow, dw_summers
from ptxdsl.ops.rmsnorm.fwd import build_forward, max_vec, plan
from ptxdsl.core.types import bf16, bf16_bits_to_f32, f16, f32, f32_to_bf16_bits
from sweeps import sweep  # noqa: E402

EPS = 1e-6
NS = [1, 3, 8, 17, 96, 100, 257, 1000, 1024, 1030, 2048, 4097]


def ref_fwd(x, w, eps=EPS):
    x64 = x.astype(np.float64)
    rstd = 1.0 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + eps)
    return x64 * rstd * w.astype(np.float64), rstd[..., 0]


def rel_err(out, ref):
    scale = np.maximum(np.abs(ref).max(axis=-1, keepdims=True), 1e-30)
    return float(np.max(np.abs(out.astype(np.float64) - ref) / scale))


SETTINGS = settings(max_examples=12, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(m=st.integers(1, 5), n=st.sampled_from(NS), seed=st.integers(0, 2**16),
       lead=st.booleans())
def test_forward_f32_matches_float64(m, n, seed, lead):
    rng = np.random.default_rng(seed)
    shape = (2, m, n) if lead else (m, n)
    x = rng.standard_normal(shape).astype(np.float32) * rng.uniform(0.01, 100)
    w = (rng.standard_normal(n) * 0.5 + 1).astype(np.float32)
    y, rstd = rms_norm(x, w, EPS, return_rstd=True)
    ref, rref = ref_fwd(x, w)
    assert y.shape == x.shape and y.dtype == np.float32
    assert rel_err(y, ref) < 2e-6
    assert np.allclose(rstd, rref.reshape(-1), rtol=1e-6)


@SETTINGS
@given(m=st.integers(1, 4), n=st.sampled_from([4, 24, 100, 1000, 1030]),
       extra=st.integers(1, 9), seed=st.integers(0, 2**16))
def test_forward_strided_rows(m, n, extra, seed):
    """x is a row-slice of a wider array: its rows are not contiguous with each other."""
    rng = np.random.default_rng(seed)
    big = rng.standard_normal((m, n + extra)).astype(np.float32)
    x = big[:, :n]
    w = rng.standard_normal(n).astype(np.float32)
    y = rms_norm(x, w, EPS)
    assert rel_err(y, ref_fwd(x, w)[0]) < 2e-6


@SETTINGS
@given(m=st.integers(1, 4), n=st.sampled_from(NS), seed=st.integers(0, 2**16))
def test_forward_residual_in_place(m, n, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((m, n)).astype(np.float32)
    r = rng.standard_normal((m, n)).astype(np.float32)
    w = rng.standard_normal(n).astype(np.float32)
    h = x + r
    res = r.copy()
    y = rms_norm(x, w, EPS, residual=res)
    np.testing.assert_array_equal(res, h)  # f32 add is exact to numpy's f32 add
    assert rel_err(y, ref_fwd(h, w)[0]) < 2e-6


def _half(dtype, a):
    if dtype == f16:
        return a.astype(np.float16)
    return f32_to_bf16_bits(a.astype(np.float32))


def _widen(dtype, a):
    return a.astype(np.float32) if dtype == f16 else bf16_bits_to_f32(a)


def _ulp_err(dtype, out_bits, ref64):
    """Distance in units in the last place of the half type, per element."""
    if dtype == f16:
        ref_r = ref64.astype(np.float16).astype(np.float64)
        got = out_bits.astype(np.float64)
        ulp = np.spacing(np.abs(ref_r).astype(np.float16)).astype(np.float64)
    else:
        ref_bits = f32_to_bf16_bits(ref64.astype(np.float32))
        ref_r = bf16_bits_to_f32(ref_bits).astype(np.float64)
        got = bf16_bits_to_f32(out_bits).astype(np.float64)
        ulp = np.abs(bf16_bits_to_f32(ref_bits + 1).astype(np.float64) - ref_r)
    return np.abs(got - ref_r) / np.maximum(ulp, 1e-30)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dtype=st.sampled_from([f16, bf16]), wf32=st.booleans(), m=st.integers(1, 3),
       n=st.sampled_from([2, 8, 100, 1000, 1030, 2048]), seed=st.integers(0, 2**16))
def test_forward_half_within_one_ulp(dtype, wf32, m, n, seed):
    """f16/bf16 in, f32 math, output within 1 ulp of the correctly rounded f64 answer."""
    rng = np.random.default_rng(seed)
    x = _half(dtype, rng.standard_normal((m, n)))
    wdt = f32 if wf32 else dtype
    w = (rng.standard_normal(n) * 0.5 + 1).astype(np.float32)
    wa = w if wf32 else _half(dtype, w)
    k = build_forward(plan(n, dtype, max_vec(n, dtype)), dtype, wdt, eps=EPS)
    y = np.zeros_like(x)
    k.interpret(x, wa, y)
    ref, _ = ref_fwd(_widen(dtype, x), wa if wf32 else _widen(dtype, wa))
    assert _ulp_err(dtype, y, ref).max() <= 1.0


@SETTINGS
@given(m=st.integers(1, 6), n=st.sampled_from(NS), seed=st.integers(0, 2**16))
def test_backward_f32_matches_float64(m, n, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((m, n)).astype(np.float32)
    dy = rng.standard_normal((m, n)).astype(np.float32)
    w = (rng.standard_normal(n) * 0.5 + 1).astype(np.float32)
    _, rstd64 = ref_fwd(x, w)
    rstd = rstd64.astype(np.float32)
    dx, dw = rms_norm_backward(dy, x, w, rstd)
    x64, dy64, w64, r64 = x.astype(np.float64), dy.astype(np.float64), w.astype(np.float64), \
        rstd.astype(np.float64)[:, None]
    g = dy64 * w64
    rdx = r64 * (g - x64 * r64**2 * (g * x64).sum(-1, keepdims=True) / n)
    rdw = (dy64 * x64 * r64).sum(0)
    # dx = rstd*(g - x*rstd^2*mean(g*x)) cancels (exactly, when N == 1): measure the
    # error against the size of the terms, as f32 arithmetic on them would make it.
    scale = np.maximum(np.abs(r64 * g).max(-1, keepdims=True), np.abs(rdx).max(-1, keepdims=True))
    assert float(np.max(np.abs(dx - rdx) / scale)) < 1e-5
    dscale = max(float(np.abs(dy64 * x64 * r64).sum(0).max()), 1e-30)
    assert float(np.max(np.abs(dw - rdw))) <= 1e-5 * dscale


def _bwd_case(m, n, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((m, n)).astype(np.float32)
    dy = rng.standard_normal((m, n)).astype(np.float32)
    w = (rng.standard_normal(n) * 0.5 + 1).astype(np.float32)
    rstd = ref_fwd(x, w)[1].astype(np.float32)
    r64 = rstd.astype(np.float64)[:, None]
    g = dy.astype(np.float64) * w
    rdx = r64 * (g - x * r64**2 * (g * x).sum(-1, keepdims=True) / n)
    rdw = (dy.astype(np.float64) * x * r64).sum(0)
    return (dy, x, w, rstd), rdx, rdw


@pytest.mark.parametrize("flip", [0, 2**31])
def test_fused_backward_late_arrivals_sum_dw(flip):
    """One plain launch: dx, and dW summed by the last CTAs to arrive, whichever way the
    arrival word's top bit stands (a launch flips it and leaves the rest zero)."""
    m, n = 11, 520
    p = plan_backward(n, f32, 3)
    assert p.fused and p.grid > 1
    args, rdx, rdw = _bwd_case(m, n)
    k = build_backward(p, f32, f32)
    # a plain launch; the device must hold the CTAs that sum (one per column tile)
    assert not k.cooperative and k.resident == dw_summers(n, p.grid, dw_narrow(n, p.grid))
    ws = np.array([0, flip], np.uint32)
    dx, dw, part = k.interpret(*args, ws)
    assert rel_err(dx, rdx) < 1e-5
    np.testing.assert_allclose(dw, rdw, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(part.sum(0), rdw, rtol=1e-5, atol=1e-5)
    assert "atom.acq_rel.gpu.global.add.u32" in k.ptx() and "ld.acquire.gpu" in k.ptx()


@pytest.mark.parametrize("n", [1000, 256])
def test_thin_dw_sum_gives_the_same_bits(n, monkeypatch):
    """The fused dW sum over 32-column tiles (twice the loads in flight) adds in the
    order the 128-column one does: the same dx and dW, bit for bit."""
    from ptxdsl.ops.rmsnorm import bwd
    from ptxdsl.ops.rmsnorm.bwd_dw import dw_narrow
    p = plan_backward(n, f32, 2, ctas_per_sm=8)
    assert p.fused and p.grid > p.slices
    assert dw_narrow(n, p.grid) == (-(-n // 128) * 8 < p.grid)
    args, rdx, rdw = _bwd_case(19, n)
    out = {}
    for thin in (True, False):
        monkeypatch.setattr(bwd, "dw_narrow", lambda n, g, thin=thin: thin)
        k = build_backward(p, f32, f32)
        out[thin] = k.interpret(*args, np.zeros(2, np.uint32))[:2]
    np.testing.assert_allclose(out[True][1], rdw, rtol=1e-5, atol=1e-5)
    assert all((a == b).all() for a, b in zip(out[True], out[False]))


@pytest.mark.parametrize("m", sweep([5, 6, 7, 13], keep=1))
def test_backward_l2_prefetch_changes_no_result(m):
    """The L2 prefetch of row + 2G (thread 0, whole rows, in bounds only: the
    interpreter checks each prefetched range) leaves dx and dW as they were."""
    import dataclasses
    n = 512
    p = dataclasses.replace(plan_backward(n, f32, 1, ctas_per_sm=2), l2_ahead=True)
    assert p.prefetch and p.grid == 2 and p.vec * 4 == 16
    args, rdx, rdw = _bwd_case(m, n)
    k = build_backward(p, f32, f32)
    assert k.ptx().count("cp.async.bulk.prefetch.L2.global.L2::cache_hint") == 4
    assert ".minnctapersm 1" in k.ptx()
    dx, dw, _ = k.interpret(*args, np.zeros(2, np.uint32))
    plain = build_backward(dataclasses.replace(p, l2_ahead=False), f32, f32)
    dx0, dw0, _ = plain.interpret(*args, np.zeros(2, np.uint32))
    np.testing.assert_array_equal(dx, dx0)
    np.testing.assert_array_equal(dw, dw0)
    assert rel_err(dx, rdx) < 1e-5
    np.testing.assert_allclose(dw, rdw, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("m", sweep([3, 4, 5], keep=1))
def test_streaming_backward_l2_prefetch_changes_no_result(m):
    """The streaming (long-row) kernel's L2 prefetch of the CTA's next row (row + G)
    leaves dx and dW as they were, with row + G in and out of range."""
    import dataclasses
    n = 2048
    p = dataclasses.replace(plan_backward(n, f32, 2, threads=32, ctas_per_sm=2),
                            l2_ahead=True)
    assert p.streaming and p.grid == 4 and p.vec * 4 == 16
    args, rdx, rdw = _bwd_case(m, n)
    k = build_backward(p, f32, f32)
    assert k.ptx().count("cp.async.bulk.prefetch.L2.global [") == 2
    dx, dw, _ = k.interpret(*args, np.zeros(2, np.uint32))
    plain = build_backward(dataclasses.replace(p, l2_ahead=False), f32, f32)
    assert "prefetch" not in plain.ptx()
    dx0, dw0, _ = plain.interpret(*args, np.zeros(2, np.uint32))
    np.testing.assert_array_equal(dx, dx0)
    np.testing.assert_array_equal(dw, dw0)
    assert rel_err(dx, rdx) < 1e-5
    np.testing.assert_allclose(dw, rdw, rtol=1e-5, atol=1e-5)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(m=st.integers(1, 9), n=st.sampled_from([512, 1000, 2040, 2048]),
       stages=st.integers(1, 3), grid=st.integers(1, 3), half=st.booleans(),
       fused=st.booleans(), ahead=st.booleans(), seed=st.integers(0, 2**16))
@pytest.mark.long
def test_staged_backward_is_the_streaming_kernel_bit_for_bit(m, n, stages, grid, half, fused,
                                                              ahead, seed):
    """Long rows through the shared-memory ring (cp.async several rows ahead, dw in
    registers) give the same bits as streaming them twice from global memory, for any
    ring size, grid, ragged row and row count (the interpreter lands a cp.async in
    shared memory only at its wait_group: a missing wait reads a stale row)."""
    import dataclasses
    dt = bf16 if half else f32
    p = plan_backward(n, dt, grid, threads=128, ctas_per_sm=1, stages=stages, fused=fused)
    p = dataclasses.replace(p, l2_ahead=ahead)
    assert p.stages == stages and not p.streaming and p.grid == grid
    stream = dataclasses.replace(p, stages=0, streaming=True, prefetch=False, preload_w=False,
                                 l2_ahead=False)
    (dy, x, w, rstd), rdx, rdw = _bwd_case(m, n, seed)
    if half:
        dy, x, w = (f32_to_bf16_bits(a) for a in (dy, x, w))
    k = build_backward(p, dt, dt)
    assert k.dynamic_shared == stages * 2 * n * dt.bytes
    extra = (np.zeros(2, np.uint32),) if fused else ()
    got = k.interpret(dy, x, w, rstd, *extra)
    want = build_backward(stream, dt, dt).interpret(dy, x, w, rstd, *extra)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    dx = bf16_bits_to_f32(got[0]) if half else got[0]
    assert rel_err(dx, rdx) < (1e-2 if half else 1e-5)


def test_backward_plan_stages_long_rows_in_shared_memory():
    """Rows whose part per thread does not fit registers go through the ring where a
    buffer fits (two for 16384 halves, one for 16384 f32) and stream beyond that."""
    assert plan_backward(16384, bf16).stages == 2 and plan_backward(16384, f16).stages == 2
    p = plan_backward(16384, f32)
    assert p.stages == 1 and p.threads == 1024 and p.grid == 132 and not p.streaming
    assert plan_backward(8192, bf16).stages == 0  # held in registers
    assert plan_backward(32768, bf16).streaming and plan_backward(32768, bf16).stages == 0
    assert plan_backward(16383, bf16).streaming  # 2-byte chunks: cp.async.cg takes 16
    with pytest.raises(ValueError, match="2 shared-memory row buffers of 16384 f32 do not fit"):
        plan_backward(16384, f32, stages=2)
    import dataclasses
    bad = dataclasses.replace(plan_backward(16384, bf16), vec=4)
    with pytest.raises(ValueError, match="copies 16-byte chunks"):
        build_backward(bad, bf16, bf16).ptx()


def test_backward_ring_is_128_byte_aligned():
    """The ring (dynamic shared memory, after the static arrays) declares 128-byte
    alignment, so that ptxas pads the static arrays before it: 16-byte alignment alone
    cost 1024 x 16384 bf16 on an H200 3.7 us a call."""
    from ptxdsl.ops.rmsnorm.bwd_staged import RING_ALIGN
    for dt in (bf16, f32):
        text = build_backward(plan_backward(16384, dt), dt, dt).ptx()
        assert f".extern .shared .align {RING_ALIGN} .b8" in text and RING_ALIGN == 128


def _arrivals_kernel(G: int, K: int, expect: int, resident: bool = True):
    """``G`` CTAs that each publish a mark, then ``late_arrivals(expect, K)``; the late
    ones add every CTA's mark. Outputs WS (the arrival words, given in), MARK, SLOT (each
    CTA's slot) and SEEN (slot s: the marks' sum its CTA saw)."""
    from ptxdsl import Tile, kernel, ptx, reg
    from ptxdsl.ops.rmsnorm.bwd_dw import late_arrivals
    from ptxdsl.core.types import b32, u32

    @kernel(in_specs=(), out_specs=(Tile(2, b32), Tile(G, u32), Tile(G, u32), Tile(K, u32)),
            grid=(G, 1, 1), block=(64, 1, 1), arch="sm_90a", resident=K if resident else None)
    def arrivals_test(WS, MARK, SLOT, SEEN):
        pws, pmark, pslot, pseen = ptx.global_ptrs(WS, MARK, SLOT, SEEN)
        tid = reg.scalar(u32); ptx.inst.mov.u32(tid, ptx.special.tid.x())
        cta = reg.scalar(u32); ptx.inst.mov.u32(cta, ptx.special.ctaid.x())
        with ptx.if_(tid == 1):  # not the thread that arrives: the bar.sync carries it
            ptx.inst.st.global_.u32(ptx.addr(pmark + cta * 4), cta + 100)
        ptx.bar.sync(0)
        slot = late_arrivals(pws, tid, cta, expect, K)
        with ptx.if_(tid == 2):
            ptx.inst.st.global_.u32(ptx.addr(pslot + cta * 4), slot)
            with ptx.if_(slot < K):
                total = reg.scalar(u32, init=0)
                for c in range(G):
                    v = reg.scalar(u32)
                    ptx.inst.ld.global_.cg.u32(v, ptx.addr(pmark, 4 * c))
                    ptx.inst.add.u32(total, total, v)
                ptx.inst.st.global_.u32(ptx.addr(pseen + slot * 4), total)
    return arrivals_test


def _run_arrivals(G, K, expect, flip=0, resident=True):
    return _arrivals_kernel(G, K, expect, resident).interpret(
        np.array([0, flip], np.uint32), np.zeros(G, np.uint32), np.zeros(G, np.uint32),
        np.zeros(K, np.uint32))


@pytest.mark.parametrize("flip", [0, 2**31])
@pytest.mark.parametrize("K", [1, 2, 5])
def test_late_arrivals_see_every_mark_and_flip_the_word(K, flip):
    """The last K CTAs to arrive get slots 0..K-1 and see the mark every CTA wrote
    before arriving; the others get slots of K or more (they did not wait); the word's
    top bit has flipped with the rest left zero, ready for the next launch."""
    G = 5
    ws, mark, slot, seen = _run_arrivals(G, K, G, flip)
    assert sorted(int(s) for s in slot if s < K) == list(range(K))
    assert sum(int(s) >= K for s in slot) == G - K
    assert list(seen) == [sum(range(100, 100 + G))] * K
    assert list(ws.view(np.uint32)) == [0, flip ^ 2**31]


def test_late_arrivals_run_in_one_batch_of_the_interpreter(monkeypatch):
    """The interpreter runs large grids in batches one after another; a kernel whose
    CTAs wait for later ones (``resident=``) runs in one. Without it, batches of one CTA
    leave each late arrival waiting for a CTA of a batch that never starts."""
    import ptxdsl.interp as interp
    from ptxdsl.interp import program
    monkeypatch.setattr(interp, "MAX_BATCH_THREADS", 64)  # one CTA a batch
    monkeypatch.setattr(program, "MAX_ITERATIONS", 200)
    ws, mark, slot, seen = _run_arrivals(4, 2, 4)
    assert list(seen) == [sum(range(100, 104))] * 2
    with pytest.raises(InterpreterError, match="no progress.*spins"):
        _run_arrivals(4, 2, 4, resident=False)


def test_late_arrivals_wait_for_every_cta(monkeypatch):
    """Arrivals that expect one CTA more than the grid has never release the late ones:
    the interpreter reports the spin that does not end (they really wait)."""
    from ptxdsl.interp import program
    monkeypatch.setattr(program, "MAX_ITERATIONS", 200)
    with pytest.raises(InterpreterError, match="no progress.*spins"):
        _run_arrivals(3, 2, 4)


def test_late_arrivals_trap_instead_of_hanging(monkeypatch):
    """Late arrivals that cannot be released (a workspace that was not zero, CTAs lost)
    cannot hang the GPU: past a time limit the kernel traps (on a GPU: a failed launch,
    reported as an error)."""
    from ptxdsl.ops.rmsnorm import bwd_dw
    monkeypatch.setattr(bwd_dw, "BARRIER_TIMEOUT_NS", 50_000)
    assert "trap" in _arrivals_kernel(3, 2, 4).ptx()
    with pytest.raises(InterpreterError, match="trap executed"):
        _run_arrivals(3, 2, 4)


def test_unfused_backward_for_small_rows():
    """Plans whose dW sum would fall to too few threads keep two launches."""
    assert not plan_backward(128, f32, 132).fused and plan_backward(8192, f32, 132).fused
    n = 100
    p = plan_backward(n, f32, 2, fused=False)
    args, rdx, rdw = _bwd_case(9, n, 1)
    kb = build_backward(p, f32, f32)
    assert not kb.cooperative
    dx, part = kb.interpret(*args)
    dw = build_dw_reduce(n, p.grid, f32).interpret(part)
    assert rel_err(dx, rdx) < 1e-5
    np.testing.assert_allclose(dw, rdw, rtol=1e-5, atol=1e-5)


def test_backward_dweight_is_bitwise_repeatable():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((37, 96)).astype(np.float32)
    dy = rng.standard_normal((37, 96)).astype(np.float32)
    w = rng.standard_normal(96).astype(np.float32)
    rstd = ref_fwd(x, w)[1].astype(np.float32)
    runs = [rms_norm_backward(dy, x, w, rstd)[1].view(np.uint32) for _ in range(3)]
    assert all(np.array_equal(runs[0], r) for r in runs[1:])


@pytest.mark.long
def test_short_rows_take_one_cta_per_sm_of_several_rows():
    """ops gives short rows (<= 256 power-of-two threads, N >= 1000, 16-byte chunks) one
    CTA per SM of several row groups, shaped by the plan table's configuration for the
    call's rows (few, or many rows an SM); longer and very short rows keep the plan."""
    from ptxdsl.ops.rmsnorm.config import choose
    from ptxdsl.ops.rmsnorm.devices import Device
    for n, dt, short in [(1024, bf16, True), (1000, f16, True), (2048, bf16, True),
                         (1024, f32, True), (1000, f32, True), (4096, bf16, False),
                         (96, bf16, False), (1001, bf16, False)]:
        vec = max_vec(n, dt)
        for m in (None, 192 * 132):
            p, _ = choice.backward_kernel(n, dt, dt, vec, "sm_90a", 132, None, m=m)
            if not short:
                assert p == plan_backward(n, dt, 132, vec=vec), (n, dt)
                continue
            cfg = choose("backward", Device.of(None).plan_class("sm_90a"), dt, vec, n, m, 132)
            threads, groups = choice.short_row_shape(n, dt, vec, cfg)
            assert groups > 1 and threads <= 256, (n, dt, m)
            assert p == plan_backward(n, dt, 132, ctas_per_sm=1, threads=threads,
                                      groups=groups), (n, dt, m)
            assert p.grid == 132 and p.fused and p.block <= 1024 and p.prefetch
            assert not p.l2_ahead  # the interpreter: no occupancy to ask


@pytest.mark.parametrize("cases", [
    pytest.param([(8192, f32), (4097, bf16), (65536, bf16), (100, f16)], id="some"),
    pytest.param([(8192, bf16), (4096, f16), (1000, f32), (16384, f32), (16384, bf16),
                  (12288, f16), (1, f32)], id="the-rest", marks=pytest.mark.long)])
def test_backward_kernels_assemble_without_spills(cases):
    from ptxdsl.toolchain import find_ptxas
    if find_ptxas() is None:
        pytest.skip("no ptxas")
    for n, dt in cases:
        p = plan_backward(n, dt)
        r = build_backward(p, dt, dt).resources()
        assert r.spill_stores == 0 and r.local == 0, (n, dt, r)


@pytest.mark.parametrize("ns", [
    pytest.param([4097, 65536], id="some"),
    pytest.param([1, 100, 1000, 1024, 4096, 5120, 7168, 8192, 16384, 32768], id="the-rest",
                 marks=pytest.mark.long)])
def test_forward_kernels_assemble_without_spills(ns):
    from ptxdsl.toolchain import find_ptxas
    if find_ptxas() is None:
        pytest.skip("no ptxas")
    for n in ns:
        for dt in (f32, bf16, f16):
            for res in (False, True):
                k = build_forward(plan(n, dt), dt, dt, residual=res, with_rstd=res)
                r = k.resources()
                assert r.spill_stores == 0 and r.local == 0, (n, dt, res, r)


def test_bad_inputs_are_explained():
    x = np.zeros((2, 8), np.float32)
    with pytest.raises(LaunchError, match=r"weight must have shape \(8,\)"):
        rms_norm(x, np.zeros(7, np.float32))
    with pytest.raises(LaunchError, match="x must be float32, float16 or bfloat16"):
        rms_norm(x.astype(np.int32), np.zeros(8, np.int32))
    with pytest.raises(LaunchError, match="weight dtype"):
        rms_norm(x, np.zeros(8, np.float16))  # f16 weights need f16 x


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(m=st.integers(1, 9), n=st.sampled_from([3, 96, 1000, 1030, 4096]),
       grid=st.integers(1, 3), residual=st.booleans(), seed=st.integers(0, 2**16))
def test_persistent_forward_walks_every_row(m, n, grid, residual, seed):
    """The loop kernel (used from 16384 f32 up) on a tiny grid: each CTA takes several
    rows and prefetches the next; results, residual and rstd all match float64."""
    from ptxdsl.ops.rmsnorm.fwd_loop import build_forward_loop
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((m, n)).astype(np.float32)
    w = rng.standard_normal(n).astype(np.float32)
    k = build_forward_loop(plan(n, f32), f32, f32, grid, eps=EPS, residual=residual,
                           with_rstd=True)
    if residual:
        r = rng.standard_normal((m, n)).astype(np.float32)
        h, y, rstd = x + r, np.zeros_like(x), np.zeros(m, np.float32)
        k.interpret(x, r, w, y, r, rstd)
        np.testing.assert_array_equal(r, h)
        x = h
    else:
        y, rstd = k.interpret(x, w)
    ref, rref = ref_fwd(x, w)
    assert rel_err(y, ref) < 2e-6
    assert np.allclose(rstd, rref, rtol=1e-6)


@pytest.mark.parametrize("n", sweep([4096, 8192, 16384], keep=1))
def test_half_two_pass_kernel_keeps_the_occupancy(n):
    """Two-pass half rows: w is loaded late exactly when ptxas gives that variant more
    CTAs per SM (and a thread has at most two chunks), never when it would lower them."""
    import dataclasses
    from ptxdsl import toolchain
    if toolchain.find_ptxas() is None:
        pytest.skip("no ptxas")
    p = plan(n, bf16)
    assert p.two_pass and p.preload_w
    k = choice.best_row_kernel(p, bf16, bf16, EPS, False, False, "sm_90a")
    keep = build_forward(p, bf16, bf16, eps=EPS)
    late = build_forward(dataclasses.replace(p, preload_w=False, w_hints=("L1::evict_last",),
                                             w_policy="evict_last"), bf16, bf16, eps=EPS)
    gain = choice.ctas_per_sm(late, p.block) > choice.ctas_per_sm(keep, p.block)
    one = build_forward(dataclasses.replace(p, two_pass=False, preload_w=False,
                                            w_hints=("L1::evict_last",),
                                            w_policy="evict_last", min_ctas=4),
                        bf16, bf16, eps=EPS)
    chose_late = k.ptx() in (late.ptx(), one.ptx())
    assert chose_late == (gain and p.per_thread <= 2)
    assert choice.ctas_per_sm(k, p.block) >= choice.ctas_per_sm(keep, p.block)
    assert not k.resources().spill_stores
    if chose_late and p.block == 512:  # x stays in registers: one read of x per element
        assert k.ptx() == one.ptx()
        text = k.ptx()
        assert ".minnctapersm 4" in text and ".maxntid 512, 1, 1" in text
        # x's chunks and w's, each loaded once; no second read of x (L1::evict_first)
        assert text.count("ld.global") == 2 * p.per_thread
        assert "L1::evict_first" not in text


@pytest.mark.parametrize("residual", [False, True])
def test_ops_kernel_for_8192_half_rows_is_right(residual):
    """Whatever best_row_kernel picks for 8192 bf16 rows (with ptxas: the one-pass
    row under .minnctapersm), with and without a residual, on the interpreter."""
    n, m = 8192, 3
    k = choice.best_row_kernel(plan(n, bf16), bf16, bf16, EPS, residual, residual, "sm_90a")
    rng = np.random.default_rng(5)
    x = bf16_bits_to_f32(f32_to_bf16_bits(rng.standard_normal((m, n)).astype(np.float32)))
    w = bf16_bits_to_f32(f32_to_bf16_bits(rng.standard_normal(n).astype(np.float32)))
    y = np.zeros((m, n), np.uint16)
    if residual:
        r = bf16_bits_to_f32(f32_to_bf16_bits(rng.standard_normal((m, n)).astype(np.float32)))
        rb, rstd = f32_to_bf16_bits(r).copy(), np.zeros(m, np.float32)
        k.interpret(f32_to_bf16_bits(x), rb, f32_to_bf16_bits(w), y, rb, rstd)
        h = bf16_bits_to_f32(f32_to_bf16_bits(x + r))
        np.testing.assert_array_equal(bf16_bits_to_f32(rb), h)
        ref, rref = ref_fwd(h, w)
        assert np.allclose(rstd, rref, rtol=1e-5)
    else:
        k.interpret(f32_to_bf16_bits(x), f32_to_bf16_bits(w), y)
        ref, _ = ref_fwd(x, w)
    assert rel_err(bf16_bits_to_f32(y), ref) < 1e-2


def test_balanced_grid_keeps_the_longest_cta_and_drops_the_idle_ones():
    from ptxdsl.ops.rmsnorm.row import balanced_grid
    assert balanced_grid(8192, 528) == 512  # 16 rows each, not 272 x 16 + 256 x 15
    assert balanced_grid(0, 528) == 0
    assert balanced_grid(100, 528) == 100
    for blocks in range(1, 120):
        for most in range(1, 40):
            g = balanced_grid(blocks, most)
            longest = -(-blocks // most)
            assert 1 <= g <= most and -(-blocks // g) == longest
            assert g == 1 or -(-blocks // (g - 1)) > longest  # no fewer CTAs would do


@pytest.mark.parametrize("dt,batch", [(f32, 3), (bf16, 2), (f16, 7)])
def test_two_pass_second_read_batched_ahead_of_the_stores(dt, batch):
    """``reload_batch``: the two-pass kernel's second read of x and its w loads issued
    ``batch`` chunks ahead of their y stores (a last batch shorter than the others, a
    ragged last chunk, a residual): the same y as chunk by chunk, and all of a batch's
    loads come before its first store in the PTX."""
    import dataclasses
    n = 64 * 6 + 5 if dt != f32 else 2 * (64 * 6 + 3)  # 389 / 387 chunks: 7 a thread
    p = dataclasses.replace(plan(n, dt, 1 if dt != f32 else 2, threads=64), two_pass=True,
                            preload_w=False)
    assert p.per_thread == 7 and p.ragged
    npd = {f32: np.float32, bf16: None, f16: np.float16}[dt]
    rng = np.random.default_rng(batch)
    if dt == bf16:
        import ml_dtypes
        npd = ml_dtypes.bfloat16
    x = rng.standard_normal((3, n)).astype(npd)
    r = rng.standard_normal((3, n)).astype(npd)
    w = (rng.standard_normal(n) * 0.1 + 1).astype(npd)
    outs = []
    for b in (1, batch):
        k = build_forward(dataclasses.replace(p, reload_batch=b), dt, dt, eps=EPS,
                          residual=True, with_rstd=True)
        h, y = r.copy(), np.zeros_like(x)
        k.interpret(x, h, w, y, h, np.zeros(3, np.float32))
        outs.append((y, h))
        lines = [ln.strip() for ln in k.ptx().splitlines()]
        reloads = [i for i, ln in enumerate(lines) if "L1::evict_first" in ln]
        stores = [i for i, ln in enumerate(lines) if ln.startswith("st.global")
                  and i > reloads[0]]
        assert len(reloads) == 7
        assert sum(i < stores[0] for i in reloads) == b  # the first batch before a store
    (y1, h1), (yb, hb) = outs
    np.testing.assert_array_equal(y1, yb)
    np.testing.assert_array_equal(h1, hb)
    ref, _ = ref_fwd(hb.astype(np.float64), w)
    tol = 2e-6 if dt == f32 else 1e-2
    assert rel_err(yb, ref) < tol
    with pytest.raises(ValueError, match="reload_batch.*at least 1, not 0"):
        dataclasses.replace(p, reload_batch=0)
