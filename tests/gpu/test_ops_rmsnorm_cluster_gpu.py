"""RMSNorm of long rows over clusters of CTAs on a real Hopper GPU, against float64.

Forward and backward at N from 40000 to 262145 (f32, bf16, f16; ragged rows, strided
rows, a residual, f32 weights beside half x), dW bitwise identical across runs, many
clusters at once (races between them would show as wrong rows), and each long-row
plan's cluster kernel built and launched directly as well as through the API (which
must have chosen it). Run: ``python -m pytest -q tests/gpu/test_ops_rmsnorm_cluster_gpu.py``.
"""
from __future__ import annotations

import pytest

from gpu_env import NEEDS_GPU, torch_cuda
from rmsnorm_torch import assert_matches, ref, ulps

pytestmark = NEEDS_GPU
torch = torch_cuda()

from ptxdsl.ops import rms_norm, rms_norm_backward  # noqa: E402
from ptxdsl.ops.rmsnorm import plan as rplan  # noqa: E402
from ptxdsl.core.types import bf16, f16, f32  # noqa: E402

EPS = 1e-6
DT = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
PT = {"f32": f32, "f16": f16, "bf16": bf16}


def hopper():
    return torch.cuda.get_device_capability() == (9, 0)


def info():
    from ptxdsl.runtime import driver
    return driver.get().device(torch.cuda.current_device())


def check_kernel_rows(k, x, w, dt, offset=0.0):
    """Launch forward kernel ``k`` (X, W -> Y, RSTD) into NaN-filled outputs and check y
    against float64 (``offset + w``) and rstd."""
    y = torch.full_like(x, float("nan"))
    rstd = torch.full((x.shape[0],), float("nan"), device="cuda")
    k(x, w, y, rstd)
    assert_matches(y, ref(x, w.double() + offset), dt)
    assert torch.allclose(rstd.double(), torch.rsqrt((x.double() ** 2).mean(-1) + EPS),
                          rtol=2e-6)


def rows(shape, dt, seed, scale=1.0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = (torch.randn(*shape, device="cuda", generator=g) * scale).to(DT[dt])
    w = (torch.randn(shape[-1], device="cuda", generator=g) * 0.1 + 1).to(DT[dt])
    return x, w, g


def chosen(n, dt, backward=False):
    """The cluster plan the API takes for rows of ``n`` on this GPU (None: one CTA)."""
    from ptxdsl.ops.rmsnorm.fwd import max_vec
    lr = rplan.long_rows(n, PT[dt], max_vec(n, PT[dt]), "sm_90a", info())
    return lr.backward if backward else lr.forward


@pytest.mark.parametrize("shape", [(3, 65536), (4, 131072), (2, 262144), (5, 100003),
                                   (3, 40000), (2, 262145), (1, 131072)])
@pytest.mark.parametrize("dt", ["f32", "bf16", "f16"])
def test_forward_long_rows(shape, dt):
    if hopper():   # the API runs a cluster kernel past 128 KiB rows (plans.json)
        big = shape[1] * PT[dt].bytes > 128 * 1024
        assert (chosen(shape[1], dt) is not None) == big
    x, w, _ = rows(shape, dt, shape[0] * 7 + shape[1])
    y = rms_norm(x, w, EPS)
    assert_matches(y, ref(x, w), dt)


@pytest.mark.parametrize("dt,n", [("f32", 131072), ("bf16", 131072), ("bf16", 262144)])
def test_forward_long_rows_residual_strided_rstd(dt, n):
    # 262144 bf16: the H200 plan's ring forward takes no residual (the row-per-cluster
    # kernel runs instead)
    big = torch.randn(9, n + 64, device="cuda").to(DT[dt])
    x = big[:, :n]                      # strided rows
    res = torch.randn(9, n, device="cuda").to(DT[dt])
    w = (torch.randn(n, device="cuda") * 0.1 + 1).to(DT[dt])
    h = (x.float() + res.float()).to(DT[dt])
    with torch.no_grad():
        y, rstd = rms_norm(x, w, EPS, residual=res, return_rstd=True)
    assert torch.equal(res, h)
    assert_matches(y, ref(h, w), dt)
    rr = torch.rsqrt((h.double() ** 2).mean(-1) + EPS)
    assert torch.allclose(rstd.double(), rr, rtol=2e-6)


def test_forward_long_rows_f32_weights_with_bf16_x():
    x, _, g = rows((3, 262144), "bf16", 5)
    w = torch.randn(262144, device="cuda", generator=g) * 0.1 + 1
    y = rms_norm(x, w, EPS)
    assert y.dtype == torch.bfloat16
    assert ulps(y, ref(x, w), torch.bfloat16) <= 1.0


@pytest.mark.parametrize("shape,dt", [((2048, 131072), "bf16"), ((512, 262144), "f32"),
                                      ((2048, 131072), "f16")])
def test_forward_many_clusters_at_once(shape, dt):
    """Thousands of clusters in flight: any exchange between CTAs of different clusters,
    or a CTA reading slots before its peers wrote them, shows as a wrong row."""
    x, w, _ = rows(shape, dt, 11, scale=3.0)
    x[::7] *= 100.0  # rows of very different norms side by side
    y = rms_norm(x, w, EPS)
    for i in range(0, shape[0], 512):
        assert_matches(y[i:i + 512], ref(x[i:i + 512], w), dt)


@pytest.mark.parametrize("c,n", [(2, 131072), (4, 262144), (8, 262144), (16, 262144)])
def test_forward_cluster_kernel_at_each_cluster_size(c, n):
    """The forward kernel built for each cluster size (16: the non-portable size the
    launcher must allow) on rows of bf16, launched directly."""
    from ptxdsl.ops.rmsnorm.fwd_cluster import build_forward_cluster, plan_cluster
    threads = min(1024, n // (8 * 8 * c))
    p = plan_cluster(n, bf16, cluster=c, threads=threads, per_thread=n // (8 * c * threads))
    assert p.cluster == c and not p.ragged
    k = build_forward_cluster(p, bf16, bf16, eps=EPS, with_rstd=True)
    x, w, _ = rows((6, n), "bf16", c)
    check_kernel_rows(k, x, w, "bf16")


@pytest.mark.parametrize("n,dt,c,threads,offset", [
    (131072, "bf16", 4, 1024, 0.0), (262144, "f16", 8, 1024, 1.0),
    (100003, "f32", 4, 1024, 0.0), (131073, "bf16", 4, 512, 0.5)])
def test_two_pass_cluster_forward(n, dt, c, threads, offset):
    """The two-pass cluster forward (slices read twice, the sum exchanged through
    st.async and an mbarrier), two CTAs per SM, over many clusters at once (a push that
    reached the wrong CTA or phase shows as wrong rows); ragged and odd rows too."""
    if not hopper():
        pytest.skip("clusters: sm_90")
    from ptxdsl.ops.rmsnorm.fwd import max_vec
    from ptxdsl.ops.rmsnorm.fwd_cluster import build_forward_cluster, plan_cluster
    p = plan_cluster(n, PT[dt], max_vec(n, PT[dt]), cluster=c, threads=threads,
                     two_pass=True)
    assert p.two_pass and p.min_ctas == 2
    k = build_forward_cluster(p, PT[dt], PT[dt], eps=EPS, with_rstd=True, offset=offset)
    m = 700
    x, w, _ = rows((m, n), dt, n % 97, scale=3.0)
    check_kernel_rows(k, x, w, dt, offset)


@pytest.mark.parametrize("n,dt", [(262144, "bf16"), (250000, "bf16"), (229376, "f16"),
                                  (262144, "f32"), (65536, "f32"), (163840, "f32")])
def test_wide_slice_cluster_forward(n, dt):
    """The two-pass forward's wide slices (plan_long.wide_slices: clusters of 2 to 4 CTAs
    of 1024 threads, one per SM, up to 16 chunks a thread, past 11 held in registers),
    over many clusters at once; 250000 has a ragged last slice."""
    if not hopper():
        pytest.skip("clusters: sm_90")
    from ptxdsl.ops.rmsnorm.fwd import max_vec
    from ptxdsl.ops.rmsnorm.fwd_cluster import build_forward_cluster
    from ptxdsl.ops.rmsnorm.config import ROWS, WideSlicesConfig
    from ptxdsl.ops.rmsnorm.plan_long import wide_slices
    cfg = next(r.config for r in ROWS
               if isinstance(r.config, WideSlicesConfig) and r.config.hold is None)
    p = wide_slices(n, PT[dt], max_vec(n, PT[dt]), cfg)
    assert p.two_pass and p.min_ctas == 1 and p.threads == 1024
    assert p.hold == max(0, p.per_thread - cfg.reread)
    k = build_forward_cluster(p, PT[dt], PT[dt], eps=EPS, with_rstd=True)
    m = 300
    x, w, _ = rows((m, n), dt, n % 89, scale=2.0)
    check_kernel_rows(k, x, w, dt)


@pytest.mark.parametrize("n,dt,stages", [(262144, "bf16", 3), (131072, "f32", 2),
                                         (65536, "f16", 3)])
def test_persistent_forward_ring(n, dt, stages):
    """The persistent cluster forward (rows through a shared-memory ring), its grid as
    many clusters as the device runs at once, over more rows than clusters."""
    if not hopper():
        pytest.skip("clusters: sm_90")
    import dataclasses
    from ptxdsl.ops.rmsnorm.fwd_cluster import build_forward_cluster, plan_cluster
    from ptxdsl.runtime import prepare
    p = plan_cluster(n, PT[dt], stages=stages)
    q = prepare(build_forward_cluster(p, PT[dt], PT[dt], eps=EPS)).resident_clusters(
        info().ordinal)
    assert q >= 1
    k = build_forward_cluster(dataclasses.replace(p, grid=q), PT[dt], PT[dt], eps=EPS,
                              with_rstd=True)
    m = 3 * q + 5
    x, w, _ = rows((m, n), dt, 17, scale=2.0)
    check_kernel_rows(k, x, w, dt)


def backward_ref(dy, x, w):
    x64 = x.double().requires_grad_()
    w64 = w.double().requires_grad_()
    y64 = x64 * torch.rsqrt((x64 * x64).mean(-1, keepdim=True) + EPS) * w64
    y64.backward(dy.double())
    return x64.grad, w64.grad


def check_backward(shape, dt, wdt=None, runs=3, seed=7):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(*shape, device="cuda", generator=g).to(DT[dt])
    w = (torch.randn(shape[1], device="cuda", generator=g) * 0.1 + 1).to(DT[wdt or dt])
    dy = torch.randn(*shape, device="cuda", generator=g).to(DT[dt])
    rstd = torch.rsqrt((x.double() ** 2).mean(-1) + EPS).float()
    outs = [rms_norm_backward(dy, x, w, rstd) for _ in range(runs)]
    bits = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}
    for dx, dw in outs[1:]:
        assert torch.equal(dw.view(bits[dw.dtype]), outs[0][1].view(bits[dw.dtype]))
        assert torch.equal(dx, outs[0][0])
    gx, gw = backward_ref(dy, x, w)
    dx, dw = outs[0]
    tol = 1e-5 if dt == "f32" else 1e-2
    assert ((dx.double() - gx).abs().max() / gx.abs().max()).item() < tol
    wtol = 1e-5 if (wdt or dt) == "f32" else 1e-2
    assert ((dw.double() - gw).abs().max() / gw.abs().max()).item() < wtol


@pytest.mark.parametrize("shape,dt", [((37, 65536), "bf16"), ((20, 131072), "bf16"),
                                      ((20, 131072), "f32"), ((9, 262144), "bf16"),
                                      ((3, 262144), "f32"), ((5, 100000), "f16"),
                                      ((1, 131072), "bf16"), ((70, 32768), "bf16"),
                                      ((40, 32768), "f32"), ((3, 400000), "bf16"),
                                      ((2, 200000), "f32"), ((3, 143436), "f32"),
                                      ((2, 267064), "bf16")])
def test_backward_long_rows_deterministic_and_matches_autograd(shape, dt):
    # 400000 halves and 200000 f32 (50000 chunks): 448 evened-out threads, where 512 would
    # leave the last of 16 CTAs no part of the row; 143436 f32 and 267064 bf16: more
    # chunks a thread, where a warp's rounding of the evened-out threads still would
    if hopper():
        assert chosen(shape[1], dt, backward=True) is not None
    check_backward(shape, dt)


def test_backward_long_rows_f32_weights_with_bf16_x():
    check_backward((11, 131072), "bf16", wdt="f32")


def test_backward_many_rows_per_cluster():
    """Hundreds of rows per cluster: the ring of staged rows and the double-buffered
    slots turn over many times."""
    check_backward((600, 131072), "bf16", runs=2, seed=3)


def test_backward_grid_is_as_many_clusters_as_run_at_once():
    if not hopper():
        pytest.skip("clusters: sm_90")
    from ptxdsl.runtime import prepare
    p, k = rplan.backward_kernel(262144, bf16, bf16, 8, "sm_90a", info().sm_count, info())
    assert p.cluster == 16 and not p.fused
    assert p.grid == prepare(k).resident_clusters(info().ordinal) >= 1
    assert k.grid == (p.grid * 16, 1, 1)
