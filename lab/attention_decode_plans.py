"""Decode plans side by side in one run on the current GPU (issue 51: Sq = 1 within 90% of
the copy of the K/V bytes at Sk >= 8k): the table's plan (``decode_plans.json``, split
kernel then combine kernel) beside the variants of ``VARIANTS`` (the fused plan, whose
last split of each tile merges the partials in the same launch; the L2 prefetch of a
split's first blocks before the wait for the previous kernel; other block sizes, ring
depths and CTAs per SM), each launched directly (its kernels, partials and a zeroed
ticket word per tile made once, outside the timing) so that every variant is timed the
same way; a torch copy of the K/V bytes beside them. Beside those, ``ptxdsl.ops.attention``
itself with the table's plan, with it fused, and with it fused for tiles of at most 4
query rows (``fused_max_rows``: Sq = 1 fused, Sq = 16 split + combine) ("op: ..."),
captured as bench/attention_decode.py captures it; each op row records the node types
of a graph of one call (a fused plan's: one kernel, no memset: its tickets come from
the capture's arena, zeroed outside the graph).

Shapes: B in {1, 8}, Sq in {1, 16}, Sk in {8k, 16k, 32k}, D in {64, 128}, H = 32, Hkv = 8,
bf16, no mask. Every variant's output and LSE are checked against torch SDPA (math
backend, float32, batch 0: max error over the largest value <= 2e-2, LSE within 1e-3)
before it is timed, and the fused variant's tickets must be zero again after its calls.
Timing: each variant's ``--iters`` calls captured in a CUDA graph, replays interleaved
(``bench.timing``), the median per call; ``pct_copy`` = K/V bytes / time as a % of the
copy's bandwidth ``2 x bytes / copy time`` (bench/attention_decode.py's measure).
Reported per row: the split count, CTAs, K/V bytes per CTA and microseconds beside it.
JSON goes to ``$OUT/attention_decode_plans.json`` (or ``--json``).

``--set tail`` (D = 128) times the table's plan beside ``TAIL`` instead (no op rows):
the fixed cost of a launch (B = 1, Sq = 1, Sk = 16k: 20 µs where the K/V bytes at the
kernel's own streaming rate take ~15), attacked by a later go-ahead for the next launch
(``late_go``), tensor-map prefetches, deeper L2 prefetches and another split count.
``--sq`` / ``--sk`` keep only those shapes.

``--set cluster`` (D = 128; B = 1 Sq = 1 Sk 8k / 16k / 32k and B = 8 Sk = 32k unless
``--b`` / ``--sk`` say otherwise) runs only op rows: the table's plan beside ``CLUSTER``
(its splits as one cluster per tile, merged through distributed shared memory:
``cluster_merge``, decode_cluster.py), each checked, then captured as the op runs; each
cluster row records how many of its clusters the device runs at once.

    PYTHONPATH=. python lab/attention_decode_plans.py [--d 128] [--b 1]
    PYTHONPATH=. python lab/attention_decode_plans.py --set tail --d 128 --b 1 8 --sq 1
    PYTHONPATH=. python lab/attention_decode_plans.py --set cluster
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from bench.attention_decode import (H, HKV, copy_fn, graphed, inputs,  # noqa: E402
                                    reference, time_graphs)

# per head dim: (block_n, stages, ctas_per_sm, min_blocks, fused, l2_ahead); the table's
# row runs as "table" beside them
VARIANTS = {
    64: [(128, 6, 1, 2, True, 0), (128, 6, 1, 2, True, 2), (64, 6, 2, 2, True, 0),
         (64, 6, 2, 2, True, 4), (64, 6, 2, 2, False, 0)],
    128: [(64, 6, 1, 2, True, 0), (64, 6, 1, 2, True, 3), (64, 6, 1, 2, False, 3),
          (128, 3, 1, 2, True, 2), (64, 3, 2, 2, True, 0), (64, 3, 2, 2, False, 0)],
}

# --set tail (issue 51: B=1 Sq=1 Sk=16k at 84% of the copy, a fixed ~5 µs per launch):
# name -> DecodePlan fields (D = 128) and an optional split count; "late" = late_go
# (the next launch starts once every split has issued its last load, so its L2
# prefetches land at this launch's tail), "tp" = tmap_prefetch.
TAIL = {
    "128x3 l2a2": dict(block_n=128, stages=3, l2_ahead=2),
    "64x6 tp": dict(tmap_prefetch=True),
    "64x6 late tp": dict(late_go=True, tmap_prefetch=True),
    "64x6 l2a3": dict(l2_ahead=3),
    "64x6 l2a6": dict(l2_ahead=6),
    "64x6 late l2a3 tp": dict(l2_ahead=3, late_go=True, tmap_prefetch=True),
    "64x6 late l2a6 tp": dict(l2_ahead=6, late_go=True, tmap_prefetch=True),
    "128x3 late l2a2 tp": dict(block_n=128, stages=3, l2_ahead=2, late_go=True,
                               tmap_prefetch=True),
    "128x3 late l2a3 tp": dict(block_n=128, stages=3, l2_ahead=3, late_go=True,
                               tmap_prefetch=True),
    "64x6 splits 15": dict(splits=15),
}


# --set cluster: name -> DecodePlan fields over the table's row (D = 128), as op rows
CLUSTER = {
    "op: cluster": dict(cluster_merge=True),
    "op: cluster tp": dict(cluster_merge=True, tmap_prefetch=True),
    "op: cluster l2a3": dict(cluster_merge=True, l2_ahead=3),
    "op: cluster <=8": dict(cluster_merge=True, cluster_max=8),    # portable: 64 CTAs at B=1
}
CLUSTER_SHAPES = [(1, 1, 8192, 128), (1, 1, 16384, 128), (1, 1, 32768, 128),
                  (8, 1, 32768, 128)]


def resident_clusters(torch, decode, plan, q, k) -> dict:
    """The split count and clusters of its kernel the device runs at once (the op's key)."""
    from ptxdsl.core.types import bf16
    from ptxdsl.ops.attention.config import Mask
    from ptxdsl.ops.attention.decode_split import ROWS
    from ptxdsl.runtime import prepare
    b, sq, h, d = q.shape
    group = h // k.shape[2]
    plan = plan.for_tile(sq, group)
    tiles = b * k.shape[2] * -(-sq // (ROWS // group))
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    ns = decode.cluster_splits(plan, decode.splits_for(plan, tiles, -(-k.shape[1] //
                                                                      plan.block_n), sms), d)
    kern, _ = decode.kernels(plan, bf16, d, group, Mask(-1, -1), float(d ** -0.5), 0.0,
                             "sm_90a", ns)
    fit = prepare(kern).resident_clusters(torch.cuda.current_device())
    # fewer at once than tiles: the op ran the ticket merge instead (decode.clusters_fit)
    return {"splits": ns, "clusters": tiles, "resident_clusters": fit,
            "clustered": fit >= tiles}


def shapes(ds=(128, 64), bs=(1, 8), sqs=(1, 16), sks=(8192, 16384, 32768)):
    return [(b, sq, sk, d) for d in ds for b in bs for sq in sqs for sk in sks]


def tail_plans(decode, table):
    """``--set tail``: name -> (plan, split count or None), the table's plan first."""
    plans = {"table": (table, None)}
    for name, kw in TAIL.items():
        kw = dict(kw)
        splits = kw.pop("splits", None)
        plans[name] = (dataclasses.replace(table, **kw), splits)
    return plans


def launcher(torch, plan, q, k, v, splits=None):
    """``(fn, out, lse, tickets, ns)``: one call of ``plan`` (``splits`` of each tile, else
    the rule's) as a function of no argument."""
    from ptxdsl.core.types import bf16
    from ptxdsl.ops.attention import decode
    from ptxdsl.ops.attention.config import Mask
    from ptxdsl.ops.attention.decode_split import ROWS
    b, sq, h, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    group = h // hk
    split, combine = decode.kernels(plan, bf16, d, group, Mask(-1, -1), float(d ** -0.5),
                                    0.0, "sm_90a")
    tiles = b * hk * -(-sq // (ROWS // group))
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    ns = splits or decode.splits_for(plan, tiles, -(-sk // plan.block_n), sms)
    f32 = dict(device="cuda", dtype=torch.float32)
    op, lp = torch.empty(ns, b, h, sq, d, **f32), torch.empty(ns, b, h, sq, **f32)
    out, lse = torch.empty_like(q), torch.empty(b, h, sq, **f32)
    tickets = torch.zeros(tiles, device="cuda", dtype=torch.int32)
    if plan.fused:
        return (lambda: split(q, k, v, op, lp, out, lse, tickets)), out, lse, tickets, ns
    return (lambda: (split(q, k, v, op, lp), combine(op, lp, out, lse))), out, lse, \
        tickets, ns


def op_graph(torch, decode, plan, q, k, v, ref, rlse, iters):
    """``ptxdsl.ops.attention`` with ``plan`` as the table's choice (the op's memo emptied
    first, so the call records this plan), checked, then captured as bench/attention_
    decode.py captures it, and the node types of a graph of one call. Returns (result
    row, graph replay or None)."""
    import ptxdsl.ops as ops
    from ptxdsl.ops.attention.api import FORWARD
    chosen = decode.choose
    decode.choose = lambda *_a: plan
    FORWARD.clear()
    try:
        out, lse = ops.attention(q, k, v, return_lse=True)
        torch.cuda.synchronize()
        err = float((out[:1].float() - ref).abs().max() / ref.abs().max())
        lerr = float(((lse[0] - rlse).abs() / rlse.abs().clamp(min=1)).max())
        res = {"plan": [plan.block_n, plan.stages, plan.ctas_per_sm, plan.min_blocks,
                        plan.fused, plan.l2_ahead, plan.fused_max_rows],
               "cluster_merge": plan.cluster_merge, "cluster_max": plan.cluster_max,
               "tmap_prefetch": plan.tmap_prefetch,
               "max_err": err,
               "lse_err": lerr}
        if err > 2e-2 or lerr > 1e-3:
            res["error"] = "wrong result"
            return res, None
        res["graph_nodes"] = graph_nodes(torch, lambda: ops.attention(q, k, v))
        return res, graphed(torch, lambda: ops.attention(q, k, v), iters)
    except Exception as e:  # noqa: BLE001 - recorded
        return {"error": f"{type(e).__name__}: {str(e)[:300]}"}, None
    finally:
        decode.choose = chosen
        FORWARD.clear()


def graph_nodes(torch, fn) -> dict:
    """Node type -> count in a CUDA graph of one call of ``fn`` (asked of the graph while
    it is being captured)."""
    from ptxdsl.runtime import driver
    drv = driver.get()
    cu = drv.cu
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
        info = drv.check(cu.cuStreamGetCaptureInfo(
            drv.stream(torch.cuda.current_stream().cuda_stream)), "cuStreamGetCaptureInfo")
        _, n = drv.check(cu.cuGraphGetNodes(info[2], 0), "cuGraphGetNodes")
        nodes, _ = drv.check(cu.cuGraphGetNodes(info[2], n), "cuGraphGetNodes")
        kinds = [drv.check(cu.cuGraphNodeGetType(x), "cuGraphNodeGetType").name
                 for x in nodes]
    return {k: kinds.count(k) for k in sorted(set(kinds))}


def ref_lse(torch, q, k):
    rep = q.shape[2] // k.shape[2]
    s = torch.einsum("qhd,khd->hqk", q[0].float(), k[0].float().repeat_interleave(rep, 1))
    return torch.logsumexp(s * q.shape[-1] ** -0.5, dim=-1)        # (H, Sq)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--json", default=None)
    ap.add_argument("--d", type=int, nargs="+", default=[128, 64], help="head dims")
    ap.add_argument("--b", type=int, nargs="+", default=[1, 8], help="batch sizes")
    ap.add_argument("--sq", type=int, nargs="+", default=[1, 16], help="query rows")
    ap.add_argument("--sk", type=int, nargs="+", default=[8192, 16384, 32768], help="keys")
    ap.add_argument("--set", choices=["plans", "tail", "cluster"], default="plans",
                    help="plans: VARIANTS and the op rows; tail: TAIL (D = 128, no op rows); "
                         "cluster: CLUSTER beside the table, op rows only")
    args = ap.parse_args()
    run_shapes = shapes(args.d, args.b, args.sq, args.sk)
    if args.set == "cluster":
        run_shapes = [(b, sq, sk, d) for b, sq, sk, d in CLUSTER_SHAPES
                      if ("--b" not in sys.argv or b in args.b)
                      and ("--sk" not in sys.argv or sk in args.sk)]
    import torch
    from ptxdsl.ops.attention import decode
    path = args.json or os.path.join(os.environ.get("OUT", "."), "attention_decode_plans.json")
    result = {"benchmark": "attention_decode_plans", "device": torch.cuda.get_device_name(),
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "torch": torch.__version__, "dtype": "bf16", "H": H, "Hkv": HKV,
              "pct_copy": "K/V bytes / time as a % of 2 x bytes / (torch copy's time)",
              "rows": []}
    for b, sq, sk, d in run_shapes:
        q, k, v = inputs(torch, b, sq, sk, d)
        nbytes = 2 * k.numel() * 2
        ref = reference(torch, q[:1], k[:1], v[:1])
        rlse = ref_lse(torch, q, k)
        if args.set == "cluster":
            plans = {}
        elif args.set == "tail":
            plans = tail_plans(decode, decode.choose(d, "bf16").for_tile(sq, H // HKV))
        else:
            plans = {"table": (decode.choose(d, "bf16"), None)}
            for bn, st, cps, mb, fused, l2a in VARIANTS[d]:
                plans[f"{bn}x{st} cps{cps}{' fused' if fused else ''}"
                      f"{f' l2a{l2a}' if l2a else ''}"] = (decode.DecodePlan(
                          block_n=bn, stages=st, ctas_per_sm=cps, min_blocks=mb, fused=fused,
                          l2_ahead=l2a), None)
        row = {"B": b, "Sq": sq, "Sk": sk, "D": d, "kv_bytes": nbytes, "results": {}}
        live = {}
        for name, (plan, splits) in plans.items():
            res = row["results"][name] = {"plan": [plan.block_n, plan.stages, plan.ctas_per_sm,
                                                   plan.min_blocks, plan.fused, plan.l2_ahead]}
            if args.set == "tail":
                res.update(late_go=plan.late_go, tmap_prefetch=plan.tmap_prefetch)
            try:
                fn, out, lse, tickets, ns = launcher(torch, plan, q, k, v, splits)
                fn()
                fn()
                torch.cuda.synchronize()
                err = float((out[:1].float() - ref).abs().max() / ref.abs().max())
                lerr = float(((lse[0] - rlse).abs() / rlse.abs().clamp(min=1)).max())
                ctas = ns * b * HKV * -(-sq // (64 // (H // HKV)))
                res.update(max_err=err, lse_err=lerr, splits=ns, ctas=ctas,
                           kv_bytes_per_cta=nbytes // ctas)
                if err <= 2e-2 and lerr <= 1e-3 and bool(torch.isfinite(out).all()) \
                        and not bool(tickets.any()):
                    live[name] = fn
                else:
                    res["error"] = "wrong result (or tickets not left zero)"
            except Exception as e:  # noqa: BLE001 - a variant that fails is recorded
                res["error"] = f"{type(e).__name__}: {str(e)[:300]}"
        live["copy"] = copy_fn(torch, nbytes)
        graphs = {n: graphed(torch, f, args.iters) for n, f in live.items()}
        table_plan = decode.choose(d, "bf16")
        fused = dataclasses.replace(table_plan, fused=True)
        ops = (("op: table", table_plan), ("op: fused", fused),
               ("op: fused <=4 rows", dataclasses.replace(fused, fused_max_rows=4)))
        if args.set == "cluster":
            ops = (("op: table", table_plan),) + tuple(
                (n, dataclasses.replace(table_plan, **kw)) for n, kw in CLUSTER.items())
        for name, plan in ops if args.set != "tail" else ():
            got = op_graph(torch, decode, plan, q, k, v, ref, rlse, args.iters)
            row["results"][name] = got[0]
            if plan.cluster_merge:
                try:
                    got[0].update(resident_clusters(torch, decode, plan, q, k))
                except Exception as e:  # noqa: BLE001 - recorded
                    got[0]["resident_error"] = f"{type(e).__name__}: {str(e)[:200]}"
            if got[1] is not None:
                graphs[name] = got[1]
        ms = time_graphs(torch, {n: g for n, g in graphs.items() if g is not None},
                         args.rounds, args.iters)
        row["copy_us"] = ms["copy"] * 1e3
        for name in graphs:
            if name != "copy" and name in ms:
                row["results"][name].update(us=ms[name] * 1e3,
                                            pct_copy=100 * ms["copy"] / (2 * ms[name]))
        result["rows"].append(row)
        print(json.dumps(row), flush=True)
        with open(path, "w") as f:
            json.dump(result, f, indent=1)
    table(result)


def table(result) -> None:
    for d in (128, 64):
        rows = [r for r in result["rows"] if r["D"] == d]
        if not rows:
            continue
        names = list(rows[0]["results"]) if rows else []
        print(f"\n{result['device']} D={d}: µs / % of the copy (splits)")
        print(f"{'B':>2} {'Sq':>3} {'Sk':>6} {'copy':>6} " + " ".join(f"{n:>26}" for n in names))
        for r in rows:
            cells = []
            for n in names:
                x = r["results"][n]
                cells.append(f"{x['us']:7.1f} {x['pct_copy']:6.1f}% ({x.get('splits', 0):>2})"
                             if "us" in x else f"{x.get('error', '-')[:26]:>26}")
            print(f"{r['B']:>2} {r['Sq']:>3} {r['Sk']:>6} {r['copy_us']:6.1f} "
                  + " ".join(f"{c:>26}" for c in cells))


if __name__ == "__main__":
    main()
