"""The Hopper GEMM kernel: traces, verifies and assembles; ptxas keeps the accumulators in
registers; the PTX holds the pipeline the docs describe. (Interpreter runs at 128x256x136
and ragged shapes: see test_interp_matmul_hopper below; GPU runs: tests/gpu.)"""
from __future__ import annotations

import re

import pytest

from ptxdsl.ops.matmul.hopper import build_hopper
from ptxdsl.ops.matmul.layout import Layout
from ptxdsl.ops.matmul.plan import SMEM_PER_CTA, choose, one_row
from ptxdsl.core.types import bf16, f16, f32
from ptxas_resources import resources_or_skip  # noqa: E402


@pytest.fixture(scope="module")
def k2():
    return build_hopper(choose(4096, 4096, 4096, bf16), bf16, bf16)


def test_smem_map_fits_and_is_aligned():
    for odt in (bf16, f32):
        p = choose(4096, 4096, 4096, bf16, odt)
        L = Layout(p, bf16, odt)
        assert L.total <= SMEM_PER_CTA
        assert L.b % 1024 == 0 and L.c % 1024 == 0 and L.c_consumer % 1024 == 0


def test_ptx_has_the_pipeline(k2):
    text = k2.ptx()
    for needle in ("setmaxnreg.dec.sync.aligned.u32 40", "setmaxnreg.inc.sync.aligned.u32 232",
                   "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16",
                   "multicast::cluster", "mbarrier.try_wait.parity", "mapa.shared::cluster",
                   "cp.async.bulk.tensor.2d.global.shared::cta", "fence.proxy.async",
                   ".maxntid 384", ".reqnctapercluster 2"):
        assert needle in text, needle
    # four k16 steps per stage, twice (the peeled first stage and the loop)
    assert len(re.findall(r"wgmma\.mma_async", text)) == 8


@pytest.mark.ptxas
# The register-pressure extremes: the plain and the fused (bias + gelu, f32 out) 128 x 256
# kernel, split-K 2 with the fused epilogue and split-K 4 (the 128 x 64 rows and f16 / silu
# epilogues assemble in test_plans.py and test_api.py).
@pytest.mark.parametrize("m,odt,bias,act,split", [
    (4096, bf16, None, None, 1), (4096, f32, f32, "gelu", 1), (128, f32, f32, "gelu", 2),
    (1, f16, None, None, 4)])
def test_ptxas_keeps_everything_in_registers(m, odt, bias, act, split):
    dt = f16 if odt == f16 else bf16
    p = one_row(m, 4096, 4096, dt, odt, split=split) if split > 1 else \
        choose(m, 4096, 4096, dt, odt, split=1)
    assert p.split == split
    k = build_hopper(p, dt, odt, bias=bias, activation=act, b_major="MN" if split > 1 else "K")
    r = resources_or_skip(k)
    assert r.spill_stores == 0 and r.spill_loads == 0 and r.local == 0


def _interpretable(k) -> bool:
    from ptxdsl.interp import unsupported
    ops = {i.match.spec.opcode for i in k.program().walk()}
    missing = ops & set(unsupported())
    assert not missing, f"the interpreter has no semantics for {sorted(missing)}"
    return True


def _interprets_exactly(kern, ka, kb, a, w, out) -> None:
    """Run ``kern`` on the interpreter with bf16 operands ``ka``, ``kb`` (bit patterns, in
    the kernel's majors) of the integer-valued ``a`` (M, K) and ``w`` (N, K), and check C
    against the float64 ``a @ w.T``: bit-exact for an f32 output (given NaN-filled),
    rounded once (as ``cvt.rn``) for a bf16 one."""
    import numpy as np
    from ptxdsl.core.types import f32_to_bf16_bits
    want = a.astype(np.float64) @ w.astype(np.float64).T
    if out == f32:
        c = kern.interpret(ka, kb, np.full(want.shape, np.nan, np.float32))
        np.testing.assert_array_equal(c, want)
    else:
        c = kern.interpret(ka, kb)
        np.testing.assert_array_equal(np.asarray(c).view(np.uint16),
                                      f32_to_bf16_bits(want.astype(np.float32)))


# Rows of every operand are 16-byte multiples, as tensor maps need (n=65 f32 is refused
# by the runtime and the interpreter alike).
# (An MN-major operand's rows are M or N: multiples of 8 bf16.)
# (Ragged M past one tile row: the cluster-of-2 test's 250 x 264 x 520.)
@pytest.mark.parametrize("m,n,k,a_major,b_major", [
    (7, 68, 72, "K", "K"), (128, 256, 136, "MN", "MN"), (7, 72, 72, "K", "MN"),
    (8, 68, 72, "MN", "K"),
    # K = 512: the ring wraps, both consumers release each stage at their own time
    pytest.param(128, 256, 512, "K", "K", marks=pytest.mark.long)])
def test_interpreter_runs_the_shipped_kernel(m, n, k, a_major, b_major):
    """The Hopper kernel itself on the CPU, each operand major: integer inputs, bit-exact
    f32 output."""
    import numpy as np
    from ptxdsl.core.types import f32_to_bf16_bits
    p = choose(m, n, k, bf16, f32, sms=2)
    kern = build_hopper(p, bf16, f32, sms=2, a_major=a_major, b_major=b_major)
    _interpretable(kern)
    rng = np.random.default_rng(m + n + k)
    a = rng.integers(-4, 5, (m, k)).astype(np.float32)
    w = rng.integers(-4, 5, (n, k)).astype(np.float32)
    ka = f32_to_bf16_bits(a) if a_major == "K" else np.ascontiguousarray(f32_to_bf16_bits(a.T))
    kb = f32_to_bf16_bits(w) if b_major == "K" else np.ascontiguousarray(f32_to_bf16_bits(w.T))
    c = kern.interpret(ka, kb, np.full((m, n), np.nan, np.float32))
    np.testing.assert_array_equal(c, a.astype(np.float64) @ w.astype(np.float64).T)


@pytest.mark.parametrize("m,n,k,a_major,b_major", [
    (256, 128, 136, "MN", "MN"),
    pytest.param(250, 264, 520, "K", "K", marks=pytest.mark.long)])
def test_interpreter_runs_the_shipped_kernel_in_a_cluster_of_2(m, n, k, a_major, b_major):
    """The Hopper kernel in clusters of 2 along M on the CPU: each CTA loads half of the
    shared B stage with .multicast::cluster into both, consumers release every stage on
    both CTAs' empty barriers (mapa + remote mbarrier.arrive), a final cluster barrier;
    bit-exact f32 output, ragged M and K with the ring wrapping."""
    import dataclasses
    import numpy as np
    from ptxdsl.core.types import f32_to_bf16_bits
    p = dataclasses.replace(choose(m, n, k, bf16, f32, sms=2), cluster=2)
    kern = build_hopper(p, bf16, f32, sms=2, a_major=a_major, b_major=b_major)
    text = kern.ptx()
    assert "multicast::cluster" in text and "mbarrier.arrive.shared::cluster" in text
    rng = np.random.default_rng(m + n + k)
    a = rng.integers(-4, 5, (m, k)).astype(np.float32)
    w = rng.integers(-4, 5, (n, k)).astype(np.float32)
    ka = f32_to_bf16_bits(a) if a_major == "K" else np.ascontiguousarray(f32_to_bf16_bits(a.T))
    kb = f32_to_bf16_bits(w) if b_major == "K" else np.ascontiguousarray(f32_to_bf16_bits(w.T))
    c = kern.interpret(ka, kb, np.full((m, n), np.nan, np.float32))
    np.testing.assert_array_equal(c, a.astype(np.float64) @ w.astype(np.float64).T)


# (A K-major B under split-K: the plans table's split rows in test_plans.py, one k-block a
# rank; a_rows with split-K below.)
@pytest.mark.parametrize("m,n,k,split,b_major", [
    (16, 120, 136, 4, "MN"),                   # 3 k-blocks for 4 ranks: rank 0 gets none
    # both consumers' partials; ranks of 3 and 2 k-blocks
    pytest.param(128, 120, 264, 4, "MN", marks=pytest.mark.long),
    pytest.param(16, 136, 264, 2, "MN", marks=pytest.mark.long)])
def test_interpreter_runs_the_split_k_kernel(m, n, k, split, b_major):
    """Split-K over a cluster on the CPU: integer inputs, bit-exact f32 output (every
    partial sum is an exact integer), ragged K (a rank may get one block less)."""
    import numpy as np
    from ptxdsl.core.types import f32_to_bf16_bits
    p = one_row(m, n, k, bf16, f32, sms=2 * split, split=split)
    kern = build_hopper(p, bf16, f32, sms=2 * split, b_major=b_major)
    _interpretable(kern)
    rng = np.random.default_rng(m + n + k + split)
    a = rng.integers(-4, 5, (m, k)).astype(np.float32)
    b = rng.integers(-4, 5, (k, n)).astype(np.float32)
    kb = f32_to_bf16_bits(b) if b_major == "MN" else np.ascontiguousarray(f32_to_bf16_bits(b.T))
    c = kern.interpret(f32_to_bf16_bits(a), kb, np.full((m, n), np.nan, np.float32))
    np.testing.assert_array_equal(c, a.astype(np.float64) @ b.astype(np.float64))


@pytest.mark.parametrize("m,n,k", [(128, 256, 64), (7, 72, 72)])
def test_interpreter_runs_the_shipped_kernel_bf16_output(m, n, k):
    """The 16-bit epilogue (stmatrix staging, fence.proxy.async, TMA store) on the CPU:
    every sum is an integer below 2^11, exact in f32, rounded once to bf16 as cvt.rn is."""
    import numpy as np
    from ptxdsl.core.types import f32_to_bf16_bits
    p = choose(m, n, k, bf16, bf16, sms=2)
    kern = build_hopper(p, bf16, bf16, sms=2)
    _interpretable(kern)
    rng = np.random.default_rng(m * n + k)
    a = rng.integers(-4, 5, (m, k)).astype(np.float32)
    w = rng.integers(-4, 5, (n, k)).astype(np.float32)
    _interprets_exactly(kern, f32_to_bf16_bits(a), f32_to_bf16_bits(w), a, w, bf16)


# (Clusters of 4: the plans table's 128 x 128 cluster_n=4 row in test_plans.py and the
# part-panel test below.)
@pytest.mark.parametrize("bn,cn,m,n,k,a_major,odt", [
    (64, 2, 100, 200, 136, "K", "f32"),
    pytest.param(64, 2, 128, 264, 200, "MN", "f32", marks=pytest.mark.long),
    pytest.param(128, 2, 7, 392, 136, "K", "bf16", marks=pytest.mark.long)])
def test_interpreter_runs_clusters_along_n(bn, cn, m, n, k, a_major, odt):
    """Clusters along N (Plan.cluster_n): each CTA loads bm / cn rows of A with
    .multicast::cluster into every CTA of its cluster and its own B; both CTAs' consumers
    release each stage on every CTA. Ragged N (a cluster's last CTA past N), several
    tiles per CTA, A in either major; exact."""
    import numpy as np
    from ptxdsl.ops.matmul.plan import Plan
    from ptxdsl.core.types import f32_to_bf16_bits
    out = {"f32": f32, "bf16": bf16}[odt]
    p = Plan(bn=bn, cluster=1, cluster_n=cn, stages=3)
    kern = build_hopper(p, bf16, out, sms=cn, a_major=a_major)
    text = kern.ptx()
    assert "multicast::cluster" in text and f".reqnctapercluster {cn}" in text
    _interpretable(kern)
    rng = np.random.default_rng(m + n + k + cn)
    a = rng.integers(-2, 3, (m, k)).astype(np.float32)
    w = rng.integers(-2, 3, (n, k)).astype(np.float32)
    ka = f32_to_bf16_bits(a) if a_major == "K" else np.ascontiguousarray(f32_to_bf16_bits(a.T))
    _interprets_exactly(kern, ka, f32_to_bf16_bits(w), a, w, out)


# (128- and 224-wide a_rows tiles: the plans table's rows in test_plans.py.)
@pytest.mark.parametrize("bn,a_rows,m,n,k,odt", [
    (64, 16, 7, 200, 136, "f32"), (64, 64, 64, 72, 200, "bf16"),
    pytest.param(64, 32, 29, 136, 72, "f32", marks=pytest.mark.long)])
def test_interpreter_runs_a_rows_of_a(bn, a_rows, m, n, k, odt):
    """Plan.a_rows: each stage loads only A's first a_rows rows (one TMA box, expect_tx of
    those bytes), the other rows were zeroed once at the start; several tiles per CTA, the
    ring wrapping, ragged N and K; exact. M above a_rows is refused at launch."""
    import numpy as np
    from ptxdsl.core.errors import LaunchError
    from ptxdsl.ops.matmul.plan import Plan
    from ptxdsl.core.types import f32_to_bf16_bits
    out = {"f32": f32, "bf16": bf16}[odt]
    p = Plan(bn=bn, cluster=1, a_rows=a_rows, stages=3)
    kern = build_hopper(p, bf16, out, sms=2)
    assert "st.shared.v4.b32" in kern.ptx()
    _interpretable(kern)
    rng = np.random.default_rng(m + n + k + a_rows)
    a = rng.integers(-2, 3, (m, k)).astype(np.float32)
    w = rng.integers(-2, 3, (n, k)).astype(np.float32)
    _interprets_exactly(kern, f32_to_bf16_bits(a), f32_to_bf16_bits(w), a, w, out)
    big = np.zeros((a_rows + 1, k), np.uint16)
    outs = (np.zeros((a_rows + 1, n), np.float32),) if out == f32 else ()
    with pytest.raises((ValueError, LaunchError), match="a_rows"):
        kern.interpret(big, f32_to_bf16_bits(w), *outs)


@pytest.mark.parametrize("bn,split,m,n,k,odt", [
    (64, 2, 1, 72, 136, "bf16"),
    pytest.param(64, 2, 7, 200, 264, "f32", marks=pytest.mark.long)])
def test_interpreter_runs_a_rows_with_split_k(bn, split, m, n, k, odt):
    """Plan.a_rows beside split-K: each rank of the cluster along K loads A's first 16 rows
    of its k-blocks (the rest of each stage zero), and the owners add the partners' partial
    sums of the live rows; ragged N and K, several tiles per CTA; exact."""
    import numpy as np
    from ptxdsl.ops.matmul.plan import Plan
    from ptxdsl.core.types import f32_to_bf16_bits
    out = {"f32": f32, "bf16": bf16}[odt]
    p = Plan(bn=bn, cluster=1, split=split, a_rows=16, stages=3)
    kern = build_hopper(p, bf16, out, sms=split)
    assert "st.shared.v4.b32" in kern.ptx() and f".reqnctapercluster {split}" in kern.ptx()
    _interpretable(kern)
    rng = np.random.default_rng(m + n + k + split)
    a = rng.integers(-2, 3, (m, k)).astype(np.float32)
    w = rng.integers(-2, 3, (n, k)).astype(np.float32)
    _interprets_exactly(kern, f32_to_bf16_bits(a), f32_to_bf16_bits(w), a, w, out)


def test_a_rows_plans_are_checked():
    from ptxdsl.ops.matmul.plan import Plan
    for bad in (dict(a_rows=8), dict(a_rows=16, cluster=2), dict(a_rows=16, cluster=1,
                                                                  cluster_n=2)):
        with pytest.raises(ValueError, match="a_rows"):
            Plan(**bad)
    with pytest.raises(ValueError, match="K-major"):
        build_hopper(Plan(bn=64, cluster=1, a_rows=16), bf16, bf16, a_major="MN")


def test_cluster_n_plans_are_checked():
    from ptxdsl.ops.matmul.plan import Plan
    for bad in (dict(cluster_n=3), dict(cluster_n=2, cluster=2),
                dict(cluster_n=2, cluster=1, split=2)):
        with pytest.raises(ValueError, match="cluster_n"):
            Plan(**bad)
    p = Plan(bn=64, cluster=1, cluster_n=4)
    assert p.cluster_ctas == 4 and p.multicast == 4 and p.tiles(16, 520) == (1, 12)


# (128 x 64 tiles, K split or not: the plans table's rows in test_plans.py, and the
# a_rows, cluster_n and split-K tests here.)
@pytest.mark.parametrize("bn,cluster,split,m,n,k,b_major", [
    (192, 1, 1, 7, 400, 200, "MN"),
    pytest.param(192, 2, 1, 130, 400, 72, "K", marks=pytest.mark.long)])
def test_interpreter_runs_the_narrow_and_192_tiles(bn, cluster, split, m, n, k, b_major):
    """The 128 x 192 tiles (m64n192 consumers) on the CPU, alone and in a cluster of 2:
    integer inputs, bit-exact f32 output, ragged edges; a 2-stage ring that wraps and CTAs
    that take more than one tile. (The same function builds 128 x 64 tiles: see above.)"""
    import numpy as np
    from ptxdsl.ops.matmul.plan import Plan
    from ptxdsl.core.types import f32_to_bf16_bits
    p = Plan(bn=bn, cluster=cluster, split=split, stages=2)
    sms = 2 * cluster * split
    kern = build_hopper(p, bf16, f32, sms=sms, b_major=b_major)
    _interpretable(kern)
    rng = np.random.default_rng(m + n + k + bn)
    a = rng.integers(-4, 5, (m, k)).astype(np.float32)
    b = rng.integers(-4, 5, (k, n)).astype(np.float32)
    kb = f32_to_bf16_bits(b) if b_major == "MN" else np.ascontiguousarray(f32_to_bf16_bits(b.T))
    c = kern.interpret(f32_to_bf16_bits(a), kb, np.full((m, n), np.nan, np.float32))
    np.testing.assert_array_equal(c, a.astype(np.float64) @ b.astype(np.float64))


def test_panel_steps_cover_the_tile_with_whole_panels():
    """C's panels of one epilogue: whole 128-byte panels, the last one overlapping the one
    before it where the tile is not whole panels wide, grouped by the staging buffer."""
    from ptxdsl.ops.matmul.store import panel_steps
    assert panel_steps(256, 128, 64) == [[0, 64], [128, 192]]
    assert panel_steps(224, 128, 64) == [[0, 64], [128, 160]]
    assert panel_steps(224, 128, 32) == [[0, 32, 64, 96], [128, 160, 192]]
    assert panel_steps(96, 64, 64) == [[0], [32]]
    assert panel_steps(192, 64, 64) == [[0], [64], [128]]
    assert panel_steps(176, 128, 64) == [[0, 64], [112]]
    for bn in range(64, 257, 16):
        for pc in (32, 64):
            steps = panel_steps(bn, 128, pc)
            cols = {s + c for step in steps for s in step for c in range(pc)}
            assert cols == set(range(bn)), (bn, pc)
    with pytest.raises(ValueError, match="panel_steps"):
        panel_steps(32, 64, 64)


@pytest.mark.parametrize("bn,cluster,a_rows,m,n,k,odt,bias", [
    (160, 1, 0, 7, 328, 72, "bf16", False), (96, 1, 0, 20, 200, 72, "f32", False),
    pytest.param(224, 2, 0, 250, 296, 136, "bf16", True, marks=pytest.mark.long),
    pytest.param(224, 1, 16, 16, 456, 200, "f32", True, marks=pytest.mark.long),
    pytest.param(176, 1, 0, 100, 376, 72, "f32", False, marks=pytest.mark.long)])
def test_interpreter_runs_tiles_that_are_not_whole_panels(bn, cluster, a_rows, m, n, k, odt,
                                                          bias):
    """Tiles 224, 176, 160 and 96 wide (m64nN consumers; C's last panel overlaps the one before
    it, both staged and stored): integer inputs, exact f32 output or bf16 output rounded
    once, with a bias; N ragged inside the overlapped panel, several tiles per CTA, the
    ring wrapping."""
    import numpy as np
    from ptxdsl.ops.matmul.plan import Plan
    from ptxdsl.core.types import f32_to_bf16_bits
    out = f32 if odt == "f32" else bf16
    p = Plan(bn=bn, cluster=cluster, a_rows=a_rows, stages=2)
    kw = {"bias": bf16} if bias else {}
    kern = build_hopper(p, bf16, out, sms=2 * cluster, **kw)
    _interpretable(kern)
    assert f"m64n{bn}k16" in kern.ptx()
    rng = np.random.default_rng(m + n + k + bn)
    a = rng.integers(-2, 3, (m, k)).astype(np.float32)
    w = rng.integers(-2, 3, (n, k)).astype(np.float32)
    bv = rng.integers(-3, 4, n).astype(np.float32)
    want = a.astype(np.float64) @ w.astype(np.float64).T + (bv if bias else 0.0)
    args = (f32_to_bf16_bits(a), f32_to_bf16_bits(w)) + ((f32_to_bf16_bits(bv),) if bias else ())
    if out == f32:
        c = kern.interpret(*args, np.full(want.shape, np.nan, np.float32))
        np.testing.assert_array_equal(c, want)
    else:
        c = kern.interpret(*args)
        np.testing.assert_array_equal(np.asarray(c).view(np.uint16),
                                      f32_to_bf16_bits(want.astype(np.float32)))


@pytest.mark.parametrize("bn,split,cn,m,n,k,odt", [
    pytest.param(176, 2, 1, 7, 304, 136, "bf16", marks=pytest.mark.long),
    pytest.param(224, 1, 4, 100, 1000, 72, "f32", marks=pytest.mark.long)])
def test_interpreter_runs_part_panel_tiles_split_or_in_clusters_along_n(bn, split, cn, m, n,
                                                                        k, odt):
    """Widths that are not whole panels with K split over a cluster (the owner stores the
    overlapping panel) and in clusters along N (A multicast): exact on the CPU."""
    import numpy as np
    from ptxdsl.ops.matmul.plan import Plan
    from ptxdsl.core.types import f32_to_bf16_bits
    out = f32 if odt == "f32" else bf16
    p = Plan(bn=bn, cluster=1, split=split, cluster_n=cn, stages=2)
    kern = build_hopper(p, bf16, out, sms=2 * split * cn)
    _interpretable(kern)
    rng = np.random.default_rng(bn + split + cn)
    a = rng.integers(-2, 3, (m, k)).astype(np.float32)
    w = rng.integers(-2, 3, (n, k)).astype(np.float32)
    _interprets_exactly(kern, f32_to_bf16_bits(a), f32_to_bf16_bits(w), a, w, out)


def test_for_majors_keeps_what_the_operands_allow():
    """A plan's K-major-only choices give way for MN-major operands: a_rows for an
    MN-major A, a tile width of part-atoms (224) for an MN-major B (256, the ring
    re-sized); a K-major B keeps 224, and building 224 with an MN-major B is refused."""
    from ptxdsl.ops.matmul.plan import Plan, for_majors
    p = Plan(bn=224, cluster=1, a_rows=16, stages=4)
    assert for_majors(p, bf16, bf16) == p
    q = for_majors(p, bf16, bf16, "MN", "MN")
    assert (q.bn, q.a_rows, q.stages, q.epi_cols) == (256, 0, 4, 128)
    assert for_majors(p, bf16, f32, "K", "MN").stages == 3
    with pytest.raises(ValueError, match="boxes of 64"):
        build_hopper(Plan(bn=224, cluster=1, stages=2), bf16, bf16,
                     b_major="MN")
    # four CTAs along N would each load 32 rows of A, but an MN-major A comes in boxes
    # of 64 rows: two share it (the N = 14336 plan of one tile row, A column-major)
    c4 = Plan(bn=128, cluster=1, cluster_n=4, stages=3)
    assert for_majors(c4, bf16, bf16, "K", "K") == c4
    assert for_majors(c4, bf16, bf16, "MN", "K").cluster_n == 2
    with pytest.raises(ValueError, match="boxes of 64"):
        build_hopper(c4, bf16, f32, sms=4, a_major="MN")
    with pytest.raises(ValueError, match="multiple of 16"):
        build_hopper(Plan(bn=200, cluster=1, stages=2), bf16, bf16)
