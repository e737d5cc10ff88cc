"""RMSNorm over clusters of CTAs (rows longer than one CTA holds): plans, the per-device
choice, what ptxas makes of the kernels, and what they record."""
from __future__ import annotations

import pytest

from ptxdsl.ops.rmsnorm import plan as rplan
from ptxdsl.ops.rmsnorm.bwd_cluster import build_backward_cluster, plan_backward_cluster
from ptxdsl.ops.rmsnorm.bwd_staged import SMEM_PER_CTA
from ptxdsl.ops.rmsnorm.cluster_row import ClusterSplit
from ptxdsl.ops.rmsnorm.devices import Device, interpreter_runs_clusters
from ptxdsl.ops.rmsnorm.fwd_cluster import build_forward_cluster, plan_cluster
from ptxdsl.core.types import bf16, f16, f32

from hopper_devices import H100, H200, device  # noqa: E402
from sweeps import sweep  # noqa: E402


def covers(p: ClusterSplit) -> None:
    """Every chunk of the row belongs to exactly one CTA, and every CTA owns some."""
    assert p.cluster * p.slice_chunks >= p.chunks > (p.cluster - 1) * p.slice_chunks, p
    assert p.threads % 32 == 0 and p.threads <= 1024 and 1 <= p.cluster <= 16, p


@pytest.mark.parametrize("n,dt,c", [(65536, bf16, 2), (131072, bf16, 4), (262144, bf16, 8),
                                    (262144, f16, 8), (65536, f32, 4), (131072, f32, 8),
                                    (262144, f32, 16)])
def test_forward_cluster_plan_gives_each_cta_64_kib(n, dt, c):
    p = plan_cluster(n, dt)
    assert (p.cluster, p.threads, p.per_thread, p.vec * dt.bytes) == (c, 512, 8, 16)
    assert not p.ragged
    covers(p)


@pytest.mark.parametrize("n", [32769, 65535, 100003, 131071, 262145, 300000, 524288])
@pytest.mark.parametrize("dt", [f32, bf16])
def test_forward_cluster_plan_covers_odd_rows(n, dt):
    p = plan_cluster(n, dt)
    covers(p)
    if p.vec * dt.bytes < 16:  # single-element chunks are kept as f32: 32 per thread,
        assert p.per_thread * p.vec <= (32 if n <= 262144 else 64)  # 64 past 16 x 512 x 32
        assert p.min_ctas == (2 if p.per_thread * p.vec <= 32 else 1)


def test_forward_cluster_plan_refuses_rows_beyond_sixteen_ctas():
    assert plan_cluster(4 * 1024 * 1024, f32) is None
    with pytest.raises(ValueError, match="would own no part"):
        ClusterSplit(1000, 4, 4, 64, 4)
    with pytest.raises(ValueError, match="do not cover"):
        ClusterSplit(100000, 4, 2, 512, 8)


@pytest.mark.parametrize("n,dt,c,k,stages", [(65536, bf16, 4, 4, 3), (131072, bf16, 8, 4, 3),
                                             (262144, bf16, 16, 4, 3),
                                             (131072, f32, 16, 4, 3),
                                             (262144, f32, 16, 8, 1)])
def test_backward_cluster_plan_stages_slices_of_32_kib(n, dt, c, k, stages):
    p = plan_backward_cluster(n, dt, sms=132)
    assert (p.cluster, p.threads, p.per_thread, p.stages) == (c, 512, k, stages)
    assert p.grid == 132 // c and not p.fused
    assert p.stages * p.stage_bytes <= SMEM_PER_CTA - 8 * 1024
    covers(p)


def test_backward_cluster_plan_needs_16_byte_chunks():
    assert plan_backward_cluster(131071, bf16) is None
    assert plan_backward_cluster(131074, bf16) is None  # 4-byte chunks
    p = plan_backward_cluster(100000, f16)               # ragged last slice
    covers(p)
    assert p.ragged


@pytest.mark.parametrize("info", [H100, H200], ids=["H100", "H200"])
def test_long_rows_backward_takes_clusters_where_one_cta_streams(info):
    """The backward takes clusters exactly where the one-CTA kernel would stream its rows
    twice from memory or stage them through one shared-memory buffer (16-byte chunks),
    at any number of rows, its dW summed by a second launch."""
    from ptxdsl.ops.rmsnorm.bwd import plan_backward
    for n, dt in [(12288, f32), (14336, f32), (16384, f32), (16384, bf16), (32768, bf16),
                  (262144, bf16)]:
        one = plan_backward(n, dt, 132, vec=16 // dt.bytes)
        got = rplan.long_rows(n, dt, 16 // dt.bytes, "sm_90a", info).backward
        assert (got is not None) == (one.streaming or one.stages == 1), (n, dt.name)
        if got is not None:
            covers(got)
            assert got.grid == 132 // got.cluster
    for m in (1, 32, 4096):  # the CPU interpreter's device (it runs clusters)
        p, _ = rplan.backward_kernel(14336, f32, f32, 4, "sm_90a", 132, None, m=m)
        assert p.cluster > 1 and not p.fused, m


def test_long_rows_stay_on_one_cta_without_sm_90a():
    for info, arch in [(device(cc=(8, 0)), "sm_80"), (device(cc=(10, 0)), "sm_100a")]:
        got = rplan.long_rows(262144, bf16, 8, arch, info)
        assert got.forward is None and got.backward is None
    # the interpreter: clusters where it runs them
    got = rplan.long_rows(262144, bf16, 8, "sm_90a", None)
    assert (got.forward is not None) == interpreter_runs_clusters()


def test_device_profiles_read_bandwidth_and_l2():
    h100, h200 = Device.of(H100), Device.of(H200)
    assert round(h100.bandwidth / 1e12, 2) == 3.35 and round(h200.bandwidth / 1e12, 2) == 4.92
    assert h100.l2_bytes == 50 << 20 and h200.clusters and not Device.of(
        device(cc=(8, 0))).clusters
    # both kernels keep far more in flight per SM than either device needs
    assert 20_000 < h100.in_flight_bytes < h200.in_flight_bytes < 40_000
    assert Device.of(None).sms == 2


def _ptxas():
    from ptxdsl.toolchain import find_ptxas
    if find_ptxas() is None:
        pytest.skip("no ptxas")


@pytest.mark.parametrize("n,dt,wdt", sweep([(65536, bf16, bf16), (131072, f16, f16),
                                      (262144, bf16, f32), (262144, f32, f32),
                                      (100003, bf16, bf16), (131072, f32, f32),
                                      (262145, f32, f32)], keep=2))
def test_forward_cluster_kernels_fit_their_ctas_per_sm(n, dt, wdt):
    _ptxas()
    p = plan_cluster(n, dt)
    for res in (False, True):
        r = build_forward_cluster(p, dt, wdt, residual=res, with_rstd=res).resources()
        assert r.spill_stores == 0 and r.local == 0, (n, dt, res, r)
        assert r.registers * p.threads * p.min_ctas <= 65536, (n, dt, res, r.registers)


@pytest.mark.parametrize("n,dt,wdt", sweep([(65536, bf16, bf16), (131072, bf16, f32),
                                      (262144, bf16, bf16), (131072, f32, f32),
                                      (262144, f32, f32), (100000, f16, f16)], keep=2))
def test_backward_cluster_kernels_fit_one_cta_per_sm(n, dt, wdt):
    _ptxas()
    p = plan_backward_cluster(n, dt)
    k = build_backward_cluster(p, dt, wdt)
    r = k.resources()
    assert r.spill_stores == 0 and r.local == 0, (n, dt, r)
    assert r.registers * p.threads <= 65536
    assert r.shared + k.dynamic_shared <= SMEM_PER_CTA


def _body(k) -> list[str]:
    lines = [ln.strip() for ln in k.ptx().splitlines()]
    start = lines.index("{")
    return [ln for ln in lines[start:] if ln and not ln.startswith((".reg", ".shared", "//"))]


def test_forward_cluster_records_one_exchange():
    """The start barrier is arrived at first and waited for right before the one remote
    store; then one release/acquire phase; nothing remote after it."""
    k = build_forward_cluster(plan_cluster(131072, bf16), bf16, bf16)
    body = _body(k)
    bars = [ln for ln in body if ln.startswith("barrier.cluster")]
    assert bars == ["barrier.cluster.arrive.relaxed.aligned;", "barrier.cluster.wait.aligned;",
                    "barrier.cluster.arrive.aligned;", "barrier.cluster.wait.aligned;"]
    first = next(i for i, ln in enumerate(body) if not ln.startswith(("mov.u32 %r0, smem",
                                                                       "{")))
    assert body[first] == "barrier.cluster.arrive.relaxed.aligned;"
    remote = [i for i, ln in enumerate(body) if "shared::cluster" in ln]
    assert len(remote) == 2 and "mapa" in body[remote[0]] and "st.shared::cluster.f32" in \
        body[remote[1]]
    waits = [i for i, ln in enumerate(body) if ln == "barrier.cluster.wait.aligned;"]
    assert waits[0] < remote[0] and remote[1] < waits[1]
    loads = [i for i, ln in enumerate(body) if ln.startswith("ld.global")]
    assert sum(i < waits[0] for i in loads) == 8  # the row's 8 chunks before the wait


def test_backward_cluster_exchanges_once_per_row():
    p = plan_backward_cluster(262144, bf16)
    body = _body(build_backward_cluster(p, bf16, bf16))
    bars = [ln for ln in body if ln.startswith("barrier.cluster")]
    # start (relaxed) + its wait before the loop, then one phase in the loop body
    assert bars == ["barrier.cluster.arrive.relaxed.aligned;", "barrier.cluster.wait.aligned;",
                    "barrier.cluster.arrive.aligned;", "barrier.cluster.wait.aligned;"]
    # the ring primed with S - 1 rows before the loop, one row per iteration: dy and x
    assert sum("cp.async.cg.shared.global" in ln for ln in body) == p.stages * 2 * p.per_thread
    assert sum("st.shared::cluster.f32" in ln for ln in body) == 1


def test_backward_cluster_refuses_chunks_other_than_16_bytes():
    p = plan_backward_cluster(131072, bf16)  # 8-element chunks: 32 bytes of f32
    with pytest.raises(ValueError, match="16-byte chunks"):
        build_backward_cluster(p, f32, f32)


@pytest.mark.parametrize("n,dt", [(65536, bf16), (262144, bf16), (131072, f32),
                                  (262144, f32)])
def test_persistent_forward_ring_fits_one_cta_per_sm(n, dt):
    p = plan_cluster(n, dt, stages=3)  # slices of 64 KiB: three fit
    assert p.stages == 3 and p.min_ctas == 1 and p.grid == 132 // p.cluster
    _ptxas()
    k = build_forward_cluster(p, dt, dt, with_rstd=True)
    r = k.resources()
    assert r.spill_stores == 0 and r.registers * p.threads <= 65536
    assert k.dynamic_shared == 3 * p.slice_chunks * 16
    assert r.shared + k.dynamic_shared <= SMEM_PER_CTA
    body = _body(k)
    assert [ln for ln in body if ln.startswith("barrier.cluster")] == [
        "barrier.cluster.arrive.relaxed.aligned;", "barrier.cluster.wait.aligned;",
        "barrier.cluster.arrive.aligned;", "barrier.cluster.wait.aligned;"]
    assert sum("cp.async.cg.shared.global" in ln for ln in body) == 3 * p.per_thread


def test_persistent_forward_ring_refusals():
    assert plan_cluster(131074, bf16, stages=2) is None      # 4-byte chunks
    assert plan_cluster(262144, bf16, stages=4) is None      # 4 x 64 KiB do not fit
    with pytest.raises(ValueError, match="takes no residual"):
        build_forward_cluster(plan_cluster(131072, bf16, stages=2), bf16, bf16,
                              residual=True)


@pytest.mark.long
@pytest.mark.parametrize("n", [65536, 65536 + 40])
def test_cluster_kernels_on_the_interpreter(n):
    """Long rows on the CPU go through the cluster kernels (the interpreter runs clusters):
    forward and backward against numpy, ragged N included."""
    import numpy as np
    from ptxdsl.ops.rmsnorm.api import rms_norm, rms_norm_backward
    got = rplan.long_rows(n, f32, 4, "sm_90a", None)
    assert got.forward is not None and got.backward is not None
    rng = np.random.default_rng(n)
    x = rng.standard_normal((3, n)).astype(np.float32)
    w = rng.standard_normal(n).astype(np.float32)
    dy = rng.standard_normal((3, n)).astype(np.float32)
    y, rstd = rms_norm(x, w, 1e-6, return_rstd=True)
    r = 1 / np.sqrt((x.astype(np.float64) ** 2).mean(1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(rstd.reshape(-1, 1), r, rtol=1e-5)
    np.testing.assert_allclose(y, x * r * w, rtol=1e-4, atol=1e-5)
    dx, dw = rms_norm_backward(dy, x, w, rstd)
    xh = x * rstd.reshape(-1, 1).astype(np.float64)
    g = dy * w.astype(np.float64)
    np.testing.assert_allclose(dw, (dy * xh).sum(0), rtol=1e-4, atol=1e-4)
    want = rstd.reshape(-1, 1) * (g - xh * (g * xh).mean(1, keepdims=True))
    np.testing.assert_allclose(dx, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("info", [H100, H200], ids=["H100", "H200"])
def test_ring_forward_leaves_a_residual_to_the_row_per_cluster_kernel(info):
    """The two-pass forwards (and the ring) long half rows take have no residual input:
    with one, the call takes the one-row-per-cluster kernel that holds its slice in
    registers, not the one-CTA kernels."""
    p = rplan.long_rows(262144, bf16, 8, "sm_90a", info).forward
    assert p.two_pass
    for n, c in ((262144, 8), (131072, 4)):
        k = rplan.forward_kernel(n, bf16, bf16, 8, True, False, 1e-6, "sm_90a", 132, info)
        assert f"cluster{c}_bf16" in k.name, k.name


@pytest.mark.parametrize("info", [None, H100, H200], ids=["interp", "H100", "H200"])
def test_wide_rows_are_read_twice_with_their_rows_hints(info):
    """Rows past 64 KiB over 1024 threads (plan.wide_row_plan): two-pass on every device,
    the second read batched and x and y with the hints of the device's table row; rows
    of 64 KiB and less, and narrower CTAs, as fwd.plan has them."""
    from ptxdsl.ops.rmsnorm.fwd import plan
    for n, dt, vec in ((65536, bf16, 8), (32768, f32, 4), (49152, f16, 8)):
        cfg = rplan.row_config(n, dt, vec, info)
        p = rplan.wide_row_plan(plan(n, dt, vec), cfg)
        assert p.two_pass and p.threads == 1024 and not p.preload_w
        assert p.reload_batch == min(p.per_thread, cfg.reload_values // vec)
        assert p.y_hints == cfg.y_hints and p.x_hints == (
            plan(n, dt).x_hints if cfg.x_hints is None else cfg.x_hints)
    for n, dt, vec in ((32768, bf16, 8), (16384, f32, 4), (20000, f32, 4)):
        p = plan(n, dt, vec)
        assert rplan.wide_row_plan(p, rplan.row_config(n, dt, vec, info)) == p
    # the kernel the API builds for it, on the interpreter, against float64
    k = rplan.forward_kernel(32768, f32, f32, 4, False, False, 1e-6, "sm_90a", 132, info)
    check_two_pass_1024(k, 32768, batch=8, h200=info is H200, rows=2, seed=5)


def check_two_pass_1024(k, n: int, *, batch: int, h200: bool, rows: int, seed: int):
    """``k``, a plan.two_pass_1024 kernel of f32 rows of ``n``: y stored .cs on an H200
    only, ``batch`` chunks of the second read (L1::evict_first) issued before the first
    store, and on the interpreter within 2e-6 of float64."""
    import numpy as np
    body = k.ptx()
    assert ("st.global.cs.v4" in body) == h200
    lines = body.splitlines()
    first_store = next(i for i, ln in enumerate(lines) if "st.global" in ln)
    assert sum("L1::evict_first" in ln for ln in lines[:first_store]) == batch
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, n)).astype(np.float32)
    w = (rng.standard_normal(n) * 0.1 + 1).astype(np.float32)
    y = k.interpret(x, w, np.zeros_like(x))
    x64 = x.astype(np.float64)
    ref = x64 / np.sqrt((x64 ** 2).mean(-1, keepdims=True) + 1e-6) * w
    assert np.abs(y - ref).max() / np.abs(ref).max() < 2e-6


@pytest.mark.parametrize("info", [None, H100, H200], ids=["interp", "H100", "H200"])
def test_f32_16384_rows_take_the_loop_only_while_its_ctas_walk_few_rows(info):
    """f32 rows of 16384: the persistent forward for calls of at most the table's
    loop_rows_per_cta rows a CTA (and where the row count is not known), the two-pass kernel of 1024 threads
    (two_pass_1024, the H200's hints on an H200) for more; rows of narrower chunks keep
    the loop whatever the count (not measured)."""
    sms = 132 if info is not None else 2
    limit = rplan.row_config(16384, f32, 4, info).loop_rows_per_cta * sms
    names = {m: rplan.forward_kernel(16384, f32, f32, 4, False, False, 1e-6, "sm_90a", sms,
                                     info, m=m).name for m in (None, 1, limit, limit + 1)}
    assert all("fwd_loop" in names[m] for m in (None, 1, limit)), names
    many = rplan.forward_kernel(16384, f32, f32, 4, False, False, 1e-6, "sm_90a", sms, info,
                                m=limit + 1)
    assert "fwd_loop" not in many.name
    check_two_pass_1024(many, 16384, batch=4, h200=info is H200, rows=3, seed=7)
    narrow = rplan.forward_kernel(16383, f32, f32, 1, False, False, 1e-6, "sm_90a", sms, info,
                                  m=limit + 1)
    assert "fwd_loop" in narrow.name


@pytest.mark.parametrize("n,dt", [(400000, bf16), (400000, f16), (200000, f32),
                                  (393224, bf16), (131072 + 8, bf16), (143436, f32),
                                  (267064, bf16), (402656, bf16)])
def test_backward_cluster_plan_leaves_no_cta_empty(n, dt):
    """Rows whose slices, rounded up to 512 threads, would leave the last of 16 CTAs
    nothing (400000 halves: 50000 chunks, 16 x 512 x 7 = 57344) take fewer threads,
    evened out, and where a warp's rounding still overshoots (143436 f32: 35859 chunks,
    16 x 480 x 5) more chunks a thread, instead of failing; the long-row plans of every
    device build."""
    p = plan_backward_cluster(n, dt)
    covers(p)
    for info in (None, H100, H200):
        lr = rplan.long_rows(n, dt, 16 // dt.bytes, "sm_90a", info)
        covers(lr.forward)
        covers(lr.backward)


@pytest.mark.parametrize("dt", sweep([f32, bf16, f16], keep=1))
def test_long_row_plans_build_for_every_length(dt):
    """long_rows gives a valid plan (or none) for every row length from 32769 to about 1 M
    elements, on every device, with full and with one-element chunks."""
    from ptxdsl.ops.rmsnorm.fwd import max_vec
    for n in range(32769, 1 << 20, 769):
        for vec in {max_vec(n, dt), 1}:
            for info in (None, H100, H200):
                lr = rplan.long_rows(n, dt, vec, "sm_90a", info)
                if lr.forward is not None:
                    covers(lr.forward)
                if lr.backward is not None:
                    covers(lr.backward)
