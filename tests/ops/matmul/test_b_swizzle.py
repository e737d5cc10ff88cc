"""``Plan.b_swizzle = 64``: an MN-major B (``a @ b``) in 32-column atoms of the 64-byte
swizzle, so tiles 96 (or 160) columns wide (issue #50); where a cluster along M shares
such a B and the CTAs' halves are not whole atoms, each loads half of every atom's K-rows
(``Operand.k_parts``). Checked here: the operand's boxes, descriptor fields and K steps,
``plan.for_majors``, the refusals, and exact results on the CPU interpreter (long)."""
from __future__ import annotations

import numpy as np
import pytest

from ptxdsl.core.types import bf16, f32, f32_to_bf16_bits
from ptxdsl.ops.matmul.config import Plan
from ptxdsl.ops.matmul.hopper import build_hopper
from ptxdsl.ops.matmul.operands import operands
from ptxdsl.ops.matmul.plan import for_majors
from matmul_lab import assemble_one_per_option  # noqa: E402

M64 = dict(consumers=1, b_swizzle=64)


def test_b_swizzle_operand_boxes_and_steps():
    """64 x 96 pairs: two K-chunks of 32 rows, each 3 atoms of 2 KiB (LBO), 8-row groups
    512 bytes apart, k16 steps 1024 bytes inside a chunk and the second chunk 6 KiB on;
    unpaired: one chunk of 4 KiB atoms; 64 x 128 pairs: whole atoms each (no chunks)."""
    _, b = operands(Plan(bn=96, cluster=2, **M64), bf16, b_major="MN")
    assert (b.k_parts, b.load_rows, b.box_k, b.box_mn, b.box_bytes) == (2, 96, 32, 32, 2048)
    assert (b.fields.leading, b.fields.stride, b.fields.swizzle) == (2048, 512, 64)
    assert [b.k_offset(ks) for ks in range(4)] == [0, 64, 384, 448]
    assert b.tile("sb").tma.box == (32, 32) and b.tile("sb").tma.swizzle == 64
    _, b = operands(Plan(bn=96, cluster=1, **M64), bf16, b_major="MN")
    assert (b.k_parts, b.box_k, b.box_bytes, b.fields.leading) == (1, 64, 4096, 4096)
    assert [b.k_offset(ks) for ks in range(4)] == [0, 64, 128, 192]
    _, b = operands(Plan(bn=128, cluster=2, **M64), bf16, b_major="MN")
    assert (b.k_parts, b.load_rows, b.box_mn) == (1, 64, 32)
    _, b = operands(Plan(bn=128, cluster=2), bf16, b_major="MN")     # the default: unchanged
    assert (b.swizzle, b.k_parts, b.box_mn, b.fields.leading, b.k_step) == (128, 1, 64, 8192,
                                                                           128)


def test_b_swizzle_for_majors_and_refusals():
    """for_majors keeps 96 with 32-column atoms, rounds it to 128 with 64-column ones and
    drops b_swizzle for a K-major B; b_swizzle 32, a K-major B with 64 and 8-bit operands
    are refused."""
    assert for_majors(Plan(bn=96, **M64), bf16, bf16, "K", "MN").bn == 96
    assert for_majors(Plan(bn=96, consumers=1), bf16, bf16, "K", "MN").bn == 128
    assert for_majors(Plan(bn=96, **M64), bf16, bf16, "K", "K").b_swizzle == 128
    assert Plan(bn=96, **M64).options_tag == "_m64_sw64"
    with pytest.raises(ValueError, match="b_swizzle"):
        Plan(b_swizzle=32)
    with pytest.raises(ValueError, match="b_swizzle"):
        build_hopper(Plan(bn=96, cluster=2, stages=4, **M64), bf16, bf16, b_major="K")


@pytest.mark.long
@pytest.mark.parametrize("fields,m,n,k,odt,sms", [
    (dict(bn=128, cluster=2, stages=3, **M64), 190, 264, 136, "bf16", 2),
    # the plans table's row (64 x 96 tiles, a cluster of 2, C staged in the ring)
    (dict(bn=96, cluster=2, stages=4, epi_in_ring=True, **M64), 128, 192, 328, "bf16", 4)])
def test_interpreter_runs_b_swizzle(fields, m, n, k, odt, sms):
    """Exact against float64 with integer-valued inputs: pairs in whole atoms (128
    columns), pairs and an unpaired atom (96), ragged edges, several tiles per CTA,
    epi_in_ring."""
    out = f32 if odt == "f32" else bf16
    kern = build_hopper(Plan(**fields), bf16, out, sms=sms, b_major="MN")
    rng = np.random.default_rng(m + n + k)
    a = rng.integers(-4, 5, (m, k)).astype(np.float32)
    b = rng.integers(-4, 5, (k, n)).astype(np.float32)
    want = a.astype(np.float64) @ b.astype(np.float64)
    if out == f32:
        c = kern.interpret(f32_to_bf16_bits(a), f32_to_bf16_bits(b),
                           np.full((m, n), np.nan, np.float32))
        np.testing.assert_array_equal(c, want)
    else:
        c = kern.interpret(f32_to_bf16_bits(a), f32_to_bf16_bits(b))
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


@pytest.mark.long
@pytest.mark.ptxas
def test_lab_nn96_set_assembles_clean():
    """``lab/matmul_trailing.py --check --set nn96``: every candidate fits shared memory
    and ptxas -v of one candidate with b_swizzle (the set's option) shows no spills and no
    warnings."""
    import os
    if os.system("ptxas --version > /dev/null 2>&1"):
        pytest.skip("no ptxas")
    from ptxdsl.ops.matmul.plan import SMEM_PER_CTA
    lab = _lab()
    for (m, n, k) in lab.NN96_SET:
        for p in lab.candidates(m, n, k, table=lab.NN96_SET).values():
            assert p.smem_bytes(bf16, bf16) <= SMEM_PER_CTA
    assert assemble_one_per_option(lab, list(lab.NN96_SET), lab.NN96_SET,
                                   ("b_swizzle",)) == {"b_swizzle"}
