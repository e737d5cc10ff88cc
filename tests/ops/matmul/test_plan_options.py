"""Three Hopper GEMM plan options that lab/matmul_trailing.py times where the op trailed
cuBLAS: ``Plan.one_partial`` (split-K of 2 with one partial buffer per CTA, the rest given
to the ring), ``Plan.b_prefetch`` (a K-major B's next k-blocks asked of L2 in one burst)
and ``Plan.epi_in_ring`` (one tile per CTA: C staged in the ring's stages). Checked here:
the plans, the shared-memory map, the PTX, exact results on the CPU interpreter (long),
and the lab's candidates."""
from __future__ import annotations

import dataclasses
import importlib.util
import os

import numpy as np
import pytest

from ptxdsl.core.types import bf16, f32, f32_to_bf16_bits
from ptxdsl.ops.matmul.config import Plan
from ptxdsl.ops.matmul.hopper import build_hopper
from ptxdsl.ops.matmul.layout import Layout, grid_for
from ptxdsl.ops.matmul.plan import SMEM_PER_CTA, choose, fitted, one_tile_each
from matmul_lab import assemble_one_per_option  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))


def _lab():
    spec = importlib.util.spec_from_file_location(
        "matmul_trailing", os.path.join(ROOT, "lab", "matmul_trailing.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod




def test_one_partial_gives_the_ring_one_consumers_buffer():
    """One 64 x bn f32 buffer instead of two: 128 x 128 split in two fits 5 stages, not 4;
    128 x 64 fits 8, not 7. Only a split of two (one owner per consumer) takes it."""
    for bn, before, after in ((128, 4, 5), (64, 7, 8), (96, 5, 6)):
        two = fitted(Plan(bn=bn, split=2, cluster=1), bf16, bf16)
        one = fitted(Plan(bn=bn, split=2, cluster=1, one_partial=True), bf16, bf16)
        assert (two.stages, one.stages) == (before, after)
        assert one.partial_bytes() * 2 == two.partial_bytes() == 128 * bn * 4
        assert Layout(one, bf16, bf16).total <= SMEM_PER_CTA
    for bad in (dict(split=1), dict(split=4)):
        with pytest.raises(ValueError, match="one_partial"):
            Plan(bn=128, cluster=1, one_partial=True, **bad)


def test_b_prefetch_is_checked():
    """b_prefetch: runs of 2-16 k-blocks, a K-major B only (for_majors drops it for an
    MN-major one, with the tile width a plan of part-atoms changes)."""
    from ptxdsl.ops.matmul.plan import for_majors
    for bad in (3, 32, -1):
        with pytest.raises(ValueError, match="b_prefetch"):
            Plan(b_prefetch=bad)
    with pytest.raises(ValueError, match="b_prefetch"):
        build_hopper(Plan(bn=64, cluster=1, stages=4, b_prefetch=8), bf16, bf16, b_major="MN")
    p = fitted(Plan(bn=96, cluster=1, split=2, one_partial=True, b_prefetch=8), bf16, bf16)
    assert for_majors(p, bf16, bf16) == p
    q = for_majors(p, bf16, bf16, "K", "MN")
    assert (q.bn, q.b_prefetch, q.one_partial, q.stages) == (128, 0, True, 5)


def test_options_change_only_their_kernels():
    """The options name their kernels and add only their own instructions: the default
    plan's PTX has no prefetch and one partial buffer per consumer."""
    base = Plan(bn=64, cluster=1, split=2, stages=4)
    k0 = build_hopper(base, bf16, bf16)
    k1 = build_hopper(dataclasses.replace(base, one_partial=True, b_prefetch=4), bf16, bf16)
    assert "_op_pf4" in k1.ptx() and "_op" not in k0.ptx().split("(")[0]
    assert "prefetch.tensor" not in k0.ptx()
    # one run of 4 k-blocks, two 32-row boxes of B each
    assert k1.ptx().count("cp.async.bulk.prefetch.tensor.2d.L2.global.tile") == 8


def test_epi_in_ring_takes_one_tile_per_cta():
    """C staged in the ring: no staging buffers (a deeper ring fits), each consumer's panel
    j in its own A rows of stage j; refused at launch where a CTA would get two tiles and
    dropped by choose() there; as many stages as a step has panels."""
    p = fitted(Plan(bn=128, split=2, cluster=1, one_partial=True, epi_in_ring=True), bf16,
               bf16)
    assert p.epilogue_bytes(bf16) == 0 and p.stages == 6
    L = Layout(p, bf16, bf16)
    assert L.panel_stride == L.a_stage and L.partial == L.c
    assert Layout(dataclasses.replace(p, epi_in_ring=False), bf16, bf16).panel_stride == 64 * 128
    grid = grid_for(p, 132)
    assert grid(128, 8192, 8192) == (128, 1, 1)
    with pytest.raises(ValueError, match="one tile per CTA"):
        grid(256, 8192, 8192)
    assert one_tile_each(p, 128, 8192) and not one_tile_each(p, 256, 8192)
    with pytest.raises(ValueError, match="epi_in_ring"):
        Layout(Plan(bn=128, cluster=1, stages=3, epi_in_ring=True), bf16, f32)  # 4 panels
    for bad in (dict(m_waves=2), dict(tma_store=True)):
        with pytest.raises(ValueError, match="epi_in_ring"):
            Plan(epi_in_ring=True, **bad)
    with pytest.raises(ValueError, match="epi_in_ring"):
        build_hopper(Plan(bn=128, cluster=1, stages=4, epi_in_ring=True), bf16, bf16,
                     grouped=True)


def test_choose_drops_epi_in_ring_where_tiles_outnumber_the_ctas(monkeypatch):
    """A table row naming epi_in_ring applies only where each CTA gets one tile."""
    from ptxdsl.ops.matmul import plan as plan_mod
    row = {"plan": {"bn": 128, "split": 2, "cluster": 1, "one_partial": True,
                    "epi_in_ring": True}}
    monkeypatch.setattr(plan_mod, "measured", lambda *a: row)
    assert choose(128, 8192, 8192, bf16, sms=132).epi_in_ring
    q = choose(128, 8192, 8192, bf16, sms=114)
    assert not q.epi_in_ring and q.stages == 5


def _exact(kern, m, n, k, b_major, out, seed):
    rng = np.random.default_rng(seed)
    a = rng.integers(-4, 5, (m, k)).astype(np.float32)
    b = rng.integers(-4, 5, (k, n)).astype(np.float32)
    kb = f32_to_bf16_bits(b) if b_major == "MN" else np.ascontiguousarray(f32_to_bf16_bits(b.T))
    want = a.astype(np.float64) @ b.astype(np.float64)
    if out == f32:
        c = kern.interpret(f32_to_bf16_bits(a), kb, np.full((m, n), np.nan, np.float32))
        np.testing.assert_array_equal(c, want)
    else:
        c = kern.interpret(f32_to_bf16_bits(a), kb)
        np.testing.assert_array_equal(np.asarray(c).view(np.uint16),
                                      f32_to_bf16_bits(want.astype(np.float32)))


@pytest.mark.long
@pytest.mark.parametrize("bn,m,n,k,b_major,odt,pf", [(128, 128, 264, 392, "MN", "f32", 0)])
def test_interpreter_runs_one_partial(bn, m, n, k, b_major, odt, pf):
    """Split-K of two with one partial buffer per CTA (each rank's sending consumer writes
    it, the partner's owner reads it through DSMEM), several tiles per cluster, the ring
    wrapping, ragged N and K. Exact. (The table's 64- and 128-wide one_partial rows:
    test_plans.py; with b_prefetch and epi_in_ring: test_interpreter_runs_epi_in_ring.)"""
    out = f32 if odt == "f32" else bf16
    p = Plan(bn=bn, cluster=1, split=2, one_partial=True, stages=2, b_prefetch=pf)
    _exact(build_hopper(p, bf16, out, sms=2, b_major=b_major), m, n, k, b_major, out, bn + k)


@pytest.mark.long
@pytest.mark.parametrize("bn,cluster,m,n,k", [(128, 2, 250, 264, 392)])
def test_interpreter_runs_b_prefetch(bn, cluster, m, n, k):
    """b_prefetch (a lab option: one case) beside the unsplit kernel in clusters along M
    (each CTA asks for its half of B): exact, runs that stop before K's end."""
    p = Plan(bn=bn, cluster=cluster, stages=3, b_prefetch=2)
    _exact(build_hopper(p, bf16, f32, sms=2 * cluster), m, n, k, "K", f32, m + n)


@pytest.mark.long
# (With one consumer, the table's row: test_b_swizzle.py.)
@pytest.mark.parametrize("fields,m,n,k,b_major,odt,sms", [
    (dict(bn=96, split=2, one_partial=True, stages=2, b_prefetch=2), 120, 192, 520, "K",
     "bf16", 4)])
def test_interpreter_runs_epi_in_ring(fields, m, n, k, b_major, odt, sms):
    """C staged in the ring (each consumer's own A rows of the first stages, after its last
    wgmmas retired), one tile per CTA, with two consumers (a lab option: one case, the
    most demanding): split-K of two with one partial and b_prefetch; the ring wrapping;
    exact."""
    out = f32 if odt == "f32" else bf16
    p = Plan(cluster=1, epi_in_ring=True, **fields)
    _exact(build_hopper(p, bf16, out, sms=sms, b_major=b_major), m, n, k, b_major, out, m + k)


def test_lab_candidates_are_buildable_plans():
    """Every candidate of lab/matmul_trailing.py fits shared memory and differs from the
    current plan of the layouts it is built for (one the plans table has taken is dropped)."""
    lab = _lab()
    for (m, n, k), cands in lab.SETS.items():
        got = lab.candidates(m, n, k)
        for name, (_, layouts) in cands.items():
            for lay in layouts:
                if (name, lay) not in got:
                    continue
                p = got[(name, lay)]
                assert p != got[("current", lay)]
                assert p.smem_bytes(bf16, bf16) <= SMEM_PER_CTA
                assert not (p.bn % 64 and lay == lab.NN)


@pytest.mark.long
@pytest.mark.ptxas
def test_lab_candidates_assemble_without_spills():
    """``lab/matmul_trailing.py --check``: one candidate per option of this file
    (one_partial, b_prefetch, epi_in_ring) through ptxas -v, no spills, no warnings
    (:func:`assemble_one_per_option`)."""
    if os.system("ptxas --version > /dev/null 2>&1"):
        pytest.skip("no ptxas")
    lab = _lab()
    opts = ("one_partial", "b_prefetch", "epi_in_ring")
    assert assemble_one_per_option(lab, list(lab.SETS), options=opts) == set(opts)
