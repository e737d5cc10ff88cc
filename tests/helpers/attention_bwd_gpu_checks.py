"""Checks shared by the attention backward's GPU tests: gradients against float64, against
SDPA's backward, and a varlen backward against each packed sequence's own float64
backward."""
from __future__ import annotations

import numpy as np

from ptxdsl.ops import attention, attention_backward, attention_varlen, attention_varlen_backward
from ptxdsl.ops.attention import attention_backward_reference


def close(got, ref, what=""):
    """dq, dk, dv (torch) within 3e-2 of the largest float64 value (a floor for zeros)."""
    for name, g, r in zip(("dq", "dk", "dv"), got, ref):
        g = g.float().cpu().numpy().astype(np.float64)
        assert np.isfinite(g).all(), (what, name)
        assert np.abs(g - r).max() <= 3e-2 * max(np.abs(r).max(), 1e-2), (what, name)


def gqa_matches_float64(torch, d: int, sq: int, sk: int, kw: dict, det: bool) -> None:
    """q, dout (2, sq, 4, d), k, v (2, sk, 2, d), bf16: the API's forward then backward
    against float64; ``det``: the deterministic mode too, twice, bitwise equal."""
    g = torch.Generator(device="cuda").manual_seed(sq + sk + d)
    mk = lambda *s: torch.randn(*s, device="cuda", dtype=torch.bfloat16, generator=g)
    q, k, v, do = mk(2, sq, 4, d), mk(2, sk, 2, d), mk(2, sk, 2, d), mk(2, sq, 4, d)
    out, lse = attention(q, k, v, return_lse=True, **kw)
    got = attention_backward(do, q, k, v, out, lse, **kw)
    ref = attention_backward_reference(*(x.float().cpu().numpy() for x in (do, q, k, v)), **kw)
    close(got, ref, (d, sq, sk, kw))
    if det:
        runs = [attention_backward(do, q, k, v, out, lse, deterministic=True, **kw)
                for _ in range(2)]
        close(runs[0], ref, ("det", d, sq, sk, kw))
        assert all(torch.equal(a, b) for a, b in zip(*runs))


def matches_sdpa_at_1k(torch, d: int, causal: bool) -> None:
    """The labs' shape at S = 1k (B 16, H 2048 // d), bf16: the API's gradients against
    SDPA's f32 ones (:func:`matches_sdpa`)."""
    g = torch.Generator(device="cuda").manual_seed(d + causal)
    q, k, v, do = (torch.randn(16, 1024, 2048 // d, d, device="cuda", dtype=torch.bfloat16,
                               generator=g) for _ in range(4))
    out, lse = attention(q, k, v, causal=causal, return_lse=True)
    got = attention_backward(do, q, k, v, out, lse, causal=causal)
    matches_sdpa(torch, q, k, v, do, got, causal, (d, causal))


def matches_sdpa(torch, q, k, v, do, got, causal: bool, what=None) -> None:
    """``got`` (dq, dk, dv) within 3e-2 (max relative) of SDPA's backward on the same
    inputs: cuDNN's, or flash's where cuDNN refuses the shape."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    ref = None
    for backend in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION):
        leaves = [x.clone().requires_grad_() for x in (q, k, v)]
        try:
            with sdpa_kernel(backend):
                F.scaled_dot_product_attention(*(x.transpose(1, 2) for x in leaves),
                                               is_causal=causal).transpose(1, 2).backward(do)
        except RuntimeError:
            continue
        ref = [x.grad.float() for x in leaves]
        break
    assert ref is not None, "neither cuDNN's nor flash's SDPA backward ran"
    for name, a, b in zip(("dq", "dk", "dv"), got, ref):
        err = float((a.float() - b).abs().max() / b.abs().max())
        assert err <= 3e-2, (what, name, err)


def varlen_matches_each_sequence(torch, d: int, causal: bool) -> None:
    """Seven ragged sequences (empty ones too), 8 query heads on 2 K/V heads, bf16: the
    varlen forward then backward; each sequence's slices against its float64 backward, an
    empty sequence's gradients zero."""
    lens_q, lens_k = [0, 1, 300, 77, 1024, 5, 40], [3, 1, 300, 200, 1024, 0, 129]
    g = torch.Generator(device="cuda").manual_seed(7)
    mk = lambda *s: torch.randn(*s, device="cuda", dtype=torch.bfloat16, generator=g)
    q, do = mk(sum(lens_q), 8, d), mk(sum(lens_q), 8, d)
    k, v = mk(sum(lens_k), 2, d), mk(sum(lens_k), 2, d)
    cu = lambda lens: torch.tensor(np.cumsum([0] + lens), dtype=torch.int32, device="cuda")
    cq, ck = cu(lens_q), cu(lens_k)
    out, lse = attention_varlen(q, k, v, cq, ck, 1024, 1024, causal=causal, return_lse=True)
    got = attention_varlen_backward(do, q, k, v, out, lse, cq, ck, 1024, 1024, causal=causal)
    cq, ck = cq.tolist(), ck.tolist()
    for i in range(len(cq) - 1):
        a, e, ka, kb = cq[i], cq[i + 1], ck[i], ck[i + 1]
        parts = [x[None] for x in (got[0][a:e], got[1][ka:kb], got[2][ka:kb])]
        if a == e or ka == kb:
            assert all(bool((x == 0).all()) for x in parts), i
            continue
        close(parts, attention_backward_reference(
            *(x.float().cpu().numpy()[None] for x in (do[a:e], q[a:e], k[ka:kb], v[ka:kb])),
            causal=causal), i)
