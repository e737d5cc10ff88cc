"""The GEMM's table of measured plans (ptxdsl/ops/matmul/plans.json) and the rules beside
it: invariants, not pinned values. Every row is well formed, cites results files that
exist, overlaps no other row, is what choose() returns where it applies, was the fastest
plan (or near it) in the runs it cites, fits shared memory, assembles without spills (the
kernels of most register pressure) and computes exactly on the interpreter at a small
shape. The rules' plans fit and split K only where they may."""
from __future__ import annotations

import dataclasses
import json
import math
import os

import numpy as np
import pytest

from ptxdsl.core.types import bf16, e4m3, e5m2, f16, f32, f32_to_bf16_bits
from ptxdsl.ops.matmul.api import describe
from ptxdsl.ops.matmul.config import Plan
from ptxdsl.ops.matmul.fp8 import MODES
from ptxdsl.ops.matmul.hopper import build_hopper
from ptxdsl.ops.matmul.plan import (
    B_MAJORS, DEVICE_CLASSES, MIN_SPLIT_KBLOCKS, SMEM_PER_CTA, bk_for, choose, for_majors,
    for_scaling, measured, one_row, row_applies, rows)

from paths import ROOT
DTYPES = {"bf16": bf16, "f16": f16, "e4m3": e4m3, "e5m2": e5m2}
FIELDS = {f.name for f in dataclasses.fields(Plan)} - {"stages", "bk"}


def _out(dt):
    return dt if dt.bytes == 2 else bf16


def _chosen(row, dev, m=None):
    """choose() where ``row`` applies (its smallest M unless given), for its first dtype,
    B layout and scaling mode."""
    dt = DTYPES[row["dtypes"][0]]
    return choose(row["m"][0] if m is None else m, row["n"], row["k"], dt, _out(dt),
                  device=dev, b_major=row.get("b_majors", B_MAJORS)[0],
                  scaling=row.get("scalings", [None])[0]), dt


def _kinds():
    """One (plan, dtype) per distinct kernel the rows choose for an f32 output."""
    seen = {}
    for row in rows():
        dt = DTYPES[row["dtypes"][0]]
        for dev in row["devices"]:
            p = choose(row["m"][0], row["n"], row["k"], dt, f32, device=dev)
            seen.setdefault((p, dt.bytes), (p, dt))
    return list(seen.values())


def _pressure_kinds():
    """The kinds of most register pressure (at most 4, for ptxas): the widest tile of 16-
    and of 8-bit operands, the widest split-K one (its partials beside the accumulators)
    and a 64-row (one consumer) one. The others have fewer accumulators of the same code."""
    ks = list(enumerate(_kinds()))
    picks = [max((x for x in ks if x[1][1].bytes == b and x[1][0].split == 1),
                 key=lambda x: x[1][0].bn)[0] for b in (2, 1)]
    picks.append(max((x for x in ks if x[1][0].split > 1),
                     key=lambda x: (x[1][0].bn, x[1][0].one_partial))[0])
    picks += [i for i, (p, _) in ks if p.consumers == 1][:1]
    return picks


def _interp_cases():
    """Every kind; the split-K ones (an exchange of partials through DSMEM) and the
    256-column one (the costliest on the interpreter) in the long run."""
    return [pytest.param(i, marks=pytest.mark.long) if p.split > 1 or p.bn > 224 else i
            for i, (p, _) in enumerate(_kinds())]


def test_rows_are_well_formed():
    for i, row in enumerate(rows()):
        assert set(row) - {"b_majors", "scalings"} == {"devices", "dtypes", "m", "n", "k",
                                                       "plan", "sources", "reason"}, i
        assert set(row.get("b_majors", B_MAJORS)) <= set(B_MAJORS), i
        assert set(row.get("scalings", MODES)) <= set(MODES) and row.get("scalings", 1), i
        assert "scalings" not in row or all(DTYPES[d].bytes == 1 for d in row["dtypes"]), i
        assert row["devices"] and set(row["devices"]) <= set(DEVICE_CLASSES), i
        assert row["dtypes"] and set(row["dtypes"]) <= set(DTYPES), i
        assert len({DTYPES[d].bytes for d in row["dtypes"]}) == 1, i
        lo, hi = row["m"]
        assert 1 <= lo <= hi and (hi <= 128 or lo > 128), i     # one tile row, or many
        assert set(row["plan"]) <= FIELDS, i
        assert row["reason"] and "\n" not in row["reason"] and len(row["reason"]) <= 120, i
        Plan(**row["plan"])


def test_rows_cite_results_files_that_exist():
    for row in rows():
        assert row["sources"]
        for src in row["sources"]:
            assert src.startswith("bench/results/"), src
            assert os.path.isfile(os.path.join(ROOT, src)), src


def test_rows_do_not_overlap():
    rs = rows()
    for i, a in enumerate(rs):
        for b in rs[i + 1:]:
            assert not (set(a["devices"]) & set(b["devices"]) and
                        set(a["dtypes"]) & set(b["dtypes"]) and a["n"] == b["n"] and
                        a["k"] == b["k"] and a["m"][0] <= b["m"][1] and
                        b["m"][0] <= a["m"][1] and
                        set(a.get("b_majors", B_MAJORS)) & set(b.get("b_majors", B_MAJORS))
                        and set(a.get("scalings", MODES)) & set(b.get("scalings", MODES))
                        ), (a, b)


def test_choose_takes_the_row_that_applies():
    for row in rows():
        for dev in row["devices"]:
            for name in row["dtypes"]:
                dt = DTYPES[name]
                for m in row["m"]:
                    for bm in row.get("b_majors", B_MAJORS):
                        assert row_applies(row, m, row["n"], row["k"], dt, dev, bm)
                        p = choose(m, row["n"], row["k"], dt, _out(dt), device=dev,
                                   b_major=bm)
                        for f, v in row["plan"].items():
                            assert getattr(p, f) == v, (row, dev, m, f)
                        assert p.bk == bk_for(dt)
                    for bm in set(B_MAJORS) - set(row.get("b_majors", B_MAJORS)):
                        assert not row_applies(row, m, row["n"], row["k"], dt, dev, bm)
                    bm = row.get("b_majors", B_MAJORS)[0]
                    for mode in MODES:
                        assert row_applies(row, m, row["n"], row["k"], dt, dev, bm,
                                           mode) == (mode in row.get("scalings", MODES))
        lo = row["m"][0]
        if lo > 1:          # just past the row: the rules, whatever they give
            dt = DTYPES[row["dtypes"][0]]
            assert not row_applies(row, lo - 1, row["n"], row["k"], dt, row["devices"][0])


def test_block_wise_calls_pass_over_rows_of_widths_they_cannot_take():
    """A row measured per tensor in 224-column tiles names its modes: the block-wise kernel
    would run it as 128-column tiles (bench/results/fp8_block_wide_h200.json: 16384 x 8192 x
    28672 1057 TFLOP/s that way against 1216 with the rules' 256-column halves, NVIDIA
    H200), so a block-wise call takes the rules' plan there."""
    wide = [r for r in rows() if r["plan"].get("bn") == 224 and
            set(r["dtypes"]) & {"e4m3", "e5m2"}]
    assert wide
    for row in wide:
        assert "block" not in row.get("scalings", MODES), row["reason"]
        for dev in row["devices"]:
            for m in row["m"]:
                args = (m, row["n"], row["k"], e4m3, bf16)
                assert choose(*args, device=dev, scaling="tensor").bn == 224
                p = for_scaling(choose(*args, device=dev, scaling="block"), "block", e4m3,
                                bf16, one_row=64 < m <= 128)
                assert p.bn == 256 and p.kb_roll, (row["reason"], m)
                # what bench/matmul_fp8.py records as the kernel it timed
                assert describe(*args, device=dev, scaling="block").startswith(
                    "hopper 128x256x128"), (row["reason"], m)


def _plan_key(d):
    return (d["bn"], d.get("split", 1), d.get("a_rows", 0), d.get("cluster_n", 1),
            d.get("cluster", 1), d.get("one_partial", False), d.get("b_prefetch", 0),
            d.get("epi_in_ring", False), d.get("consumers", 2))


def test_rows_were_the_fastest_in_the_runs_they_cite():
    """In each cited run of a row's device that timed its plan at the row's shape, the
    plan's TFLOP/s, by the geometric mean over those runs of its ratio to every other
    candidate timed beside it, is within 1% (8-bit operands: 4%) of each. A row whose
    reason does not say it is untimed has such a run."""
    for row in rows():
        shape = (row["m"][1], row["n"], row["k"])
        timed = 0
        for dev in row["devices"]:
            p, dt = _chosen(row, dev, row["m"][1])
            want = _plan_key(dataclasses.asdict(p))
            logs = {}
            for src in row["sources"]:
                if dev.lower() not in os.path.basename(src):
                    continue
                with open(os.path.join(ROOT, src)) as f:
                    run = json.load(f)
                for r in run["rows"]:
                    if tuple(r["shape"]) != shape:
                        continue
                    tf = {}
                    for nm, v in r["results"].items():
                        if nm in r.get("plans", {}) and "tflops" in v:
                            kk = _plan_key(r["plans"][nm])
                            tf[kk] = max(tf.get(kk, 0.0), v["tflops"])
                    if want in tf:
                        timed += 1
                        for kk, t in tf.items():
                            logs.setdefault(kk, []).append(math.log(tf[want] / t))
            tol = 0.99 if dt.bytes == 2 else 0.96
            for kk, v in logs.items():
                assert math.exp(sum(v) / len(v)) >= tol, (row["reason"], dev, kk)
        assert timed or "untimed" in row["reason"], row


def test_row_plans_fit_shared_memory():
    for row in rows():
        for dev in row["devices"]:
            for name in row["dtypes"]:
                dt = DTYPES[name]
                for odt in (bf16, f16, f32):
                    p = choose(row["m"][1], row["n"], row["k"], dt, odt, device=dev)
                    assert p.smem_bytes(dt, odt) <= SMEM_PER_CTA and p.stages >= 3, (row, odt)
                    for am, bm in (("K", "K"), ("MN", "MN")) if dt.bytes == 2 else ():
                        q = for_majors(p, dt, odt, am, bm)
                        assert q.smem_bytes(dt, odt) <= SMEM_PER_CTA and q.stages >= 3


@pytest.mark.ptxas
@pytest.mark.parametrize("i", _pressure_kinds())
def test_row_kernels_assemble_without_spills(i):
    """The kinds of most register pressure (:func:`_pressure_kinds`) with the fused
    epilogue of most registers (f32 bias, gelu), through ptxas: no spills."""
    p, dt = _kinds()[i]
    try:
        r = build_hopper(p, dt, f32, bias=f32, activation="gelu",
                         scaled=dt.bytes == 1).resources()
    except Exception as e:  # no ptxas on this machine
        if "ptxas" in str(e).lower() and "not found" in str(e).lower():
            pytest.skip(str(e))
        raise
    assert r.spill_stores == 0 and r.spill_loads == 0 and r.local == 0, p


@pytest.mark.parametrize("i", _interp_cases())
def test_row_kernels_are_exact_on_the_interpreter(i):
    """Each distinct kernel of the rows at a small shape on the CPU (the split-K and
    256-column ones in the long run): one tile row of the plan's M (at most its a_rows), N
    one cluster of tiles less 8 columns (ragged), one k-block per split-K rank; integer
    inputs, bit-exact f32 output."""
    pytest.importorskip("ptxdsl.interp")
    from ptxdsl.interp import unsupported
    p, dt = _kinds()[i]
    m = min(p.a_rows or 16, 16) if p.cluster == 1 else 130
    n = p.bn * p.cluster_n - 8
    k = p.bk * p.split
    kern = build_hopper(p, dt, f32, sms=p.cluster_ctas, scaled=dt.bytes == 1)
    if {x.match.spec.opcode for x in kern.program().walk()} & set(unsupported()):
        pytest.skip("the interpreter cannot run this kernel yet")
    rng = np.random.default_rng(i)
    a = rng.integers(-2, 3, (m, k)).astype(np.float32)
    w = rng.integers(-2, 3, (n, k)).astype(np.float32)
    if dt.bytes == 2:
        args = (f32_to_bf16_bits(a), f32_to_bf16_bits(w))
    else:
        ml = pytest.importorskip("ml_dtypes")
        one = np.array([1.0], np.float32)
        args = (a.astype(ml.float8_e4m3fn), w.astype(ml.float8_e4m3fn), one, one)
    c = kern.interpret(*args, np.full((m, n), np.nan, np.float32))
    np.testing.assert_array_equal(c, a.astype(np.float64) @ w.astype(np.float64).T)


def test_rule_plans_fit_and_split_only_where_they_may():
    """Away from the rows: every plan fits shared memory with a ring of at least 3
    stages; one tile row never clusters along M; split-K takes 128-wide tiles and leaves
    each rank at least MIN_SPLIT_KBLOCKS k-blocks unless forced; a forced split is
    honoured; many rows take 128 x 128 or 128 x 256 tiles in pairs along M."""
    for m in (1, 16, 100, 128, 129, 1000, 4096):
        for n in (64, 1000, 4096, 28672):
            for k in (64, 520, 4096):
                for dt in (bf16, e4m3):
                    for odt in (bf16, f32):
                        if measured(m, n, k, dt, "H100") is not None:
                            continue
                        p = choose(m, n, k, dt, odt)
                        assert p.smem_bytes(dt, odt) <= SMEM_PER_CTA and p.stages >= 3
                        if m <= 128:
                            assert p.cluster == 1
                            if p.split > 1:
                                assert p.bn == 128
                                assert -(-k // bk_for(dt)) >= p.split * MIN_SPLIT_KBLOCKS
                        else:
                            assert p.cluster == 2 and p.bn in (128, 256) and p.split == 1
    for s in (1, 2, 4):
        assert choose(16, 4096, 4096, bf16, split=s).split == s
        assert one_row(1, 4096, 64, bf16, bf16, split=s).split == s
    with pytest.raises(ValueError, match="device"):
        choose(128, 128, 128, bf16, device="B200")
