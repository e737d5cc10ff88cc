"""The RMSNorm plan table (ptxdsl/ops/rmsnorm/plans.json): its rows do not overlap and
cover the space they claim, cite results files that exist, and every row's
configuration builds kernels that ptxas assembles without spills at a size the row
covers and that are right on the interpreter, against float64, at a small size."""
from __future__ import annotations

import dataclasses
import functools
import os

import numpy as np
import pytest

import ptxdsl.interp  # noqa: F401  (the package's own interpreter: a broken one fails here)
from ptxdsl.core.types import bf16, f16, f32
from ptxdsl.ops.rmsnorm import config, plan as rplan
from ptxdsl.ops.rmsnorm.bwd import build_backward
from ptxdsl.ops.rmsnorm.config import (
    ROWS, BackwardConfig, ClusterConfig, QuantConfig, RingConfig, RowConfig,
    TwoPassSlicesConfig, WideSlicesConfig)
from ptxdsl.ops.rmsnorm.devices import Device, interpreter_runs_clusters
from ptxdsl.ops.rmsnorm.fwd import build_forward, max_vec, plan
from ptxdsl.ops.rmsnorm.fwd_cluster import build_forward_cluster, plan_cluster
from ptxdsl.ops.rmsnorm.plan_long import cluster_forward

from hopper_devices import H100  # noqa: E402

from paths import ROOT as REPO
from sweeps import sweep  # noqa: E402
DT = {"f32": f32, "f16": f16, "bf16": bf16}
EPS = 1e-6


def _edges(spans):
    """Values either side of every range end: the table is constant between them."""
    out = {0, 1 << 40}
    for lo, hi in spans:
        out |= {lo, max(0, lo - 1)} | ({hi, hi + 1} if hi is not None else set())
    return sorted(out)


def test_rows_cover_their_space_without_overlap():
    """For every op, device class, dtype and chunk width, each row length and rows-per-SM
    count (either side of every range end) falls in exactly one row."""
    nbytes = _edges(r.bytes for r in ROWS)
    per_sm = _edges(r.rows_per_sm for r in ROWS)
    for op in config.OPS:
        for dev in config.DEVICE_CLASSES:
            for dt in config.DTYPES:
                for ch in config.CHUNKS:
                    for b in nbytes:
                        for m in per_sm:
                            hits = [r for r in ROWS if r.matches(op, dev, dt, ch, b, m)]
                            assert len(hits) == 1, (op, dev, dt, ch, b, m, hits)


def test_rows_cite_results_that_exist_and_give_a_reason():
    for r in ROWS:
        assert r.source.startswith("bench/results/"), r
        assert os.path.isfile(os.path.join(REPO, r.source)), r.source
        assert r.reason and "\n" not in r.reason, r


def test_choose_refuses_what_no_row_covers():
    with pytest.raises(LookupError, match="0 rows for forward nowhere"):
        config.choose("forward", "nowhere", f32, 4, 1024)


# ---------------------------------------------------------------- a size each row covers
def _size(row, dname):
    """A row length of ``dname`` inside the row's bytes (its upper end where bounded, 1 MiB
    and less), of 16-byte chunks unless the row takes only narrower ones (then odd)."""
    dt = DT[dname]
    lo, hi = row.bytes
    top = hi if hi is not None and hi <= 1 << 20 else lo or 4096
    e = 16 // dt.bytes
    if "16B" in row.chunks:
        n = top // dt.bytes // e * e
        if n * dt.bytes < lo:
            n += e
    else:
        n = -(-max(lo, 1) // dt.bytes) | 1
    assert lo <= n * dt.bytes and (hi is None or n * dt.bytes <= hi), (row, n)
    return n, dt


def _spill_free(k):
    r = k.resources()
    assert r.spill_stores == 0 and r.local == 0, (k.name, r)


def _row_kernels(cfg, n, dt):
    vec = max_vec(n, dt)
    out = [rplan.best_row_kernel(rplan.wide_row_plan(plan(n, dt, vec), cfg), dt, dt, EPS,
                                 False, True, "sm_90a")]
    if vec * dt.bytes == 16 and n >= 1024 * vec:  # the many-rows kernel
        out.append(build_forward(rplan.two_pass_1024(plan(n, dt, vec, threads=1024), cfg),
                                 dt, dt, eps=EPS))
    return out


@pytest.mark.parametrize("i", sweep(range(len(ROWS)), every=4), ids=[
    f"{r.op}-{type(r.config).__name__}-{r.devices[0]}-{r.dtypes[0]}-{r.bytes[0]}"
    for r in ROWS])
def test_every_row_assembles_without_spills(i):
    from ptxdsl.toolchain import find_ptxas
    if find_ptxas() is None:
        pytest.skip("no ptxas")
    row = ROWS[i]
    n, dt = _size(row, row.dtypes[0])
    vec, cfg = max_vec(n, dt), row.config
    if isinstance(cfg, RowConfig):
        ks = _row_kernels(cfg, n, dt)
    elif isinstance(cfg, BackwardConfig):
        p, k = rplan._device_backward(n, dt, dt, vec, "sm_90a", 132, None, 0.0, cfg)
        ks = [k] + ([build_backward(dataclasses.replace(p, l2_ahead=True), dt, dt)]
                    if cfg.l2_ahead and p.prefetch and vec * dt.bytes == 16 else [])
    elif isinstance(cfg, QuantConfig):
        ks = [rplan.quant_kernel(n, dt, dt, vec, False, True, EPS, 0.0, "sm_90a")]
    else:
        p = cluster_forward(cfg, n, dt, vec, Device.of(H100))
        assert p is not None, (row, n)
        ks = [build_forward_cluster(p, dt, dt, eps=EPS, with_rstd=True)]
    for k in ks:
        _spill_free(k)


# ---------------------------------------------------------------- small sizes, interpreted
def _rows_of(m, n, dt, seed):
    import ml_dtypes
    npt = {f32: np.float32, f16: np.float16, bf16: ml_dtypes.bfloat16}[dt]
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((m, n)) * np.arange(1, m + 1)[:, None]).astype(npt)
    w = (rng.standard_normal(n) * 0.1 + 1).astype(npt)
    return x, w


def _ref(x, w):
    x64 = x.astype(np.float64)
    return x64 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + EPS) * w.astype(np.float64)


def _close(y, ref, dt):
    if y.dtype == np.uint16:  # half bits, as the interpreter hands its own outputs back
        import ml_dtypes
        y = y.view(ml_dtypes.bfloat16 if dt == bf16 else np.float16)
    tol = 2e-6 if dt == f32 else 1e-2
    return float(np.abs(y.astype(np.float64) - ref).max() / np.abs(ref).max()) < tol


def _small_cluster_plan(cfg, dt):
    """The configuration's cluster kernel over a small row: clusters of 2 CTAs of a warp
    (a ragged last slice where the kernel allows it)."""
    e = 16 // dt.bytes
    if isinstance(cfg, TwoPassSlicesConfig):
        p = plan_cluster(2 * 32 * cfg.per_thread * e - e, dt, e, two_pass=True, cluster=2,
                         threads=32, per_thread=cfg.per_thread)
        return dataclasses.replace(p, reload_batch=cfg.reload_batch)
    if isinstance(cfg, WideSlicesConfig):
        per = cfg.reread + 1
        p = plan_cluster(2 * 32 * per * e - e, dt, e, two_pass=True, cluster=2, threads=32,
                         per_thread=per)
        hold = cfg.hold if cfg.hold is not None else max(0, per - cfg.reread)
        return dataclasses.replace(p, min_ctas=1, hold=hold, reload_batch=cfg.reload_batch)
    if isinstance(cfg, RingConfig):
        return plan_cluster(2 * 32 * cfg.per_thread * e, dt, e, stages=cfg.stages,
                            threads=32, per_thread=cfg.per_thread, cluster=2, sms=2)
    assert isinstance(cfg, ClusterConfig)
    return plan_cluster(1001, dt, 1, cluster=2, threads=32)


def _distinct(kind):
    """(config, a dtype its rows take) for each distinct configuration of ``kind``."""
    seen = {}
    for r in ROWS:
        if isinstance(r.config, kind):
            seen.setdefault(r.config, DT[r.dtypes[-1]])
    return list(seen.items())


@pytest.mark.parametrize("cfg,dt", _distinct((TwoPassSlicesConfig, WideSlicesConfig,
                                              RingConfig, ClusterConfig)))
def test_every_cluster_configuration_is_right_on_the_interpreter(cfg, dt):
    if not interpreter_runs_clusters():
        pytest.skip("the interpreter runs no clusters")
    p = _small_cluster_plan(cfg, dt)
    k = build_forward_cluster(p, dt, dt, eps=EPS)
    x, w = _rows_of(3, p.n, dt, p.n)
    assert _close(k.interpret(x, w, np.zeros_like(x)), _ref(x, w), dt), cfg


@pytest.mark.parametrize("cfg,dt", _distinct(RowConfig))
def test_every_row_configuration_is_right_on_the_interpreter(cfg, dt):
    for n in (1000, 4096):  # the row kernel; its many-rows kernel of 1024 threads
        k = _row_kernels(cfg, n, dt)[-1]
        x, w = _rows_of(2, n, dt, n)
        assert _close(k.interpret(x, w, np.zeros_like(x), np.zeros(2, np.float32))[0],
                      _ref(x, w), dt), (cfg, n)


@functools.lru_cache(maxsize=None)
def _backward_case(n, m, dt):
    x, w = _rows_of(m, n, dt, n + m)
    dy, _ = _rows_of(m, n, dt, 7 * n)
    x64, w64, dy64 = (a.astype(np.float64) for a in (x, w, dy))
    rstd = 1.0 / np.sqrt((x64 * x64).mean(-1) + EPS)
    g = dy64 * w64
    dx = rstd[:, None] * (g - x64 * (rstd ** 2)[:, None] * (g * x64).mean(-1, keepdims=True))
    dw = (dy64 * x64 * rstd[:, None]).sum(0)
    return (dy, x, w, rstd.astype(np.float32)), dx, dw


@pytest.mark.parametrize("cfg,dt", _distinct(BackwardConfig))
def test_every_backward_configuration_is_right_on_the_interpreter(cfg, dt):
    """Short rows (row groups shaped by the configuration), a few of them, dx and dW."""
    n, m = 1024, 5
    p, k = rplan._device_backward(n, dt, dt, max_vec(n, dt), "sm_90a", 2, None, 0.0, cfg)
    if cfg.l2_ahead:
        p = dataclasses.replace(p, l2_ahead=True)
        k = build_backward(p, dt, dt)
    assert p.groups > 1 and p.fused, p
    args, rdx, rdw = _backward_case(n, m, dt)
    dx, dw, _ = k.interpret(*args, np.zeros(2, np.uint32))
    assert _close(dx, rdx, dt) and _close(dw, rdw, dt), cfg


@pytest.mark.parametrize("cfg,dt", _distinct(QuantConfig))
def test_every_quant_configuration_is_right_on_the_interpreter(cfg, dt):
    """The FP8 bytes times their dynamic scale, within e4m3's rounding of float64."""
    n = 1000
    k = rplan.quant_kernel(n, dt, dt, max_vec(n, dt), False, True, EPS, 0.0, "sm_90a")
    x, w = _rows_of(3, n, dt, 11)
    y, scale = k.interpret(x, w, np.zeros(x.shape, np.uint8), np.zeros(3, np.float32))
    import ml_dtypes
    deq = y.view(ml_dtypes.float8_e4m3fn).astype(np.float64) * scale[:, None]
    ref = _ref(x, w)
    assert np.all(np.abs(deq - ref) <= np.abs(ref) / 16 + scale[:, None] * 2.0 ** -9), cfg
