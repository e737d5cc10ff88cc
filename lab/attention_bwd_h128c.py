"""``lab/attention_bwd_plans.py --set h128c``: which kernel for head dim 128 under the
causal mask (issue #51: the causal row is 0.87-0.92 of FlashAttention-4 at S 1k, 4k, 16k,
while the full-mask row, the 80-query tile, is 0.96-1.02).

The causal row runs :mod:`ptxdsl.ops.attention.bwd` (64 queries a step, ``dq_split``) with
the fixed-cost options (``prep_wide``, ``dkv_tma``, ``dq_exit_read``) and ``lpt_units`` 8;
the full-mask row runs :mod:`ptxdsl.ops.attention.bwd_m80` (``dq_swap``: 80 queries a step,
dQ transposed) with the fixed-cost options, which gained about 10% on it at full mask but
were not timed on it at causal. Variants (explicit configs, not the plan's):

* ``c64``: the causal row's config (at causal it is the plan, so not timed twice);
* ``m80 fx``: the 80-query tile with the fixed-cost options (at full mask: the plan);
* ``m80 fx lptN`` (causal shapes), N = 4, 8, 16: with ``BwdConfig.lpt_units`` N (CTAs in
  key block-major sections of N (batch, K/V head) units, a section's longest causal key
  blocks first, :func:`ptxdsl.ops.attention.bwd_det.det_cta`'s order, as the causal row);
* ``m80 fx sa2`` (every shape: a candidate for the full row too), ``m80 fx lpt8 sa2``
  (causal): with ``BwdConfig.s_ahead`` 2 and ``ahead_k`` (the next step's Sᵀ queued
  behind dK, :mod:`ptxdsl.ops.attention.bwd_ahead`; +2.5% at head dim 64).

S 1k, 4k, 16k causal and 4k full as a control (B·S = 16k tokens, H = 16, inputs and cuDNN's
reference from :func:`lab.attention_bwd_case.case`). Every variant's dq, dk, dv are checked
against the reference (max relative error <= 3e-2) before any is timed; a wrong one is
reported, not timed; then interleaved rounds with the plan (:func:`bench.timing.
time_interleaved`). About 90 s of GPU time (mostly the kernels' first builds). JSON to
``$OUT/attention_bwd_h128c.json``; a table and each variant's geometric mean over the plan
on the causal shapes last."""
from __future__ import annotations

import datetime
import json
import os
import statistics

D = 128
FIXED = dict(prep_wide=True, dkv_tma=True, dq_exit_read=True)
C64 = dict(stages=2, dq_tma=True, overlap=1, dq_swizzle=True, dq_split=True, ds_double=True,
           dq_warp=True, dk_last=True, **FIXED, lpt_units=8)
M80 = dict(stages=2, dq_tma=True, overlap=1, dq_swizzle=True, block_m=80, ds_double=True,
           dq_warp=True, dk_last=True, dq_swap=True, **FIXED)
VARIANTS = {"c64": C64, "m80 fx": M80, "m80 fx lpt4": dict(M80, lpt_units=4),
            "m80 fx lpt8": dict(M80, lpt_units=8), "m80 fx lpt16": dict(M80, lpt_units=16),
            "m80 fx sa2": dict(M80, s_ahead=2, ahead_k=True),
            "m80 fx lpt8 sa2": dict(M80, lpt_units=8, s_ahead=2, ahead_k=True)}
CAUSAL_ONLY = ("m80 fx lpt4", "m80 fx lpt8", "m80 fx lpt16", "m80 fx lpt8 sa2")
GRID = ((1024, True), (4096, True), (16384, True), (4096, False))


def run(rounds: int = 9, block_ms: float = 10.0, tokens: int = 16384, width: int = 2048,
        fa4: bool = False, grid=GRID) -> None:
    """``rounds`` rounds a shape, each timed block about ``block_ms`` (calls by the FLOPs at
    500 TFLOP/s, 4 to 50); ``grid``: (S, causal) shapes; ``fa4``: FlashAttention-4's
    backward in the same rounds (off: its first calls compile for tens of seconds, and
    today's table has it)."""
    import torch
    from lab.attention_bwd_case import case
    import ptxdsl.ops as ops
    from ptxdsl.ops.attention import bwd_api
    from ptxdsl.ops.attention.bwd_config import BwdConfig
    from bench.timing import time_interleaved
    from lab.attention_bwd_short import _fa4, _mask

    shipped, rows = bwd_api.choose_bwd, []
    for s, causal in grid:
        sc = case(torch, s, D, causal, tokens, width)
        b, h, q, k, v, do, out, lse, ref, flops = (sc.b, sc.h, sc.q, sc.k, sc.v, sc.do,
                                                   sc.out, sc.lse, sc.ref, sc.flops)
        row = {"S": s, "D": D, "causal": causal, "B": b, "H": h, "results": {}}
        plan = shipped(D, "bf16", _mask(causal))
        fns = {}
        for label, cfg in [("plan", plan)] + [(n, BwdConfig(**x)) for n, x in VARIANTS.items()]:
            if label in CAUSAL_ONLY and not causal:
                continue
            if label != "plan" and cfg == plan:       # timed once, as the plan
                row["results"][label] = {"same_as": "plan"}
                continue

            def call(_cfg=cfg):
                bwd_api.choose_bwd = lambda *_a, **_k: _cfg    # the variant under test
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
            row["results"][label] = {"err": err, "config": cfg.tag +
                                     (" prep_wide" if cfg.prep_wide else "")}
            if err <= 3e-2:          # the bound: a wrong variant is not timed
                fns[label] = call
        peer = _fa4(torch, q, k, v, do, causal, ref) if fa4 else None   # same run
        if peer is not None:
            row["results"]["fa4"] = {"err": peer[1]}
            if peer[1] <= 3e-2:
                fns["fa4"] = peer[0]
        iters = max(4, min(50, round(block_ms * 5e11 / flops)))
        row["iters"] = iters
        for label, ms in time_interleaved(torch, fns, rounds, iters).items():
            row["results"][label].update(ms=ms, tflops=flops / ms / 1e9)
        for label, r in row["results"].items():       # (a duplicate reads the plan's time)
            if r.get("same_as") == "plan" and "tflops" in row["results"]["plan"]:
                r.update(ms=row["results"]["plan"]["ms"],
                         tflops=row["results"]["plan"]["tflops"])
        rows.append(row)
        print(json.dumps(row), flush=True)
    doc = {"lab": "attention_bwd_h128c", "device": torch.cuda.get_device_name(),
           "date": datetime.date.today().isoformat(), "rounds": rounds, "rows": rows}
    with open(os.path.join(os.environ.get("OUT", "."), "attention_bwd_h128c.json"), "w") as f:
        json.dump(doc, f, indent=1)
    _table(rows, ["plan"] + list(VARIANTS) + (["fa4"] if fa4 else []))


def _table(rows, names) -> None:
    """TFLOP/s a shape and variant, then each variant over the plan (geomean, causal)."""
    print(f"{'S':>6} {'mask':>6} " + " ".join(f"{n:>13}" for n in names))
    for r in rows:
        tf = [r["results"].get(n, {}).get("tflops", float("nan")) for n in names]
        print(f"{r['S']:>6} {'causal' if r['causal'] else 'full':>6} " +
              " ".join(f"{t:13.1f}" for t in tf))
    for n in names[1:]:
        ratios = [r["results"][n]["tflops"] / r["results"]["plan"]["tflops"]
                  for r in rows if r["causal"] and "tflops" in r["results"].get(n, {})
                  and "tflops" in r["results"].get("plan", {})]
        if ratios:
            print(f"{n} / plan: geomean {statistics.geometric_mean(ratios):.3f} over "
                  f"{len(ratios)} causal rows")


__all__ = ["run", "VARIANTS", "GRID"]
