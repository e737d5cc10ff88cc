"""8-bit floats (e4m3, e5m2): the value of every code, and rounding to a code.

One place for the formats, read by tracing (a register's float initialiser), the
interpreter (cvt, wgmma, TMA of fp8 data) and the tests.
"""
from __future__ import annotations

import numpy as np


def _fp8_values(name: str) -> np.ndarray:
    """The value of every code 0..255 of e4m3 or e5m2 (NaN for NaN codes)."""
    code = np.arange(256)
    sign = np.where(code >> 7, -1.0, 1.0)
    if name == "e4m3":
        e, m, bias = (code >> 3) & 15, code & 7, 7
        special = (e == 15) & (m == 7)
        val = np.where(e == 0, m / 8 * 2.0 ** -6, (1 + m / 8) * 2.0 ** (e - bias))
        val = np.where(special, np.nan, val)
    else:
        e, m, bias = (code >> 2) & 31, code & 3, 15
        val = np.where(e == 0, m / 4 * 2.0 ** -14, (1 + m / 4) * 2.0 ** (e - bias))
        val = np.where(e == 31, np.where(m == 0, np.inf, np.nan), val)
    return sign * val


FP8_VALUES = {n: _fp8_values(n) for n in ("e4m3", "e5m2")}
_FP8_MAXCODE = {"e4m3": 0x7E, "e5m2": 0x7B}   # largest finite: 448 and 57344


def fp8_encode(x, name: str, relu: bool = False) -> np.ndarray:
    """float64 -> codes, rounded to nearest even and saturated to the finite range."""
    x = np.asarray(x, np.float64)
    table = FP8_VALUES[name][: _FP8_MAXCODE[name] + 1]
    mag = np.abs(np.nan_to_num(x, nan=0.0, posinf=np.inf, neginf=-np.inf))
    mag = np.minimum(mag, table[-1])
    hi = np.clip(np.searchsorted(table, mag), 0, len(table) - 1)
    lo = np.maximum(hi - 1, 0)
    dlo, dhi = mag - table[lo], table[hi] - mag
    pick = np.where(dlo < dhi, lo, np.where(dhi < dlo, hi, np.where(lo % 2 == 0, lo, hi)))
    code = pick.astype(np.uint8) | np.where(np.signbit(x), np.uint8(0x80), np.uint8(0))
    if relu:
        code = np.where(np.signbit(x) | (x == 0), np.uint8(0), code)
    return np.where(np.isnan(x), np.uint8(0x7F), code).astype(np.uint8)


def fp8_decode(codes, name: str) -> np.ndarray:
    return FP8_VALUES[name][np.asarray(codes).astype(np.int64) & 0xFF]


__all__ = ["FP8_VALUES", "fp8_encode", "fp8_decode"]
