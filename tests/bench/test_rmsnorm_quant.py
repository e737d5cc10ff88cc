"""bench/rmsnorm_quant.py's checks and "same math" contenders, on CPU tensors (ptxdsl on
the interpreter): the validation accepts right answers, refuses wrong ones, and the
torch.compile contenders compute what rms_norm_quant documents."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from bench import rmsnorm_quant as bq  # noqa: E402
from ptxdsl.ops import rms_norm, rms_norm_quant  # noqa: E402
from ptxdsl.ops.rmsnorm.quant import FP8_MAX, MIN_SCALE  # noqa: E402


def _case(m=6, n=96, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, n, generator=g) * torch.exp2(torch.randint(-4, 4, (m, 1), generator=g))
    w = torch.randn(n, generator=g) * 0.5 + 1
    return x, w


def test_constants_are_the_ops():
    assert bq.FP8_MAX == FP8_MAX and abs(bq.MIN_SCALE - MIN_SCALE) <= MIN_SCALE * 1e-7


def test_validation_accepts_both_contenders_and_refuses_wrong_answers():
    x, w = _case()
    want = bq.ref64(x, w)
    ours = rms_norm_quant(x, w, bq.EPS)
    theirs = bq.quant_math(x, w)
    assert bq.fp8_ok(ours, want) and bq.fp8_ok(theirs, want)
    q, s = ours
    assert not bq.fp8_ok((q, s * 2), want)                    # wrong scale
    flipped = q.view(torch.uint8).flip(-1).view(torch.float8_e4m3fn)
    assert not bq.fp8_ok((flipped, s), want)                  # wrong bytes
    st = (want.abs().max() / FP8_MAX).float().reshape(1)
    q2, s2 = rms_norm_quant(x, w, bq.EPS, scale=st)
    assert bq.fp8_ok((q2, s2), want, st) and bq.fp8_ok(bq.quant_math(x, w, st), want, st)
    assert not bq.fp8_ok((q2, s2), want, st * 4)


def test_the_same_math_agrees_with_the_kernel_scales():
    x, w = _case(seed=1)
    _, s = rms_norm_quant(x, w, bq.EPS)
    _, s_ref = bq.quant_math(x, w)
    torch.testing.assert_close(s, s_ref, rtol=2e-6, atol=0)


def test_residual_math_writes_back_and_offset_math():
    x, w = _case(seed=2)
    r = torch.randn_like(x)
    h = x + r
    q, s = bq.quant_res_math(x, r, w)
    assert torch.equal(r, h) and bq.fp8_ok((q, s), bq.ref64(h, w))
    y = bq.offset_math(x, w)
    torch.testing.assert_close(y.double(), bq.ref64(x, w, bq.OFFSET), rtol=0, atol=1e-5)
    torch.testing.assert_close(rms_norm(x, w, bq.EPS, offset=bq.OFFSET), y, rtol=0, atol=1e-5)


def test_unknown_kinds_are_refused():
    with pytest.raises(SystemExit):
        bq.main(["--kinds", "quant,nope"])
