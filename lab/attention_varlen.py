"""A/B of the varlen forward's serving choices on the current GPU: GQA packing (a tile
holds a group's query heads, or one head) and the tile order (longest first from the
order pass, or numbering order), each alone and together, at bench/attention.py's varlen
shapes (sequences of 512 to 2048 tokens, 16k in all, D = 128, bf16; H / Hkv of 16 / 16
and 32 / 8; causal and not) and at short sequences (64 to 512 tokens, where packing
fills the tiles). Every variant's output is checked against the default's before it is
timed (the median of ``--rounds`` rounds of ``--iters`` calls between CUDA events);
TFLOP/s counts the real tokens only (causal half). JSON goes to
``$OUT/attention_varlen.json``.

    PYTHONPATH=. python lab/attention_varlen.py [--rounds 5] [--iters 20]
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

VARIANTS = {"ordered+packed": (True, None), "ordered": (True, 1),
            "numbered+packed": (False, None), "numbered": (False, 1)}


def lengths(lo: int, hi: int, total: int = 16384, seed: int = 0) -> list[int]:
    rnd, out = random.Random(seed), []
    while sum(out) < total:
        out.append(min(rnd.randint(lo, hi), total - sum(out)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    args = ap.parse_args()
    import torch
    from ptxdsl.core.types import bf16, f32
    from ptxdsl.ops.attention import varlen
    from ptxdsl.runtime.adapter import Frame
    rows = []
    for (lo, hi), (h, hk), causal in [(s, g, c) for s in ((512, 2048), (64, 512))
                                      for g in ((16, 16), (32, 8)) for c in (False, True)]:
        lens = lengths(lo, hi)
        total, d = sum(lens), 128
        torch.manual_seed(0)
        q = torch.randn(total, h, d, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(total, hk, d, device="cuda", dtype=torch.bfloat16)
                for _ in range(2))
        cu = torch.tensor([0] + [sum(lens[:i + 1]) for i in range(len(lens))],
                          device="cuda", dtype=torch.int32)
        frame = Frame(q, "attention")
        out = {n: torch.empty_like(q) for n in VARIANTS}
        lse = {n: frame.empty((h, total), q, f32) for n in VARIANTS}

        def call(name):
            ordered, group = VARIANTS[name]
            varlen.run(frame, bf16, q, k, v, cu, cu, out[name], lse[name], causal=causal,
                       softmax_scale=None, window_size=(-1, -1), softcap=0.0,
                       group=group, ordered=ordered)

        for name in VARIANTS:
            call(name)
        torch.cuda.synchronize()
        base = out["ordered+packed"].float()
        row = {"lengths": [lo, hi], "nseq": len(lens), "H": h, "Hkv": hk, "D": d,
               "causal": causal, "results": {}}
        for name in VARIANTS:
            err = float((out[name].float() - base).abs().max() / base.abs().max())
            row["results"][name] = {"max_err_vs_default": err}
        ms = {n: [] for n in VARIANTS}
        for _ in range(args.rounds):
            for name in VARIANTS:
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                for _ in range(args.iters):
                    call(name)
                b.record()
                torch.cuda.synchronize()
                ms[name].append(a.elapsed_time(b) / args.iters)
        flops = sum(4 * h * x * x * d * (0.5 if causal else 1.0) for x in lens)
        for name, t in ms.items():
            med = statistics.median(t)
            row["results"][name].update(ms=med, tflops=flops / med / 1e9)
        rows.append(row)
        print(json.dumps(row), flush=True)
    result = {"benchmark": "attention_varlen", "device": torch.cuda.get_device_name(),
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(
                  timespec="seconds"), "dtype": "bf16", "rows": rows}
    path = os.path.join(os.environ.get("OUT", "."), "attention_varlen.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    print(f"\n{result['device']}, bf16 TFLOP/s (causal counts half)")
    print(f"{'lengths':>10} {'H/Hkv':>6} {'mask':>7} " + " ".join(f"{n:>16}" for n in VARIANTS))
    for r in rows:
        print(f"{r['lengths'][0]:>4}-{r['lengths'][1]:<5} {r['H']:>3}/{r['Hkv']:<2} "
              f"{'causal' if r['causal'] else 'full':>7} "
              + " ".join(f"{r['results'][n]['tflops']:>16.0f}" for n in VARIANTS))


if __name__ == "__main__":
    main()
