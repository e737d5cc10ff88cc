"""The RMSNorm torch glue without a GPU: autograd wiring (ops/rmsnorm/autograd.py), the
dispatch through the op's memo (api.py; the memo itself: test_runtime_memo.py), the
torch hooks (runtime/torch_private.py) and the bounded caches, on CPU tensors.

The kernels themselves are stood in for by float64 reference functions here; tests/gpu
runs the real ones. Skips without torch (an optional dependency), never because ptxdsl
itself fails to import.
"""
from __future__ import annotations

import pytest

from ptxdsl.core.errors import LaunchError
from ptxdsl.ops import rmsnorm
from ptxdsl.ops.rmsnorm import api
from ptxdsl.runtime import torch_private
from ptxdsl.runtime.fastpath import Signatures

torch = pytest.importorskip("torch")


EPS = 1e-6


def ref_forward(x, w, eps=EPS):
    x64 = x.detach().double()
    rstd = torch.rsqrt((x64 * x64).mean(-1) + eps)
    return (x64 * rstd[..., None] * w.detach().double()).to(x.dtype), rstd.float()


@pytest.fixture
def stand_ins(monkeypatch):
    """The autograd Function's forward and backward kernels replaced by references;
    returns the list of calls made."""
    calls = []

    def forward(x, weight, eps, offset=0.0):
        calls.append(("forward", True))
        return ref_forward(x, weight, eps)

    def backward(dy, x, weight, rstd, offset=0.0):
        calls.append(("backward", tuple(dy.shape)))
        with torch.enable_grad():  # autograd runs backward functions with grad off
            xr = x.detach().double().requires_grad_()
            wr = weight.detach().double().requires_grad_()
            y = xr * torch.rsqrt((xr * xr).mean(-1, keepdim=True) + EPS) * wr
            dx, dw = torch.autograd.grad(y, (xr, wr), dy.double())
        return dx.to(x.dtype), dw.to(weight.dtype)

    monkeypatch.setattr(api, "forward", forward)
    monkeypatch.setattr(api, "rms_norm_backward", backward)
    api.clear()
    yield calls
    api.clear()


def test_grad_goes_through_the_autograd_function(stand_ins):
    x = torch.randn(5, 16, dtype=torch.float64, requires_grad=True)
    w = torch.randn(16, dtype=torch.float64, requires_grad=True)
    y = rmsnorm.rms_norm(x, w, EPS)
    assert y.grad_fn is not None and type(y.grad_fn).__name__.startswith("_RMSNormFn")
    g = torch.randn_like(y)
    y.backward(g)
    assert stand_ins == [("forward", True), ("backward", (5, 16))]
    xr, wr = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    yr = xr * torch.rsqrt((xr * xr).mean(-1, keepdim=True) + EPS) * wr
    yr.backward(g)
    torch.testing.assert_close(x.grad, xr.grad)
    torch.testing.assert_close(w.grad, wr.grad)


def test_return_rstd_under_grad_and_the_module(stand_ins):
    x = torch.randn(3, 8, requires_grad=True)
    m = rmsnorm.RMSNorm(8, eps=EPS)
    assert isinstance(m, torch.nn.Module) and m.weight.shape == (8,) and "eps" in repr(m)
    y = m(x)
    y.sum().backward()
    assert m.weight.grad is not None and x.grad is not None
    y2, rstd = rmsnorm.rms_norm(x, m.weight, EPS, return_rstd=True)
    torch.testing.assert_close(rstd, ref_forward(x, m.weight)[1])


def test_in_place_forms_refuse_grad(stand_ins):
    x = torch.randn(2, 8, requires_grad=True)
    w = torch.ones(8)
    with pytest.raises(LaunchError, match="not differentiable"):
        rmsnorm.rms_norm(x, w, residual=torch.zeros(2, 8))
    with pytest.raises(LaunchError, match="not differentiable"):
        rmsnorm.rms_norm(x, w, out=torch.empty(2, 8))
    assert stand_ins == []


# ---------------------------------------------------------------- dispatch
def _fail(*a, **kw):
    raise AssertionError("the general path ran")


def test_a_memo_hit_is_returned_without_the_general_path(monkeypatch):
    """The call's arguments reach the memo in its slot order (x, weight, residual, out;
    eps, offset, return_rstd): its hot entry first, then its key."""
    import types
    sentinel = torch.zeros(1)
    seen = []

    def memo(hot, key):
        return types.SimpleNamespace(
            hot=lambda *a: seen.append(("hot", a)) or (sentinel if hot else None),
            lookup=lambda *a: seen.append(("key", a)) or (sentinel if key else None))
    monkeypatch.setattr(api, "Frame", _fail)
    monkeypatch.setattr(api, "FORWARD", memo(True, False))
    x, w, r = torch.randn(4, 64), torch.randn(64), torch.randn(4, 64)
    assert rmsnorm.rms_norm(x, w, EPS, offset=1.0, residual=r) is sentinel
    assert seen == [("hot", (x, w, r, None, EPS, 1.0, False))]
    monkeypatch.setattr(api, "FORWARD", memo(False, True))
    assert rmsnorm.rms_norm(x, w, EPS, return_rstd=True) is sentinel
    assert seen[-2:] == [("hot", (x, w, None, None, EPS, 0.0, True)),
                         ("key", (x, w, None, None, EPS, 0.0, True))]
    # the autograd Function's forward and the custom op ask for (y, rstd): want_rstd True
    assert api.forward(x, w, EPS) is sentinel
    assert seen[-1] == ("key", (x, w, None, None, EPS, 0.0, True))
    monkeypatch.setattr(api, "BACKWARD", memo(True, False))
    dy, rs = torch.randn(4, 64), torch.randn(4)
    assert rmsnorm.rms_norm_backward(dy, x, w, rs, offset=1.0) is sentinel
    assert seen[-1] == ("hot", (dy, x, w, rs, 1.0))
    monkeypatch.setattr(api, "FORWARD", memo(False, False))
    with pytest.raises(AssertionError, match="general path"):
        rmsnorm.rms_norm(x, w, EPS)


def test_cpu_tensors_are_never_recorded():
    """CPU tensors run on the interpreter; only CUDA tensors' calls are recorded."""
    api.clear()
    x, w = torch.randn(2, 40), torch.randn(40)
    rmsnorm.rms_norm(x, w, EPS)
    assert len(api.FORWARD) == 0 and api.FORWARD.lookup(x, w, None, None, EPS, 0.0,
                                                        False) is None
    api.clear()


# ---------------------------------------------------------------- torch hooks and caches
def test_hooks_guard_checks_the_signature_and_the_switch(monkeypatch):
    torch_private.HOOKS.clear()
    x, w = torch.randn(4, 64), torch.randn(64)
    h = torch_private.hooks(torch)
    assert torch_private.hooks(torch) is h  # cached
    g = h.guard((x, w))
    if g is not torch_private.never:
        assert g(torch.randn(4, 64), torch.randn(64))
        assert not g(torch.randn(64, 4).t(), torch.randn(64))      # strides
        assert not g(torch.randn(4, 64).double(), torch.randn(64))  # dtype
        assert not g(torch.randn(4, 64, requires_grad=True), torch.randn(64))
    monkeypatch.setenv("PTXDSL_TORCH_PRIVATE", "0")
    off = torch_private.hooks(torch)
    assert off is not h and off.guard((x, w)) is torch_private.never
    assert callable(off.raw_stream) and callable(off.current_device) and callable(off.capturing)
    monkeypatch.delenv("PTXDSL_TORCH_PRIVATE")
    torch_private.HOOKS.clear()


def test_signatures_are_bounded_and_clearable():
    s = Signatures(hot="none", limit=3)
    for i in range(5):
        assert s.add(i, f"e{i}") == f"e{i}"
    assert list(s.entries) == [2, 3, 4] and len(s) == 3
    assert s.add(4, "other") == "e4"  # the first entry of a key stays
    s.clear(hot="none")
    assert len(s) == 0 and s.hot == "none"


def test_kernel_cache_is_bounded_and_clearable():
    from ptxdsl.ops._common.kernels import KernelCache
    c = KernelCache(limit=2)
    built = []
    for k in ("a", "b", "c", "a"):
        c.get((k,), lambda k=k: built.append(k) or k)
    assert built == ["a", "b", "c", "a"] and len(c) == 2
    c.clear()
    assert len(c) == 0


# ---------------------------------------------------------------- Gemma's offset
def test_offset_autograd_on_the_interpreter():
    """CPU tensors run the real kernels on the interpreter: y, dx and dw with offset 1
    against float64 autograd of x * rstd * (1 + w); the module and the custom op agree."""
    api.clear()
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 40, generator=g).requires_grad_()
    w = (torch.randn(40, generator=g) * 0.1).requires_grad_()
    y = rmsnorm.rms_norm(x, w, EPS, offset=1.0)
    dy = torch.randn(3, 40, generator=g)
    y.backward(dy)
    xr, wr = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    yr = xr * torch.rsqrt((xr * xr).mean(-1, keepdim=True) + EPS) * (1.0 + wr)
    yr.backward(dy.double())
    torch.testing.assert_close(y.detach().double(), yr.detach(), rtol=0, atol=1e-6)
    torch.testing.assert_close(x.grad.double(), xr.grad, rtol=0, atol=1e-5)
    torch.testing.assert_close(w.grad.double(), wr.grad, rtol=0, atol=1e-5)
    m = rmsnorm.RMSNorm(40, eps=EPS, offset=1.0)
    assert "offset=1.0" in repr(m) and float(m.weight.detach().abs().sum()) == 0.0  # Gemma's init
    with torch.no_grad():
        m.weight.copy_(w)
        y_op, _ = torch.ops.ptxdsl.rms_norm(x.detach(), w.detach(), EPS, 1.0)
        torch.testing.assert_close(m(x.detach()), y.detach(), rtol=0, atol=0)
    torch.testing.assert_close(y_op, y.detach(), rtol=0, atol=0)
    api.clear()
