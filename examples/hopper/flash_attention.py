"""Attention on Hopper, the third flagship: ``softmax(Q Kᵀ · scale [+ mask]) V`` per head.

The kernels are written in the DSL in ``ptxdsl/ops/attention/`` (``fwd.py`` the forward,
``bwd.py`` the backward, ``decode_split.py`` the split-KV decode); ``docs/attention.md``
walks through the forward next to the PTX it records. This script takes them, as a user
would, from the op's public calls (``ptxdsl.ops.attention``; ``forward_kernel`` and
``backward_kernels`` build what a call runs).

The forward, per CTA (FlashAttention-3's structure):

- a **producer warpgroup** gives its registers away (``setmaxnreg.dec``) and issues TMA
  copies: the CTA's Q tile once, then K and V blocks into a ring of shared-memory stages,
  each announced on a *full* mbarrier (``expect_tx``) and handed back on an *empty* one;
- two (head dim 64: three) **consumer warpgroups** (``setmaxnreg.inc``) each own 64 query
  rows: ``S = Q·Kᵀ`` by ``wgmma.mma_async`` from shared memory, an online softmax in
  ``ex2`` with the scale folded into one FMA and row max / sum over the four lanes of a row
  (``shfl.sync.bfly``), then ``O += P·V`` with P converted to bf16 **in registers** (the
  wgmma A operand), the S of block j+1 issued before the softmax of block j;
- masks (causal, sliding window, ragged lengths) only on boundary blocks; the epilogue
  divides by the row sum and writes O and the row log-sum-exp.

Run it: on a GPU it checks ``ptxdsl.ops.attention`` (and the backward) against float64 and
prints TFLOP/s beside torch's SDPA; without one it checks small ragged shapes on the CPU
interpreter with every detector on.

    python examples/hopper/flash_attention.py            # run and check
    ptxdsl ptx examples/hopper/flash_attention.py        # read the PTX
    ptxdsl check examples/hopper/flash_attention.py      # registers / spills (ptxas)
"""
from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

from _harness import on_gpu  # noqa: E402
from ptxdsl.ops import attention, attention_backward  # noqa: E402
from ptxdsl.ops.attention import attention_reference  # noqa: E402
from ptxdsl.ops.attention.api import forward_kernel  # noqa: E402
from ptxdsl.ops.attention.bwd_api import backward_kernels  # noqa: E402
from ptxdsl.ops.attention.bwd_reference import attention_backward_reference  # noqa: E402


def KERNELS():
    """What ``ptxdsl ptx/check`` show: the forward at head dims 64, 128 and 256 (causal at
    128) and the backward's main kernel at head dim 128."""
    out = {f"attention_fwd_d{d}": forward_kernel(d) for d in (64, 128, 256)}
    out["attention_fwd_d128_causal"] = forward_kernel(128, causal=True)
    out["attention_bwd_d128"] = backward_kernels(128)[1]
    return out


def _bf16(rng, *shape):
    import ml_dtypes
    return rng.standard_normal(shape).astype(ml_dtypes.bfloat16)


def _rel(got, ref) -> float:
    return float(np.abs(np.asarray(got, np.float64) - ref).max() / max(np.abs(ref).max(), 1e-30))


def cpu_check() -> None:
    """Ragged shapes on the interpreter against float64: a causal GQA forward (Sq != Sk),
    a sliding window, and the backward of the causal case."""
    rng = np.random.default_rng(0)
    q, k, v = _bf16(rng, 1, 70, 2, 64), _bf16(rng, 1, 100, 1, 64), _bf16(rng, 1, 100, 1, 64)
    for kw in (dict(causal=True), dict(window_size=(32, 8))):
        out, lse = attention(q, k, v, return_lse=True, **kw)
        ref, rlse = attention_reference(q, k, v, **kw)
        err = _rel(out, ref)
        ok = err <= 2e-2
        print(f"[{'OK' if ok else 'FAIL'}] attention bf16 Sq 70, Sk 100, H 2 / Hkv 1, "
              f"D 64, {kw} on the interpreter: max error {err:.1e} of the largest value")
        if not ok:
            raise SystemExit(1)
    dout = _bf16(rng, 1, 70, 2, 64)
    out, lse = attention(q, k, v, causal=True, return_lse=True)
    grads = attention_backward(dout, q, k, v, out, lse, causal=True)
    refs = attention_backward_reference(dout, q, k, v, causal=True)
    err = max(_rel(g, r) for g, r in zip(grads, refs))
    ok = err <= 3e-2
    print(f"[{'OK' if ok else 'FAIL'}] attention_backward (dq, dk, dv) of the causal case on "
          f"the interpreter: max error {err:.1e} of the largest value")
    if not ok:
        raise SystemExit(1)
    try:
        r = forward_kernel(128).resources()
        print(f"  forward, head dim 128: {r.registers} registers, {r.spill_stores} spill "
              f"stores (ptxas -v)")
    except Exception as e:  # noqa: BLE001 - no ptxas here
        print(f"  (ptxas not available: {type(e).__name__})")


def gpu_check() -> None:
    """The forward and backward on CUDA tensors against float64, then TFLOP/s beside SDPA."""
    import torch
    import torch.nn.functional as F
    from _harness import time_us
    g = torch.Generator(device="cuda").manual_seed(0)
    for b, s, h, hk, d, causal in ((2, 1000, 8, 2, 128, True), (1, 777, 4, 4, 64, False),
                                   (1, 513, 2, 2, 256, True)):
        q = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16, generator=g)
        k = torch.randn(b, s, hk, d, device="cuda", dtype=torch.bfloat16, generator=g)
        v = torch.randn(b, s, hk, d, device="cuda", dtype=torch.bfloat16, generator=g)
        out, lse = attention(q, k, v, causal=causal, return_lse=True)
        host = [x.float().cpu().numpy() for x in (q, k, v)]
        err = _rel(out.float().cpu().numpy(), attention_reference(*host, causal=causal)[0])
        ok = err <= 2e-2
        if d in (64, 128):
            dout = torch.randn_like(q)
            grads = attention_backward(dout, q, k, v, out, lse, causal=causal)
            refs = attention_backward_reference(dout.float().cpu().numpy(), *host, causal=causal)
            gerr = max(_rel(x.float().cpu().numpy(), r) for x, r in zip(grads, refs))
            ok = ok and gerr <= 3e-2
            err = max(err, gerr)
        print(f"[{'OK' if ok else 'FAIL'}] attention bf16 B {b}, S {s}, H {h}/{hk}, D {d}"
              f"{', causal' if causal else ''}: max error {err:.1e} (forward"
              f"{' and backward' if d in (64, 128) else ''})")
        if not ok:
            raise SystemExit(1)
    q, k, v = (torch.randn(4, 4096, 16, 128, device="cuda", dtype=torch.bfloat16)
               for _ in range(3))
    flop = 4.0 * 4 * 16 * 4096 * 4096 * 128
    ours = time_us(lambda: attention(q, k, v), 20)
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    sdpa = time_us(lambda: F.scaled_dot_product_attention(qt, kt, vt), 20)
    print(f"  B 4, S 4096, H 16, D 128 on {torch.cuda.get_device_name()}: ptxdsl "
          f"{flop / ours / 1e6:.0f} TFLOP/s | SDPA {flop / sdpa / 1e6:.0f} TFLOP/s "
          f"(bench/attention.py times it properly, FlashAttention-4 beside)")


def main() -> None:
    if not on_gpu():
        print("running on the CPU interpreter (no GPU found)")
        cpu_check()
        return
    gpu_check()


if __name__ == "__main__":
    main()
