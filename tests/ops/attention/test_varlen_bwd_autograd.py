"""Autograd through ``ptxdsl.ops.attention_varlen`` on torch CPU tensors (the interpreter runs
the forward and the one-launch varlen backward): each packed sequence's gradients against
torch float64 autograd of a plain attention (GQA heads summed by autograd, not by us), the
varlen custom ops' fake impls, and a ``torch.compile(fullgraph=True)`` step."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
import ptxdsl.ops as ops  # noqa: E402
from compile_check import assert_compiled_matches_eager  # noqa: E402


def _packed(lens_q, lens_k, h, hk, d, seed):
    g = torch.Generator().manual_seed(seed)
    mk = lambda *s: torch.randn(*s, generator=g).to(torch.bfloat16).requires_grad_()
    cq = torch.tensor([0] + lens_q, dtype=torch.int32).cumsum(0, dtype=torch.int32)
    ck = torch.tensor([0] + lens_k, dtype=torch.int32).cumsum(0, dtype=torch.int32)
    q = mk(int(cq[-1]), h, d)
    k, v = mk(int(ck[-1]), hk, d), mk(int(ck[-1]), hk, d)
    do = torch.randn(q.shape, generator=g).to(torch.bfloat16)
    return q, k, v, do, cq, ck


def _reference(q, k, v, causal, window, with_lse=False):
    """One sequence's attention in float64 torch ops (q (Sq, H, D), k, v (Sk, Hkv, D); keys
    aligned bottom-right; a row without keys gives 0); with its LSE (H, Sq) if asked."""
    sq, h, d = q.shape
    sk, hk = k.shape[:2]
    k, v = (t.repeat_interleave(h // hk, dim=1) for t in (k, v))
    s = torch.einsum("qhd,khd->hqk", q, k) * d ** -0.5
    i = torch.arange(sq)[:, None] + sk - sq
    j = torch.arange(sk)[None, :]
    left, right = window
    right = 0 if causal else right
    seen = torch.ones(sq, sk, dtype=torch.bool)
    if right >= 0:
        seen &= j <= i + right
    if left >= 0:
        seen &= j >= i - left
    s = s.masked_fill(~seen, float("-inf"))
    out = torch.einsum("hqk,khd->qhd", torch.softmax(s, dim=-1).nan_to_num(0.0), v)
    return (out, torch.logsumexp(s, dim=-1)) if with_lse else out


def _check(lens_q, lens_k, h, hk, d, seed, causal=False, window=(-1, -1)):
    q, k, v, do, cq, ck = _packed(lens_q, lens_k, h, hk, d, seed)
    out = ops.attention_varlen(q, k, v, cq, ck, max(lens_q), max(lens_k), causal=causal,
                               window_size=window)
    assert out.requires_grad and out.grad_fn is not None
    out.backward(do)
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    for i in range(len(lens_q)):
        a, e, ka, kb = int(cq[i]), int(cq[i + 1]), int(ck[i]), int(ck[i + 1])
        if a < e and ka < kb:
            ref = _reference(leaves[0][a:e], leaves[1][ka:kb], leaves[2][ka:kb], causal, window)
            ref.backward(do[a:e].double())
    for name, t, r in zip(("dq", "dk", "dv"), (q, k, v), leaves):
        got, want = t.grad.double(), r.grad
        assert torch.isfinite(got).all(), name
        # rows / keys of sequences without keys or rows: zero in both
        err = (got - want).abs().max() / max(want.abs().max(), 1e-2)
        assert err <= 3e-2, (name, float(err))
    return q, k, v


def test_varlen_autograd_gqa_causal_ragged():
    """GQA (2 query heads per K/V head), causal, five sequences: one without rows, one of a
    single row and key, one without keys. Under no_grad the call records nothing."""
    q, k, v = _check([5, 0, 17, 1, 3], [9, 4, 20, 1, 0], 2, 1, 64, 0, causal=True)
    cq = torch.tensor([0, 5, 5, 22, 23, 26], dtype=torch.int32)
    ck = torch.tensor([0, 9, 13, 33, 34, 34], dtype=torch.int32)
    with torch.no_grad():
        out = ops.attention_varlen(q, k, v, cq, ck, 17, 20, causal=True)
    assert out.grad_fn is None and not out.requires_grad


def test_varlen_lse_gradient_reaches_q_and_k():
    """A loss of out and the LSE (return_lse=True): the LSE's gradient (dlse · P added to
    dS) reaches dq and dk; every sequence has rows and keys."""
    q, k, v, do, cq, ck = _packed([5, 17, 1], [9, 20, 1], 2, 1, 64, 5)
    w = torch.randn(2, 23, generator=torch.Generator().manual_seed(6))
    out, lse = ops.attention_varlen(q, k, v, cq, ck, 17, 20, causal=True, return_lse=True)
    ((out.float() * do.float()).sum() + (lse * w).sum()).backward()
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    loss = 0
    for i in range(3):
        a, e, ka, kb = int(cq[i]), int(cq[i + 1]), int(ck[i]), int(ck[i + 1])
        o, l = _reference(leaves[0][a:e], leaves[1][ka:kb], leaves[2][ka:kb], True, (-1, -1),
                          with_lse=True)
        loss = loss + (o * do[a:e].double()).sum() + (l * w[:, a:e].double()).sum()
    loss.backward()
    for name, t, r in zip(("dq", "dk", "dv"), (q, k, v), leaves):
        err = (t.grad.double() - r.grad).abs().max() / r.grad.abs().max()
        assert err <= 3e-2, (name, float(err))


def test_varlen_fake_impls_give_shapes():
    from torch._subclasses.fake_tensor import FakeTensorMode
    ops.register_torch_ops()
    with FakeTensorMode():
        q = torch.empty(10, 4, 64, dtype=torch.bfloat16)
        k = torch.empty(12, 2, 64, dtype=torch.bfloat16)
        cu = torch.empty(3, dtype=torch.int32)
        out, lse = torch.ops.ptxdsl.attention_varlen_fwd(q, k, k, cu, cu, 8, 8, True, 0.125,
                                                         -1, 0, 0.0)
        assert out.shape == q.shape and lse.shape == (4, 10) and lse.dtype == torch.float32
        dq, dk, dv = torch.ops.ptxdsl.attention_varlen_bwd(q, q, k, k, q, lse, cu, cu, 8, 8,
                                                           True, 0.125, -1, 0, 0.0, False)
        assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == k.shape


@pytest.mark.long
@pytest.mark.parametrize("d,window,heads", [(128, (-1, -1), (4, 2)), (96, (7, 2), (4, 2)),
                                            (192, (-1, -1), (2, 1))])
def test_varlen_autograd_head_dims_windows(d, window, heads):
    """Four query heads on two K/V heads (192: two on one, the wg3 backward's cost on the
    interpreter) over three packed sequences, one of a single query."""
    _check([33, 1, 70], [40, 65, 20], *heads, d, d, window=window)


@pytest.mark.long
def test_varlen_compiled_training_step_fullgraph():
    """A loss through attention_varlen under torch.compile(fullgraph=True): loss and
    gradients equal eager's."""
    ops.register_torch_ops()
    q, k, v, _, cq, ck = _packed([6, 10], [7, 12], 2, 1, 64, 3)

    def loss_of(q, k, v):
        return ops.attention_varlen(q, k, v, cq, ck, 10, 12, causal=True).float().square().sum()

    assert_compiled_matches_eager(loss_of, (q, k, v))


@pytest.mark.long
def test_varlen_ops_pass_opcheck():
    """torch.library.opcheck (schema, autograd registration, fake tensors, AOT dispatch
    with dynamic shapes) of both varlen ops, on the interpreter."""
    ops.register_torch_ops()
    q, k, v, do, cq, ck = _packed([5, 7], [4, 6], 2, 1, 64, 4)
    args = (q, k, v, cq, ck, 7, 6, True, 0.125, -1, 0, 0.0)
    torch.library.opcheck(torch.ops.ptxdsl.attention_varlen_fwd.default, args)
    out, lse = torch.ops.ptxdsl.attention_varlen_fwd(*args)
    bargs = (do, *(t.detach() for t in (q, k, v, out, lse)), cq, ck, 7, 6, True, 0.125, -1,
             0, 0.0, False)
    torch.library.opcheck(torch.ops.ptxdsl.attention_varlen_bwd.default, bargs)


def test_padded_rows_on_host_and_device_offsets_agree():
    """The packed row -> padded row map the LSE gradient is folded through, computed from
    host offsets (numpy) and from tensor offsets (torch.searchsorted, the CUDA path)."""
    import numpy as np
    from ptxdsl.ops.attention.bwd_api import _padded_rows
    from ptxdsl.runtime.adapter import Frame
    cq = [0, 5, 5, 70, 71, 200]
    frame = Frame(torch.zeros(1), "attention")
    host = _padded_rows(frame, np.asarray(cq, np.int32), 200)
    dev = _padded_rows(frame, torch.tensor(cq, dtype=torch.int32), 200)
    assert host.tolist() == dev.tolist()
    assert host[:5].tolist() == list(range(5)) and int(host[5]) == 128 + 0   # seq 2 at 2·64
    assert int(host[70]) == (3 + 1) * 64 and int(host[71]) == (4 + 1) * 64
