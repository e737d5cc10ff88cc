"""Forward configs for the GQA-packed layout (a tile's rows the query heads of a group,
taken where one head's queries fill at most half a tile: :func:`ptxdsl.ops.attention.api.
packs`) on the current GPU, at ``bench/attention.py``'s short-query GQA shape (B 64,
Sq 32, Sk 4096, H / Hkv 32 / 8, D 128, bf16) and others given by ``--shapes``. Each
candidate replaces the plan row for the call; outputs are checked against float32 SDPA,
then timed in interleaved rounds (``bench/timing.py``). JSON to ``$OUT/<name>.json``.

    PYTHONPATH=. python lab/attention_packed_plans.py [--rounds 9] [--causal]
        [--shapes 64x32x4096,16x64x8192] [--name attention_packed_plans]
        [--candidates '{"no tma": {"block_n": 128, "persistent": true}}']
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--causal", action="store_true", help="the causal mask too")
    ap.add_argument("--shapes", default="64x32x4096", help="BxSqxSk, comma-separated")
    ap.add_argument("--candidates", default="{}", help="JSON: label -> Config fields")
    ap.add_argument("--name", default="attention_packed_plans")
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F
    from lab.checked_timing import time_checked
    import ptxdsl.ops as ops
    from ptxdsl.ops.attention import api
    from ptxdsl.ops.attention.config import Config

    shipped = api.choose
    cands = {"row": None, **json.loads(args.candidates)}
    h, hk, d = 32, 8, 128
    rows = []
    for shape in args.shapes.split(","):
        b, sq, sk = (int(x) for x in shape.split("x"))
        for causal in (False, True) if args.causal else (False,):
            torch.manual_seed(0)
            q = torch.randn(b, sq, h, d, device="cuda", dtype=torch.bfloat16)
            k, v = (torch.randn(b, sk, hk, d, device="cuda", dtype=torch.bfloat16)
                    for _ in range(2))
            ref = F.scaled_dot_product_attention(
                q.transpose(1, 2).float(), k.transpose(1, 2).float(),
                v.transpose(1, 2).float(), is_causal=False, enable_gqa=True,
                attn_mask=torch.ones(sq, sk, dtype=torch.bool, device="cuda").tril(sk - sq)
                if causal else None).transpose(1, 2)
            row = {"B": b, "Sq": sq, "Sk": sk, "H": h, "Hkv": hk, "D": d, "causal": causal}
            calls = {}
            for label, extra in cands.items():
                def call(_extra=extra):
                    api.choose = shipped if _extra is None else \
                        (lambda *_a, **_k: Config(**_extra))
                    try:
                        return ops.attention(q, k, v, causal=causal)
                    finally:
                        api.choose = shipped
                calls[label] = call
            keys = sk * sq - (sq * (sq - 1) // 2 if causal else 0)     # (bottom-right)
            row["results"] = time_checked(torch, calls, ref, args.rounds, args.iters,
                                          4 * b * h * keys * d)
            rows.append(row)
    result = {"lab": "attention_packed_plans", "device": torch.cuda.get_device_name(),
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(
                  timespec="seconds"), "rounds": args.rounds, "rows": rows}
    with open(os.path.join(os.environ.get("OUT", "."), f"{args.name}.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(f"{result['device']}, bf16 TFLOP/s")
    print(f"{'B x Sq x Sk':>16} {'mask':>7}" + "".join(f"{x:>14}" for x in cands))
    for r in rows:
        print(f"{r['B']:>5}x{r['Sq']:>4}x{r['Sk']:>5} {'causal' if r['causal'] else 'full':>7}"
              + "".join(f"{r['results'][x].get('tflops', float('nan')):>14.1f}"
                        for x in cands))


if __name__ == "__main__":
    main()
