"""A/B of the attention forward's configs (``block_n``, ``stages``, ping-pong, persistent
grid, three consumers, lazy rescale, head sections, the dynamic tile scheduler) on the
current GPU, at the FA3-paper shapes (B·S = 16k, H·D = 2048) with S in ``--seqs`` (default
1024 and 4096), bf16, causal and not (``--causal-only``: causal): what
the rows of ``ptxdsl/ops/attention/plans.json`` are chosen from. Each config's output is
checked against torch SDPA before it is timed (median of rounds of CUDA-event timed
calls; a dynamic config's counter word must be zero again after them, and the output
still right). JSON goes to ``$OUT/<name>.json``. ``--write-plans`` then rewrites
``ptxdsl/ops/attention/plans.json`` with the fastest config per head dim and mask kind
(full; causal, which window follows): the least sum over the S values of its time over the
best time at that shape, citing ``bench/results/<name>_<device>.json``; rows of head dims
not run are kept. ``--budget`` seconds: candidates not reached by then are skipped.

    PYTHONPATH=. python lab/attention_plans.py [--heads 64,96,128] [--seqs 1024,4096]
        [--name attention_plans] [--budget 600] [--causal-only] [--write-plans]
        [--candidates '{"128": [{"block_n": 176, "lazy_rescale": true}]}'] [--set dynamic]

``--candidates`` replaces the configs tried for the head dims it names (JSON, the keys
as strings); ``--set`` a named set of :data:`SETS` (``dynamic``: the causal plan rows of
head dims 64, 128 and 256 as they are, with head sections, dynamic, and dynamic with head
sections).
"""
from __future__ import annotations

import datetime
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

# Config keyword arguments per head dim, the current plans row first. Earlier sweeps (S =
# 1k, 4k: bench/results/attention_plans_h200.json, attention_plans_s1k_h200.json) tried
# 192 / 176 keys per block, 3 stages, ping-pong, persistent and the TMA-store epilogue.
# Three consumers (192-row tiles) compile without spills only at head dim 64 with 128
# keys per block (ptxas -v; 144 and more keys, or head dim 96 / 128, spill at 160
# registers); each was checked on the interpreter first. Dynamic (a global tile counter)
# with and without head sections: the causal rows' configs (no spills, ptxas -v).
_P, _L, _D = dict(persistent=True), dict(lazy_rescale=True), dict(dynamic=True)
CANDIDATES = {
    64: [dict(block_n=128, **_P), dict(block_n=128, **_P, **_D),
         dict(block_n=128, **_P, **_D, head_sections=True), dict(block_n=128, **_P, **_L),
         dict(block_n=128, consumers=3, **_P, **_L),
         dict(block_n=128, consumers=3, pingpong=True, **_P, **_L),
         dict(block_n=128, stages=3, consumers=3, **_P, **_L),
         dict(block_n=128, stages=3, consumers=3, **_P, **_L, head_sections=True),
         dict(block_n=128, stages=3, consumers=3, **_P, **_L, **_D),
         dict(block_n=128, stages=3, consumers=3, **_P, **_L, **_D, head_sections=True)],
    96: [dict(block_n=128, **_P), dict(block_n=128, **_P, **_L)],
    128: [dict(block_n=128, **_P), dict(block_n=128, **_P, **_L),
          dict(block_n=176, **_P, **_L), dict(block_n=128, pingpong=True, **_P, **_L),
          dict(block_n=128, stages=3, **_P, **_L),
          dict(block_n=128, **_P, **_L, head_sections=True),
          dict(block_n=128, **_P, **_L, **_D),
          dict(block_n=128, **_P, **_L, **_D, head_sections=True)],
    192: [dict(block_n=96, pingpong=True, **_P), dict(block_n=96, pingpong=True, **_P, **_L)],
    256: [dict(block_n=80, pingpong=True), dict(block_n=80, pingpong=True, **_L),
          dict(block_n=80, pingpong=True, **_P, **_L),
          dict(block_n=80, pingpong=True, **_P, **_L, head_sections=True),
          dict(block_n=80, pingpong=True, **_P, **_L, **_D),
          dict(block_n=80, pingpong=True, **_P, **_L, **_D, head_sections=True)],
}


def _variants(*rows):
    """Each row as it is, with head sections, dynamic, and dynamic with head sections."""
    return [dict(r, **x) for r in rows for x in ({}, dict(head_sections=True), _D,
                                                 dict(head_sections=True, **_D))]


# Named candidate sets (--set): ``dynamic``, the A/B of Config.dynamic on the causal rows
SETS = {"dynamic": {
    64: _variants(dict(block_n=128, **_P), dict(block_n=128, stages=3, consumers=3, **_P, **_L)),
    128: _variants(dict(block_n=128, **_P, **_L)),
    256: _variants(dict(block_n=80, pingpong=True, **_P, **_L))}}


def main() -> None:
    import torch
    import torch.nn.functional as F
    from ptxdsl.core.types import bf16
    from ptxdsl.ops.attention.config import Config, Mask
    from ptxdsl.ops.attention.fwd import build_forward
    t0 = time.time()
    out = {"benchmark": "attention_plans", "device": torch.cuda.get_device_name(),
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "torch": torch.__version__, "rows": []}
    path = os.path.join(os.environ.get("OUT", "."), f"{_arg('--name', 'attention_plans')}.json")
    heads = [int(x) for x in _arg("--heads", ",".join(map(str, CANDIDATES))).split(",")]
    seqs = [int(x) for x in _arg("--seqs", "1024,4096").split(",")]
    budget = float(_arg("--budget", "600"))
    out["heads"], out["seqs"] = heads, seqs
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    kernels = {}
    cands_of = {**CANDIDATES, **SETS.get(_arg("--set", ""), {}),
                **{int(d): c for d, c in json.loads(_arg("--candidates", "{}")).items()}}
    for d, cands in ((d, cands_of[d]) for d in heads):
        for s in seqs:
            b, h = 16384 // s, 2048 // d if d != 96 else 16
            torch.manual_seed(0)
            q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16)
                       for _ in range(3))
            for causal in (True,) if "--causal-only" in sys.argv else (False, True):
                ref = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                                     v.transpose(1, 2), is_causal=causal)
                ref = ref.transpose(1, 2).float()
                flops = 4 * b * h * s * s * d * (0.5 if causal else 1.0)
                for kw in cands:
                    row = {"D": d, "S": s, "causal": causal, "config": kw}
                    if time.time() - t0 > budget:
                        row["error"] = "skipped: past --budget"
                        out["rows"].append(row)
                        continue
                    try:
                        key = (d, causal, tuple(sorted(kw.items())))
                        if key not in kernels:
                            kernels[key] = build_forward(
                                Config(**kw), bf16, d, Mask(-1, 0) if causal else Mask(),
                                scale=d ** -0.5, sms=sms)
                        kern = kernels[key]
                        o = torch.empty_like(q)
                        lse = torch.empty(b, h, s, device="cuda", dtype=torch.float32)
                        # Config.dynamic: the tile counter, zero, left zero by each launch
                        args = (q, k, v, o, lse) + ((torch.zeros(1, dtype=torch.int32,
                                                                 device="cuda"),)
                                                    if kw.get("dynamic") else ())
                        kern(*args)
                        torch.cuda.synchronize()
                        row["max_err"] = float((o.float() - ref).abs().max() / ref.abs().max())
                        row["registers"] = kern.resources().registers
                        times = []
                        for _ in range(5):
                            e0, e1 = (torch.cuda.Event(enable_timing=True) for _ in range(2))
                            e0.record()
                            for _ in range(10):
                                kern(*args)
                            e1.record()
                            e1.synchronize()
                            times.append(e0.elapsed_time(e1) / 10)
                        row["ms"] = statistics.median(times)
                        row["tflops"] = flops / row["ms"] / 1e9
                        if kw.get("dynamic"):       # 51 launches on one counter word
                            row["counter_after"] = int(args[-1].item())
                            row["max_err"] = max(row["max_err"], float(
                                (o.float() - ref).abs().max() / ref.abs().max()))
                    except Exception as e:  # noqa: BLE001 - recorded
                        row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
                    out["rows"].append(row)
                    print(json.dumps(row), flush=True)
                    with open(path, "w") as f:
                        json.dump(out, f, indent=1)
            del q, k, v, ref
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    _table(out)
    if "--write-plans" in sys.argv:
        write_plans(out)


def _name(kw: dict) -> str:
    """A config as ``128x2 pp persistent m192 lazy`` (only what differs from Config())."""
    bits = [f"{kw.get('block_n', 128)}x{kw.get('stages', 2)}"]
    bits += [w for k, w in (("pingpong", "pp"), ("persistent", "persistent"),
                            ("tma_store", "tma-store"), ("lazy_rescale", "lazy"),
                            ("head_sections", "l2"), ("dynamic", "dyn")) if kw.get(k)]
    if kw.get("consumers", 2) != 2:
        bits.append(f"m{64 * kw['consumers']}")
    return " ".join(bits)


def _table(out) -> None:
    print(f"{'D':>4} {'S':>6} {'mask':>7}  " + "TFLOP/s per config")
    shapes = sorted({(r["D"], r["S"], r["causal"]) for r in out["rows"]})
    for d, s, causal in shapes:
        rs = [r for r in out["rows"] if (r["D"], r["S"], r["causal"]) == (d, s, causal)]
        print(f"{d:>4} {s:>6} {'causal' if causal else 'full':>7}  " + "; ".join(
            f"{_name(r['config'])} {r['tflops']:.0f}" if "tflops" in r else
            f"{_name(r['config'])} {r.get('error', '?')[:40]}" for r in rs))


def _arg(name: str, default: str) -> str:
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


def write_plans(out) -> None:
    """plans.json rows: per head dim and mask kind (full; causal with window) the config
    with the least sum over the S values of its time over the best there, in a new row
    ahead of the old ones where it differs from what the table chose; the old rows stay
    where they still answer some mask kind (one row when both kinds pick the same new
    config)."""
    from ptxdsl.ops.attention.config import Config
    dev = out["device"].split()[-1].lower()
    plans = os.path.join(os.path.dirname(__file__), "..", "ptxdsl", "ops", "attention",
                         "plans.json")
    table = json.load(open(plans))
    old = table["rows"]

    def current(d, kind):
        return next((r for r in old if d in r["head_dims"] and kind in r["masks"]), None)

    seqs = "/".join(f"{s // 1024}k" for s in out["seqs"])
    new, replaced = [], set()
    for d in out["heads"]:
        picks = []
        for causal, masks in ((False, ["full"]), (True, ["causal", "window"])):
            runs = [r for r in out["rows"] if r["D"] == d and r["causal"] == causal
                    and "ms" in r and r["max_err"] <= 2e-2 and not r.get("counter_after")]
            shapes = {r["S"] for r in runs}
            best_ms = {sh: min(r["ms"] for r in runs if r["S"] == sh) for sh in shapes}
            score, seen = {}, {}
            for r in runs:
                key = json.dumps(r["config"], sort_keys=True)
                score[key] = score.get(key, 0.0) + r["ms"] / best_ms[r["S"]]
                seen.setdefault(key, []).append(r)
            full = [k for k in score if len(seen[k]) == len(shapes)]
            if not full:
                continue
            best = min(full, key=score.get)
            was = [current(d, m) for m in masks]
            if all(w is not None and Config(**w["config"]) == Config(**json.loads(best))
                   for w in was):
                continue                          # the table's choice stands
            measured = "/".join(f"{s // 1024}k" for s in sorted(shapes))
            say = "; ".join(f"{_name(json.loads(k))} " + " ".join(
                f"{r['tflops']:.0f}" for r in sorted(seen[k], key=lambda r: r["S"]))
                for k in full)
            picks.append((masks, best, say, measured))
            replaced.update((d, m) for m in masks)
        if len(picks) == 2 and picks[0][1] == picks[1][1]:
            picks = [(picks[0][0] + picks[1][0], picks[0][1],
                      f"full: {picks[0][2]}. causal: {picks[1][2]}", picks[0][3])]
        for masks, best, say, measured in picks:
            new.append({"head_dims": [d], "dtypes": ["bf16", "f16"], "masks": masks,
                        "config": json.loads(best),
                        "source": f"bench/results/{_arg('--name', 'attention_plans')}_{dev}"
                                  f".json",
                        "reason": f"{out['device']} bf16 TFLOP/s at S={measured} "
                                  f"({'/'.join(masks)}): {say}"})
    kept = [r for r in old if any((d, m) not in replaced
                                  for d in r["head_dims"] for m in r["masks"])]
    table["rows"] = new + kept
    with open(plans, "w") as f:          # one row a line
        f.write('{\n "about": ' + json.dumps(table["about"]) + ',\n "rows": [\n'
                + ",\n".join("  " + json.dumps(r) for r in table["rows"]) + "\n ]\n}\n")
    print(json.dumps(table["rows"], indent=1))


if __name__ == "__main__":
    main()
