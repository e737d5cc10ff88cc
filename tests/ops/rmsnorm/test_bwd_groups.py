"""The RMSNorm backward with several rows per CTA ("row groups", ``BwdPlan.groups``),
on the CPU interpreter.

A CTA of ``groups`` row groups walks the same rows as ``groups`` one-row CTAs would
(group g of CTA c: rows c*groups + g, then every grid*groups-th), each row summed at its
group's own named barrier; the groups' dw partials are added in shared memory in group
order, so the CTA's partial row is, bit for bit, the f32 sum of those one-row CTAs'
partial rows, and dx is bit for bit theirs.
"""
from __future__ import annotations

import dataclasses
import re

import ml_dtypes
import numpy as np
import pytest

import ptxdsl.interp  # noqa: F401  (the package's own interpreter: a broken one fails here)
from ptxdsl.ops.rmsnorm import bwd
from ptxdsl.ops.rmsnorm.bwd import MAX_GROUP_SMEM, build_backward, group_smem, plan_backward
from ptxdsl.ops.rmsnorm.bwd_dw import build_dw_reduce
from ptxdsl.ops.rmsnorm.fwd import max_vec
from ptxdsl.core.types import bf16, f16, f32

from rmsnorm_cases import case, rel_err
from sweeps import sweep  # noqa: E402

SMS = 2  # the interpreter's SM count
NP = {f32: np.float32, f16: np.float16, bf16: ml_dtypes.bfloat16}
BITS = {f32: np.uint32, f16: np.uint16, bf16: np.uint16}


def as_float(a, dt):
    """The interpreter returns bf16 arrays as their uint16 bits."""
    return a.view(ml_dtypes.bfloat16) if dt is bf16 and a.dtype == np.uint16 else a


def run(p, dt, args):
    k = build_backward(p, dt, dt)
    ws = np.zeros(2, np.uint32)
    if p.fused:
        dx, dw, part = k.interpret(*args, ws)
    else:
        dx, part = k.interpret(*args)
        dw = build_dw_reduce(p.n, p.grid, dt).interpret(part)
    return as_float(dx, dt), as_float(dw, dt), part


@pytest.mark.parametrize("n, dt, groups, m, fused, threads", sweep([
    (256, f32, 2, 19, True, None),      # 64 threads a row, two rows a CTA
    (1000, bf16, 3, 23, True, None),    # 128 threads, a ragged last chunk, three rows
    pytest.param(1000, f16, 4, 40, False, None,    # dW summed by a second launch
                 marks=pytest.mark.long),
    (64, f32, 3, 11, True, None),       # one warp a row: the row sum needs no barrier
    (4096, bf16, 2, 9, True, None),     # 512 threads a row, two rows a CTA
    # one-warp rows of four chunks, more groups than named barriers, the partials in
    # dynamic shared memory (16 x 4 KiB)
    (1000, bf16, 16, 45, True, 32),
    (250, f32, 2, 7, True, None),       # N % 4: the partial row summed a column at a time
], keep=3))
def test_groups_walk_the_rows_of_one_row_ctas(n, dt, groups, m, fused, threads, monkeypatch):
    p = plan_backward(n, dt, SMS, groups=groups, fused=fused, threads=threads)
    assert p.groups == groups and p.block == p.threads * groups and p.fused == fused
    (dy, x, w, rstd), rdx, rdw = case(m, n, NP[dt], seed=n + m)
    dx, dw, part = run(p, dt, (dy, x, w, rstd))
    # the same rows as grid * groups one-row CTAs (their partial rows in global memory,
    # even where so few CTAs would sum dW as one cluster)
    monkeypatch.setattr(bwd, "MAX_DW_CLUSTER", 0)
    one = dataclasses.replace(p, groups=1, grid=p.grid * groups)
    dx1, _, part1 = run(one, dt, (dy, x, w, rstd))
    np.testing.assert_array_equal(dx.view(BITS[dt]), dx1.view(BITS[dt]))
    want = part1.reshape(p.grid, groups, n)[:, 0].copy()
    for g in range(1, groups):
        want = (want + part1.reshape(p.grid, groups, n)[:, g]).astype(np.float32)
    np.testing.assert_array_equal(part.view(np.uint32), want.view(np.uint32))
    tol = 1e-5 if dt is f32 else 2e-2
    assert rel_err(dx.astype(np.float64), rdx) < tol
    assert float(np.max(np.abs(dw.astype(np.float64) - rdw))) <= tol * max(
        1.0, float(np.abs(rdw).max()))
    # deterministic: the same bits again
    np.testing.assert_array_equal(run(p, dt, (dy, x, w, rstd))[1].view(BITS[dt]),
                                  dw.view(BITS[dt]))


def test_each_group_sums_its_row_at_its_own_barrier():
    """``bar.sync 1 + group, T`` for the row sums (a register id), ``bar.sync 0`` only
    where the whole CTA meets (the groups' dw, the grid barrier, the dW sum)."""
    p = plan_backward(1000, bf16, 132, groups=4)
    k = build_backward(p, bf16, bf16)
    text = k.ptx()
    assert re.search(r"bar\.sync\s+%r\d+, 128;", text)
    assert k.block == (512, 1, 1) and k.grid == (p.grid, 1, 1) and p.grid % 132 == 0


@pytest.mark.parametrize("rows", [1, 3, 100, 131, 132, 500, 10**5])
def test_few_rows_drop_the_groups(rows):
    """Fewer rows than CTAs: one-row CTAs, the grid cut as without groups; else the
    grouped plan itself."""
    p = plan_backward(1000, bf16, 132, groups=4, ctas_per_sm=1)
    assert p.grid == 132 and p.row_step == 528
    q = p.for_rows(rows)
    if rows >= p.grid:
        assert q is p
    else:
        nxt = 1 << (rows - 1).bit_length()
        assert q.groups == 1 and q.grid == min(132, nxt) and q.fused
        assert dataclasses.replace(q, groups=4, grid=132) == p
    assert plan_backward(1000, bf16, 132, groups=4, ctas_per_sm=1, rows=rows) == q


def test_groups_that_do_not_fit_say_why():
    with pytest.raises(ValueError, match="streamed or staged"):
        plan_backward(65536, f32, 132, groups=2)
    with pytest.raises(ValueError, match="192 threads, not a power of two"):
        plan_backward(768, f32, 132, groups=2)  # 192 chunks of 4: 192 threads
    with pytest.raises(ValueError, match="2048 threads per CTA"):
        plan_backward(4096, bf16, 132, groups=4)
    # 256 threads x 32 values: 32 KiB of partials per group
    assert group_smem(8192, 8, 256, 3) == MAX_GROUP_SMEM
    plan_backward(8192, bf16, 132, groups=3, threads=256)
    with pytest.raises(ValueError, match="131072 bytes of shared memory"):
        plan_backward(8192, bf16, 132, groups=4, threads=256)


def test_grouped_kernels_assemble_without_spills():
    """Grouped CTAs are built for one per SM (``.minnctapersm 1``, so ptxas keeps to the
    registers that leaves), and the plans ops takes fit there without spilling."""
    from ptxdsl.toolchain import find_ptxas
    if find_ptxas() is None:
        pytest.skip("no ptxas")
    for n, dt, threads, groups in [(1000, bf16, 64, 8), (1024, f16, 64, 8),
                                   (1000, bf16, 64, 6), (1000, bf16, 128, 5),
                                   (1000, f32, 128, 4), (2048, f16, 128, 4),
                                   (2048, bf16, 256, 3)]:
        p = plan_backward(n, dt, 132, vec=max_vec(n, dt), threads=threads, groups=groups,
                          ctas_per_sm=1)
        k = build_backward(p, dt, dt)
        r = k.resources()
        assert r.spill_stores == 0 and r.local == 0, (n, dt, groups, r)
        assert ".minnctapersm 1" in k.ptx()
        assert -(-r.registers // 8) * 8 * p.block <= 65536
