"""One forward call each of ptxdsl's attention and FlashAttention-4 (when importable) at one
FA3-paper shape, for ``ncu`` to profile side by side (the kernels' tensor-pipe, shared-memory
and MUFU load and the warps' stall reasons).

    ncu --clock-control none --section SpeedOfLight --section ComputeWorkloadAnalysis \\
        --section WarpStateStats -k regex:'attention_fwd|flash' -c 2 \\
        python lab/attention_ncu.py [--d 128] [--s 16384] [--causal]
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))


def main() -> None:
    import torch
    import ptxdsl.ops as ops
    ap = argparse.ArgumentParser()
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--s", type=int, default=16384)
    ap.add_argument("--causal", action="store_true")
    a = ap.parse_args()
    b, h = 16384 // a.s, 2048 // a.d
    q, k, v = (torch.randn(b, a.s, h, a.d, device="cuda", dtype=torch.bfloat16)
               for _ in range(3))
    ops.attention(q, k, v, causal=a.causal)
    torch.cuda.synchronize()
    try:
        from flash_attn.cute import flash_attn_func
        flash_attn_func(q, k, v, causal=a.causal)
        torch.cuda.synchronize()
    except ImportError as e:
        print(f"fa4 sits out: {e}")


if __name__ == "__main__":
    main()
