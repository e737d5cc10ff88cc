"""One shape of the backward labs' grid (FA3's: B·S = 16k tokens, H·D = 2048): seeded random
normal bf16 inputs, ptxdsl's forward out and LSE, SDPA's gradients in f32 as the reference
(cuDNN's, or SDPA flash's where cuDNN refuses the head dim) and the backward's FLOPs (2.5x
the forward's, half under the causal mask). Shared by the ``lab/attention_bwd_*`` sets."""
from __future__ import annotations

from contextlib import contextmanager
from types import SimpleNamespace


def case(torch, s: int, d: int, causal: bool, tokens: int = 16384, width: int = 2048):
    """``b, h, q, k, v, do, out, lse, ref, flops`` of one (S, head dim, mask)."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import ptxdsl.ops as ops
    b, h = tokens // s, width // d           # (H·D = 1920 at head dim 192)
    g = torch.Generator(device="cuda").manual_seed(s + d)
    q, k, v, do = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16,
                               generator=g) for _ in range(4))
    out, lse = ops.attention(q, k, v, causal=causal, return_lse=True)
    ref = None
    for backend in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION):
        leaves = [x.clone().requires_grad_() for x in (q, k, v)]
        try:
            with sdpa_kernel(backend):
                F.scaled_dot_product_attention(*(x.transpose(1, 2) for x in leaves),
                                               is_causal=causal).transpose(1, 2).backward(do)
        except RuntimeError:     # cuDNN refuses some head dims: SDPA flash instead
            continue
        ref = [x.grad.float() for x in leaves]
        break
    flops = 2.5 * 4 * b * h * s * s * d * (0.5 if causal else 1.0)
    return SimpleNamespace(b=b, h=h, q=q, k=k, v=v, do=do, out=out, lse=lse, ref=ref,
                           flops=flops)


def fa4_call(torch, q, k, v, causal: bool, do=None, deterministic: bool = False):
    """A no-argument call of FlashAttention-4 on these inputs: its forward, or with ``do``
    its backward (the forward run once here, its graph kept; ``deterministic``: FA4's
    deterministic backward); None where ``flash_attn.cute`` does not import."""
    try:
        from flash_attn.cute import flash_attn_func
    except ImportError as e:
        print(f"FA4 sits out: {e}")
        return None
    if do is None:
        return lambda: flash_attn_func(q, k, v, causal=causal)
    leaves = [x.detach().clone().requires_grad_() for x in (q, k, v)]
    o = flash_attn_func(*leaves, causal=causal, deterministic=deterministic)[0]
    return lambda: torch.autograd.grad(o, leaves, do, retain_graph=True)


@contextmanager
def plan_as(cfg=None, **changes):
    """Within the block, the backward's plan table answers ``cfg`` (a BwdConfig), or its
    own row with ``changes`` replaced, or (neither) itself: how the labs run a variant
    through ``ptxdsl.ops.attention_backward`` (kernels are cached by config)."""
    import dataclasses
    from ptxdsl.ops.attention import bwd_api
    shipped = bwd_api.choose_bwd
    if cfg is not None:
        bwd_api.choose_bwd = lambda *_a, **_k: cfg
    elif changes:
        bwd_api.choose_bwd = lambda *a, **k: dataclasses.replace(shipped(*a, **k), **changes)
    try:
        yield
    finally:
        bwd_api.choose_bwd = shipped


__all__ = ["case", "fa4_call", "plan_as"]
