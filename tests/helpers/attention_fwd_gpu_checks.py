"""Checks shared by the attention forward's GPU tests of plan options that change which
instructions run, never a value (test_ops_attention_fwd_late_gpu.py,
test_ops_attention_fwd_oq_gpu.py, test_ops_attention_fwdc_gpu.py)."""
from __future__ import annotations

import numpy as np

from gpu_env import torch_sm90
from ptxdsl.core.types import bf16
from ptxdsl.ops.attention import attention_reference
from ptxdsl.ops.attention.config import Config
from ptxdsl.ops.attention.fwd import build_forward


def launch(torch, c, d, mask, q, k, v, layout, g, sms):
    """``(out, lse (B, H, SQ))`` of the kernel of ``c``, launched twice: the same bits."""
    kern = build_forward(c, bf16, d, mask, scale=d ** -0.5, sms=sms, layout=layout,
                         group=g if layout == "packed" else 1)
    b, sq, h, _ = q.shape
    hk = h // g
    out = torch.empty_like(q)
    if layout == "packed":
        qa, oa = q.view(b, sq, hk, g, d), out.view(b, sq, hk, g, d)
        lse = torch.empty(b, hk, g, sq, device="cuda", dtype=torch.float32)
    else:
        qa, oa = q, out
        lse = torch.empty(b, h, sq, device="cuda", dtype=torch.float32)
    word = (torch.zeros(1, dtype=torch.int32, device="cuda"),) if c.dynamic else ()
    kern(qa, k, v, oa, lse, *word)
    first = out.clone()
    kern(qa, k, v, oa, lse, *word)
    torch.cuda.synchronize()
    assert torch.equal(first, out)
    assert not word or int(word[0].item()) == 0
    return out, lse.reshape(b, h, sq)


def against_reference(q, k, v, mask, out, lse):
    """``out`` within bf16 rounding of the float64 reference, the LSE within 1e-3 (−inf
    exactly where the reference's is)."""
    ref, rlse = attention_reference(*(x.float().cpu().numpy() for x in (q, k, v)),
                                    window_size=(mask.left, mask.right))
    o = out.float().cpu().numpy().astype(np.float64)
    assert np.abs(o - ref).max() <= 2e-2 * np.abs(ref).max()
    got = lse.cpu().numpy()
    fin = ~np.isinf(rlse)
    np.testing.assert_array_equal(np.isinf(got), ~fin)
    assert (np.abs(got[fin] - rlse[fin]) / np.maximum(np.abs(rlse[fin]), 1)).max() <= 1e-3


def same_and_right(d, base: Config, on: Config, layout, mask, sq=1000, sk=1017):
    """``on`` gives bitwise the output and LSE of ``base`` (B2, H8, Hkv2: ragged Sq and Sk),
    within bf16 rounding of the float64 reference; repeat launches bit-identical."""
    torch = torch_sm90()
    b, h, hk = 2, 8, 2
    g = h // hk
    gen = torch.Generator(device="cuda").manual_seed(d + sq)
    q = torch.randn(b, sq, h, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    k, v = (torch.randn(b, sk, hk, d, device="cuda", dtype=torch.bfloat16, generator=gen)
            for _ in range(2))
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    want, wlse = launch(torch, base, d, mask, q, k, v, layout, g, sms)
    out, lse = launch(torch, on, d, mask, q, k, v, layout, g, sms)
    assert torch.equal(out, want) and torch.equal(lse, wlse)
    against_reference(q, k, v, mask, out, lse)
