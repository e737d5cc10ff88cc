"""``Plan.consumers = 1``: 64-row tiles of one consumer warpgroup (issue #50: M = 128 is
two tiles, and a cluster of two along M shares B's tile by multicast, each CTA loading
half of it). Checked here: the plan's refusals, its shape (threads, rows, shared memory,
kernel name), and exact results on the CPU interpreter (long): clusters along M and N,
both B majors, several tiles per CTA, ragged edges, a tile of part-panels, epi_overlap
and epi_in_ring."""
from __future__ import annotations

import numpy as np
import pytest

from ptxdsl.core.types import bf16, f32, f32_to_bf16_bits
from ptxdsl.ops.matmul.config import Plan
from ptxdsl.ops.matmul.hopper import build_hopper
from matmul_lab import assemble_one_per_option  # noqa: E402


def test_one_consumer_plan():
    """64-row tiles: 256 threads, A's stage a quarter of B's at bn = 256; refused with
    split-K, stream-K, a_rows, m_waves, and in the grouped or block-scaled kernels."""
    p = Plan(consumers=1, bn=96, stages=10, cluster=2)
    assert (p.bm, p.threads, p.tiles(128, 6144)) == (64, 256, (2, 64))
    assert p.stage_bytes(bf16) == (64 + 96) * 64 * 2 and p.epilogue_bytes(bf16) == 64 * 64 * 2
    assert p.options_tag == "_m64" and Plan().options_tag == ""
    for bad in (dict(split=2, cluster=1), dict(stream_k=True), dict(a_rows=16, cluster=1),
                dict(consumers=3)):
        with pytest.raises(ValueError, match="consumers"):
            Plan(**dict(dict(consumers=1), **bad))
    with pytest.raises(ValueError, match="one consumer"):
        build_hopper(Plan(consumers=1, bn=128, cluster=1, stages=4), bf16, bf16, grouped=True)


@pytest.mark.long
# (The table's 64 x 96 rows: test_plans.py (K-major B) and test_b_swizzle.py (MN-major,
# epi_in_ring); one consumer with epi_overlap is no plan's.)
@pytest.mark.parametrize("fields,m,n,k,b_major,odt,sms", [
    (dict(bn=128, cluster=2, stages=2), 190, 264, 136, "MN", "bf16", 2),
    (dict(bn=64, cluster=1, cluster_n=2, stages=2), 64, 264, 136, "K", "bf16", 2)])
def test_interpreter_runs_one_consumer(fields, m, n, k, b_major, odt, sms):
    """Exact against float64 with integer-valued inputs: a cluster along M (ragged M, two
    tiles per tile row), along N."""
    out = f32 if odt == "f32" else bf16
    kern = build_hopper(Plan(consumers=1, **fields), bf16, out, sms=sms, b_major=b_major)
    rng = np.random.default_rng(m + n + k)
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


def _lab():
    import importlib.util
    import os
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    spec = importlib.util.spec_from_file_location(
        "matmul_trailing", os.path.join(root, "lab", "matmul_trailing.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_lab_m64_set_is_buildable():
    """``lab/matmul_trailing.py --set m64``: every candidate fits shared memory, differs from
    the current plan and is buildable for the layouts it names."""
    from ptxdsl.ops.matmul.plan import SMEM_PER_CTA
    lab = _lab()
    for (m, n, k), cands in lab.M64_SET.items():
        got = lab.candidates(m, n, k, table=lab.M64_SET)
        for name, (_, layouts) in cands.items():
            for lay in layouts:
                if (name, lay) not in got:       # the table's row took it: dropped
                    continue
                p = got[(name, lay)]
                assert p != got[("current", lay)]
                assert p.smem_bytes(bf16, bf16) <= SMEM_PER_CTA


@pytest.mark.long
@pytest.mark.ptxas
def test_lab_m64_set_assembles_without_spills():
    """``lab/matmul_trailing.py --check --set m64``: ptxas -v of one candidate with
    one consumer (the set's option), no spills, no warnings."""
    import os
    if os.system("ptxas --version > /dev/null 2>&1"):
        pytest.skip("no ptxas")
    lab = _lab()
    assert assemble_one_per_option(lab, list(lab.M64_SET), lab.M64_SET,
                                   ("consumers",)) == {"consumers"}


def test_fitted_gives_64_row_tiles_the_ring_that_fits():
    """A table row naming consumers = 1 gets the ring timed in the lab: as deep as fits
    (10 stages at 64 x 96, 8 at 64 x 128, 9 with epi_in_ring), the 128-row caps unchanged."""
    from ptxdsl.ops.matmul.plan import fitted
    got = [fitted(Plan(consumers=1, cluster=2, bn=bn, epi_in_ring=er), bf16, bf16).stages
           for bn, er in ((96, False), (128, False), (128, True))]
    assert got == [10, 8, 9]
    assert fitted(Plan(bn=128, cluster=2), bf16, bf16).stages == 6
