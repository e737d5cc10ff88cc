"""``lab/attention_bwd_plans.py --set ahead``: the backward's plan rows at head dims 64 and
128 against ``BwdConfig.s_ahead`` (the next step's Sᵀ issued before the step ends:
``ptxdsl/ops/attention/bwd_ahead.py``), default mode, S = 1k, 4k, 16k, full and causal
(B·S = 16k tokens, H·D = 2048). Head dim 128: the plan row (dq_warp + dk_last +
ds_double), it with ``s_ahead`` 2 (Sᵀ behind dQ's stage; 1 is serialized by ptxas there).
Head dim 64: the plan row (block_m 128, overlap 1, ds_double), it with dq_warp + dk_last
(``--set h64b``'s "dqw dkl", which s_ahead needs), that with ``s_ahead`` 1 (Sᵀ behind dK,
under dQ's stage) and 2. Every variant's dq, dk, dv are checked against
cuDNN's (max relative error <= 3e-2) before any is timed; the timing is
``bench/timing.py``'s (a fresh order every round, each timed block after an untimed one
of its own). JSON to ``$OUT/attention_bwd_ahead.json``; a table and each variant's
geometric mean over its head dim's plan row last."""
from __future__ import annotations

import datetime
import json
import os
import statistics


def variants():
    from ptxdsl.ops.attention.bwd_config import BwdConfig
    h128 = dict(stages=2, dq_tma=True, overlap=1, dq_swizzle=True, dq_split=True,
                ds_double=True, dq_warp=True, dk_last=True)
    h64 = dict(stages=2, dq_tma=True, dq_swizzle=True, block_m=128, overlap=1,
               ds_double=True, dq_warp=True, dk_last=True)
    return {128: {"plan": None, "sa2": BwdConfig(**h128, s_ahead=2)},
            64: {"plan": None, "dqw dkl": BwdConfig(**h64),
                 "dqw dkl sa1": BwdConfig(**h64, s_ahead=1),
                 "dqw dkl sa2": BwdConfig(**h64, s_ahead=2)}}


def run(rounds: int = 7, block_ms: float = 10.0, grid=None, tokens: int = 16384,
        width: int = 2048, table=None, name: str = "attention_bwd_ahead") -> None:
    """``rounds`` rounds a shape; each timed block about ``block_ms`` (calls by the FLOPs
    at 500 TFLOP/s, 4 to 50); ``grid``: (S, D, causal) shapes, B·S = ``tokens`` and
    H·D = ``width``; ``table``: {head dim: {name: config, None for the plan's}} (this
    set's :func:`variants` by default), the JSON ``$OUT/<name>.json``."""
    import torch
    from lab.attention_bwd_case import case
    import ptxdsl.ops as ops
    from ptxdsl.ops.attention import bwd_api
    from bench.timing import time_interleaved

    shipped, table, rows = bwd_api.choose_bwd, table or variants(), []
    grid = grid or [(s, d, c) for d in (128, 64) for s in (1024, 4096, 16384)
                    for c in (False, True)]
    for s, d, causal in grid:
        sc = case(torch, s, d, causal, tokens, width)
        b, h, q, k, v, do, out, lse, ref, flops = (sc.b, sc.h, sc.q, sc.k, sc.v, sc.do,
                                                   sc.out, sc.lse, sc.ref, sc.flops)
        row = {"S": s, "D": d, "causal": causal, "B": b, "H": h, "results": {}}
        fns = {}
        for label, cfg in table[d].items():
            choose = shipped if cfg is None else (lambda *_a, _c=cfg, **_k: _c)

            def call(_choose=choose):
                bwd_api.choose_bwd = _choose          # the variant under test
                try:
                    return ops.attention_backward(do, q, k, v, out, lse, causal=causal)
                finally:
                    bwd_api.choose_bwd = shipped
            try:
                got = call()
                err = max(float((x.float() - r).abs().max() / r.abs().max())
                          for x, r in zip(got, ref))
            except Exception as e:  # noqa: BLE001 - report and go on
                row["results"][label] = {"error": f"{type(e).__name__}: {e}"[:300]}
                continue
            row["results"][label] = {"err": err}
            if err <= 3e-2:          # the bound: a wrong variant is not timed
                fns[label] = call
        iters = max(4, min(50, round(block_ms * 5e11 / flops)))
        row["iters"] = iters
        for label, ms in time_interleaved(torch, fns, rounds, iters).items():
            row["results"][label].update(ms=ms, tflops=flops / ms / 1e9)
        rows.append(row)
        print(json.dumps(row), flush=True)
    doc = {"lab": name, "device": torch.cuda.get_device_name(),
           "date": datetime.date.today().isoformat(), "rounds": rounds,
           "rows": rows}
    with open(os.path.join(os.environ.get("OUT", "."), f"{name}.json"), "w") as f:
        json.dump(doc, f, indent=1)
    for d, names in ((d, list(v)) for d, v in table.items()):
        print(f"{'S':>6} {'D':>4} {'mask':>6} " + " ".join(f"{n:>12}" for n in names))
        mine = [r for r in rows if r["D"] == d]
        for r in mine:
            tf = [r["results"].get(n, {}).get("tflops", float("nan")) for n in names]
            print(f"{r['S']:>6} {d:>4} {'causal' if r['causal'] else 'full':>6} " +
                  " ".join(f"{t:12.1f}" for t in tf))
        for n in names[1:]:
            ratios = [r["results"][n]["tflops"] / r["results"]["plan"]["tflops"]
                      for r in mine if "tflops" in r["results"].get(n, {})
                      and "tflops" in r["results"].get("plan", {})]
            if ratios:
                print(f"D={d} {n} / plan: geomean {statistics.geometric_mean(ratios):.3f} "
                      f"over {len(ratios)} rows")
