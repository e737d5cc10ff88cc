"""Autograd through ``ptxdsl.ops.attention`` on torch CPU tensors (the interpreter runs the
kernels): gradients against the float64 reference, the custom ops' fake impls, and a
``torch.compile(fullgraph=True)`` training step."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import ptxdsl.ops as ops  # noqa: E402
from ptxdsl.ops.attention import attention_backward_reference  # noqa: E402
from compile_check import assert_compiled_matches_eager  # noqa: E402


def _leaves(b, sq, sk, h, hk, d, seed):
    g = torch.Generator().manual_seed(seed)
    mk = lambda *s: torch.randn(*s, generator=g).to(torch.bfloat16).requires_grad_()
    return mk(b, sq, h, d), mk(b, sk, hk, d), mk(b, sk, hk, d)


def _ref_grads(q, k, v, do, **kw):
    f = lambda t: t.detach().float().numpy()
    return attention_backward_reference(f(do), f(q), f(k), f(v), **kw)


def _close(got, ref, tol=3e-2):
    for g, r in zip(got, ref):
        g = g.detach().double().numpy()
        assert np.abs(g - r).max() <= tol * np.abs(r).max()


def test_autograd_gqa_causal_matches_float64():
    q, k, v = _leaves(1, 17, 17, 2, 1, 64, 0)
    out = ops.attention(q, k, v, causal=True)
    do = torch.randn(out.shape, generator=torch.Generator().manual_seed(1)).to(out.dtype)
    out.backward(do)
    _close((q.grad, k.grad, v.grad), _ref_grads(q, k, v, do, causal=True))


def test_fake_impls_give_shapes():
    from torch._subclasses.fake_tensor import FakeTensorMode
    ops.register_torch_ops()
    with FakeTensorMode():
        q = torch.empty(2, 8, 4, 64, dtype=torch.bfloat16)
        k = torch.empty(2, 16, 2, 64, dtype=torch.bfloat16)
        out, lse = torch.ops.ptxdsl.attention_fwd(q, k, k, True, 0.125, -1, 0, 0.0)
        assert out.shape == q.shape and lse.shape == (2, 4, 8) and lse.dtype == torch.float32
        dq, dk, dv = torch.ops.ptxdsl.attention_bwd(q, q, k, k, q, lse, True, 0.125, -1, 0,
                                                    0.0, False)
        assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == k.shape


@pytest.mark.long
def test_compiled_training_step_fullgraph():
    """A training step's loss through attention under torch.compile(fullgraph=True) (the
    custom ops stay single nodes; AOT autograd puts attention_bwd in the backward graph),
    then backward: loss and gradients match eager's."""
    ops.register_torch_ops()       # (ptxdsl.ops may have been imported before torch)
    q, k, v = _leaves(1, 16, 16, 1, 1, 64, 2)

    def loss_of(q, k, v):
        return ops.attention(q, k, v, causal=True).float().square().sum()

    assert_compiled_matches_eager(loss_of, (q, k, v))


@pytest.mark.long
def test_lse_gradient_matches_float64_autograd():
    """A loss of out and the LSE: dlse · P joins dS (the backward op's dlse), against
    torch float64 autograd of the same loss; GQA, causal with Sq < Sk."""
    q, k, v = _leaves(1, 20, 33, 2, 1, 64, 7)
    g = torch.Generator().manual_seed(8)
    do, w = torch.randn(1, 20, 2, 64, generator=g), torch.randn(1, 2, 20, generator=g)
    out, lse = ops.attention(q, k, v, causal=True, return_lse=True)
    ((out.float() * do).sum() + (lse * w).sum()).backward()
    r = [t.detach().double().requires_grad_() for t in (q, k, v)]
    s = torch.einsum("bqhd,bkhd->bhqk", r[0], r[1].repeat_interleave(2, 2)) * 64 ** -0.5
    seen = torch.arange(33)[None, :] <= torch.arange(20)[:, None] + 13
    s = s.masked_fill(~seen, float("-inf"))
    o = torch.einsum("bhqk,bkhd->bqhd", torch.softmax(s, -1), r[2].repeat_interleave(2, 2))
    ((o * do.double()).sum() + (torch.logsumexp(s, -1) * w.double()).sum()).backward()
    for name, t, ref in zip(("dq", "dk", "dv"), (q, k, v), r):
        err = (t.grad.double() - ref.grad).abs().max() / ref.grad.abs().max()
        assert err <= 3e-2, (name, float(err))
