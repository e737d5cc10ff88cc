"""How long a 16 KB f32 bulk reduce-add takes to *land* (``cp.reduce.async.bulk`` into
global memory, then ``cp.async.bulk.wait_group 0``) while other CTAs do the same: the wait
the deterministic attention backward's dQ writer takes before each turn passes, where the
default mode fires and forgets (issue #51: with the turn polls removed the deterministic
kernels ran 0.92-0.97 of the default, `bench/results/attention_bwd_det_fake_spin_h200.json`).

Each CTA's thread 0 adds its 16 KB shared buffer into its own global block ``iters`` times;
``waiting`` CTAs wait for each add to land and sum the ``%globaltimer`` nanoseconds of
issue-to-landing, the others (``load``) keep ``depth`` adds in flight without waiting, as
the default mode's writers do. JSON to ``$OUT/<name>.json``.

    PYTHONPATH=. python lab/bulk_reduce_latency.py [--iters 200] [--name bulk_reduce_latency]
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

NBYTES = 16384


def build(iters: int, depth: int = 4):
    """The kernel: dst ``(CTAS, NBYTES / 4)`` f32 (added to), ns ``(CTAS,)`` u64 (the
    waiting CTAs' summed landing times), the first ``WAIT`` CTAs waiting."""
    from ptxdsl import Tile, kernel
    from ptxdsl.core.types import f32, s32, s64, u8, u32, u64
    from ptxdsl.dsl import ptx, reg, smem

    @kernel(in_specs=(Tile("WAIT", s32),), out_specs=(Tile("CTAS", NBYTES // 4, f32),
                                                      Tile("CTAS", s64)),
            arg_names=("wait", "dst", "ns"), grid=lambda CTAS: (CTAS, 1, 1),
            block=(32, 1, 1), arch="sm_90a", name=f"bulk_reduce_latency_i{iters}_d{depth}")
    def bulk_reduce_latency(wait, dst, ns):
        tid = reg.scalar(u32); ptx.inst.mov.u32(tid, ptx.special.tid.x())
        cta = reg.scalar(u32); ptx.inst.mov.u32(cta, ptx.special.ctaid.x())
        buf = smem.alloc(u8, (NBYTES,), align=128).base
        zero = [reg.scalar(f32, init=0.0) for _ in range(4)]
        for i in ptx.range_(tid, NBYTES // 16, 32):
            ptx.inst("st.shared.v4.f32", ptx.addr(buf + i * 16), zero)
        ptx.inst("fence.proxy.async.shared::cta")
        ptx.inst("bar.sync", 0)
        at = ptx.global_ptr(dst) + cta * NBYTES
        waits = cta < ptx.dim("WAIT")
        with ptx.if_(tid == 0):
            total = reg.scalar(u64, init=0)
            t0, t1 = reg.scalar(u64), reg.scalar(u64)
            for _ in ptx.range_(0, iters):
                ptx.inst.mov.u64(t0, ptx.special.globaltimer())
                ptx.inst("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32",
                         ptx.addr(at), ptx.addr(buf), NBYTES)
                ptx.inst("cp.async.bulk.commit_group")
                with ptx.if_(waits):
                    ptx.inst("cp.async.bulk.wait_group", 0)
                    ptx.inst.mov.u64(t1, ptx.special.globaltimer())
                    ptx.inst.sub.u64(t1, t1, t0)
                    ptx.inst.add.u64(total, total, t1)
                with ptx.else_():
                    ptx.inst("cp.async.bulk.wait_group.read", depth - 1)
            ptx.inst("cp.async.bulk.wait_group", 0)
            ptx.inst("st.global.u64", ptx.addr(ptx.global_ptr(ns) + cta * 8), total)

    return bulk_reduce_latency


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--name", default="bulk_reduce_latency")
    args = ap.parse_args()
    import torch
    kern = build(args.iters)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    for ctas, waiting in ((1, 1), (sms, 1), (sms, sms // 2), (sms, sms), (2 * sms, 2 * sms)):
        dst = torch.zeros(ctas, NBYTES // 4, device="cuda")
        ns = torch.zeros(ctas, dtype=torch.int64, device="cuda")
        w = torch.zeros(waiting, dtype=torch.int32, device="cuda")
        kern(w, dst, ns)                                  # (warm-up: the JIT, the lines)
        ns.zero_()
        kern(w, dst, ns)
        torch.cuda.synchronize()
        per = ns[:waiting].double() / args.iters / 1e3       # µs a landing, each waiter
        rows.append({"ctas": ctas, "waiting": waiting, "mean_us": float(per.mean()),
                     "max_us": float(per.max())})
        print(json.dumps(rows[-1]), flush=True)
    result = {"lab": "bulk_reduce_latency", "device": torch.cuda.get_device_name(),
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(
                  timespec="seconds"), "bytes": NBYTES, "iters": args.iters, "rows": rows}
    with open(os.path.join(os.environ.get("OUT", "."), f"{args.name}.json"), "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
