"""``lab/attention_bwd_plans.py --set detpipe``: the deterministic backward's pipelined
writer turns (``BwdConfig.det_pipe``, :mod:`ptxdsl.ops.attention.bwd_detpipe`) and its
sections of more (batch, K/V head) units (``det_units`` 8, 16, 32: fewer co-resident key
blocks of a unit, so shorter chains of turns), beside the plan's deterministic rows and the
plan's default (non-deterministic) row, on the current GPU. Per shape every variant is first checked (dq, dk, dv against cuDNN's, or SDPA
flash's where cuDNN refuses the head dim: max relative error <= 3e-2; the deterministic
ones for bitwise repeats), then all are timed interleaved (a round of each variant, five
rounds, the median). Head dim 128 at S 1k, 4k, 16k full and causal; 64 and 192 at 4k
full and causal and 16k causal (``--heads`` picks). JSON to
``$OUT/attention_bwd_detpipe.json``; a table last, with each variant over the default row.
"""
from __future__ import annotations

import datetime
import json
import os
import statistics
from dataclasses import replace


def _variants(d):
    """name -> (config or None for the plan table's, deterministic)."""
    from ptxdsl.ops.attention.bwd_config import BwdConfig
    sw = dict(stages=2, dq_tma=True, dq_swizzle=True)
    plan = {64: BwdConfig(**sw),        # (the deterministic rows of bwd_plans.json)
            128: BwdConfig(**sw, overlap=1, dq_split=True, ds_double=True, dq_warp=True,
                           dk_last=True),
            192: BwdConfig(**sw, wg3=True, consumer_regs=160, overlap=2, dq_warp=True)}[d]
    # the writer warp's config: the plan's, or at 64 the default row's 128-row tile with it
    det = BwdConfig(**sw, block_m=128, overlap=1, ds_double=True, dq_warp=True) \
        if d == 64 else plan
    out = {"default": (None, False), "plan det": (None, True),
           "u16 det": (replace(plan, det_units=16), True)}
    if d == 64:
        out["m128 dqw det"] = (det, True)
    out["pipe det"] = (replace(det, det_pipe=True), True)
    for g in (8, 16, 32) if d == 128 else (16,):
        out[f"pipe u{g} det"] = (replace(det, det_pipe=True, det_units=g), True)
    return out


def run(heads: str = "") -> None:
    import torch
    from lab.attention_bwd_case import case, plan_as
    import ptxdsl.ops as ops

    grid = tuple((s, 128, c) for s in (1024, 4096, 16384) for c in (False, True)) + \
        tuple((s, d, c) for d in (64, 192) for s, c in ((4096, False), (4096, True),
                                                      (16384, True)))
    if heads:
        grid = tuple(g for g in grid if str(g[1]) in heads.split(","))
    rows = []
    for s, d, causal in grid:
        sc = case(torch, s, d, causal)
        b, h, q, k, v, do, out, lse, ref, flops = (sc.b, sc.h, sc.q, sc.k, sc.v, sc.do,
                                                   sc.out, sc.lse, sc.ref, sc.flops)
        row = {"S": s, "D": d, "causal": causal, "B": b, "H": h, "results": {}}
        calls = {}
        for name, (cfg, det) in _variants(d).items():
            def call(_c=cfg, _det=det):
                with plan_as(_c):
                    return ops.attention_backward(do, q, k, v, out, lse, causal=causal,
                                                  deterministic=_det)
            try:
                got = call()
                err = max(float((x.float() - r).abs().max() / r.abs().max())
                          for x, r in zip(got, ref))
                rep = all(all(torch.equal(x, y) for x, y in zip(got, call()))
                          for _ in range(2)) if det else None
                if not err <= 3e-2 or rep is False:     # wrong: reported, not timed
                    row["results"][name] = {"error": f"max relative error {err:.3g}, "
                                                     f"bitwise repeat {rep}"}
                    continue
                row["results"][name] = {"err": err, "bitwise_repeat": rep}
                calls[name] = call
            except Exception as e:  # noqa: BLE001 - report and go on
                row["results"][name] = {"error": f"{type(e).__name__}: {e}"[:300]}
        times = {n: [] for n in calls}
        for _ in range(5):                   # interleaved: a round of every variant
            for name, call in calls.items():
                e0, e1 = (torch.cuda.Event(enable_timing=True) for _ in range(2))
                e0.record()
                for _ in range(3):
                    call()
                e1.record()
                torch.cuda.synchronize()
                times[name].append(e0.elapsed_time(e1) / 3)
        for name, ts in times.items():
            ms = statistics.median(ts)
            row["results"][name].update(ms=ms, tflops=flops / ms / 1e9)
        rows.append(row)
        print(json.dumps(row), flush=True)
    doc = {"lab": "attention_bwd_detpipe", "device": torch.cuda.get_device_name(),
           "date": datetime.date.today().isoformat(), "rows": rows}
    with open(os.path.join(os.environ.get("OUT", "."), "attention_bwd_detpipe.json"),
              "w") as f:
        json.dump(doc, f, indent=1)
    names = list(dict.fromkeys(n for r in rows for n in r["results"]))
    print(f"{'S':>6} {'D':>4} {'mask':>6} " + " ".join(f"{n:>13}" for n in names) +
          "   (TFLOP/s; / default)")
    for r in rows:
        tf = {n: r["results"].get(n, {}).get("tflops", float("nan")) for n in names}
        print(f"{r['S']:>6} {r['D']:>4} {'causal' if r['causal'] else 'full':>6} " +
              " ".join(f"{tf[n]:7.1f} {tf[n] / tf['default']:5.2f}" for n in names))
