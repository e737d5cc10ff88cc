"""Candidate plans of the Hopper GEMM timed per shape beside cuBLAS, for choosing
``ptxdsl/ops/matmul/plan.py``'s tables from measurements.

For each shape, :func:`candidates` lists plans around what ``plan.choose`` picks now
(``base``): tile width ``bn`` 64 / 128 / 176 / 192 / 224 / 256, ring depth, cluster 1 / 2
along M or 2 / 4 along N, and at M <= 128 the split-K factor and the rows of A loaded. Operands as ``bench/matmul.py`` makes them (``b = W.T``, random normal bf16,
enough copies to stream from HBM where they would fit in L2). Every candidate is validated
before it is timed: at the timed shape against a float64 product (output prefilled with
NaN, relative error < 1e-2) and at a ragged shape (379 x 1000 x 528). Timing: at least
``--block-ms`` per candidate and round in 2 ms slices that take turns
(``bench.matmul.timed_rounds``), ``--rounds`` rounds in rotated orders, median kept.
Writes ``$OUT/matmul_plans.json`` after every shape.

    python lab/matmul_plans.py                       # the default weak shapes
    python lab/matmul_plans.py --shapes 16384x28672x8192,128x4096x14336 --api
    python lab/matmul_plans.py --fp8 --shapes 8192x8192x8192   # e4m3 operands, scaled,
                                   # beside torch._scaled_mm (bench/matmul_fp8.py's sets)
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from bench.matmul import make_sets, rel_err, timed_rounds, warm  # noqa: E402

LARGE = ["16384x28672x8192", "16384x8192x28672", "1024x14336x4096", "16384x6144x4096",
         "1024x4096x4096", "1024x6144x4096", "4096x8192x28672", "2048x2048x2048"]
SMALL_NK = [(4096, 4096), (4096, 14336), (6144, 4096), (8192, 8192), (14336, 4096),
            (28672, 8192), (8192, 28672)]
DEFAULT = [f"128x{n}x{k}" for n, k in SMALL_NK] + LARGE + [f"16x{n}x{k}" for n, k in SMALL_NK]


def candidates(m, n, k, sms, device="H100", dt=None):
    """name -> Plan for one shape (duplicates of ``base`` dropped); ``dt``: the operands'
    type (bf16 unless given)."""
    from ptxdsl.ops.matmul.plan import choose, most_stages, stages_for
    from ptxdsl.core.types import bf16
    dt = dt or bf16
    base = choose(m, n, k, dt, bf16, sms, device=device)

    def mk(**kw):
        p = dataclasses.replace(base, **kw)
        if "stages" not in kw:
            p = dataclasses.replace(p, stages=stages_for(p, dt, bf16, most_stages(p.bn)))
        return p
    out = {"base": base}
    if m <= 128:
        for bn in (64, 128, 256):
            for s in (1, 2, 4):
                if bn == 256 and s > 1 or bn == 64 and s == 4 and n > 4096:
                    continue
                out[f"n{bn}s{s}"] = mk(bn=bn, split=s, cluster=1, cluster_n=1, a_rows=0)
        if m <= 64:                 # only A's first rows loaded (the others zero)
            ar = 16 if m <= 16 else 32 if m <= 32 else 64
            for bn in (64, 128, 224, 256):
                out[f"n{bn}a{ar}"] = mk(bn=bn, split=1, cluster=1, cluster_n=1, a_rows=ar)
            for bn in (64, 128):    # ... and K split over a cluster of s CTAs
                for s in (2, 4):
                    out[f"n{bn}s{s}a{ar}"] = mk(bn=bn, split=s, cluster=1, cluster_n=1,
                                                a_rows=ar)
        out["n224s1"] = mk(bn=224, split=1, cluster=1, cluster_n=1, a_rows=0)
        for bn in (64, 128):        # A shared by multicast along N
            for cn in (2, 4):
                out[f"n{bn}cn{cn}"] = mk(bn=bn, split=1, cluster=1, cluster_n=cn, a_rows=0)
    else:
        out["n128"] = mk(bn=128)
        out["n192"] = mk(bn=192)
        out["n256"] = mk(bn=256)
        out["c1"] = mk(cluster=1)
        out["n192c1"] = mk(bn=192, cluster=1)
        out["n224"] = mk(bn=224)                    # 14336 / 224: 64 whole tile columns
        out["n224c1"] = mk(bn=224, cluster=1)
        out["n176"] = mk(bn=176)                    # 14336 / 176: 82 tile columns, 5 rounds
        out["n176c1"] = mk(bn=176, cluster=1)
        out["st-1"] = mk(stages=base.stages - 1)
        out["c2"] = mk(cluster=2)
        out["n128c1"] = mk(bn=128, cluster=1)
        out["cn2"] = mk(cluster=1, cluster_n=2)
    seen, res = set(), {}
    for name, p in out.items():
        if p in seen:
            continue
        seen.add(p)
        res[name] = p
    return res


def time_and_record(live, sets, a, shape, row, plans, result, path) -> None:
    """Time the validated contenders of one shape side by side (``a.rounds`` rounds of
    ``a.block_ms``) into ``row`` and rewrite the JSON at ``path`` with it, so that a run cut
    short keeps what it measured."""
    m, n, k = shape
    warm(0.2)
    timed_rounds(live, sets, a.rounds, a.block_ms, 2.0 * m * n * k, row)
    result["rows"].append({"shape": [m, n, k], "results": row, "plans": plans})
    with open(path, "w") as f:
        json.dump(result, f, indent=1)


def main(argv=None):
    import torch
    from ptxdsl.ops.matmul.hopper import build_hopper
    from ptxdsl.core.types import bf16
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default=",".join(DEFAULT))
    ap.add_argument("--block-ms", type=float, default=20.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--api", action="store_true", help="also time ptxdsl.ops.matmul")
    ap.add_argument("--budget-s", type=float, default=1e9, help="stop starting shapes after")
    ap.add_argument("--fp8", action="store_true", help="e4m3 operands with scales")
    ap.add_argument("--candidates", default=None,
                    help="comma-separated candidate names to time (default: all)")
    a = ap.parse_args(argv)
    from ptxdsl.core.types import e4m3
    dt = e4m3 if a.fp8 else bf16
    scale = 0.125 if a.fp8 else 1.0
    if a.fp8:
        from bench.matmul_fp8 import make_sets as fp8_sets
        fp8_args = (torch.tensor([0.5], device="cuda"), torch.tensor([0.25], device="cuda"))
    t0 = time.time()
    props = torch.cuda.get_device_properties(0)
    sms, l2 = props.multi_processor_count, getattr(props, "L2_cache_size", 50 << 20)
    from ptxdsl.ops.matmul.plan import device_class
    from ptxdsl.runtime import driver
    cls = device_class(driver.get().device(torch.cuda.current_device()))
    path = os.path.join(os.environ.get("OUT", "."), "matmul_plans.json")
    result = {"device": torch.cuda.get_device_name(), "sms": sms, "layout": "lin",
              "dtype": dt.name,
              "date": time.strftime("%Y-%m-%dT%H:%M"), "block_ms": a.block_ms,
              "rounds": a.rounds, "rows": []}
    built = {}
    g = torch.Generator(device="cuda").manual_seed(1)
    tdt = torch.float8_e4m3fn if a.fp8 else torch.bfloat16
    ra = torch.randn(379, 528, device="cuda", generator=g).to(tdt)
    rw = torch.randn(1000, 528, device="cuda", generator=g).to(tdt)
    rref = ra.double() @ rw.double().t() * scale
    extra = fp8_args if a.fp8 else ()
    warm(1.0)
    for shape in a.shapes.split(","):
        if time.time() - t0 > a.budget_s:
            print("budget spent; stopping before", shape, flush=True)
            break
        m, n, k = (int(v) for v in shape.split("x"))
        if a.fp8:       # (a, b, scale_a, scale_b) sets; cuBLAS is torch._scaled_mm
            sets = [(x, b) for x, b, _, _ in fp8_sets(m, n, k, l2)]
            live = {"cuBLAS": lambda x, b: torch._scaled_mm(
                x, b, scale_a=fp8_args[0], scale_b=fp8_args[1], out_dtype=torch.bfloat16)}
        else:
            sets = make_sets(m, n, k, "lin", l2)
            live = {"cuBLAS": lambda x, b: torch.matmul(x, b)}
        x, b = sets[0]
        ref = x.double() @ b.double() * scale
        row, plans = {}, {}
        if a.api:       # the op itself (ptxdsl.ops.matmul, as bench/matmul.py calls it)
            from ptxdsl.ops import matmul as op
            kw = dict(scale_a=fp8_args[0], scale_b=fp8_args[1]) if a.fp8 else {}
            e = rel_err(op(x, b, **kw), ref)
            if e < 1e-2:
                live["api"] = lambda x, b: op(x, b, **kw)
            else:
                row["api"] = {"error": f"err={e:.3g}"}
        keep = set(a.candidates.split(",")) if a.candidates else None
        for name, p in candidates(m, n, k, sms, cls, dt).items():
            if keep is not None and name not in keep:
                continue
            plans[name] = {f.name: getattr(p, f.name) for f in dataclasses.fields(p)}
            try:
                if p not in built:
                    built[p] = build_hopper(p, dt, bf16, sms=sms, scaled=a.fp8)
                kern = built[p]

                c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
                kern(x, b.t(), *extra, c)
                # Timed through the launch bound to this signature, as the op's fast path
                # launches. The same plan as 'api' and as 'base' still differs by up to 8%
                # between blocks on an H200 at its power cap, either way round
                # (bench/results/matmul_plans_h200_4.json): single differences under
                # that are noise.
                from ptxdsl.runtime import prepare
                bound = prepare(kern).bind(x, b.t(), *extra, c)
                eptrs = [t.data_ptr() for t in extra]

                def run(x, b, kern=kern, bound=bound, eptrs=eptrs):
                    c = torch.empty(x.shape[0], b.shape[1], device="cuda", dtype=torch.bfloat16)
                    if bound is None:
                        kern(x, b.t(), *extra, c)
                    else:
                        bound(x.data_ptr(), b.data_ptr(), *eptrs, c.data_ptr())
                    return c
                rm = p.a_rows or 379        # a plan of a_rows takes no more rows of A
                cr = torch.full((rm, 1000), float("nan"), device="cuda", dtype=torch.bfloat16)
                kern(ra[:rm], rw, *extra, cr)
                torch.cuda.synchronize()
                e1, e2 = rel_err(c, ref), rel_err(cr, rref[:rm])
                del c
                if not (e1 < 1e-2 and e2 < 1e-2):
                    row[name] = {"error": f"err={e1:.3g} ragged={e2:.3g}"}
                    continue
                live[name] = run
            except Exception as e:  # noqa: BLE001 - reported in the table
                row[name] = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
        del ref
        time_and_record(live, sets, a, (m, n, k), row, plans, result, path)
        del sets, x, b
        cub = row.get("cuBLAS", {}).get("tflops")
        ours = sorted(((v["tflops"], nm) for nm, v in row.items()
                       if "tflops" in v and nm != "cuBLAS"), reverse=True)
        best = f"  best {ours[0][1]} {ours[0][0] / cub:.3f}x" if ours and cub else ""
        print(f"{shape} ({time.time() - t0:.0f}s): " + ", ".join(
            f"{nm}={v['tflops']:.0f}" if "tflops" in v else f"{nm}=ERR {v['error'][:80]}"
            for nm, v in row.items()) + best, flush=True)


if __name__ == "__main__":
    main()
