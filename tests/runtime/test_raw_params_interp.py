"""Kernels whose ``raw_params`` name no dim, run on the interpreter: the values come by
keyword (``k.interpret(X, Y, K=3)``), checked against each parameter's type."""
from __future__ import annotations

import numpy as np
import pytest

from ptxdsl.core.errors import LaunchError
from raw_param_kernels import make_affine  # noqa: E402


affine = make_affine(tag=False)    # y[i] = x[i] * scale + shift + pair[0] - pair[1]


def test_raw_params_by_keyword():
    x = np.arange(20, dtype=np.float32)
    pair = np.array([10, 3], np.int32)
    y = affine.interpret(x, scale=0.5, shift=-2, pair=pair.tobytes())
    np.testing.assert_array_equal(y, x * 0.5 + (-2 + 10 - 3))
    y2 = np.empty_like(x)
    affine.interpret(x, y2, scale=2.0, shift=1, pair=pair)   # a numpy array is bytes-like
    np.testing.assert_array_equal(y2, x * 2 + (1 + 10 - 3))


def test_raw_params_through_a_call_with_the_interpreter(monkeypatch):
    monkeypatch.setenv("PTXDSL_INTERPRET", "1")
    x = np.ones(4, np.float32)
    y = affine(x, scale=3, shift=0, pair=bytes(8))
    np.testing.assert_array_equal(y, np.full(4, 3, np.float32))


@pytest.mark.parametrize("kw, match", [
    (dict(shift=0, pair=bytes(8)), r"raw parameter scale \(\.f32\) names no dim.*"
                                   r"affine\(\.\.\., scale=\.\.\.\)"),
    (dict(scale=1.0, shift=2 ** 31, pair=bytes(8)), r"shift \(\.s32\) takes an int in "
                                                    r"\[-2147483648, 2147483647\], got 2147483648"),
    (dict(scale=1.0, shift=True, pair=bytes(8)), "shift .* takes an int"),
    (dict(scale="1", shift=0, pair=bytes(8)), "scale .* takes a number"),
    (dict(scale=1.0, shift=0, pair=bytes(4)), r"pair \(\.b8 \[8\], 8 bytes\) takes a bytes-like "
                                              r"value of exactly 8 bytes, got bytes of 4"),
    (dict(scale=1.0, shift=0, pair=3), "got int"),
    (dict(scale=1.0, shift=0, pair=bytes(8), K=1), r"unknown keyword arguments \['K'\].*raw "
                                                   r"parameters \['scale', 'shift', 'pair'\]"),
])
def test_raw_param_errors_name_what_is_wrong(kw, match):
    with pytest.raises(LaunchError, match=match) as e:
        affine.interpret(np.ones(4, np.float32), **kw)
    assert __file__ in str(e.value)       # the caller's line


def test_jax_call_passes_raw_values_to_the_interpreter():
    jax = pytest.importorskip("jax")
    if jax.default_backend() == "gpu":
        pytest.skip("the interpreter path")
    from ptxdsl.runtime.jax_ffi import jax_call
    f = jax.jit(jax_call(affine, scale=2.0, shift=1, pair=bytes(8)))
    x = np.arange(8, dtype=np.float32)
    np.testing.assert_array_equal(np.asarray(f(x)), x * 2 + 1)
    with pytest.raises(LaunchError, match="shift .* takes an int"):
        jax_call(affine, scale=2.0, shift=0.5, pair=bytes(8))
