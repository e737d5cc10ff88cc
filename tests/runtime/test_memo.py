"""The ops' memo (ptxdsl/runtime/memo.py) on a fake GPU with the real (CPU) torch.

A small "op" (vector add, with an optional output tensor and a plain value) records
what its general path launched; its repeat calls must go through the memo's guarded
entry (``hot``) or its key (``lookup``) with the call's own pointers, and fall back to
the general path where the signature, the plain values, the pointers' alignment or the
grad mode differ.
"""
from __future__ import annotations

import numpy as np
import pytest

from launch_helpers import vadd_on
from runtime_fakes import cpu_torch_as_cuda
from ptxdsl.runtime import torch_private
from ptxdsl.runtime.memo import Launch, Memo, Recording, output, tensor, value


@pytest.fixture
def real_torch(monkeypatch):
    pytest.importorskip("torch")
    return cpu_torch_as_cuda(monkeypatch)


@pytest.fixture
def op(gpu, real_torch):
    """``add(a, b, out=None, tag="t") -> c`` (or ``(c, tag)`` for tag "pair"), its memo
    and the list of general-path calls."""
    torch = real_torch
    k = vadd_on(gpu)
    memo = Memo("add", 3, 1)
    general = []

    def add(a, b, out=None, tag="t"):
        got = memo.hot(a, b, out, tag)
        if got is None:
            got = memo.lookup(a, b, out, tag)
        if got is not None:
            return got
        general.append((tuple(a.shape), tag))
        c = out if out is not None else torch.empty_like(a)
        k(a, b, c)
        c_ = tensor(2) if out is not None else output(0)
        memo.record((a, b, out, tag), Recording(
            (Launch(k, (a, b, c), (tensor(0), tensor(1), c_)),),
            () if out is not None else (c,), (c_, value(0)) if tag == "pair" else c_))
        return (c, tag) if tag == "pair" else c
    return add, memo, general


def _guards(torch):
    if torch_private.hooks(torch).guard((torch.zeros(1),)) is torch_private.never:
        pytest.skip("this torch has no usable TensorGuards")


def test_repeat_calls_hit_the_guard_with_their_own_pointers(gpu, real_torch, op):
    torch = real_torch
    _guards(torch)
    add, memo, general = op
    a, b = torch.randn(100), torch.randn(100)
    assert torch.equal(add(a, b), a + b) and len(general) == 1 and len(memo) == 1
    hot = memo.hot
    for _ in range(3):
        x, y = torch.randn(100), torch.randn(100)
        c = add(x, y)
        assert torch.equal(c, x + y)
        assert gpu.cu.launches[-1]["params"][:3] == [x.data_ptr(), y.data_ptr(), c.data_ptr()]
    assert len(general) == 1 and memo.hot is hot
    entry = next(iter(memo.entries.values()))
    assert "GUARD(t0, t1)" in entry.source and "t2 is not None" in entry.source


def test_other_signatures_values_and_forms_miss_then_record(gpu, real_torch, op):
    torch = real_torch
    add, memo, general = op
    a, b = torch.randn(100), torch.randn(100)
    add(a, b)
    add(torch.randn(50), torch.randn(50))                   # another shape
    add(a, b, tag="u")                                      # another plain value
    out = torch.empty(100)
    assert add(a, b, out) is out and torch.equal(out, a + b)  # another form (out given)
    c, tag = add(a, b, tag="pair")                          # a value in the result
    assert tag == "pair" and torch.equal(c, a + b)
    assert len(general) == 5 and len(memo) == 5
    # each signature again: no general path (the last one by its guard, the others by key)
    for args, kw in [((a, b), {}), ((torch.randn(50), torch.randn(50)), {}),
                     ((a, b), {"tag": "u"}), ((a, b, out), {}), ((a, b), {"tag": "pair"})]:
        got = add(*args, **kw)
        want = args[0] + args[1]
        assert torch.equal(got[0] if kw.get("tag") == "pair" else got, want)
    assert add(a, b, out) is out
    assert len(general) == 5
    # the one found by key became the hot entry: a repeat of it needs no key
    add(torch.randn(50), torch.randn(50))
    assert memo.hot(torch.randn(50), torch.randn(50), None, "t") is not None


def test_an_unaligned_pointer_or_grad_mode_falls_back(gpu, real_torch, op):
    torch = real_torch
    _guards(torch)
    add, memo, general = op
    flat = torch.randn(101)
    assert flat.data_ptr() % 16 == 0
    a, b = flat[:100], torch.randn(100)
    add(a, b)
    shifted = flat[1:]                          # same shape and strides, 4 bytes on
    assert memo.hot(shifted, b, None, "t") is None          # the guard passes, run declines
    assert memo.lookup(shifted, b, None, "t") is None       # another key
    assert torch.equal(add(shifted, b), shifted + b) and len(general) == 2
    # recorded under no_grad with tensors that require grad: only under no_grad again
    w = torch.randn(100, requires_grad=True)
    with torch.no_grad():
        add(w, b)
        assert len(general) == 3
        add(torch.randn(100, requires_grad=True), b)
        assert len(general) == 3
    assert memo.hot(w, b, None, "t") is None and memo.lookup(w, b, None, "t") is None


def test_not_torch_tensors_are_not_recorded(real_torch):
    memo = Memo("m", 2, 0)
    x = np.zeros(4, np.float32)
    assert memo.lookup(x, x) is None and memo.hot(x, x) is None
    assert memo.record((x, x), Recording(())) is None and len(memo) == 0


def test_the_memo_is_bounded_and_clearable(gpu, real_torch, op):
    torch = real_torch
    add, memo, general = op
    memo.limit = 2
    for n in (10, 20, 30):
        add(torch.randn(n), torch.randn(n))
    assert len(memo) == 2
    add(torch.randn(10), torch.randn(10))      # the oldest was dropped: general path again
    assert len(general) == 4
    memo.clear()
    assert len(memo) == 0 and memo.hot(torch.randn(10), torch.randn(10), None, "t") is None
