"""Issue #48's ops cases on the CPU interpreter: out= views written through, NaN kept by
ReLU and the quant scale, argument errors naming the argument and the caller's line."""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from ptxdsl.core.errors import LaunchError, PtxdslError
from ptxdsl.ops import matmul, rms_norm, rms_norm_backward, rms_norm_quant

HERE = __file__


def _ref(x, w, eps=1e-6):
    x64 = x.astype(np.float64)
    return x64 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + eps) * w


def _xw(shape=(4, 3, 64), seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape).astype(np.float32), \
        rng.standard_normal(shape[-1]).astype(np.float32)


# ------------------------------------------------------------------ out= views
@pytest.mark.parametrize("make", [
    lambda: np.zeros((3, 4, 64), np.float32).transpose(1, 0, 2),     # permuted leading dims
    lambda: np.zeros((4, 3, 128), np.float32)[..., ::2],             # strided last dim
    lambda: np.zeros((4, 6, 64), np.float32)[:, ::2],                # strided rows
], ids=["permuted", "strided-inner", "strided-rows"])
def test_rms_norm_out_view_is_written_through(make):
    x, w = _xw()
    out = make()
    got = rms_norm(x, w, out=out)
    assert got is out
    np.testing.assert_allclose(out, _ref(x, w), rtol=2e-5, atol=2e-5)


def test_rms_norm_out_view_torch_cpu():
    torch = pytest.importorskip("torch")
    if not hasattr(torch, "randn") or not hasattr(torch.Tensor, "copy_"):
        pytest.skip("the fake torch")
    x, w = _xw()
    out = torch.zeros(3, 4, 64).permute(1, 0, 2)
    rms_norm(torch.from_numpy(x), torch.from_numpy(w), out=out)
    np.testing.assert_allclose(out.numpy(), _ref(x, w), rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("out, what", [
    (np.zeros((4, 3, 32), np.float32), "out must have x's shape"),
    (np.zeros((4, 3, 64), np.float16), "out must have x's shape"),
    ([0.0] * 64, "out must be a numpy array"),
])
def test_rms_norm_out_wrong_is_refused(out, what):
    x, w = _xw()
    with pytest.raises(LaunchError, match=what) as e:
        rms_norm(x, w, out=out)
    assert e.value.loc is not None and e.value.loc.file == HERE


# ------------------------------------------------------------------ NaN
def test_matmul_relu_keeps_nan():
    a = np.ones((4, 8), np.float16)
    a[1, 2] = np.nan
    b = np.ones((8, 4), np.float16)
    b[0, 3] = -1.0
    y = matmul(a, b, activation="relu")
    assert np.isnan(y[1]).all()
    assert (y[0] == [8, 8, 8, 6]).all()
    c = matmul(-np.ones((2, 8), np.float16), b, activation="relu")
    assert (c == 0).all() and not np.signbit(c).any()


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_rms_norm_quant_scale_of_a_nan_or_inf_row_is_nan(bad):
    x, w = _xw((3, 64))
    x[1, 5] = bad
    _, scale = rms_norm_quant(x, w)
    assert np.isnan(scale[1, 0])
    assert np.isfinite(scale[[0, 2], 0]).all()


# ------------------------------------------------------------------ argument errors
def _raises_here(fn, *what):
    with pytest.raises(PtxdslError) as e:
        fn()
    msg = str(e.value)
    assert e.value.loc is not None and e.value.loc.file == HERE, msg
    for w in what:
        assert w in msg, msg
    return e.value


def test_rms_norm_argument_errors_name_the_argument_at_the_callers_line():
    x, w = _xw((4, 64))
    _raises_here(lambda: rms_norm(x, w, residual=x.astype(np.float64)), "residual", "float64")
    _raises_here(lambda: rms_norm(x, w[:10]), "weight", "(64,)")
    _raises_here(lambda: rms_norm(x, None), "weight", "NoneType")
    _raises_here(lambda: rms_norm(x, list(w)), "weight", "list")
    _raises_here(lambda: rms_norm(np.float32(1.0), w), "x")
    _raises_here(lambda: rms_norm(np.array(1.0, np.float32), w), "x")
    _raises_here(lambda: rms_norm(x.astype(np.float64), w), "x", "float64")
    _raises_here(lambda: rms_norm_quant(x, w, residual=x.astype(np.float64)), "residual")
    _raises_here(lambda: rms_norm_quant(x, w.astype(np.int32)), "weight")


@pytest.mark.parametrize("eps", [-1e-6, math.nan, math.inf, None, "1e-6"])
def test_rms_norm_eps_is_checked(eps):
    x, w = _xw((2, 64))
    _raises_here(lambda: rms_norm(x, w, eps), "eps")
    _raises_here(lambda: rms_norm_quant(x, w, eps), "eps")


def test_rms_norm_backward_argument_errors():
    x, w = _xw((4, 64))
    rstd = np.ones(4, np.float32)
    _raises_here(lambda: rms_norm_backward(x, x, w, None), "rstd", "NoneType")
    _raises_here(lambda: rms_norm_backward(x, x, w, [1.0] * 4), "rstd")
    _raises_here(lambda: rms_norm_backward(x[:2], x, w, rstd), "dy")
    _raises_here(lambda: rms_norm_backward(x, x, None, rstd), "weight")
    _raises_here(lambda: rms_norm_backward(x, x, w, rstd.astype(np.float64)), "rstd")


def test_matmul_out_views_are_written_or_refused():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((8, 16)).astype(np.float16)
    b = rng.standard_normal((16, 8)).astype(np.float16)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    rows = np.zeros((8, 16), np.float16)[:, :8]
    assert matmul(a, b, out=rows) is rows
    np.testing.assert_allclose(rows, ref, atol=1e-2, rtol=1e-2)
    for bad in (np.zeros((8, 16), np.float16)[:, ::2], np.zeros((8, 8), np.float16).T):
        _raises_here(lambda: matmul(a, b, out=bad), "out needs unit inner stride")


def test_matmul_argument_errors_name_the_argument():
    a = np.ones((8, 16), np.float16)
    b = np.ones((16, 8), np.float16)
    _raises_here(lambda: matmul(a, b, activation=["relu"]), "activation")
    _raises_here(lambda: matmul(None, b), "a must be")
    _raises_here(lambda: matmul(a, None), "b must be")
    _raises_here(lambda: matmul(a, b, bias=[0.0] * 8), "bias must be")


def test_torch_weight_errors_and_module_arguments():
    torch = pytest.importorskip("torch")
    if not hasattr(torch, "nn"):
        pytest.skip("the fake torch")
    from ptxdsl.ops import RMSNorm
    x, w = _xw((4, 64))
    _raises_here(lambda: rms_norm(torch.from_numpy(x), None), "weight", "NoneType")
    _raises_here(lambda: rms_norm(torch.from_numpy(x), w), "weight", "torch")
    _raises_here(lambda: RMSNorm(-1), "dim")
    _raises_here(lambda: RMSNorm(64, eps=None), "eps")
