"""The RMSNorm torch glue without a GPU: autograd wiring (ops/rmsnorm/autograd.py), the
fast path's signature keys, guard and dispatch (ops/rmsnorm/fast.py, api.py), the torch
hooks (runtime/torch_private.py) and the bounded caches, on CPU tensors.

The kernels themselves are stood in for by float64 reference functions here; tests/gpu
runs the real ones. Skips without torch (an optional dependency), never because ptxdsl
itself fails to import.
"""
from __future__ import annotations

import pytest

from ptxdsl.core.errors import LaunchError
from ptxdsl.ops import rmsnorm
from ptxdsl.ops.rmsnorm import api, fast
from ptxdsl.runtime import torch_private
from ptxdsl.runtime.fastpath import Signatures

torch = pytest.importorskip("torch")

from ptxdsl.ops.rmsnorm import autograd  # noqa: E402  (imports torch)

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

    def forward(frame, x, weight, eps, residual, want_rstd, out, **kw):
        calls.append(("forward", want_rstd))
        return ref_forward(x, weight, eps)

    def backward(dy, x, weight, rstd, offset=0.0):
        calls.append(("backward", tuple(dy.shape)))
        with torch.enable_grad():  # autograd runs backward functions with grad off
            xr = x.detach().double().requires_grad_()
            wr = weight.detach().double().requires_grad_()
            y = xr * torch.rsqrt((xr * xr).mean(-1, keepdim=True) + EPS) * wr
            dx, dw = torch.autograd.grad(y, (xr, wr), dy.double())
        return dx.to(x.dtype), dw.to(weight.dtype)

    monkeypatch.setattr(autograd, "_forward", forward)
    monkeypatch.setattr(autograd, "rms_norm_backward", backward)
    fast.clear()
    yield calls
    fast.clear()


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


# ---------------------------------------------------------------- keys
def test_forward_key_is_the_signature_not_the_data():
    x, w = torch.randn(4, 64), torch.randn(64)
    k = fast.fwd_key(x, w, EPS, None, False, None)
    assert k == fast.fwd_key(torch.randn(4, 64), torch.randn(64), EPS, None, False, None)
    others = [fast.fwd_key(torch.randn(4, 32), torch.randn(32), EPS, None, False, None),
              fast.fwd_key(torch.randn(64, 4).t(), w, EPS, None, False, None),
              fast.fwd_key(x.double(), w, EPS, None, False, None),
              fast.fwd_key(x, w.half(), EPS, None, False, None),
              fast.fwd_key(x, w, 1e-5, None, False, None),
              fast.fwd_key(x, w, EPS, None, True, None),
              fast.fwd_key(x, w, EPS, torch.randn(4, 64), False, None),
              fast.fwd_key(x.view(-1)[1:].view(-1)[:252].view(4, 63), w[:63], EPS, None,
                           False, None)]
    assert all(o != k for o in others)
    with pytest.raises((AttributeError, TypeError)):
        import numpy as np
        fast.fwd_key(np.ones((4, 64), np.float32), np.ones(64, np.float32), EPS, None, False,
                     None)


def test_backward_key_sees_every_operand():
    x, dy, w, r = torch.randn(4, 64), torch.randn(4, 64), torch.randn(64), torch.randn(4)
    k = fast.bwd_key(dy, x, w, r)
    assert k == fast.bwd_key(torch.randn(4, 64), torch.randn(4, 64), torch.randn(64),
                             torch.randn(4))
    assert k != fast.bwd_key(dy.half(), x, w, r) and k != fast.bwd_key(dy, x, w, r.double())


# ---------------------------------------------------------------- dispatch
def test_a_recorded_signature_is_launched_without_the_general_path(monkeypatch):
    fast.clear()
    x, w = torch.randn(4, 64), torch.randn(64)
    sentinel = torch.zeros(1)

    def run(x_, w_, residual, out):
        return sentinel, None
    run.hot = None
    fast.FORWARD.add(fast.fwd_key(x, w, EPS, None, False, None), run)

    def general(*a, **kw):
        raise AssertionError("the general path ran")
    monkeypatch.setattr(api, "Frame", general)
    assert rmsnorm.rms_norm(torch.randn(4, 64), torch.randn(64), EPS) is sentinel
    # tensors that require grad, under no_grad: looked up once, by _forward
    monkeypatch.setattr(api, "_forward_general", general)
    cuda_frame = type("F", (), {"kind": "torch", "cuda_torch": True})
    monkeypatch.setattr(api, "Frame", lambda x, op: cuda_frame())
    with torch.no_grad():
        y = rmsnorm.rms_norm(torch.randn(4, 64, requires_grad=True), torch.randn(64), EPS)
    assert y is sentinel
    fast.clear()
    assert len(fast.FORWARD) == 0 and fast.FORWARD.hot is fast.NO_HOT


def test_the_plain_form_is_found_by_the_guard_first(monkeypatch):
    fast.clear()
    x, w = torch.randn(4, 64), torch.randn(64)
    guard = torch_private.hooks(torch).guard((x, w))
    if guard is torch_private.never:
        pytest.skip("this torch has no usable TensorGuards")
    sentinel = torch.zeros(1)
    fast.FORWARD.hot = fast.Hot(guard, EPS, lambda x_, w_: sentinel)
    monkeypatch.setattr(fast, "fwd_key", lambda *a: pytest.fail("the key was built"))
    assert rmsnorm.rms_norm(torch.randn(4, 64), torch.randn(64), EPS) is sentinel
    monkeypatch.undo()
    monkeypatch.setattr(api, "Frame", lambda *a: pytest.fail("general path") or None)
    fast.FORWARD.hot = fast.Hot(guard, EPS, lambda x_, w_: sentinel)
    with pytest.raises(pytest.fail.Exception, match="general path"):
        rmsnorm.rms_norm(torch.randn(4, 32), torch.randn(32), EPS)  # another signature
    with pytest.raises(pytest.fail.Exception, match="general path"):
        rmsnorm.rms_norm(torch.randn(4, 64), torch.randn(64), 1e-5)  # another eps
    fast.clear()


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
def test_offset_is_part_of_both_keys_and_of_the_hot_guard(monkeypatch):
    x, dy, w, r = torch.randn(4, 64), torch.randn(4, 64), torch.randn(64), torch.randn(4)
    assert fast.fwd_key(x, w, EPS, None, False, None) != \
        fast.fwd_key(x, w, EPS, None, False, None, 1.0)
    assert fast.fwd_key(x, w, EPS, None, False, None) == \
        fast.fwd_key(x, w, EPS, None, False, None, 0.0)
    assert fast.bwd_key(dy, x, w, r) != fast.bwd_key(dy, x, w, r, 1.0)
    fast.clear()
    guard = torch_private.hooks(torch).guard((x, w))
    if guard is torch_private.never:
        pytest.skip("this torch has no usable TensorGuards")
    sentinel = torch.zeros(1)
    fast.FORWARD.hot = fast.Hot(guard, EPS, lambda x_, w_: sentinel, 1.0)
    assert rmsnorm.rms_norm(torch.randn(4, 64), torch.randn(64), EPS, offset=1.0) is sentinel
    monkeypatch.setattr(api, "Frame", lambda *a: pytest.fail("general path") or None)
    with pytest.raises(pytest.fail.Exception, match="general path"):
        rmsnorm.rms_norm(torch.randn(4, 64), torch.randn(64), EPS)  # offset 0, not 1
    fast.clear()


def test_offset_autograd_on_the_interpreter():
    """CPU tensors run the real kernels on the interpreter: y, dx and dw with offset 1
    against float64 autograd of x * rstd * (1 + w); the module and the custom op agree."""
    fast.clear()
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
    fast.clear()
