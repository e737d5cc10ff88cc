"""``Plan.uniform_cons``: the consumer index taken from lane 0 through ``shfl.sync.idx``
(ptxas then keeps A's wgmma descriptors in uniform registers). Checked here: the option
is off by default and names its kernels, it adds the one shuffle and nothing else, and on
the CPU interpreter (long) its outputs are bitwise those of the plan without it, exact
against float64 for integer-valued inputs, ragged M, N, K: once per kernel (the
many-row and grouped plans take it, so those kernels' own tests run it too): the dense
kernel's two consumers in a cluster, block-wise fp8; the grouped kernel's consumer cursor,
which takes its group ends through ``redux.sync`` (ragged and empty groups, an MN-major B,
clusters along N with epi_overlap)."""
from __future__ import annotations

import collections
import dataclasses
import importlib.util
import os

import ml_dtypes
import numpy as np
import pytest

from ptxdsl.core.types import bf16, e4m3, e5m2, f32, f32_to_bf16_bits
from ptxdsl.ops.matmul.config import Plan
from ptxdsl.ops.matmul.grouped import plan_for
from ptxdsl.ops.matmul.hopper import build_hopper
from ptxdsl.ops.matmul.plan import fitted

SHFL = "shfl.sync.idx.b32"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))


def _ops(ptx: str) -> collections.Counter:
    """How many of each opcode the kernel's body holds."""
    return collections.Counter(ln.split()[0] for ln in ptx.splitlines()
                               if ln.startswith("\t") and ln.split())


def test_uniform_cons_shuffles_once_and_steps_descriptors():
    """Off by default; ``_uc`` in the name; one ``shfl.sync.idx`` from lane 0 (the
    consumer index of every later use), and each stage's descriptors as stage 0's plus
    the slot's 16-byte units (``mad.wide.u32`` by A's 16 KiB / 16 and B's 8 KiB / 16)
    instead of built from its address; the plan without it has neither."""
    assert not Plan().uniform_cons and Plan(uniform_cons=True).options_tag == "_uc"
    p = Plan(bn=64, cluster=1, stages=3)
    k0 = build_hopper(p, bf16, bf16)
    k1 = build_hopper(dataclasses.replace(p, uniform_cons=True), bf16, bf16)
    assert k1.name == k0.name.replace("_c1", "_c1_uc")
    o0, o1 = _ops(k0.ptx()), _ops(k1.ptx())
    assert (o0[SHFL], o1[SHFL], o0["mad.wide.u32"]) == (0, 1, 0)
    (shfl,) = [ln for ln in k1.ptx().splitlines() if SHFL in ln]
    assert shfl.endswith(", 0, 31, 0xffffffff;")
    steps = [ln.split(",")[2].strip() for ln in k1.ptx().splitlines() if "mad.wide.u32" in ln]
    assert sorted(set(steps)) == ["1024", "512"]
    assert o1["mad.wide.u32"] == 2 * k1.ptx().count("wgmma.commit_group")
    # the shuffle replaces the per-stage masking of addresses: fewer and.b32 than before
    assert o1["and.b32"] < o0["and.b32"]


def _bf16_exact(p, m, n, k, b_major, out, sms, seed):
    rng = np.random.default_rng(seed)
    a = rng.integers(-4, 5, (m, k)).astype(np.float32)
    b = rng.integers(-4, 5, (k, n)).astype(np.float32)
    kb = f32_to_bf16_bits(b) if b_major == "MN" else np.ascontiguousarray(f32_to_bf16_bits(b.T))
    want = a.astype(np.float64) @ b.astype(np.float64)
    res = []
    for q in (p, dataclasses.replace(p, uniform_cons=True)):
        kern = build_hopper(q, bf16, out, sms=sms, b_major=b_major)
        if out == f32:
            c = kern.interpret(f32_to_bf16_bits(a), kb, np.full((m, n), np.nan, np.float32))
            np.testing.assert_array_equal(c, want)
            res.append(np.asarray(c).view(np.uint32))
        else:
            c = np.asarray(kern.interpret(f32_to_bf16_bits(a), kb)).view(np.uint16)
            np.testing.assert_array_equal(c, f32_to_bf16_bits(want.astype(np.float32)))
            res.append(c)
    np.testing.assert_array_equal(res[1], res[0])


@pytest.mark.long
@pytest.mark.parametrize("fields,m,n,k,b_major,odt,sms", [
    (dict(bn=128, cluster=2, stages=3), 250, 264, 200, "K", "f32", 2)])
def test_interpreter_uniform_cons_matches_the_plan(fields, m, n, k, b_major, odt, sms):
    """Bitwise the plain plan's outputs and exact against float64: the dense kernel's
    many-row plan (a cluster along M, ragged M, N, K; one consumer, pingpong, epi_overlap
    and split-K take no uniform_cons in any plan)."""
    _bf16_exact(Plan(**fields), m, n, k, b_major, f32 if odt == "f32" else bf16, sms,
                m + n + k)


@pytest.mark.long
def test_interpreter_uniform_cons_block_wise_fp8():
    """Block-wise fp8 with scale_a through the ring and four k-blocks an iteration (the
    plan of 4096 x 7168 x 16384), ragged: bitwise the plain plan's, exact."""
    m, n, k = 132, 300, 400
    p = fitted(Plan(bn=128, bk=128, cluster=1, kb_roll=4, smem_scales=True), e4m3, f32)
    rng = np.random.default_rng(7)
    a = rng.integers(-4, 5, (m, k)).astype(np.float32)
    w = rng.integers(-4, 5, (n, k)).astype(np.float32)
    kb = -(-k // 128)
    sa = (2.0 ** rng.integers(-3, 3, (m, kb))).astype(np.float32)
    sb = (2.0 ** rng.integers(-3, 3, (kb, -(-n // 128)))).astype(np.float32)
    want = np.zeros((m, n))
    for j in range(kb):
        ks = slice(128 * j, 128 * j + 128)
        want += (a[:, ks].astype(np.float64) @ w[:, ks].T.astype(np.float64)) \
            * sa[:, j:j + 1] * np.repeat(sb[j].astype(np.float64), 128)[:n]
    res = []
    for q in (p, dataclasses.replace(p, uniform_cons=True)):
        kern = build_hopper(q, e4m3, f32, sms=2, b_dtype=e5m2, scaled="block")
        c = kern.interpret(a.astype(ml_dtypes.float8_e4m3fn), w.astype(ml_dtypes.float8_e5m2),
                           np.ascontiguousarray(sa.T), sb, np.full((m, n), np.nan, np.float32))
        np.testing.assert_array_equal(c, want)
        res.append(np.asarray(c).view(np.uint32))
    np.testing.assert_array_equal(res[1], res[0])


REDUX = "redux.sync.min.u32"


def test_grouped_uniform_cons_reduces_the_consumer_cursor_only():
    """The grouped kernel with ``uniform_cons``: the consumer cursor's loaded group end
    and its tile count before the group through ``redux.sync.min`` (two per
    :meth:`.groups.GroupCursor.locate`; the producer's cursor, one lane's, and the tile
    count's scan have none); without it none, and the plan's PTX has no shuffle."""
    p = fitted(Plan(bn=64, cluster=1, tma_store=True), bf16, f32)
    k0 = build_hopper(p, bf16, f32, sms=4, grouped=True)
    k1 = build_hopper(dataclasses.replace(p, uniform_cons=True), bf16, f32, sms=4, grouped=True)
    o0, o1 = _ops(k0.ptx()), _ops(k1.ptx())
    assert (o0[REDUX], o0[SHFL], o1[SHFL]) == (0, 0, 1)
    assert o1[REDUX] == 2
    lines = k1.ptx().splitlines()
    loads = [i for i, ln in enumerate(lines) if "ld.global.nc.u32" in ln]
    reduced = [i for i, ln in enumerate(lines) if REDUX in ln]
    assert reduced[0] == loads[-1] + 1 and lines[reduced[0]].split()[1] == \
        lines[loads[-1]].split()[1]          # the consumer's load, the last, reduced at once
    assert all(ln.rstrip(";").endswith(", 0xffffffff") for ln in (lines[i] for i in reduced))


def _grouped_case(opts, odt, b_major, scaled, sizes, n, k, seed):
    rng = np.random.default_rng(seed)
    offs = np.cumsum(sizes).astype(np.int32)
    g, total = len(sizes), int(offs[-1]) + 3
    a = rng.integers(-4, 5, (total, k)).astype(np.float32)
    w = rng.integers(-4, 5, (g, n, k)).astype(np.float32)
    dt = e4m3 if scaled else bf16
    el = ml_dtypes.float8_e4m3fn if scaled else ml_dtypes.bfloat16
    b2 = w.reshape(g * n, k) if b_major == "K" else \
        np.ascontiguousarray(w.transpose(0, 2, 1)).reshape(g * k, n)
    args = [a.astype(el), b2.astype(el), offs]
    sa = np.ones(total, np.float32)
    sb = np.ones((g, n), np.float32)
    if scaled:
        sa = (2.0 ** rng.integers(-3, 3, total)).astype(np.float32)
        sb = (2.0 ** rng.integers(-3, 3, (g, n))).astype(np.float32)
        args += [sa, sb]
    p = fitted(dataclasses.replace(plan_for(dt, odt, n), **opts), dt, odt)
    res = []
    for q in (p, dataclasses.replace(p, uniform_cons=True)):
        kern = build_hopper(q, dt, odt, sms=3, b_major=b_major, scaled=scaled, grouped=True)
        c = np.asarray(kern.interpret(*args, np.full((total, n), np.nan, np.float32 if odt == f32
                                                     else ml_dtypes.bfloat16)))
        start = 0
        for i, end in enumerate(offs):
            want = (a[start:end].astype(np.float64) @ w[i].T.astype(np.float64)
                    * sa[start:end, None] * sb[i])
            if odt != f32:
                want = want.astype(np.float32).astype(ml_dtypes.bfloat16)
            np.testing.assert_array_equal(c[start:end].astype(np.float32),
                                          np.asarray(want).astype(np.float32))
            start = end
        assert np.isnan(c[start:].astype(np.float32)).all()
        res.append(c.view(np.uint32 if odt == f32 else np.uint16))
    np.testing.assert_array_equal(res[1], res[0])


@pytest.mark.long
@pytest.mark.parametrize("opts,odt,b_major,scaled,sizes,n,k", [
    (dict(bn=64, cluster_n=2, epi_overlap=2), "bf16", "MN", False, [0, 129, 3, 64], 72, 192)])
def test_interpreter_grouped_uniform_cons_matches_the_plan(opts, odt, b_major, scaled, sizes,
                                                            n, k):
    """The grouped kernel (its TMA store of rows inside a group, as the op's plans) over
    ragged groups with empty ones, rows past the last group left NaN: bitwise the plain
    plan's outputs, exact against float64."""
    _grouped_case(opts, f32 if odt == "f32" else bf16, b_major, scaled, sizes, n, k,
                  sum(sizes) + n)


def _lab():
    spec = importlib.util.spec_from_file_location(
        "matmul_uniform", os.path.join(ROOT, "lab", "matmul_uniform.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


SASS = """
        /*0100*/                   ULEA UR6, UR4, UR13, 0x3 ;    /* 0x0 */
        /*0110*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR6], R8 ;
        /*0120*/              @!P0 BRA 0x0300 ;
        /*0130*/                   R2UR UR21, R9 ;
        /*0140*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR20], R24 ;
        /*0150*/              @!P1 BRA 0x0100 ;
        /*0160*/                   EXIT ;
        /*0300*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR6], R8 ;
        /*0310*/              @!P0 BRA 0x0300 ;
        /*0320*/                   BRA 0x0130 ;
"""


def test_lab_counts_the_main_loop_and_pairs_the_plans():
    """The lab's SASS reading: the predicated back edge over the wgmma, not the spin
    wait's out-of-line retry (an unconditional branch back); its plans differ only in
    ``uniform_cons``."""
    lab = _lab()
    (body,) = lab.main_loops(SASS)
    c = lab.loop_counts(body)
    assert (c["instructions"], c["wgmma"], c["R2UR"], c["uniform"]) == (6, 1, 1, 1)
    for dt, m, n, k, layouts, scaled in lab.CASES:
        ps = lab.plans(dt, m, n, k, layouts[0], scaled)
        assert dataclasses.replace(ps["current"], uniform_cons=True) == ps["uc"]
        assert not ps["current"].uniform_cons
    for g, n, k, lo, hi in lab.GROUPED:     # the grouped set: the op's plan without and with uc
        ps = lab.grouped_plans("bf16", n)
        assert ps["uc"] == plan_for(bf16, bf16, n) and not ps["current"].uniform_cons
        assert dataclasses.replace(ps["current"], uniform_cons=True) == ps["uc"]
