"""Where a kernel's warps wait, ptxdsl's beside FlashAttention-4's: Nsight Compute's warp-state
sampling per SASS instruction, summed by stall reason and ranked by instruction. The 32nd
session's backward levers (``lse_early``, ``dq_frag``) came from this view of head dim
64's step (bench/results/attention_bwd_levers_h200.json).

Two halves. ``run`` is the workload ncu profiles: both attention calls (ptxdsl's and, where
``flash_attn.cute`` imports, FA4's) warmed, then one of each between
``cudaProfilerStart`` / ``Stop``. ``report`` reads ncu's source page (CSV) of one kernel
and prints the stall reasons' totals and the instructions with the most samples. On the
GPU machine (``--clock-control none``: the clocks stay as they are)::

    ncu --clock-control none --profile-from-start off \\
        -k 'regex:attention_bwd_bf16|flash_bwd_sm90' \\
        --section WarpStateStats --section SourceCounters --import-source no \\
        -o $OUT/prof python lab/ncu_stalls.py run --pass bwd --head-dim 64 --seq 1024
    for k in 0 1; do ncu --import $OUT/prof.ncu-rep --page source --csv \\
        --print-source sass --launch-skip $k --launch-count 1 > $OUT/src$k.csv; done
    python lab/ncu_stalls.py report $OUT/src0.csv $OUT/src1.csv [--json out.json]

(``--pass fwd`` profiles the forward: ``-k 'regex:attention_fwd|flash_fwd_sm90'``.)
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

SAMPLES = "Warp Stall Sampling (All Samples)"


def read_source(path: str) -> tuple[str, list[dict]]:
    """(kernel name, rows) of ncu's ``--page source --csv`` export: each row the
    instruction's address, SASS text, sample count and ``stall_*`` samples."""
    with open(path, newline="") as f:
        lines = list(csv.reader(f))
    if not lines or lines[0][:1] != ["Kernel Name"] or len(lines) < 2:
        raise ValueError(f"{path}: not ncu's source page (--page source --csv): its first "
                         f"line should be 'Kernel Name',<name>")
    name, head = lines[0][1], lines[1]
    if "Source" not in head or SAMPLES not in head:
        raise ValueError(f"{path}: no 'Source' or '{SAMPLES}' column: profile with "
                         f"--section SourceCounters and export with --print-source sass")
    ix = {h: i for i, h in enumerate(head)}
    reasons = [h for h in head if h.startswith("stall_") and "Not Issued" not in h]
    rows = []
    for line in lines[2:]:
        if len(line) < len(head):
            continue
        num = lambda h: int(float(line[ix[h]] or 0))
        rows.append({"address": line[ix["Address"]], "sass": line[ix["Source"]].strip(),
                     "samples": num(SAMPLES),
                     "stalls": {r[len("stall_"):]: num(r) for r in reasons if num(r)}})
    return name, rows


def summary(rows: list[dict], top: int = 20) -> dict:
    """The samples in all, by stall reason (largest first), and the ``top`` instructions
    by samples with their reasons over 15% of theirs."""
    by = {}
    for r in rows:
        for k, v in r["stalls"].items():
            by[k] = by.get(k, 0) + v
    ranked = sorted(rows, key=lambda r: -r["samples"])[:top]
    return {"samples": sum(r["samples"] for r in rows),
            "by_reason": dict(sorted(by.items(), key=lambda kv: -kv[1])),
            "top": [{"address": r["address"], "sass": r["sass"], "samples": r["samples"],
                     "reasons": {k: v for k, v in r["stalls"].items()
                                 if v > 0.15 * r["samples"]}} for r in ranked]}


def run(pass_: str, d: int, s: int, causal: bool, deterministic: bool = False,
        det_variants=()) -> None:
    """The profiled workload: each contender warmed twice, then once each between the
    profiler's start and stop (with ``deterministic``, ptxdsl's deterministic backward
    second, then one deterministic call per ``det_variants`` entry (fields replaced in the
    plan's deterministic config), FA4's default and FA4's deterministic backward last: the
    main kernels are launches 0 ptxdsl, 1 ptxdsl deterministic, 2.. the variants, then FA4
    and FA4 deterministic)."""
    import torch
    import ptxdsl.ops as ops
    from lab.attention_bwd_case import case, fa4_call, plan_as
    c = case(torch, s, d, causal)

    def det_call(changes=None):
        def call():
            with plan_as(**(changes or {})):
                return ops.attention_backward(c.do, c.q, c.k, c.v, c.out, c.lse,
                                              causal=causal, deterministic=True)
        return call
    if pass_ == "bwd":
        calls = [lambda: ops.attention_backward(c.do, c.q, c.k, c.v, c.out, c.lse,
                                                causal=causal)]
        if deterministic:
            calls += [det_call()] + [det_call(v) for v in det_variants]
    else:
        calls = [lambda: ops.attention(c.q, c.k, c.v, causal=causal)]
    fa4 = fa4_call(torch, c.q, c.k, c.v, causal, c.do if pass_ == "bwd" else None)
    if fa4:
        calls.append(fa4)
        if pass_ == "bwd" and deterministic:
            calls.append(fa4_call(torch, c.q, c.k, c.v, causal, c.do, deterministic=True))
    for _ in range(2):
        for f in calls:
            f()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for f in calls:
        f()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="the workload ncu profiles")
    r.add_argument("--pass", dest="pass_", choices=("fwd", "bwd"), default="bwd")
    r.add_argument("--head-dim", type=int, default=64)
    r.add_argument("--seq", type=int, default=1024)
    r.add_argument("--causal", action="store_true")
    r.add_argument("--det-variant", action="append", default=[], type=json.loads,
                   help="with --deterministic: a JSON object of BwdConfig fields replaced "
                   "in the plan's deterministic config, profiled after it (repeatable)")
    r.add_argument("--deterministic", action="store_true",
                   help="bwd: ptxdsl's deterministic backward too, between the default and FA4, "
                   "and FA4's deterministic one last")
    p = sub.add_parser("report", help="summarize ncu source-page CSVs")
    p.add_argument("csv", nargs="+")
    p.add_argument("--top", type=int, default=20)
    p.add_argument("--json", default=None)
    a = ap.parse_args()
    if a.cmd == "run":
        return run(a.pass_, a.head_dim, a.seq, a.causal, a.deterministic, a.det_variant)
    out = {}
    for path in a.csv:
        name, rows = read_source(path)
        out[name] = s = summary(rows, a.top)
        print(f"{name[:90]}\n  {s['samples']} samples: " +
              ", ".join(f"{k} {v}" for k, v in s["by_reason"].items()))
        for t in s["top"]:
            print(f"  {t['address'][-5:]} {t['samples']:6d} {t['sass'][:60]:60s} {t['reasons']}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
