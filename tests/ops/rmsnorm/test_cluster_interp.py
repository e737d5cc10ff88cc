"""RMSNorm of long rows over clusters of CTAs on the CPU interpreter, against float64.

Through the ops API (numpy arrays run on the interpreter, which runs clusters and
distributed shared memory): rows of 131072 and 262144 elements take the cluster
kernels there as on an sm_90 GPU. Two rows each; the backward's single cluster (the
interpreter's two SMs) walks both rows through its ring and double-buffered slots.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import ptxdsl.interp  # noqa: F401  (the package's own interpreter: a broken one fails here)
from ptxdsl.ops import rms_norm, rms_norm_backward
from ptxdsl.ops.rmsnorm import plan as rplan
from ptxdsl.ops.rmsnorm.fwd import max_vec
from ptxdsl.ops.rmsnorm.fwd_cluster import build_forward_cluster, plan_cluster
from ptxdsl.core.types import bf16, f16, f32

from hopper_devices import H200  # noqa: E402

import ml_dtypes  # noqa: E402
from sweeps import sweep  # noqa: E402

EPS = 1e-6
NP = {f32: np.float32, bf16: ml_dtypes.bfloat16, f16: np.float16}


def inputs(m, n, dt, seed):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((m, n)) * np.arange(1, m + 1)[:, None]).astype(NP[dt])
    w = (rng.standard_normal(n) * 0.1 + 1).astype(NP[dt])
    return x, w, rng


def ref_fwd(x, w):
    x64 = x.astype(np.float64)
    rstd = 1.0 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + EPS)
    return x64 * rstd * w.astype(np.float64), rstd[:, 0]


def within_rounding(out, ref, dt):
    """f32: 2e-6 of each row's largest value; halves: the float64 answer rounded to the
    dtype, give or take one unit in the last place."""
    out = out.astype(np.float64)
    if dt == f32:
        scale = np.abs(ref).max(-1, keepdims=True)
        return float((np.abs(out - ref) / scale).max()) < 2e-6
    r = ref.astype(NP[dt]).astype(np.float64)
    ulp = np.abs(np.nextafter(ref.astype(NP[dt]), np.array(np.inf, NP[dt]))
                 .astype(np.float64) - r)
    return bool((np.abs(out - r) <= ulp + 1e-30).all())


def takes_clusters(n, dt):
    lr = rplan.long_rows(n, dt, max_vec(n, dt), "sm_90a", None)
    assert lr.forward is not None and lr.backward is not None, "the interpreter runs clusters"
    return lr


@pytest.mark.parametrize("n,dt", sweep([(131072, bf16), (131072, f32), (262144, bf16),
                                  (262144, f32)], keep=2))
def test_forward_long_rows(n, dt):
    # (the interpreter has no DRAM figures: as an H100) 256 KiB rows and 1 MiB ones: the
    # two-pass forward's wide slices (clusters of 2 and 4, 1024 threads of 8 and 16
    # chunks, five of the 16 held in registers); 512 KiB rows: 64 KiB slices, clusters
    # of 8
    fwd = takes_clusters(n, dt).forward
    want = {256: (2, 1, 8, 0), 512: (8, 2, 4, 0), 1024: (4, 1, 16, 5)}[n * dt.bytes // 1024]
    assert (fwd.cluster, fwd.min_ctas, fwd.per_thread, fwd.hold) == want
    assert fwd.two_pass and not fwd.stages
    x, w, _ = inputs(2, n, dt, n)
    y, rstd = rms_norm(x, w, EPS, return_rstd=True)
    ref, rref = ref_fwd(x, w)
    assert y.dtype == x.dtype and within_rounding(y, ref, dt)
    assert np.allclose(rstd, rref, rtol=1e-6)


def test_forward_long_ragged_rows_with_residual():
    """131071 f16: one-element chunks, the last CTA's slice ragged; x + residual is
    written back into the residual, rounded to f16, and normalised."""
    n, dt = 131071, f16
    x, w, rng = inputs(2, n, dt, 3)
    res = rng.standard_normal((2, n)).astype(np.float16)
    h = (x.astype(np.float32) + res.astype(np.float32)).astype(np.float16)
    assert rplan.long_rows(n, dt, 1, "sm_90a", None).forward.ragged
    y = rms_norm(x, w, EPS, residual=res)
    assert np.array_equal(res, h)
    assert within_rounding(y, ref_fwd(h, w)[0], dt)


@pytest.mark.long
@pytest.mark.parametrize("n,dt", [(131072, bf16), (262144, f32)])
def test_backward_long_rows(n, dt):
    lr = takes_clusters(n, dt)
    assert lr.backward.grid == 1 and lr.backward.stages == (3 if dt == bf16 else 1)
    x, w, rng = inputs(2, n, dt, 7)
    dy = rng.standard_normal((2, n)).astype(NP[dt])
    x64, dy64, w64 = (a.astype(np.float64) for a in (x, dy, w))
    rstd = (1.0 / np.sqrt((x64 * x64).mean(-1) + EPS)).astype(np.float32)
    dx, dw = rms_norm_backward(dy, x, w, rstd)
    r = rstd.astype(np.float64)[:, None]
    g = dy64 * w64
    rdx = r * (g - x64 * r * r * (g * x64).sum(-1, keepdims=True) / n)
    rdw = (dy64 * x64 * r).sum(0)
    tol = 1e-5 if dt == f32 else 1e-2
    assert dx.dtype == x.dtype and dw.dtype == w.dtype
    assert np.abs(dx.astype(np.float64) - rdx).max() / np.abs(rdx).max() < tol
    assert np.abs(dw.astype(np.float64) - rdw).max() / np.abs(rdw).max() < tol


@pytest.mark.parametrize("kw", [dict(stages=2), dict(stages=1, threads=1024, per_thread=8)],
                         ids=["two-buffers", "one-buffer"])
def test_persistent_forward_ring_walks_every_row(kw):
    """The persistent forward: one cluster walks five rows of 131072 bf16 through a ring of
    two buffers (four CTAs), or of one (two CTAs of 1024 threads: the H200's plan)."""
    p = dataclasses.replace(plan_cluster(131072, bf16, **kw), grid=1)
    k = build_forward_cluster(p, bf16, bf16, eps=EPS, with_rstd=True)
    x, w, _ = inputs(5, 131072, bf16, 5)
    y = np.zeros_like(x)
    rstd = np.zeros(5, np.float32)
    y, rstd = k.interpret(x, w, y, rstd)
    ref, rref = ref_fwd(x, w)
    assert within_rounding(y, ref, bf16) and np.allclose(rstd, rref, rtol=1e-6)


@pytest.mark.parametrize("kind", ["64 KiB slices", "the H200's plan"])
def test_two_pass_cluster_forward_131072(kind):
    """131072 bf16 read twice: clusters of four 1024-thread CTAs reading their 64 KiB
    slices twice (two CTAs per SM), or the H200's plan: wide slices, clusters of two of
    8 chunks a thread, 4 of them held in registers; the sum exchanged through st.async
    and an mbarrier."""
    if kind == "64 KiB slices":
        p = plan_cluster(131072, bf16, cluster=4, threads=1024, per_thread=4, two_pass=True)
        assert (p.two_pass, p.min_ctas, p.prefetch_w) == (True, 2, False)
    else:
        p = rplan.long_rows(131072, bf16, 8, "sm_90a", H200).forward
        assert (p.cluster, p.threads, p.per_thread, p.hold, p.min_ctas) == (2, 1024, 8, 4, 1)
    k = build_forward_cluster(p, bf16, bf16, eps=EPS, with_rstd=True)
    x, w, _ = inputs(2, 131072, bf16, 17)
    y, rstd = k.interpret(x, w, np.zeros_like(x), np.zeros(2, np.float32))
    ref, rref = ref_fwd(x, w)
    assert within_rounding(y, ref, bf16) and np.allclose(rstd, rref, rtol=1e-6)


@pytest.mark.parametrize("dt,offset,batch", [(f32, 0.0, 3), (f16, 1.0, 1), (bf16, 0.5, 2)])
def test_two_pass_cluster_forward_ragged_rows(dt, offset, batch):
    """A ragged row (the second CTA's slice ends short) in each dtype, Gemma's offset,
    seven rows of one cluster each; the peers' pushes complete on each CTA's mbarrier
    (the interpreter fails a read of a slot before they have). The second read is
    issued ``batch`` chunks ahead of the stores (``reload_batch``)."""
    n = 4000
    p = plan_cluster(n, dt, cluster=2, threads=128, per_thread=2 if dt != f32 else 4,
                     two_pass=True)
    p = dataclasses.replace(p, reload_batch=batch)
    assert p.ragged
    k = build_forward_cluster(p, dt, dt, eps=EPS, with_rstd=True, offset=offset)
    x, w, _ = inputs(7, n, dt, 19)
    y, rstd = k.interpret(x, w, np.zeros_like(x), np.zeros(7, np.float32))
    ref, rref = ref_fwd(x, (w.astype(np.float64) + offset))
    assert within_rounding(y, ref, dt) and np.allclose(rstd, rref, rtol=1e-6)


def test_two_pass_waits_for_its_peers_before_its_loads():
    """One cluster barrier, waited for before the slice's first load (its cluster-scope
    acquire would empty L1 of the slice the second read needs); the sum goes out by
    st.async and in through the CTA's own mbarrier."""
    p = plan_cluster(131072, bf16, cluster=4, threads=1024, per_thread=4, two_pass=True)
    body = [ln.strip() for ln in build_forward_cluster(p, bf16, bf16, eps=EPS).ptx()
            .splitlines()]
    waits = [i for i, ln in enumerate(body) if ln.startswith("barrier.cluster.wait")]
    loads = [i for i, ln in enumerate(body) if ln.startswith("ld.global")]
    assert len(waits) == 1 and waits[0] < loads[0]
    assert sum(ln.startswith("ld.global.L1::evict_last") for ln in body) == 4
    assert sum(ln.startswith("ld.global.L1::evict_first") for ln in body) == 4
    assert any("st.async.shared::cluster.mbarrier::complete_tx::bytes.f32" in ln
               for ln in body)
    assert any(ln.startswith("mbarrier.try_wait.parity.shared::cta") for ln in body)


@pytest.mark.parametrize("dt,offset,hold,batch", [(f32, 0.0, 2, 4), (bf16, 1.0, 1, 3),
                                                   (f16, 0.5, 3, 2)])
def test_wide_slices_hold_chunks_in_registers(dt, offset, hold, batch):
    """Wide slices (plan_long.wide_slices' kind): a thread's first ``hold`` chunks read once
    and kept in registers, the others read twice (the second time ``batch`` ahead of the
    stores); ragged rows of two clusters' CTAs, Gemma's offset, against float64."""
    n = 4000
    p = plan_cluster(n, dt, cluster=2, threads=64, per_thread=4 if dt != f32 else 8,
                     two_pass=True)
    p = dataclasses.replace(p, min_ctas=1, hold=hold, reload_batch=batch)
    assert p.ragged
    k = build_forward_cluster(p, dt, dt, eps=EPS, with_rstd=True, offset=offset)
    lines = [ln.strip() for ln in k.ptx().splitlines()]
    assert sum("ld.global.L1::no_allocate" in ln for ln in lines) == hold
    assert sum("ld.global.L1::evict_first" in ln for ln in lines) == p.per_thread - hold
    x, w, _ = inputs(5, n, dt, 29)
    y, rstd = k.interpret(x, w, np.zeros_like(x), np.zeros(5, np.float32))
    ref, rref = ref_fwd(x, (w.astype(np.float64) + offset))
    assert within_rounding(y, ref, dt) and np.allclose(rstd, rref, rtol=1e-6)


def test_two_pass_cache_hints_are_the_plans():
    """x_hints / y_hints reach the PTX: the default (L1::evict_last on the first read,
    plain stores) or the plan's own (none on x, .cs on y)."""
    p = plan_cluster(131072, bf16, cluster=4, threads=1024, per_thread=4, two_pass=True)
    for q, first, store in ((p, "ld.global.L1::evict_last.", "st.global.v4"),
                            (dataclasses.replace(p, x_hints=(), y_hints=("cs",)),
                             "ld.global.L2::cache_hint.", "st.global.cs.v4")):
        body = [ln.strip() for ln in build_forward_cluster(q, bf16, bf16, eps=EPS).ptx()
                .splitlines()]
        loads = [ln for ln in body if ln.startswith("ld.global")]
        assert all(ln.startswith(first) for ln in loads[:4]), loads[:4]
        assert sum(ln.startswith(store) for ln in body) == 4


def test_two_pass_plans_are_explained():
    with pytest.raises(ValueError, match="not through a ring"):
        plan_cluster(131072, bf16, stages=1, two_pass=True)
    with pytest.raises(ValueError, match="reload_batch.*at least 1, not 0"):
        dataclasses.replace(plan_cluster(131072, bf16, two_pass=True), reload_batch=0)
    p = plan_cluster(131072, bf16, two_pass=True)
    with pytest.raises(ValueError, match=rf"hold: .* 1 to per_thread \({p.per_thread}\), "
                                         rf"not {p.per_thread + 1}"):
        dataclasses.replace(p, hold=p.per_thread + 1)
    with pytest.raises(ValueError, match="two_pass=False"):
        dataclasses.replace(plan_cluster(131072, bf16), hold=1)
    with pytest.raises(ValueError, match="takes no residual"):
        build_forward_cluster(plan_cluster(131072, bf16, two_pass=True), bf16, bf16,
                              residual=True)


def test_f32_weights_beside_bf16_rows():
    """f32 weights with bf16 x: 32 bytes of w per 16-byte chunk of x (two loads), dw in
    f32; three rows through the backward's one cluster (32768: clusters of 2; 131072
    took 50 s on the CPU)."""
    n = 32768
    x, _, rng = inputs(3, n, bf16, 9)
    w = (rng.standard_normal(n) * 0.1 + 1).astype(np.float32)
    dy = rng.standard_normal((3, n)).astype(NP[bf16])
    y, rstd = rms_norm(x, w, EPS, return_rstd=True)
    ref, _ = ref_fwd(x, w)
    assert y.dtype == x.dtype and within_rounding(y, ref, bf16)
    dx, dw = rms_norm_backward(dy, x, w, rstd)
    x64, dy64 = x.astype(np.float64), dy.astype(np.float64)
    r = rstd.astype(np.float64)[:, None]
    g = dy64 * w
    rdx = r * (g - x64 * r * r * (g * x64).sum(-1, keepdims=True) / n)
    rdw = (dy64 * x64 * r).sum(0)
    assert dw.dtype == np.float32
    assert np.abs(dx.astype(np.float64) - rdx).max() / np.abs(rdx).max() < 1e-2
    assert np.abs(dw - rdw).max() / np.abs(rdw).max() < 1e-5


@pytest.mark.parametrize("n", [143436, pytest.param(200000, marks=pytest.mark.long)])
@pytest.mark.long
def test_backward_of_rows_whose_slices_needed_fewer_threads(n):
    """200000 f32 (50000 chunks over 16 CTAs: 448 threads, not 512, so the last CTA owns
    part of the row) and 143436 (35859 chunks: 384 threads of 6 chunks, where 480 of 5
    still overshot), forward and backward through the API, against float64."""
    x, w, rng = inputs(2, n, f32, 23)
    dy = rng.standard_normal((2, n)).astype(np.float32)
    y, rstd = rms_norm(x, w, EPS, return_rstd=True)
    ref, _ = ref_fwd(x, w)
    assert within_rounding(y, ref, f32)
    dx, dw = rms_norm_backward(dy, x, w, rstd)
    x64, r = x.astype(np.float64), rstd.astype(np.float64)[:, None]
    g = dy * w.astype(np.float64)
    rdx = r * (g - x64 * r * r * (g * x64).sum(-1, keepdims=True) / n)
    rdw = (dy * x64 * r).sum(0)
    assert np.abs(dx - rdx).max() / np.abs(rdx).max() < 1e-5
    assert np.abs(dw - rdw).max() / np.abs(rdw).max() < 1e-5
