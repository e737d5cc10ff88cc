"""``Plan.epi_overlap`` in the dense kernel (issue #50, 1024 x 14336 x 4096 runs about
seven 128 x 128 tiles per CTA): each tile's epilogue under the next tile's first
k-blocks. Checked here: what the dense kernel refuses, and exact results on the CPU
interpreter (long) with several tiles per CTA, clusters along M and N, ragged edges,
bias and both B majors."""
from __future__ import annotations

import numpy as np
import pytest

from ptxdsl.core.types import bf16, f32, f32_to_bf16_bits
from ptxdsl.ops.matmul.config import Plan
from ptxdsl.ops.matmul.hopper import build_hopper


def test_dense_epi_overlap_refuses_partial_tiles():
    """Whole tiles only: split-K, stream-K and a_rows give a consumer part of a tile (or
    none of it); block-wise scales keep their own loop; wider than 128 columns, the two
    accumulators do not fit."""
    for bad, word in ((dict(split=2, cluster=1), "split-K"),
                      (dict(stream_k=True, cluster=1), "stream_k"),
                      (dict(a_rows=16, cluster=1), "a_rows"),
                      (dict(bn=256), "two accumulators"), (dict(stages=2), "ring stages")):
        fields = dict(dict(bn=128, stages=4, epi_overlap=2), **bad)
        with pytest.raises(ValueError, match=word):
            build_hopper(Plan(**fields), bf16, bf16)


def _ints(rng, shape):
    return rng.integers(-4, 5, shape).astype(np.float32)


@pytest.mark.long
@pytest.mark.parametrize("fields,m,n,k,b_major,odt,bias,sms", [
    (dict(bn=176, cluster=2, stages=2, epi_overlap=1), 256, 440, 136, "K", "bf16", True, 2)])
def test_interpreter_runs_dense_epi_overlap(fields, m, n, k, b_major, odt, bias, sms):
    """The dense kernel's epi_overlap (a lab option: one case, its most demanding): several
    tiles per CTA (the stash stored under the next tile's k-blocks), a cluster along M (B
    shared), ragged N, a bias, a 176-wide tile (its last panel overlapping the one before):
    exact against float64. (Fewer k-blocks than the lag, clusters along N: the grouped
    kernel's epi_overlap in test_grouped.py.)"""
    out = f32 if odt == "f32" else bf16
    kern = build_hopper(Plan(**fields), bf16, out, sms=sms, b_major=b_major,
                        bias=f32 if bias else None)
    rng = np.random.default_rng(m + n + k)
    a, b = _ints(rng, (m, k)), _ints(rng, (k, n))
    kb = f32_to_bf16_bits(b) if b_major == "MN" else np.ascontiguousarray(f32_to_bf16_bits(b.T))
    want = a.astype(np.float64) @ b.astype(np.float64)
    args = [f32_to_bf16_bits(a), kb]
    if bias:
        bv = _ints(rng, (n,))
        args.append(bv)
        want = want + bv
    if out == f32:
        c = kern.interpret(*args, np.full((m, n), np.nan, np.float32))
        np.testing.assert_array_equal(c, want)
    else:
        c = kern.interpret(*args)
        np.testing.assert_array_equal(np.asarray(c).view(np.uint16),
                                      f32_to_bf16_bits(want.astype(np.float32)))
