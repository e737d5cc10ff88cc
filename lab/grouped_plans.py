"""A/B of the grouped GEMM's plan options on the current GPU: ``grouped.plan_for`` (the
default) against the same plan with each option of :class:`ptxdsl.ops.matmul.config.Plan`
set (clusters of 2 along N sharing A, ``tail_skip``, ``tma_store``, all three; clusters of
4 where the tile count along N is a multiple of 4; ``epi_overlap`` 2 and 4, alone and with
the others, for tiles of at most 128 columns; a tile width where it gives an even tile
count along N), beside ``torch._grouped_mm``, on the
issue's MoE shapes (G 8-64, K 2048-7168, N 1024-4096, ragged tokens per expert) and the
three shapes of docs/matmul.md's grouped table; every result checked against float64
first, then timed by ``bench/matmul.py``'s sustained interleaved rounds.

    PYTHONPATH=. python lab/grouped_plans.py [--quick] [--fp8] [--json PATH]
    PYTHONPATH=. python lab/grouped_plans.py --widths 128,256    # tile widths alone

JSON: ``--json`` or ``$OUT/grouped_plans.json``, rewritten after every shape.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from bench.matmul import timed_rounds, validate, warm  # noqa: E402
from bench.matmul_grouped import QUICK, make_set, reference, sizes_for  # noqa: E402

# (G, N, K, lo, hi) inside the ranges, then the table's three (bench QUICK).
MOE = [(16, 4096, 7168, 64, 2048), (32, 4096, 7168, 64, 1024), (8, 4096, 4096, 256, 4096),
       (64, 2048, 7168, 64, 512), (64, 1024, 2048, 64, 1024)]
SHAPES = MOE + [s for s in QUICK if s not in MOE]
ALL = {"cluster_n": 2, "tail_skip": True, "tma_store": True}
# Clusters of 4 an H100 runs at once (bench/results/matmul_tune_small_h100.json: 30, so
# 120 CTAs, where a 132-CTA persistent grid would leave 3 clusters for a second wave).
RESIDENT_CTAS = {4: 120}
OPTIONS = {"default": {}, "cn2": {"cluster_n": 2}, "tail": {"tail_skip": True},
           "tma": {"tma_store": True}, "cn2+tail+tma": ALL, "cn2+tail": {
               "cluster_n": 2, "tail_skip": True}}


def even_width(n: int, bn: int) -> int | None:
    """A tile width near ``bn`` (multiple of 16, 128 to 256) whose tile count along N is
    even, where ``bn``'s is odd (1408: 11 tiles of 128, 8 of 176); None otherwise."""
    if -(-n // bn) % 2 == 0:
        return None
    fits = [w for w in range(128, 257, 16) if n % w == 0 and (n // w) % 2 == 0]
    return min(fits, key=lambda w: abs(w - bn)) if fits else None


def candidates(n: int, dt, odt, base, widths=None) -> dict:
    """``{name: fields}`` to replace in the default plan for N columns."""
    if widths:
        return {f"bn={w}": {"bn": w} for w in widths}
    out = dict(OPTIONS)
    bn = base(dt, odt, n).bn
    if -(-n // bn) % 4 == 0:
        out["cn4+tail+tma"] = dict(ALL, cluster_n=4)
    if bn <= 128:               # two accumulators fit (Plan.epi_overlap)
        out.update({"eo2": {"epi_overlap": 2}, "eo4": {"epi_overlap": 4},
                    "cn2+tail+tma+eo3": dict(ALL, epi_overlap=3)})
    else:                       # the narrower tile with every option against the wide one
        out["bn128+cn2+tail+tma+eo3"] = dict(ALL, bn=128, epi_overlap=3)
    w = even_width(n, bn)
    if w:
        out[f"bn{w}"] = {"bn": w}
        out[f"bn{w}+cn2+tail+tma"] = dict(ALL, bn=w)
    return out


def cell(name, v, d0, t0) -> str:
    """``name=TFLOP/s (ratio to the default, to torch._grouped_mm)``."""
    if "tflops" not in v:
        return f"{name}=ERR {v.get('error', '')[:60]}"
    r = [f"{v['tflops'] / d0:.3f}x default"] if d0 else []
    r += [f"{v['tflops'] / t0:.3f}x torch"] if t0 else []
    return f"{name}={v['tflops']:.0f}" + (f" ({', '.join(r)})" if r else "")


def contender(fields: dict, kw: dict):
    """``(fn, plan)``: ``grouped_matmul`` with ``fields`` replaced in ``grouped.plan_for``'s
    plan (a tile width re-fits the ring; clusters of 4 on :data:`RESIDENT_CTAS` SMs),
    and that plan function."""
    from ptxdsl.ops import grouped_matmul
    from ptxdsl.ops.matmul import grouped
    base, hopper = grouped.plan_for, grouped.hopper_kernel
    cap = RESIDENT_CTAS.get(fields.get("cluster_n"))

    def plan(d, o, n=0):
        p = dataclasses.replace(base(d, o, n), **fields)
        return grouped.fitted(p, d, o) if "bn" in fields else p

    def kernel(*a, **kw2):
        a = list(a)
        a[4] = min(a[4], cap or a[4])         # the persistent grid's SMs
        return hopper(*a, **kw2)

    def fn(a, b, offs, sizes):
        grouped.plan_for, grouped.hopper_kernel = plan, kernel
        try:
            return grouped_matmul(a, b, offs, **kw)
        finally:
            grouped.plan_for, grouped.hopper_kernel = base, hopper
    return fn, plan


def main(argv=None):
    import torch
    from ptxdsl.core.types import bf16, e4m3
    from ptxdsl.ops.matmul import grouped
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the table's three shapes only")
    ap.add_argument("--fp8", action="store_true", help="also e4m3 (per-tensor scales)")
    ap.add_argument("--widths", default=None, help="time these tile widths instead")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--block-ms", type=float, default=20.0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    widths = [int(w) for w in args.widths.split(",")] if args.widths else None
    path = args.json or os.path.join(os.environ.get("OUT", "."), "grouped_plans.json")
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "date": datetime.datetime.now().isoformat(timespec="minutes"),
           "rounds": args.rounds, "block_ms": args.block_ms, "rows": []}
    warm(1.0)
    for g, n, k, lo, hi in QUICK if args.quick else SHAPES:
        sizes = sizes_for(g, lo, hi)
        for dtype in (torch.bfloat16, torch.float8_e4m3fn) if args.fp8 else (torch.bfloat16,):
            eight = dtype != torch.bfloat16
            dt = e4m3 if eight else bf16
            s = make_set(g, n, k, sizes, dtype)
            ref = reference(s[0], s[1], sizes)
            one = [torch.tensor([v], device="cuda") for v in (0.5, 2.0)]
            kw = {"scale_a": one[0], "scale_b": one[1]} if eight else {}   # product 1
            row, live, plans = {}, {}, {}
            for name, fields in candidates(n, dt, bf16, grouped.plan_for, widths).items():
                fn, plan = contender(fields, kw)
                plans[name] = repr(plan(dt, bf16, n))   # the plan this candidate ran
                validate(name, fn, s, ref, row, live)
            if not eight and hasattr(torch, "_grouped_mm"):
                validate("torch._grouped_mm", lambda a, b, offs, sz: torch._grouped_mm(
                    a, b, offs=offs), s, ref, row, live)
            del ref
            timed_rounds(live, [s], args.rounds, args.block_ms, 2.0 * sum(sizes) * n * k,
                         row)
            out["rows"].append({"shape": [g, n, k, lo, hi], "dtype": str(dtype),
                                "sizes": sizes, "plans": plans, "results": row})
            with open(path, "w") as f:
                json.dump(out, f, indent=1)
            d0 = row.get("default", {}).get("tflops")
            t0 = row.get("torch._grouped_mm", {}).get("tflops")
            print(f"G={g} N={n} K={k} {dtype}: " + ", ".join(
                cell(c, v, d0, t0) for c, v in row.items()), flush=True)
            del s
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
