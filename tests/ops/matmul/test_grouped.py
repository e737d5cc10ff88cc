"""ptxdsl.ops.grouped_matmul (mixture-of-experts GEMM), on the CPU.

The tile order over ragged groups (:mod:`ptxdsl.ops.matmul.groups`), the grouped Hopper
kernel on the interpreter (directly, and through the public call on a stand-in sm_90
device), the grouped SIMT kernel through the public call, and the errors. Integer
operands in [-4, 4] keep every product and sum exact, so f32 outputs compare bit for bit
against float64; rows past the last group are never written (checked as NaN).
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import ml_dtypes
from ptxdsl.core.errors import LaunchError
from ptxdsl.core.types import bf16, e4m3, f32
from ptxdsl.ops import grouped_matmul
from ptxdsl.ops.matmul.config import Plan
from ptxdsl.ops.matmul.grouped import plan_for
from ptxdsl.ops.matmul.plan import fitted
from ptxdsl.ops.matmul.groups import group_tiles_py
from ptxdsl.ops.matmul.hopper import build_hopper

BF16, E4M3, E5M2 = ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2


def ints(rng, shape):
    return rng.integers(-4, 5, shape).astype(np.float32)


def check(c, a, w, offs, scale=1.0, act=None):
    """Each group's rows against float64 ``a_g @ w[g].T`` (w (G, N, K)); the rest NaN."""
    start = 0
    for g, end in enumerate(offs):
        want = a[start:end].astype(np.float64) @ w[g].T.astype(np.float64) * scale
        np.testing.assert_array_equal(c[start:end], np.maximum(want, 0) if act else want)
        start = end
    assert np.isnan(c[start:]).all()


def test_tile_order_walks_each_group_down_its_columns():
    tiles = group_tiles_py([130, 130, 150], 128, 2)     # 2 tile rows, none, 1
    assert tiles == [(0, 0, 130, 0), (0, 128, 130, 0), (0, 0, 130, 1), (0, 128, 130, 1),
                     (2, 130, 150, 0), (2, 130, 150, 1)]


@pytest.mark.parametrize("sizes,dtype", [
    ([70, 0, 60, 5], bf16),                # ragged, an empty group, a 5-row group
    pytest.param([3, 140], e4m3, marks=pytest.mark.long),
])
def test_sm90_dispatch_runs_the_grouped_hopper_kernel(monkeypatch, sizes, dtype):
    """On a stand-in sm_90 device the public call runs the grouped Hopper kernel (on the
    interpreter): K-major B read in place (bf16), an (G, K, N) e5m2 B copied K-major."""
    from runtime_fakes import fake_sm90_dispatch
    from ptxdsl.ops.matmul import api, grouped
    seen = []
    real = grouped.hopper_kernel

    def hopper_kernel(*args, **kw):
        seen.append(args[2])
        return real(*args, **kw)
    fake_sm90_dispatch(monkeypatch, api.hopper_kernel)
    monkeypatch.setattr(grouped, "hopper_kernel", hopper_kernel)
    rng = np.random.default_rng(len(sizes))
    offs = np.cumsum(sizes).astype(np.int32)
    n, k = 136, 80 if dtype == bf16 else 160
    a, w = ints(rng, (int(offs[-1]) + 3, k)), ints(rng, (len(sizes), n, k))
    out = np.full((a.shape[0], n), np.nan, np.float32)
    if dtype == bf16:
        grouped_matmul(a.astype(BF16), w.astype(BF16).transpose(0, 2, 1), offs, out=out,
                       out_dtype=np.float32)
        check(out, a, w, offs)
    else:
        b = np.ascontiguousarray(w.transpose(0, 2, 1)).astype(E5M2)     # (G, K, N)
        grouped_matmul(a.astype(E4M3), b, offs, out=out, out_dtype=np.float32, scale_a=0.5,
                       scale_b=np.array([4.0], np.float32), activation="relu")
        check(out, a, w, offs, 2.0, "relu")
    assert seen == ["K"]


def test_grouped_plans_widen_from_4096_columns():
    assert plan_for(bf16, bf16, 1408).bn == 128 and plan_for(bf16, bf16, 14336).bn == 256
    assert plan_for(e4m3, bf16, 4096).bk == 128


@pytest.mark.long
@pytest.mark.parametrize("wide", [False, True])
def test_grouped_hopper_kernel_reads_an_mn_major_stack(wide):
    rng = np.random.default_rng(5)
    sizes, n, k = [3, 0, 140], 200 if not wide else 264, 128
    offs = np.cumsum(sizes).astype(np.int32)
    kern = build_hopper(plan_for(bf16, f32, 4096 if wide else n), bf16, f32, sms=3,
                        b_major="MN", grouped=True)
    assert ("_n256_" in kern.name) == wide
    a, w = ints(rng, (150, k)), ints(rng, (3, n, k))
    b2 = np.ascontiguousarray(w.transpose(0, 2, 1)).reshape(3 * k, n)
    c = kern.interpret(a.astype(BF16), b2.astype(BF16), offs, np.full((150, n), np.nan,
                                                                       np.float32))
    check(c, a, w, offs)


# The grouped kernel's options (Plan fields, off by default): clusters of 2 along N sharing
# A by multicast, a consumer past its group's end idle, the staged TMA store of C's rows
# inside a group, a tile's epilogue under the next tile's first k-blocks. Each alone (the
# tail_skip in the default run, the others in -m long), together and with other dtypes in
# -m long.
OPTIONS = [pytest.param(dict(cluster_n=2), marks=pytest.mark.long), dict(tail_skip=True),
           pytest.param(dict(tma_store=True), marks=pytest.mark.long),
           pytest.param(dict(epi_overlap=2), marks=pytest.mark.long)]
ALL = dict(cluster_n=2, tail_skip=True, tma_store=True, epi_overlap=3)


def grouped_kernel(opts, dt, odt, n, b_major="K", scaled=False, bn=None):
    p = dataclasses.replace(plan_for(dt, odt, n), **opts)
    if bn:
        p = fitted(dataclasses.replace(p, bn=bn), dt, odt)
    return build_hopper(p, dt, odt, sms=4, b_major=b_major, scaled=scaled, grouped=True)


def rounded(want, odt):
    """float64 integers rounded once to the output type (f32 exact, bf16 by RNE)."""
    return want if odt == f32 else want.astype(np.float32).astype(BF16).astype(np.float32)


def check_options(kern, sizes, n, k, odt=f32, b_major="K", seed=9):
    """The grouped kernel on the interpreter over ``sizes`` (empty and ragged groups, rows
    past the last group left NaN) against float64, per group."""
    rng = np.random.default_rng(seed)
    offs = np.cumsum(sizes).astype(np.int32)
    g, total = len(sizes), int(offs[-1]) + 3
    a, w = ints(rng, (total, k)), ints(rng, (g, n, k))
    b2 = w.reshape(g * n, k) if b_major == "K" else \
        np.ascontiguousarray(w.transpose(0, 2, 1)).reshape(g * k, n)
    c = kern.interpret(a.astype(BF16), b2.astype(BF16), offs,
                       np.full((total, n), np.nan, np.float32 if odt == f32 else BF16))
    c = np.asarray(c).astype(np.float32)
    start = 0
    for i, end in enumerate(offs):
        want = a[start:end].astype(np.float64) @ w[i].T.astype(np.float64)
        np.testing.assert_array_equal(c[start:end], rounded(want, odt))
        start = end
    assert np.isnan(c[start:]).all()


@pytest.mark.parametrize("opts", OPTIONS, ids=lambda o: ",".join(o))
def test_grouped_options_exact(opts):
    """Ragged groups, an empty one and a 5-row one, 64-column tiles: N = 136 is three tiles,
    so a cluster of 2 along N has a second CTA past N in its last column; a 130-row group
    ends 2 rows into a tile (its second consumer idle with tail_skip, its first's rows
    stored by TMA with tma_store)."""
    kern = grouped_kernel(opts, bf16, f32, 136, bn=64)
    assert {"cluster_n": "_cn2", "tail_skip": "_ts", "tma_store": "_tmas",
            "epi_overlap": "_eo2"}[next(iter(opts))] in kern.name
    check_options(kern, [70, 0, 130, 5], 136, 80 if "epi_overlap" not in opts else 192)


@pytest.mark.long
@pytest.mark.parametrize("odt,b_major,n,bn,cn,eo,k", [
    (bf16, "MN", 264, None, 2, 3, 128), (f32, "K", 136, 64, 4, 0, 128)])
def test_grouped_options_together_exact(odt, b_major, n, bn, cn, eo, k):
    """The options at once: f32 and bf16 outputs (bf16: the TMA store's stmatrix staging),
    K- and MN-major stacks, clusters of 4 (N = 136: three tiles of 64, one CTA of the
    cluster past N), fewer k-blocks than the overlap issues early (K = 128). (More k-blocks
    than it issues: the epi_overlap case above, K = 192.)"""
    kern = grouped_kernel(dict(ALL, cluster_n=cn, epi_overlap=eo), bf16, odt, n,
                          b_major=b_major, bn=bn)
    check_options(kern, [3, 0, 140, 64, 129, 0], n, k, odt, b_major)


@pytest.mark.long
def test_grouped_options_with_row_wise_fp8_scales():
    rng = np.random.default_rng(11)
    sizes, n, k = [70, 0, 60, 130], 136, 256
    offs = np.cumsum(sizes).astype(np.int32)
    total = int(offs[-1]) + 2
    a, w = ints(rng, (total, k)), ints(rng, (4, n, k))
    sa = (2.0 ** rng.integers(-3, 3, total)).astype(np.float32)
    sb = (2.0 ** rng.integers(-3, 3, (4, n))).astype(np.float32)
    kern = grouped_kernel(ALL, e4m3, f32, n, scaled="row", bn=64)
    c = kern.interpret(a.astype(E4M3), w.reshape(4 * n, k).astype(E4M3), offs, sa, sb,
                       np.full((total, n), np.nan, np.float32))
    start = 0
    for g, end in enumerate(offs):
        want = a[start:end].astype(np.float64) @ w[g].T.astype(np.float64)
        np.testing.assert_array_equal(c[start:end], want * sa[start:end, None] * sb[g])
        start = end
    assert np.isnan(c[start:]).all()


def test_grouped_options_are_refused_where_they_do_not_apply(monkeypatch):
    from ptxdsl.ops.matmul import grouped
    with pytest.raises(ValueError, match="clusters along M"):
        build_hopper(Plan(bn=128, cluster=2), bf16, bf16, grouped=True)
    with pytest.raises(ValueError, match="grouped GEMM's"):
        build_hopper(Plan(bn=128, cluster=1, tma_store=True), bf16, bf16)
    with pytest.raises(ValueError, match="at most 128 columns"):
        build_hopper(Plan(bn=256, cluster=1, epi_overlap=2), bf16, bf16, grouped=True)
    with pytest.raises(ValueError, match="more ring stages"):
        build_hopper(Plan(bn=128, cluster=1, stages=4, epi_overlap=4), bf16, bf16,
                     grouped=True)
    # a C that TMA cannot describe drops tma_store (st.global stores every row)
    monkeypatch.setattr(grouped, "plan_for", lambda dt, odt, n=0: dataclasses.replace(
        plan_for(dt, odt, n), tma_store=True))
    assert "_tmas" in grouped.hopper_kernel(bf16, bf16, "K", None, 4, n=128).name
    assert "_tmas" not in grouped.hopper_kernel(bf16, bf16, "K", None, 4, n=128,
                                                c_tma=False).name


def test_numpy_grouped_matmul_on_the_simt_kernel():
    rng = np.random.default_rng(6)
    sizes, n, k = [7, 0, 70, 3], 24, 40
    offs = np.cumsum(sizes).astype(np.int32)
    a, w = ints(rng, (82, k)), ints(rng, (4, n, k))
    out = np.full((82, n), np.nan, np.float32)
    grouped_matmul(a.astype(E4M3), w.astype(E5M2).transpose(0, 2, 1), m_splits=sizes,
                   out=out, out_dtype=np.float32, scale_b=0.5)
    check(out, a, w, offs, 0.5)


@pytest.mark.long
def test_numpy_bf16_grouped_matmul_of_an_n_major_stack():
    rng = np.random.default_rng(6)
    sizes, n, k = [7, 0, 70, 3], 24, 40
    offs = np.cumsum(sizes).astype(np.int32)
    a, w = ints(rng, (82, k)), ints(rng, (4, n, k))
    c = grouped_matmul(a.astype(BF16), np.ascontiguousarray(w.transpose(0, 2, 1)).astype(BF16),
                       offs)
    assert c.dtype == BF16
    check(np.where(np.arange(82)[:, None] < 80, c.astype(np.float32), np.nan), a, w, offs)


@pytest.mark.parametrize("hopper", [False, pytest.param(True, marks=pytest.mark.long)])
def test_row_wise_fp8_scales(monkeypatch, hopper):
    """scale_a per row of a, scale_b (G, N) per column of each group's matrix: the SIMT
    kernel, and the Hopper kernel through a stand-in sm_90 device."""
    if hopper:
        from runtime_fakes import fake_sm90_dispatch
        from ptxdsl.ops.matmul import api
        fake_sm90_dispatch(monkeypatch, api.hopper_kernel)
    rng = np.random.default_rng(8)
    sizes, n, k = ([5, 0, 20], 24, 40) if not hopper else ([70, 0, 60], 136, 128)
    offs = np.cumsum(sizes).astype(np.int32)
    total = int(offs[-1]) + 2
    a, w = ints(rng, (total, k)), ints(rng, (3, n, k))
    sa = (2.0 ** rng.integers(-3, 3, (total, 1))).astype(np.float32)
    sb = (2.0 ** rng.integers(-3, 3, (3, n))).astype(np.float32)
    out = np.full((total, n), np.nan, np.float32)
    grouped_matmul(a.astype(E4M3), w.astype(E4M3).transpose(0, 2, 1), offs, out=out,
                   out_dtype=np.float32, scale_a=sa, scale_b=sb)
    start = 0
    for g, end in enumerate(offs):
        want = a[start:end].astype(np.float64) @ w[g].T.astype(np.float64)
        np.testing.assert_array_equal(out[start:end], want * sa[start:end] * sb[g])
        start = end
    assert np.isnan(out[start:]).all()


@pytest.mark.long
def test_torch_cpu_grouped_matmul():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(7)
    sizes, n, k = [5, 9], 16, 24
    a, w = ints(rng, (14, k)), ints(rng, (2, n, k))
    c = grouped_matmul(torch.from_numpy(a).bfloat16(),
                       torch.from_numpy(w).bfloat16().transpose(1, 2),
                       torch.tensor(np.cumsum(sizes), dtype=torch.int32),
                       out_dtype=torch.float32)
    check(c.numpy(), a, w, np.cumsum(sizes))


@pytest.mark.parametrize("call,match", [
    (lambda a, b, o: grouped_matmul(a, b), "offs .* or m_splits"),
    (lambda a, b, o: grouped_matmul(a, b, o, m_splits=[2, 2]), "one of them"),
    (lambda a, b, o: grouped_matmul(a, b, o.astype(np.int64)), "int32"),
    (lambda a, b, o: grouped_matmul(a, b, np.array([3, 1], np.int32)), "non-decreasing"),
    (lambda a, b, o: grouped_matmul(a, b, m_splits=[4, 3]), "summing to at most"),
    (lambda a, b, o: grouped_matmul(a, b[:, :4], o), "middle dim"),
    (lambda a, b, o: grouped_matmul(a[None], b, o), "2-D"),
    (lambda a, b, o: grouped_matmul(a.astype(E4M3), b.astype(E4M3), o,
                                    scale_a=np.ones((6, 1), np.float32),
                                    scale_b=np.ones((1, 3), np.float32)), "neither per tensor"),
    (lambda a, b, o: grouped_matmul(a.astype(E4M3), b.astype(E4M3), o,
                                    scale_a=np.ones(6, np.float64),
                                    scale_b=np.ones((2, 3), np.float32)), "float32 array"),
])
def test_grouped_errors_name_the_callers_line(call, match):
    a, b = np.ones((6, 5), BF16), np.ones((2, 5, 3), BF16)
    with pytest.raises(LaunchError, match=match) as e:
        call(a, b, np.array([2, 6], np.int32))
    assert "test_grouped.py" in str(e.value)
