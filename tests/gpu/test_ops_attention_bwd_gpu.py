"""ptxdsl.ops.attention_backward on an sm_90 GPU: dq, dk, dv against the float64 reference
(max error <= 3e-2 of the largest value, bf16), GQA sums, masks and ragged lengths, the
deterministic mode bitwise identical across runs, and autograd through
``ptxdsl.ops.attention`` against torch SDPA's backward."""
from __future__ import annotations

import numpy as np
import pytest

from gpu_env import NEEDS_GPU, torch_sm90
from ptxdsl.ops import attention, attention_backward
from ptxdsl.ops.attention import attention_backward_reference

pytestmark = NEEDS_GPU


def _inputs(b, sq, sk, h, hk, d, seed=0):
    torch = torch_sm90()
    g = torch.Generator(device="cuda").manual_seed(seed)
    mk = lambda *s: torch.randn(*s, device="cuda", dtype=torch.bfloat16, generator=g)
    return mk(b, sq, h, d), mk(b, sk, hk, d), mk(b, sk, hk, d), mk(b, sq, h, d)


def _check(b, sq, sk, h, hk, d, **kw):
    q, k, v, do = _inputs(b, sq, sk, h, hk, d, sq + sk + d)
    fkw = {x: y for x, y in kw.items() if x != "deterministic"}
    out, lse = attention(q, k, v, return_lse=True, **fkw)
    got = attention_backward(do, q, k, v, out, lse, **kw)
    ref = attention_backward_reference(*(x.float().cpu().numpy() for x in (do, q, k, v)), **fkw)
    for name, g, r in zip(("dq", "dk", "dv"), got, ref):
        g = g.float().cpu().numpy().astype(np.float64)
        assert np.isfinite(g).all(), name
        # (a floor for gradients that are 0 exactly: one key per row gives dS = 0)
        assert np.abs(g - r).max() <= 3e-2 * max(np.abs(r).max(), 1e-2), name
    return (q, k, v, do, out, lse), got


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_head_dims(d, causal):
    _check(2, 300, 300, 4, 4, d, causal=causal)


@pytest.mark.parametrize("sq,sk,kw", [
    (1, 1, dict(causal=True)), (63, 200, dict(causal=True)), (200, 63, dict(causal=True)),
    (100, 1000, {}), (1000, 1000, dict(window_size=(100, 0))),
    (257, 300, dict(window_size=(32, 16))), (64, 512, dict(softcap=30.0, softmax_scale=0.2)),
])
def test_masks_and_ragged_lengths(sq, sk, kw):
    _check(1, sq, sk, 4, 2, 128, **kw)


def test_gqa_sums_over_the_group():
    _check(2, 256, 384, 8, 1, 64, causal=True)
    _check(1, 512, 512, 32, 8, 128)


@pytest.mark.parametrize("causal", [False, True])
def test_deterministic_is_bitwise_identical(causal):
    torch = torch_sm90()
    (q, k, v, do, out, lse), first = _check(2, 1000, 1000, 8, 2, 128, causal=causal,
                                            deterministic=True)
    for _ in range(3):
        again = attention_backward(do, q, k, v, out, lse, causal=causal, deterministic=True)
        for a, b in zip(first, again):
            assert torch.equal(a, b)


def test_autograd_matches_sdpa_backward():
    torch = torch_sm90()
    import torch.nn.functional as F
    q, k, v, do = _inputs(2, 512, 512, 8, 2, 128, 9)
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    attention(*leaves, causal=True).backward(do)
    ref = [x.clone().requires_grad_() for x in (q, k, v)]
    F.scaled_dot_product_attention(*(x.transpose(1, 2) for x in ref), is_causal=True,
                                   enable_gqa=True).transpose(1, 2).backward(do)
    for a, b in zip(leaves, ref):
        err = (a.grad.float() - b.grad.float()).abs().max() / b.grad.float().abs().max()
        assert err <= 3e-2, err


def test_cuda_graph_capture_of_a_training_step():
    torch = torch_sm90()
    q, k, v, do = _inputs(1, 256, 256, 4, 4, 64, 3)
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]

    def step():
        for t in leaves:
            t.grad = None
        attention(*leaves, causal=True).backward(do)
        return [t.grad for t in leaves]

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        want = [g.clone() for g in step()]       # warm-up: kernels built and loaded
    torch.cuda.current_stream().wait_stream(s)
    for t in leaves:
        t.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        got = step()
    for t in got:
        t.zero_()
    graph.replay()
    torch.cuda.synchronize()
    # dk, dv sum in registers (bitwise); dq's f32 additions land in any order
    torch.testing.assert_close(got[0], want[0], rtol=1e-2, atol=1e-2)
    for a, b in zip(got[1:], want[1:]):
        assert torch.equal(a, b)
