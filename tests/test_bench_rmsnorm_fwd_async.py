"""bench/rmsnorm_fwd_async.py (the cp.async-staged forward the ops never choose, timed by
bench/rmsnorm_tune.py --mode async) on the CPU interpreter."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from bench.rmsnorm_fwd_async import Staging, build_forward_async, can_stage
from ptxdsl.ops.rmsnorm.fwd import plan
from ptxdsl.core.types import bf16, bf16_bits_to_f32, f32, f32_to_bf16_bits
from test_ops_rmsnorm import EPS, ref_fwd, rel_err


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(m=st.integers(1, 11), n=st.sampled_from([3, 96, 1000, 1030, 4096]),
       grid=st.integers(1, 3), stages=st.integers(1, 4), residual=st.booleans(),
       half=st.booleans(), seed=st.integers(0, 2**16))
def test_staged_forward_walks_every_row(m, n, grid, stages, residual, half, seed):
    """The cp.async-staged kernel on a tiny grid: each CTA streams several rows through
    its ring of ``stages`` shared-memory buffers (the interpreter writes a copy into shared
    memory only at cp.async.wait_group, so a missing or misplaced wait reads stale rows)."""
    dt = bf16 if half else f32
    p = plan(n, dt)
    if not can_stage(p, dt):
        with pytest.raises(ValueError, match="cannot be staged"):
            build_forward_async(p, Staging(stages, 1), dt, dt, grid)
        return
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((m, n)).astype(np.float32)
    w = rng.standard_normal(n).astype(np.float32)
    if half:
        x = bf16_bits_to_f32(f32_to_bf16_bits(x))
        w = bf16_bits_to_f32(f32_to_bf16_bits(w))
    enc = (lambda a: f32_to_bf16_bits(a)) if half else (lambda a: a)
    k = build_forward_async(p, Staging(stages, 1), dt, dt, grid, eps=EPS, residual=residual,
                            with_rstd=True)
    assert k.dynamic_shared == stages * (2 if residual else 1) * p.rows_per_cta * n * dt.bytes
    if residual:
        r = rng.standard_normal((m, n)).astype(np.float32)
        if half:
            r = bf16_bits_to_f32(f32_to_bf16_bits(r))
        rb = enc(r).copy()
        y, rstd = np.zeros_like(enc(x)), np.zeros(m, np.float32)
        k.interpret(enc(x), rb, enc(w), y, rb, rstd)
        h = x + r
        if half:
            h = bf16_bits_to_f32(f32_to_bf16_bits(h))
            np.testing.assert_array_equal(bf16_bits_to_f32(rb), h)
        else:
            np.testing.assert_array_equal(rb, h)
        x = h
    else:
        y, rstd = k.interpret(enc(x), enc(w))
    ref, rref = ref_fwd(x, w)
    if half:
        assert rel_err(bf16_bits_to_f32(y), ref) < 1e-2
    else:
        assert rel_err(y, ref) < 2e-6
    assert np.allclose(rstd, rref, rtol=1e-5)
