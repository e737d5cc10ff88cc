"""Varlen forward configs on the current GPU (issue #49: varlen causal at 16 / 16 heads ran
0.88× FlashAttention-4, 372 against 422 TFLOP/s, ``bench/results/attention_s28_h200.json``).

Varlen calls name no key length, so they take the plan table's unbounded row for their
mask (head dim 128 causal: 128 × 2 persistent with the lazy rescale) while dense calls
take the rows bounded by length. Each candidate here replaces that row for the call (the
order pass and the kernel both read it), at ``bench/attention.py``'s varlen shapes
(sequences of 512 to 2048 tokens, 16k in all, D = 128, bf16; H / Hkv 16 / 16 and 32 / 8,
causal; ``--head-dim``, ``--heads`` for others). Every candidate's output is checked against the reference (float32 SDPA per
sequence) before any is timed; then interleaved rounds (``bench/timing.py``). TFLOP/s
count the real tokens (causal half). JSON to ``$OUT/attention_varlen_plans.json``.

    PYTHONPATH=. python lab/attention_varlen_plans.py [--rounds 9] [--full]
        [--candidates '{"128x2 p uc": {"block_n": 128, "persistent": true, "uniform_cons": true}}']
        [--name attention_varlen_plans] [--head-dim 128] [--heads 16/16,32/8]

``--candidates`` (JSON, label -> Config fields) replaces :data:`CANDIDATES` (the plan's
own row is timed first in any case).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

# label -> Config fields (None: the plan's own row)
CANDIDATES = {
    "row": None,
    "128x2 p": dict(block_n=128, persistent=True),
    "128x3 p lazy": dict(block_n=128, stages=3, lazy_rescale=True, persistent=True),
    "128x2 pp p lazy": dict(block_n=128, pingpong=True, lazy_rescale=True, persistent=True),
    "128x2 lazy": dict(block_n=128, lazy_rescale=True),
    "176x2 p lazy": dict(block_n=176, lazy_rescale=True, persistent=True),
    "96x2 p lazy": dict(block_n=96, lazy_rescale=True, persistent=True),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--full", action="store_true", help="the full mask too")
    ap.add_argument("--candidates", default=None, help="JSON: label -> Config fields")
    ap.add_argument("--name", default="attention_varlen_plans")
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--heads", default="16/16,32/8", help="H/Hkv pairs, comma-separated")
    args = ap.parse_args()
    cands = CANDIDATES if not args.candidates else {"row": None, **json.loads(args.candidates)}
    import torch
    import torch.nn.functional as F
    from bench.attention import varlen_lengths
    from lab.checked_timing import time_checked
    import ptxdsl.ops as ops
    from ptxdsl.ops.attention import api, varlen
    from ptxdsl.ops.attention.config import Config

    shipped = api.choose
    lens = varlen_lengths()
    total, d = sum(lens), args.head_dim
    heads = [tuple(int(x) for x in p.split("/")) for p in args.heads.split(",")]
    cu = torch.tensor([0] + [sum(lens[:i + 1]) for i in range(len(lens))],
                      device="cuda", dtype=torch.int32)
    rows = []
    for (h, hk), causal in [(g, c) for g in heads
                            for c in ((True, False) if args.full else (True,))]:
        torch.manual_seed(0)
        q = torch.randn(total, h, d, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(total, hk, d, device="cuda", dtype=torch.bfloat16)
                for _ in range(2))
        ref = torch.empty_like(q, dtype=torch.float32)
        for i in range(len(lens)):
            a, b = int(cu[i]), int(cu[i + 1])
            qq, kk, vv = (x[a:b].transpose(0, 1).float() for x in (q, k, v))
            ref[a:b] = F.scaled_dot_product_attention(
                qq, kk.repeat_interleave(h // hk, 0), vv.repeat_interleave(h // hk, 0),
                is_causal=causal).transpose(0, 1)
        row = {"nseq": len(lens), "H": h, "Hkv": hk, "D": d, "causal": causal}
        calls = {}
        for label, extra in cands.items():
            def chooser(*a, _extra=extra, **kw):
                return shipped(*a, **kw) if _extra is None else Config(**_extra)

            def call(_chooser=chooser):
                api.choose, varlen.choose = _chooser, _chooser
                try:
                    return ops.attention_varlen(q, k, v, cu, cu, max(lens), max(lens),
                                                causal=causal)
                finally:
                    api.choose, varlen.choose = shipped, shipped
            calls[label] = call
        flops = sum(4 * h * x * x * d * (0.5 if causal else 1.0) for x in lens)
        row["results"] = time_checked(torch, calls, ref, args.rounds, args.iters, flops)
        rows.append(row)
        print(json.dumps(row), flush=True)
    result = {"lab": "attention_varlen_plans", "device": torch.cuda.get_device_name(),
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(
                  timespec="seconds"), "rounds": args.rounds, "rows": rows}
    with open(os.path.join(os.environ.get("OUT", "."), f"{args.name}.json"),
              "w") as f:
        json.dump(result, f, indent=1)
    print(f"\n{result['device']}, bf16 TFLOP/s (causal counts half)")
    print(f"{'H/Hkv':>6} {'mask':>7} " + " ".join(f"{n:>18}" for n in cands))
    for r in rows:
        cells = [r["results"][n].get("tflops") for n in cands]
        print(f"{r['H']:>3}/{r['Hkv']:<2} {'causal' if r['causal'] else 'full':>7} "
              + " ".join(f"{c:>18.0f}" if c else f"{'-':>18}" for c in cells))


if __name__ == "__main__":
    main()
