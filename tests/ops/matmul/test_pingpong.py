"""``Plan.pingpong``: two consumer warpgroups on alternate 64-row tiles of a CTA's, taking
turns at the one ring so each one's epilogue runs under the other's wgmmas (issue #50).
Checked here: the plan's shape and refusals, the ring skip's arithmetic, and exact
results on the CPU interpreter (long; its mbarrier detector reports the skipped phase a
consumer running a tile ahead of its turn would cause): clusters along M, both B
majors, odd and even tile counts per CTA, ragged edges, a bias, f32 out."""
from __future__ import annotations

import numpy as np
import pytest

from ptxdsl.core.types import bf16, f32, f32_to_bf16_bits
from ptxdsl.ops.matmul.config import Plan
from ptxdsl.ops.matmul.hopper import build_hopper
from ptxdsl.ops.matmul.plan import fitted

PP = dict(pingpong=True)


def test_pingpong_plan():
    """64-row tiles of two consumers: 384 threads, one reader per stage, the 64-row ring
    depth; refused with one consumer, split-K, stream-K, epi_overlap, epi_in_ring, and in
    the grouped or block-scaled kernels."""
    p = Plan(bn=256, cluster=2, **PP)
    assert (p.bm, p.threads, p.stage_readers, p.tiles(1024, 14336)) == (64, 384, 1, (16, 56))
    assert p.options_tag == "_pp" and Plan().stage_readers == 2
    assert p.epilogue_bytes(bf16) == 2 * 64 * 128 * 2
    assert [fitted(Plan(bn=bn, **PP), bf16, bf16).stages for bn in (256, 128)] == [4, 8]
    for bad in (dict(consumers=1), dict(split=2, cluster=1), dict(stream_k=True),
                dict(epi_overlap=1), dict(epi_in_ring=True)):
        with pytest.raises(ValueError, match="pingpong"):
            Plan(**dict(PP, **bad))
    with pytest.raises(ValueError, match="pingpong"):
        build_hopper(Plan(bn=128, cluster=1, stages=4, **PP), bf16, bf16, grouped=True)


@pytest.mark.long
@pytest.mark.parametrize("fields,m,n,k,b_major,odt,bias,sms", [
    (dict(bn=96, cluster=2, stages=4), 250, 200, 136, "K", "bf16", True, 2)])
def test_interpreter_runs_pingpong(fields, m, n, k, b_major, odt, bias, sms):
    """Exact against float64 with integer-valued inputs: pingpong, a lab option, once at
    its most demanding (a cluster, ragged M and N, a bf16 output with a bias)."""
    out = f32 if odt == "f32" else bf16
    kern = build_hopper(Plan(**fields, **PP), bf16, out, sms=sms, b_major=b_major,
                        **({"bias": bf16} if bias else {}))
    rng = np.random.default_rng(m + n + k)
    a = rng.integers(-4, 5, (m, k)).astype(np.float32)
    b = rng.integers(-4, 5, (k, n)).astype(np.float32)
    bv = rng.integers(-4, 5, (n,)).astype(np.float32)
    kb = f32_to_bf16_bits(b) if b_major == "MN" else np.ascontiguousarray(f32_to_bf16_bits(b.T))
    want = a.astype(np.float64) @ b.astype(np.float64) + (bv if bias else 0.0)
    args = (f32_to_bf16_bits(a), kb) + ((f32_to_bf16_bits(bv),) if bias else ())
    if out == f32:
        c = kern.interpret(*args, np.full((m, n), np.nan, np.float32))
        np.testing.assert_array_equal(c, want)
    else:
        c = kern.interpret(*args)
        np.testing.assert_array_equal(np.asarray(c).view(np.uint16),
                                      f32_to_bf16_bits(want.astype(np.float32)))
