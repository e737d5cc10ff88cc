"""Each kernel of the attention backward, ptxdsl's and FlashAttention-4's, timed by the CUDA
profiler (``torch.profiler``): where a total's gap to FA4 sits (preprocess, main kernel,
postprocess). The bench's shapes (B·S = 16k tokens, H·D = 2048), bf16, head dims and masks
given; ``iters`` calls of each after a warm-up; the mean of each kernel's device time.

    PYTHONPATH=.:<FA4's site> python lab/bwd_kernel_times.py [--heads 64,128]
        [--seqs 1024,4096,16384] [--variant '{"dq_frag": true}'] [--json out.json]

``--variant``: BwdConfig fields over each call's plan row, timed beside it (``ptxdsl+``);
FA4 sits out where ``flash_attn.cute`` does not import.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))


def kernel_means(torch, fn, iters: int) -> dict:
    """{kernel name (80 characters): mean device µs a call} over ``iters`` calls of ``fn``."""
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
    total = collections.defaultdict(float)
    for ev in prof.events():
        if ev.device_type.name == "CUDA" and ev.device_time > 0:
            total[ev.name[:80]] += ev.device_time
    return {k: v / iters for k, v in sorted(total.items(), key=lambda kv: -kv[1])}


def main() -> None:
    import torch
    import ptxdsl.ops as ops
    from lab.attention_bwd_case import case, fa4_call
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--heads", default="64,128")
    ap.add_argument("--seqs", default="1024,4096,16384")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--variant", default=None)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    from dataclasses import replace
    from ptxdsl.ops.attention import bwd_api
    shipped, extra = bwd_api.choose_bwd, json.loads(a.variant) if a.variant else None

    def variant(fn):
        def call():
            bwd_api.choose_bwd = lambda *x, **k: replace(shipped(*x, **k), **extra)
            try:
                return fn()
            finally:
                bwd_api.choose_bwd = shipped
        return call
    rows = []
    for d in map(int, a.heads.split(",")):
        for s in map(int, a.seqs.split(",")):
            for causal in (False, True):
                c = case(torch, s, d, causal)
                fns = {"ptxdsl": lambda: ops.attention_backward(c.do, c.q, c.k, c.v, c.out,
                                                                 c.lse, causal=causal)}
                if extra:
                    fns["ptxdsl+"] = variant(fns["ptxdsl"])
                fa4 = fa4_call(torch, c.q, c.k, c.v, causal, c.do)
                if fa4:
                    fns["fa4"] = fa4
                row = {"S": s, "D": d, "causal": causal,
                       **{k: kernel_means(torch, f, a.iters) for k, f in fns.items()}}
                rows.append(row)
                print(f"S={s} D={d} {'causal' if causal else 'full'}")
                for k in fns:
                    tot = sum(row[k].values())
                    print(f"  {k:7s} total {tot:8.1f} us: " + "; ".join(
                        f"{n[:48]} {t:.1f}" for n, t in row[k].items()))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"tool": "lab/bwd_kernel_times.py", "device": torch.cuda.get_device_name(),
                       "variant": extra, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
