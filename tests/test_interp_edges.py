"""Interpreter arithmetic at the edges: the fixes of issue 15 (CPU, exact expectations)."""
from __future__ import annotations

import numpy as np
import pytest

from ptxdsl.interp import fround as fr
from test_interp_util import run_op


@pytest.fixture(autouse=True)
def _quiet_numpy():
    with np.errstate(all="ignore"):
        yield


F64 = fr.FMTS["f64"]


@pytest.mark.parametrize("mode", ["rn", "rz", "rm", "rp"])
@pytest.mark.parametrize("c,want", [(-np.inf, -np.inf), (np.inf, np.inf)])
def test_fma_f64_finite_overflowing_product_plus_infinity(mode, c, want):
    a, b = np.array([1e308]), np.array([10.0])
    got = fr.fma(a, b, np.array([c]), mode, F64).view(np.float64)
    assert got[0] == want


@pytest.mark.parametrize("chain", ["fma.rn.f64", "mad.rn.f64", "fma.rz.f64", "mad.rm.f64"])
def test_fma_and_mad_f64_through_the_interpreter(chain):
    a = np.array([1e308, -1e308, 1e308, np.inf, 0.0, np.nan])
    b = np.array([10.0, 10.0, 10.0, 0.0, np.inf, 1.0])
    c = np.array([-np.inf, np.inf, 1.0, 1.0, 1.0, -np.inf])
    got = run_op(chain, ["f64"] * 3, "f64", a, b, c)
    assert got[0] == -np.inf and got[1] == np.inf
    # a finite overflow without an infinite addend still overflows by the rounding mode
    mode = chain.split(".")[1]
    assert got[2] == (np.inf if mode in ("rn", "rp") else np.finfo(np.float64).max)
    assert np.isnan(got[3]) and np.isnan(got[4]) and np.isnan(got[5])  # inf*0, NaN


@pytest.mark.parametrize("mode,src,want", [
    ("rz", 0x3F801FFF, 0x3F800000),   # truncation
    ("rn", 0x3F801FFF, 0x3F802000),   # above the half: up
    ("rn", 0x3F801000, 0x3F800000),   # tie, even below: down
    ("rn", 0x3F803000, 0x3F804000),   # tie, odd below: up to even
    ("rna", 0x3F801000, 0x3F802000),  # tie: away from zero
    ("rz", 0xBF801FFF, 0xBF800000),   # negative truncates toward zero
    ("rn", 0xBF801FFF, 0xBF802000),
    ("rz", 0x7F7FFFFF, 0x7F7FE000),   # rz never overflows
    ("rn", 0x7F7FFFFF, 0x7F800000),
    ("rz", 0x7F800000, 0x7F800000),   # inf stays
    ("rn", 0x00001FFF, 0x00002000),   # subnormal
    ("rz", 0x00001FFF, 0x00000000),
])
def test_cvt_tf32_rounding(mode, src, want):
    x = np.array([src], np.uint32).view(np.float32)
    got = run_op(f"cvt.{mode}.tf32.f32", ["f32"], "b32", x)
    bits = int(np.asarray(got).view(np.uint32)[0])
    assert bits == want, hex(bits)
