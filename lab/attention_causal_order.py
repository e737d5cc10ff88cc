"""The causal forward's tile order against the card's power cap: the plans row beside the
dynamic tile scheduler with and without L2-sized head sections, and one CTA a tile (FA4's
sm90 grid), each timed interleaved and in sustained loops with the SM clock and power
``nvidia-smi`` reads, FlashAttention-4 beside them (where ``flash_attn.cute`` imports).

Why: under ``ncu`` one launch of ptxdsl's head-dim-128 16k causal forward and FA4's take the
same cycles (2.53M against 2.57M), but ptxdsl's reads 4x the DRAM bytes (787 against 196
GB/s, L2 hit 77% against 95%: the longest-first order over every head streams each head's
K/V once per round of ~8 m-blocks), and in the bench it runs 8% slower at a lower clock
(bench/results/ncu_fwd_order_h200.json). Head sections under the static persistent order
leave CTAs with unequal work (a simulation of the order: 10-35% over the mean at 16k); the
dynamic scheduler takes them without (0-3%). The plans rows it compares against are the
table's at the time of the run: bench/results/attention_causal_order{,2,3}_h200.json ran
before the causal rows took the dynamic order.

    PYTHONPATH=. python lab/attention_causal_order.py [--shapes 128:16384,64:16384]
        [--seconds 2] [--rounds 3] [--name attention_causal_order] [--variants waits]
    ncu --clock-control none --profile-from-start off -k regex:attention_fwd \\
        --metrics dram__bytes_read.sum,gpu__time_duration.sum,lts__t_sector_hit_rate.pct \\
        python lab/attention_causal_order.py --ncu-run [--shapes 128:16384]

JSON to ``$OUT/<name>.json``.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))


def variants(plan: dict, kind: str = "order") -> dict:
    """Label -> Config keywords: the plans row, the dynamic scheduler alone and with head
    sections of 32 and 48 MiB (keeping the row's ``q_double``: each Q buffer has its own
    tile-number words; a row without it also tries it), and one CTA a tile with 48 MiB
    sections (FA4's sm90 causal grid: no next tile to overlap, so no ``q_double`` or
    ``late_epilogue``). ``kind`` ``waits``: the row with the mbarrier waits' suspend hint
    (``Config.suspend_ns``: fewer try_wait retries, timed interleaved as neutral; here
    whether it lowers the power the clock follows)."""
    if kind == "waits":
        return {"plan": plan, "sus": {**plan, "suspend_ns": 10_000_000}}
    dyn = {**plan, "dynamic": True, "persistent": True}
    out = {"plan": plan, "dyn": dyn}
    for mb in (32, 48):
        out[f"dyn{mb}"] = {**dyn, "head_sections": True, "section_mb": mb}
    if not plan.get("q_double") and not plan.get("o_in_q"):
        out["dyn32q"] = {**out["dyn32"], "q_double": True}
    out["cta48"] = {**plan, "persistent": False, "dynamic": False, "q_double": False,
                    "late_epilogue": False, "head_sections": True, "section_mb": 48}
    return out


def plan_kwargs(d: int, s: int) -> dict:
    """The plans.json row attention() runs for bf16 causal at (d, s), as Config keywords
    (:func:`lab.attention_plans._planned`'s, without its ``plan`` mark)."""
    from lab.attention_plans import _planned
    return {k: v for k, v in _planned({"plan": True}, d, s, True).items() if k != "plan"}


def shape_fns(torch, d: int, s: int, kind: str = "order"):
    """``(fns, flops, errors)``: a no-argument call per variant (and ``fa4``), each output
    checked against SDPA first (a variant that fails or is wrong is left out, its error
    kept)."""
    import torch.nn.functional as F
    from lab.attention_bwd_case import fa4_call
    from ptxdsl.core.types import bf16
    from ptxdsl.ops.attention.config import Config, Mask
    from ptxdsl.ops.attention.fwd import build_forward
    b, h = 16384 // s, 2048 // d
    torch.manual_seed(0)
    q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    ref = F.scaled_dot_product_attention(*(x.transpose(1, 2) for x in (q, k, v)),
                                         is_causal=True).transpose(1, 2).float()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    fns, errors = {}, {}
    for label, kw in variants(plan_kwargs(d, s), kind).items():
        try:
            kern = build_forward(Config(**kw), bf16, d, Mask(-1, 0), scale=d ** -0.5, sms=sms)
            o = torch.empty_like(q)
            lse = torch.empty(b, h, s, device="cuda", dtype=torch.float32)
            args = (q, k, v, o, lse) + ((torch.zeros(1, dtype=torch.int32, device="cuda"),)
                                        if kw.get("dynamic") else ())
            kern(*args)
            torch.cuda.synchronize()
            err = float((o.float() - ref).abs().max() / ref.abs().max())
            if err > 2e-2:
                errors[label] = f"wrong result: {err}"
                continue
            fns[label] = (lambda kern, args: lambda: kern(*args))(kern, args)
        except Exception as e:  # noqa: BLE001 - recorded
            errors[label] = f"{type(e).__name__}: {str(e)[:300]}"
    fa4 = fa4_call(torch, q, k, v, True)
    if fa4:
        fns["fa4"] = fa4
    return fns, 4 * b * h * s * s * d * 0.5, errors


def main() -> None:
    import torch
    from bench.timing import time_interleaved, time_sustained
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default="128:16384,64:16384")
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--idle", type=float, default=2.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--name", default="attention_causal_order")
    ap.add_argument("--variants", default="order", choices=("order", "waits"))
    ap.add_argument("--ncu-run", action="store_true",
                    help="each variant once between cudaProfilerStart and Stop, for ncu")
    a = ap.parse_args()
    shapes = [tuple(int(x) for x in t.split(":")) for t in a.shapes.split(",")]
    out = {"benchmark": "attention_causal_order", "device": torch.cuda.get_device_name(),
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "rows": []}
    for d, s in shapes:
        fns, flops, errors = shape_fns(torch, d, s, a.variants)
        print(f"D{d} S{s} causal: {list(fns)}; errors {errors}", flush=True)
        if a.ncu_run:
            for f in fns.values():
                f(); f()
            torch.cuda.synchronize()
            torch.cuda.cudart().cudaProfilerStart()
            for f in fns.values():
                f()
            torch.cuda.synchronize()
            torch.cuda.cudart().cudaProfilerStop()
            continue
        inter = time_interleaved(torch, fns, a.rounds, 10)
        sustained = {n: [] for n in fns}
        for r in range(2):                      # forward, then reversed: drift evens out
            for n in (list(fns) if r == 0 else list(fns)[::-1]):
                sus = time_sustained(torch, fns[n], a.seconds, idle=a.idle)
                sustained[n].append({**sus, "tflops": flops / sus["ms"] / 1e9})
        for n in fns:
            row = {"D": d, "S": s, "causal": True, "variant": n,
                   "config": variants(plan_kwargs(d, s), a.variants).get(n, {}),
                   "interleaved_tflops": flops / inter[n] / 1e9, "sustained": sustained[n]}
            out["rows"].append(row)
            sus = sustained[n]
            print(f"D{d} S{s} {n:6s} interleaved {row['interleaved_tflops']:6.1f}  sustained "
                  + "  ".join(f"{x['tflops']:6.1f} @ {x['sm_mhz']:.0f} MHz {x['watts']:.0f} W"
                              for x in sus), flush=True)
        for n, e in errors.items():
            out["rows"].append({"D": d, "S": s, "causal": True, "variant": n, "error": e})
    if not a.ncu_run:
        with open(os.path.join(os.environ.get("OUT", "."), f"{a.name}.json"), "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
