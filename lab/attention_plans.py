"""A/B of the attention forward's configs (``block_n``, ``stages``, ping-pong, persistent
grid) on the current GPU, at the FA3-paper shapes with S = 1024 and 4096 (B·S = 16k,
H·D = 2048), bf16, causal and not: what the rows of ``ptxdsl/ops/attention/plans.json`` are
chosen from. Each config's output is checked against torch SDPA before it is timed (median
of rounds of CUDA-event timed calls). JSON goes to ``$OUT/attention_plans.json``.
``--write-plans`` then rewrites ``ptxdsl/ops/attention/plans.json`` with the fastest config
per head dim (the least sum over the four shapes of its time over the best time at that
shape), citing ``bench/results/<name>_<device>.json``; rows of head dims not run are kept.

    PYTHONPATH=. python lab/attention_plans.py [--heads 64,96,128] [--name attention_plans]
        [--write-plans]
"""
from __future__ import annotations

import datetime
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

# (block_n, stages, pingpong, persistent) per head dim
# For 64, 96 and 128: the chosen config against the S = 1k candidates (192 / 176 keys per
# block, 3 stages; ptxas -v: no spills, each checked on the interpreter first); the
# non-persistent and ping-pong ones are in bench/results/attention_plans_h200.json.
# A fifth entry True: the epilogue through shared memory and TMA stores (Config.tma_store).
CANDIDATES = {64: [(128, 2, False, True), (192, 2, False, True), (128, 3, False, True),
                   (128, 2, False, True, True)],
              96: [(128, 2, False, True), (176, 2, False, True), (128, 2, False, True, True)],
              128: [(128, 2, False, True), (176, 2, False, True), (128, 3, False, True),
                    (128, 2, False, True, True)],
              256: [(80, 2, True, False), (80, 2, True, True), (80, 2, False, True)],
              192: [(96, 2, True, False), (96, 2, True, True)]}
SEQS = (1024, 4096)


def main() -> None:
    import torch
    import torch.nn.functional as F
    from ptxdsl.core.types import bf16
    from ptxdsl.ops.attention.config import Config, Mask
    from ptxdsl.ops.attention.fwd import build_forward
    out = {"benchmark": "attention_plans", "device": torch.cuda.get_device_name(),
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "rows": []}
    path = os.path.join(os.environ.get("OUT", "."), f"{_arg('--name', 'attention_plans')}.json")
    heads = [int(x) for x in _arg("--heads", ",".join(map(str, CANDIDATES))).split(",")]
    out["heads"] = heads
    for d, cands in ((d, CANDIDATES[d]) for d in heads):
        for s in SEQS:
            b, h = 16384 // s, 2048 // d if d != 96 else 16
            torch.manual_seed(0)
            q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16)
                       for _ in range(3))
            for causal in (False, True):
                ref = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                                     v.transpose(1, 2), is_causal=causal)
                ref = ref.transpose(1, 2).float()
                flops = 4 * b * h * s * s * d * (0.5 if causal else 1.0)
                for bn, st, pp, pe, *ts in cands:
                    ts = bool(ts and ts[0])
                    row = {"D": d, "S": s, "causal": causal, "block_n": bn, "stages": st,
                           "pingpong": pp, "persistent": pe, "tma_store": ts}
                    try:
                        sms = torch.cuda.get_device_properties(0).multi_processor_count
                        kern = build_forward(Config(block_n=bn, stages=st, pingpong=pp,
                                                    persistent=pe, tma_store=ts), bf16, d,
                                             Mask(-1, 0) if causal else Mask(), scale=d ** -0.5,
                                             sms=sms)
                        o = torch.empty_like(q)
                        lse = torch.empty(b, h, s, device="cuda", dtype=torch.float32)
                        kern(q, k, v, o, lse)
                        torch.cuda.synchronize()
                        row["max_err"] = float((o.float() - ref).abs().max() / ref.abs().max())
                        row["registers"] = kern.resources().registers
                        times = []
                        for _ in range(5):
                            e0, e1 = (torch.cuda.Event(enable_timing=True) for _ in range(2))
                            e0.record()
                            for _ in range(10):
                                kern(q, k, v, o, lse)
                            e1.record()
                            e1.synchronize()
                            times.append(e0.elapsed_time(e1) / 10)
                        row["ms"] = statistics.median(times)
                        row["tflops"] = flops / row["ms"] / 1e9
                    except Exception as e:  # noqa: BLE001 - recorded
                        row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
                    out["rows"].append(row)
                    print(json.dumps(row), flush=True)
                    with open(path, "w") as f:
                        json.dump(out, f, indent=1)
    if "--write-plans" in sys.argv:
        write_plans(out)


def _arg(name: str, default: str) -> str:
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


def write_plans(out) -> None:
    """plans.json rows: per head dim run the config with the least full + causal time; the
    other head dims' rows stay."""
    dev = out["device"].split()[-1].lower()
    plans = os.path.join(os.path.dirname(__file__), "..", "ptxdsl", "ops", "attention",
                         "plans.json")
    table = json.load(open(plans))
    rows = [r for r in table["rows"] if not set(r["head_dims"]) & set(out["heads"])]
    for d in out["heads"]:
        runs = [r for r in out["rows"] if r["D"] == d and "ms" in r and r["max_err"] <= 2e-2]
        shapes = {(r["S"], r["causal"]) for r in runs}
        best_ms = {sh: min(r["ms"] for r in runs if (r["S"], r["causal"]) == sh)
                   for sh in shapes}
        score, seen = {}, {}
        for r in runs:
            key = (r["block_n"], r["stages"], r["pingpong"], r["persistent"],
                   r.get("tma_store", False))
            score[key] = score.get(key, 0.0) + r["ms"] / best_ms[(r["S"], r["causal"])]
            seen.setdefault(key, []).append(r)
        full = [k for k in score if len(seen[k]) == len(shapes)]
        if not full:
            continue
        best = min(full, key=score.get)
        say = "; ".join(
            f"{bn}x{st}{' pp' if pp else ''}{' persistent' if pe else ''}"
            f"{' tma-store' if ts else ''} "
            + " ".join(f"{r['tflops']:.0f}" for r in sorted(
                seen[(bn, st, pp, pe, ts)], key=lambda r: (r["S"], r["causal"])))
            for (bn, st, pp, pe, ts) in full)
        rows.append({"head_dims": [d], "dtypes": ["bf16", "f16"],
                     "masks": ["full", "causal", "window"],
                     "config": {"block_n": best[0], "stages": best[1], "pingpong": best[2],
                                "persistent": best[3], **({"tma_store": True} if best[4] else {})},
                     "source": f"bench/results/{_arg('--name', 'attention_plans')}_{dev}.json",
                     "reason": f"{out['device']} bf16 TFLOP/s at S=1k full, causal, S=4k full, "
                               f"causal (block_n x stages): {say}"})
    table["rows"] = rows
    with open(plans, "w") as f:          # one row a line
        f.write('{\n "about": ' + json.dumps(table["about"]) + ',\n "rows": [\n'
                + ",\n".join("  " + json.dumps(r) for r in rows) + "\n ]\n}\n")
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
