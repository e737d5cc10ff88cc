"""Sustained forward (or backward) loops of ptxdsl's attention and FlashAttention-4 (when
importable) at one FA3-paper shape, with the SM clock, power and temperature that
``nvidia-smi`` samples during each loop: whether a kernel's time under load differs from
its time in one launch because the card's clocks drop (power or temperature) while it runs.

    PYTHONPATH=. python lab/attention_sustained.py [--d 128] [--s 16384] [--causal]
        [--seconds 2] [--pass bwd] [--name attention_sustained]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))


def main() -> None:
    import torch
    import ptxdsl.ops as ops
    from bench.timing import time_sustained
    from lab.attention_bwd_case import fa4_call
    ap = argparse.ArgumentParser()
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--s", type=int, default=16384)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--pass", dest="pass_", choices=("fwd", "bwd"), default="fwd")
    ap.add_argument("--name", default="attention_sustained")
    a = ap.parse_args()
    b, h = 16384 // a.s, 2048 // a.d
    q, k, v, do = (torch.randn(b, a.s, h, a.d, device="cuda", dtype=torch.bfloat16)
                   for _ in range(4))
    bwd = a.pass_ == "bwd"
    if bwd:       # (the backward's FLOPs: 2.5 times the forward's)
        o, lse = ops.attention(q, k, v, causal=a.causal, return_lse=True)
        fns = {"ptxdsl": lambda: ops.attention_backward(do, q, k, v, o, lse, causal=a.causal)}
    else:
        fns = {"ptxdsl": lambda: ops.attention(q, k, v, causal=a.causal)}
    fa4 = fa4_call(torch, q, k, v, a.causal, do if bwd else None)
    if fa4:
        fns["fa4"] = fa4
    flops = 4 * b * h * a.s * a.s * a.d / (2 if a.causal else 1) * (2.5 if bwd else 1)
    out = {"device": torch.cuda.get_device_name(), "d": a.d, "s": a.s, "causal": a.causal,
           "pass": a.pass_, "rows": []}
    for name, fn in fns.items():
        fn(); torch.cuda.synchronize()
        time.sleep(3)                           # idle: the card cools between contenders
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record(); fn(); e1.record(); e1.synchronize()
        one = e0.elapsed_time(e1)
        sus = time_sustained(torch, fn, a.seconds, idle=0.0)
        row = {"name": name, "one_launch_ms": one, "sustained_ms": sus["ms"],
               "sustained_tflops": flops / sus["ms"] / 1e9, "sm_mhz": sus["sm_mhz"],
               "watts": sus["watts"], "temp_c": sus["temp_c"]}
        out["rows"].append(row)
        print(json.dumps(row), flush=True)
    with open(os.path.join(os.environ.get("OUT", "."), f"{a.name}.json"), "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
