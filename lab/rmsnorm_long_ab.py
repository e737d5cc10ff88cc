"""A/B of long-row cluster forward plans: variants of a ClusterPlan timed side by side.

Each variant is the persistent ring plan (one buffer, 1024 threads of 8 chunks: the
forward's ring) or another split of the row, with ClusterPlan fields replaced; every one
is built, launched once into a NaN-filled output and checked against float64 (first
and last rows) and, bit for bit, against the op, then timed with the op as it is and a
device copy of the same bytes, in rounds that alternate their order (each keeps its
median). The measurements of docs/rmsnorm.md's "The two-pass cluster forward" were
taken with it.

A variant is ``field=value;field=value``: ClusterPlan fields (ints where they parse; the
``*_hints`` fields a ``+``-separated list, e.g. ``y_hints=cs``, empty for none), and
``split=C:T:K`` (C CTAs of T threads, K chunks each; with ``stages=S``, 1 by default) to
start from another split, its grid the clusters the driver runs at once (``grid=0`` for
a one-row-per-cluster plan). Example, on a GPU::

    python lab/rmsnorm_long_ab.py --ns 131072 --json out.json \\
        --variant "split=4:1024:4;stages=0;prefetch_w=0;grid=0;two_pass=1;min_ctas=2"
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

DTYPES = ("bf16", "f16", "f32")


def parse_variant(text: str) -> dict:
    """``'a=1;b=x;split=4:1024:4'`` -> ``{'a': 1, 'b': 'x', 'split': (4, 1024, 4)}``."""
    out: dict = {}
    for item in filter(None, (s.strip() for s in text.split(";"))):
        key, sep, val = item.partition("=")
        if not sep or not key:
            raise ValueError(f"variant item {item!r}: expected field=value")
        if key == "split":
            parts = val.split(":")
            if len(parts) != 3 or not all(p.isdigit() for p in parts):
                raise ValueError(f"split={val!r}: expected C:T:K (CTAs, threads, chunks)")
            out[key] = tuple(int(p) for p in parts)
        elif key.endswith("_hints"):
            out[key] = tuple(h for h in val.split("+") if h)  # "L1::evict_last+cs", "" none
        else:
            out[key] = int(val) if val.lstrip("-").isdigit() else val
    return out


def ring_plan(n: int, dt):
    """The forward's ring plan (the plan table's ring configuration: threads x chunks of
    16 bytes a CTA) for rows of ``n``, whatever the plan takes for them: the variants'
    starting point."""
    from ptxdsl.ops.rmsnorm.config import ROWS, RingConfig
    from ptxdsl.ops.rmsnorm.fwd_cluster import plan_cluster
    ring = next(r.config for r in ROWS if isinstance(r.config, RingConfig))
    return plan_cluster(n, dt, stages=ring.stages, threads=ring.threads,
                        per_thread=ring.per_thread,
                        cluster=-(-n * dt.bytes // (ring.threads * ring.per_thread * 16)))


def variant_plan(n: int, dt, text: str, base):
    """The ClusterPlan of variant ``text`` (grid still to be set) and whether it asked for
    its own grid: ``base`` with its fields replaced, or the split asked for."""
    from ptxdsl.ops.rmsnorm.fwd_cluster import plan_cluster
    f = parse_variant(text)
    split = f.pop("split", None)
    p = base
    if split:
        c, t, k = split
        p = plan_cluster(n, dt, stages=f.pop("stages", 1), threads=t, per_thread=k,
                         cluster=c)
        if p is None:
            raise ValueError(f"split {c}:{t}:{k} has no plan for rows of {n}")
    return dataclasses.replace(p, **f), "grid" in f


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ns", default="131072,262144")
    ap.add_argument("--dtype", default="bf16", choices=DTYPES)
    ap.add_argument("--m", type=int, default=32768)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--variant", action="append", default=[],
                    help="field=value;...; repeat for more variants")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    for v in args.variant:
        parse_variant(v)  # a typo fails before any GPU work

    import torch

    import ptxdsl.ops as ops
    from bench.rmsnorm import interleaved, time_fn
    from bench.rmsnorm_long import EPS, _checked, _iters
    from ptxdsl.ops.rmsnorm.fwd_cluster import build_forward_cluster
    from ptxdsl.runtime import prepare
    from ptxdsl.core.types import bf16, f16, f32

    pt = {"bf16": bf16, "f16": f16, "f32": f32}[args.dtype]
    tt = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[args.dtype]
    dev = torch.cuda.current_device()
    res = {"device": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%dT%H:%M"),
           "m": args.m, "dtype": args.dtype, "variants": args.variant, "rows": []}
    for n in (int(v) for v in args.ns.split(",")):
        x = torch.randn(args.m, n, device="cuda", dtype=tt)
        w = torch.ones(n, device="cuda", dtype=tt)  # _checked assumes ones
        y = torch.empty_like(x)
        row: dict = {}
        runs = {"copy": lambda: y.copy_(x), "op": lambda: ops.rms_norm(x, w, eps=EPS, out=y)}
        y.fill_(float("nan"))
        ops.rms_norm(x, w, eps=EPS, out=y)
        ref = y.clone()
        base = ring_plan(n, pt)
        q = prepare(build_forward_cluster(base, pt, pt, eps=EPS)).resident_clusters(dev)
        for v in [""] + args.variant:
            name = f"ring Q{q} {v or 'as shipped'}"
            try:
                p, own_grid = variant_plan(n, pt, v, base)
                qq = p.grid if own_grid else prepare(
                    build_forward_cluster(p, pt, pt, eps=EPS)).resident_clusters(dev)
                p = dataclasses.replace(p, grid=qq)
                k = build_forward_cluster(p, pt, pt, eps=EPS)
                r = k.resources()
                name += f" Q{qq} r{r.registers}s{r.spill_stores}"
                prepare(k)
                if not _checked(k, x, w, y, row, name):
                    print("WRONG", name, row.get(name), flush=True)
                    continue
                row[name + " same"] = bool(torch.equal(y, ref))
                runs[name] = lambda k=k: k(x, w, y)
            except Exception as e:  # noqa: BLE001 - a variant that fails is reported
                row[name] = f"{type(e).__name__}: {str(e)[:300]}"
                print(name, row[name], flush=True)
        del ref
        iters = _iters(2 * x.nbytes)

        def time_one(fn):
            fn()
            torch.cuda.synchronize()
            return time_fn(fn, [()], warmup=2, iters=iters)
        times = interleaved(runs, args.rounds, time_one)
        copy = statistics.median_high(times["copy"])
        for name, ts in times.items():
            med = statistics.median_high(ts)
            row[name] = {"us": med, "rounds": ts, "pct_copy": 100 * copy / med}
        res["rows"].append({"n": n, "results": row})
        print(f"== N={n} M={args.m} {args.dtype}", flush=True)
        for name, v in row.items():
            if isinstance(v, dict):
                print(f"  {name:60s} {v['us']:9.1f} us  {v['pct_copy']:6.1f}%", flush=True)
        del x, y
        torch.cuda.empty_cache()
        if args.json:
            with open(args.json, "w") as fh:
                json.dump(res, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
