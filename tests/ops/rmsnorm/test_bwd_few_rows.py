"""The RMSNorm backward for few rows: a grid of M rounded up to a power of two CTAs
(at most the device's), on the CPU interpreter against float64 numpy.

A CTA without a row still writes its dW partial row and the fused sum reads all of
them, so ``rms_norm_backward`` cuts the persistent grid to the rows it has
(``plan_backward(rows=M)``, ``backward_kernel(..., m=M)``); grids of at most
``MAX_DW_CLUSTER`` CTAs sum dW as one cluster in distributed shared memory.
"""
from __future__ import annotations

import dataclasses

import ml_dtypes
import numpy as np
import pytest

from rmsnorm_cases import case, rel_err
import ptxdsl.interp  # noqa: F401  (the package's own interpreter: a broken one fails here)
from ptxdsl.ops import rms_norm_backward
from ptxdsl.ops.rmsnorm import api, bwd
from ptxdsl.ops.rmsnorm import plan as choice
from ptxdsl.ops.rmsnorm.bwd import MAX_DW_CLUSTER, build_backward, plan_backward, rows_grid
from ptxdsl.ops.rmsnorm.fwd import max_vec
from ptxdsl.core.types import bf16, f16, f32
from sweeps import sweep  # noqa: E402

SMS = 2  # the interpreter's SM count (Frame.sms)


def next_pow2(m: int) -> int:
    p = 1
    while p < m:
        p *= 2
    return p


@pytest.fixture
def plans(monkeypatch):
    """The plans ``rms_norm_backward`` ran, in call order."""
    seen = []
    real = api.backward_kernel

    def spy(*a, **kw):
        p, k = real(*a, **kw)
        seen.append(p)
        return p, k
    monkeypatch.setattr(api, "backward_kernel", spy)
    return seen


def test_rows_grid_is_rows_rounded_up_to_a_power_of_two_at_most_the_grid():
    assert [rows_grid(396, m) for m in (1, 2, 3, 4, 5, 7, 8, 9, 33, 255, 256, 257, 396, 10**6)] \
        == [1, 2, 4, 4, 8, 8, 8, 16, 64, 256, 256, 396, 396, 396]
    assert rows_grid(132, 0) == 1 and rows_grid(1, 7) == 1


@pytest.mark.parametrize("n, dt", sweep([(8192, bf16), (8192, f32), (4096, f16), (1024, bf16),
                                   (1000, f32), (12288, f32), (128, f32), (96, bf16)], keep=2))
def test_few_rows_plan_only_its_grid(n, dt):
    """On a 132-SM device: the grid is min(G, next_pow2(M)) (of one-row CTAs where the
    device's plan has row groups), everything else is the device's plan; small grids sum dW in the same launch (fused) even where the
    device's plan takes two launches (tiny rows, grids of thousands of CTAs); many
    rows keep the device's plan and kernel as they were."""
    from ptxdsl.ops.rmsnorm.config import choose
    from ptxdsl.ops.rmsnorm.devices import Device
    vec = max_vec(n, dt)
    cls = Device.of(None).plan_class("sm_90a")
    full, kfull = choice.backward_kernel(n, dt, dt, vec, "sm_90a", 132, None)
    for m in (1, 2, 3, 7, 9, 33, 100, 129, 257, 1000, 5000, 10**6):
        p, k = choice.backward_kernel(n, dt, dt, vec, "sm_90a", 132, None, m=m)
        assert p.grid == min(full.grid, next_pow2(m)), (n, dt, m)
        cfg = choose("backward", cls, dt, vec, n, m, 132)
        many = cfg != choose("backward", cls, dt, vec, n, None, 132) and full.groups > 1
        assert dataclasses.replace(p, grid=full.grid, fused=full.fused, groups=full.groups,
                                   threads=full.threads) == full
        assert p.fused == (full.fused or -(-p.grid // p.slices) <= bwd.MAX_FUSED_ROWS)
        # one cluster (or one CTA) sums dW, or the last CTA, or the last arrivals: none
        # waits for a CTA that may not be resident, a plain launch
        assert k.grid == (p.grid, 1, 1) and not k.cooperative
        assert (k.resident is not None) == p.grid_sum
        assert p.cluster_dw == (p.grid if p.fused and p.grid <= bwd.MAX_DW_CLUSTER
                                and not (p.streaming or p.stages) else 0), p
        assert tuple(k.cluster or (1, 1, 1)) == ((p.grid, 1, 1) if p.cluster_dw > 1
                                                 else (1, 1, 1))
        if m <= 128:
            assert p.fused, (n, dt, m)  # one launch
        if many:
            # many rows of short rows: the table's shape for them (plan.short_row_shape)
            t, g = choice.short_row_shape(n, dt, vec, cfg)
            assert (p.threads, p.groups, p.grid) == (t, g, full.grid) and p != full
        elif m >= full.grid:
            assert p == full and k is kfull
        # plan_backward(rows=M) is the same cut of the same plan
        assert plan_backward(n, dt, 132, vec=vec, ctas_per_sm=full.grid // 132, rows=m,
                             threads=p.threads, groups=p.groups if p.groups > 1
                             else full.groups) == p


def test_plan_backward_rows_keeps_an_explicit_fused():
    p = plan_backward(256, f32, SMS, rows=3, fused=False)
    assert p.grid == 4 and not p.fused
    assert plan_backward(256, f32, SMS, rows=3).fused
    assert plan_backward(256, f32, SMS, rows=10**4) == plan_backward(256, f32, SMS)


def test_every_row_is_walked_by_the_smaller_grid(monkeypatch):
    """Rows cta, cta + G', ...: the kernel strides by its own G, so a grid cut to the
    rows covers them all (G' >= M: one row per CTA at most). Through the global partial
    rows (no grid summing dW in one cluster: ``MAX_DW_CLUSTER`` 0) rowless CTAs write
    zeros; in one cluster they add zeros."""
    n = 256
    for m in (1, 5, 6, 12):
        p = plan_backward(n, f32, SMS, rows=m)
        assert p.grid == next_pow2(m)
        (dy, x, w, rstd), rdx, rdw = case(m, n, seed=m)
        for partial in (False, True):
            q = p
            monkeypatch.setattr(bwd, "MAX_DW_CLUSTER", 0 if partial else MAX_DW_CLUSTER)
            dx, dw, part = build_backward(q, f32, f32).interpret(dy, x, w, rstd,
                                                                 np.zeros(2, np.uint32))
            if not q.cluster_dw:
                assert part.shape == (p.grid, n) and not part[m:].any()  # rowless: zeros
            assert rel_err(dx, rdx) < 1e-5
            np.testing.assert_allclose(dw, rdw, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("m", sweep([1, 3, 7, 9, 17, 33, 50], keep=2))
def test_few_rows_backward_f32_matches_float64(m, plans):
    """rms_norm_backward on the interpreter (2 SMs; N=256 f32: a grid of 42 CTAs) at
    few rows, just above powers of two (9, 17, 33) and past the grid (50): dx and dw
    against float64, dw bit for bit the same on a second call."""
    n = 256
    full = plan_backward(n, f32, SMS)
    assert full.grid == 42
    args, rdx, rdw = case(m, n, seed=m)
    dx, dw = rms_norm_backward(*args)
    assert plans[-1].grid == min(42, next_pow2(m)) and plans[-1].fused
    assert rel_err(dx, rdx) < 1e-5
    np.testing.assert_allclose(dw, rdw, rtol=1e-5, atol=1e-5 * max(1.0, np.abs(rdw).max()))
    dx2, dw2 = rms_norm_backward(*args)
    np.testing.assert_array_equal(dw2.view(np.uint32), dw.view(np.uint32))
    np.testing.assert_array_equal(dx2.view(np.uint32), dx.view(np.uint32))


@pytest.mark.parametrize("m", sweep([1, 3, 5, 7], keep=1))
def test_few_rows_backward_short_half_rows(m, plans):
    """Short half rows (N=1024 f16: one CTA per SM of eight row groups, a grid of 2 on
    the interpreter): one row runs a single one-row CTA, more rows the grouped grid
    (fewer rows than its row groups included); lead dimensions folded into M."""
    n = 1024
    (dy, x, w, rstd), rdx, rdw = case(m, n, np.float16, seed=10 + m)
    lead = (1, m)
    dx, dw = rms_norm_backward(dy.reshape(lead + (n,)), x.reshape(lead + (n,)), w,
                               rstd.reshape(lead))
    assert (plans[-1].grid, plans[-1].groups) == ((1, 1) if m == 1 else (2, 8))
    assert dx.shape == lead + (n,) and dx.dtype == np.float16 and dw.dtype == np.float16
    assert rel_err(dx.reshape(m, n), rdx) < 2e-3
    assert float(np.max(np.abs(dw.astype(np.float64) - rdw))) <= 2e-3 * max(
        1.0, float(np.abs(rdw).max()))
    np.testing.assert_array_equal(rms_norm_backward(dy, x, w, rstd)[1].view(np.uint16),
                                  dw.view(np.uint16))


@pytest.mark.parametrize("m, fused", [(3, True), (7, False), (40, False)])
def test_few_rows_unfused_backward_sums_its_own_grid(m, fused, plans, monkeypatch):
    """Where the smaller grid's dW sum is still too long for one launch (forced here by a
    small MAX_FUSED_ROWS), the second launch sums exactly the smaller grid's partial
    rows."""
    monkeypatch.setattr(bwd, "MAX_FUSED_ROWS", 4)
    n = 64  # 32 threads, one slice: ceil(G' / 1) partial rows per thread
    full = plan_backward(n, f32, SMS)
    assert not full.fused and full.grid == 64 and full.slices == 1
    built = []
    real = api.dw_reduce_kernel

    def spy(n_, wdt, grid, arch):
        built.append(grid)
        return real(n_, wdt, grid, arch)
    monkeypatch.setattr(api, "dw_reduce_kernel", spy)
    args, rdx, rdw = case(m, n, seed=20 + m)
    dx, dw = rms_norm_backward(*args)
    p = plans[-1]
    assert p.grid == min(64, next_pow2(m)) and p.fused == fused
    assert built == ([] if fused else [p.grid])
    assert rel_err(dx, rdx) < 1e-5
    np.testing.assert_allclose(dw, rdw, rtol=1e-5, atol=1e-5 * max(1.0, np.abs(rdw).max()))
    np.testing.assert_array_equal(rms_norm_backward(*args)[1].view(np.uint32),
                                  dw.view(np.uint32))


def test_many_rows_keep_the_device_grid(plans):
    n, m = 96, 80  # 96 f32: a grid of 64 on the interpreter, fewer than the rows
    full = plan_backward(n, f32, SMS, vec=max_vec(n, f32))
    assert full.grid == 64 < m
    args, rdx, rdw = case(m, n, seed=5)
    dx, dw = rms_norm_backward(*args)
    assert plans[-1] == full
    assert rel_err(dx, rdx) < 1e-5
    np.testing.assert_allclose(dw, rdw, rtol=1e-5, atol=1e-5 * max(1.0, np.abs(rdw).max()))


@pytest.mark.parametrize("n, m, half", [(512, 1, False), (512, 3, False), (1000, 2, False),
                                        (1030, 4, True), (4096, 5, False), (2048, 8, True)])
def test_few_rows_dw_is_summed_a_column_tile_per_warp(n, m, half, monkeypatch):
    """Grids of no more CTAs than warps per CTA (G <= S) sum dW a column tile per warp:
    each column's G partial rows added in ascending order (bit for bit the f32 sum in
    that order), ragged columns (N not a multiple of 4) and half dW included, by the
    last CTA to finish its rows alone (no grid barrier: nobody waits, so the launch is
    not cooperative)."""
    dt = f16 if half else f32
    # an H100's plan, cut, with its dW through the global partial rows (not one cluster)
    monkeypatch.setattr(bwd, "MAX_DW_CLUSTER", 0)
    p = plan_backward(n, dt, 132, rows=m)
    assert p.fused and p.grid == next_pow2(m) <= p.slices and not p.cluster_dw, p
    (dy, x, w, rstd), rdx, rdw = case(m, n, np.float16 if half else np.float32, seed=n + m)
    k = build_backward(p, dt, dt)
    dx, dw, part = k.interpret(dy, x, w, rstd, np.zeros(2, np.uint32))
    want = part[0].copy()
    for g in range(1, p.grid):
        want = (want + part[g]).astype(np.float32)
    np.testing.assert_array_equal(dw.view(np.uint16 if half else np.uint32),
                                  want.astype(dw.dtype).view(np.uint16 if half else np.uint32))
    assert float(np.max(np.abs(dw.astype(np.float64) - rdw))) <= (2e-3 if half else 1e-5) * max(
        1.0, float(np.abs(rdw).max()))
    assert rel_err(dx, rdx) < (2e-3 if half else 1e-5)
    # the last CTA to arrive sums alone: one arrival, no grid barrier, a plain launch
    text = k.ptx()
    assert "grid_wait" not in text and text.count("atom.") == 1 and not k.cooperative
    assert text[text.rindex("atom."):].count("bar.sync") == 1  # the arrival's answer


@pytest.mark.parametrize("n, m, dt", sweep([(512, 1, f32), (512, 3, f32), (1000, 2, f32),
                                      (1030, 4, f16), (4096, 5, f32), (2048, 8, bf16),
                                      (8192, 1, bf16), (4094, 7, f32)], keep=2))
def test_few_rows_dw_in_one_cluster_has_the_bits_of_the_partial_rows(n, m, dt, monkeypatch):
    """Grids of at most MAX_DW_CLUSTER CTAs sum dW as one cluster (each CTA's partial in
    its shared memory, read by its peers through ``mapa`` + ``ld.shared::cluster`` after a
    cluster barrier); one CTA stores its dW from registers. Same dx and bit-for-bit the
    same dW as the global partial rows summed in ascending order; no atomics, no GPU-wide
    fence, no cooperative launch; ragged columns (N not a multiple of 4) included."""
    p = plan_backward(n, dt, 132, rows=m)
    assert p.cluster_dw == p.grid == next_pow2(m) <= bwd.MAX_DW_CLUSTER, p
    npt = {f32: np.float32, f16: np.float16, bf16: ml_dtypes.bfloat16}[dt]
    (dy, x, w, rstd), rdx, rdw = case(m, n, npt, seed=3 * n + m)
    k = build_backward(p, dt, dt)
    dx, dw, _ = k.interpret(dy, x, w, rstd, np.zeros(2, np.uint32))
    monkeypatch.setattr(bwd, "MAX_DW_CLUSTER", 0)  # the global partial rows
    ref = build_backward(p, dt, dt)
    dx0, dw0, part = ref.interpret(dy, x, w, rstd, np.zeros(2, np.uint32))
    u = np.uint32 if dt == f32 else np.uint16
    np.testing.assert_array_equal(dw.view(u), dw0.view(u))
    np.testing.assert_array_equal(dx.view(u), dx0.view(u))
    want = part[0].copy()
    for g in range(1, p.grid):
        want = (want + part[g]).astype(np.float32)
    np.testing.assert_array_equal(dw.view(u), want.astype(npt).view(u))
    tol = 1e-5 if dt == f32 else 2e-2
    assert float(np.max(np.abs(dw.view(npt).astype(np.float64) - rdw))) <= tol * max(
        1.0, float(np.abs(rdw).max()))
    text = k.ptx()
    assert "atom." not in text and "fence.acq_rel.gpu" not in text and not k.cooperative
    assert ("ld.shared::cluster" in text) == (p.grid > 1)
    assert text.count("barrier.cluster.wait") == (2 if p.grid > 1 else 0)
    assert tuple(k.cluster or (1, 1, 1)) == (p.grid if p.grid > 1 else 1, 1, 1)


def test_few_rows_kernels_assemble_without_spills():
    """The per-warp dW sum (up to 32 partial rows of 1024-thread CTAs) spills nothing."""
    from ptxdsl.toolchain import find_ptxas
    if find_ptxas() is None:
        pytest.skip("no ptxas")
    for n, dt, m in [(8192, bf16, 1), (8192, f32, 16), (12288, f32, 16), (16384, bf16, 3),
                     (12288, f16, 16), (4097, bf16, 9), (1024, bf16, 2)]:
        p, k = choice.backward_kernel(n, dt, dt, max_vec(n, dt), "sm_90a", 132, None, m=m)
        assert p.grid == next_pow2(m) <= p.slices, (n, dt, m)
        r = k.resources()
        assert r.spill_stores == 0 and r.local == 0, (n, dt, m, r)
