"""bench/rmsnorm_bwd_ktime.py --parts: the backward built without parts of its dW tail.

Kernels trace on first use, so a variant built while the module's functions are
replaced, but traced after they are back, is the full kernel again; an earlier study
timed exactly that and found the tail free. These check that each variant's PTX lacks
what it should, and that the originals are back afterwards.
"""
from __future__ import annotations

import numpy as np

from bench.rmsnorm_bwd_ktime import tail_kernels
from ptxdsl.ops.rmsnorm import bwd
from ptxdsl.ops.rmsnorm.bwd import build_backward, plan_backward
from ptxdsl.core.types import bf16, f32
from test_ops_rmsnorm_few_rows import case


def test_tail_variants_lack_their_parts_and_the_module_is_restored():
    before = {a: getattr(bwd, a) for a in ("sum_partials", "late_arrivals", "_add_groups")}
    p = plan_backward(1000, bf16, 132, threads=64, groups=8, ctas_per_sm=1)
    full = build_backward(p, bf16, bf16).ptx()
    ks = tail_kernels(p, bf16)
    assert {a: getattr(bwd, a) for a in before} == before
    no_sum, no_tail = ks["no dW sum"].ptx(), ks["no dW tail"].ptx()
    # the late arrivals' atomic and the sum's loads of the partial rows (ld.global.cg)
    # and the row groups' partials in shared memory (four floats a store)
    assert all(s in full for s in ("atom.acq_rel.gpu", "ld.global.cg", "st.shared.v4.f32"))
    assert "atom.acq_rel.gpu" in no_sum and "ld.global.cg" not in no_sum
    assert not any(s in no_tail for s in ("atom.acq_rel.gpu", "ld.global.cg",
                                          "st.shared.v4.f32"))
    # after the variants, a fresh build is the full kernel again
    assert build_backward(p, bf16, bf16).ptx() == full


def test_tail_variants_keep_dx():
    """Only dW is dropped: dx of the tail-less kernel is the full kernel's, bit for bit
    (CPU interpreter, two CTAs)."""
    p = plan_backward(256, f32, 2)
    (dy, x, w, rstd), _, _ = case(9, 256, np.float32, seed=3)
    dx = build_backward(p, f32, f32).interpret(dy, x, w, rstd, np.zeros(2, np.uint32))[0]
    k = tail_kernels(p, f32)["no dW tail"]
    dx2 = k.interpret(dy, x, w, rstd, np.zeros(2, np.uint32))[0]
    np.testing.assert_array_equal(dx.view(np.uint32), dx2.view(np.uint32))
