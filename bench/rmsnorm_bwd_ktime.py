"""Kernel time (the GPU's, host work excluded) of RMSNorm backward plans for short rows.

Short rows' calls are partly host-bound, so ``bench/rmsnorm_tune.py``'s per-call times
(host work included where the GPU waits for it) hide kernel differences of 10-15%
under the host's noise. Here the torch profiler reports each kernel's own duration:
every candidate runs once per round, in an order shuffled per round (each kernel
follows different neighbours), for ``--rounds`` rounds over inputs rotated through 8
sets; the median per candidate is reported.

No copy runs in the same rounds: a kernel right after a device copy pays for writing
back the copy's dirty lines from L2 (4096x1000 bf16 on an H100: 13.7 against 9.8 us
for the same plan after another backward kernel).

Candidates: ``ops`` (what ``ptxdsl.ops`` runs for that call), ``chunk`` (one 16-byte
chunk a thread and about 40 KiB of rows an SM: ops' plan for many rows, and for every
call before 2026-11-24), and ``T{threads} R{groups}`` with ``--sweep`` (every power of
two from 32 threads a row and row groups of 2-12, with and without the register
prefetch, ``nopf``), else a few.

    python3 bench/rmsnorm_bwd_ktime.py 4096x1000xbf16,32768x1024xf32 [--sweep]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

FEW = ((64, 8, True), (64, 6, True), (128, 5, True))


def candidates(m, n, T, sms, info, sweep):
    """``{name: BwdPlan}`` for ``m`` rows of ``n`` (dtype ``T``)."""
    from ptxdsl.ops.rmsnorm import plan as choice
    from ptxdsl.ops.rmsnorm.bwd import plan_backward
    from ptxdsl.ops.rmsnorm.fwd import max_vec
    vec = max_vec(n, T)
    ops_p, _ = choice.backward_kernel(n, T, T, vec, "sm_90a", sms, info, 0.0, m=m)
    out = {"ops": ops_p}

    def add(name, **kw):
        try:
            p = plan_backward(n, T, sms, vec=vec, ctas_per_sm=1, **kw)
        except ValueError:  # that shape does not fit (threads, groups, shared memory)
            return
        if p.fused and p.prefetch == kw.get("prefetch", p.prefetch):
            out[name] = dataclasses.replace(p, l2_ahead=ops_p.l2_ahead)

    t, g = choice.short_row_shape(n, T, vec, True)
    add("chunk", threads=t, groups=g)
    chunks = -(-n // vec)
    shapes = ([(t, g, pf) for t in (32, 64, 128, 256, 512) if chunks <= 8 * t <= 16 * chunks
               for g in (2, 3, 4, 5, 6, 8, 10, 12) for pf in (True, False)]
              if sweep else FEW)
    for t, g, pf in shapes:
        add(f"T{t} R{g}{'' if pf else ' nopf'}", threads=t, groups=g, prefetch=pf)
    return out


def kernel_times(fns: dict, rounds: int) -> dict:
    """Median kernel µs of each ``fns[name](round)`` (one kernel per call)."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    names = list(fns)
    order = []
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as pr:
        for r in range(rounds):
            shuffled = names[:]
            random.Random(r).shuffle(shuffled)
            for name in shuffled:
                fns[name](r)
                order.append(name)
        torch.cuda.synchronize()
    evs = sorted((e for e in pr.events() if e.device_type.name == "CUDA"
                  and "memset" not in e.name.lower()), key=lambda e: e.time_range.start)
    if len(evs) != len(order):
        raise RuntimeError(f"{len(evs)} kernels profiled for {len(order)} calls")
    times: dict = {name: [] for name in names}
    for name, e in zip(order, evs):
        times[name].append(e.device_time_total)
    return {name: statistics.median(v) for name, v in times.items()}


def main(argv=None):
    import torch
    from ptxdsl.ops.rmsnorm.bwd import build_backward
    from ptxdsl.runtime import driver, prepare
    from ptxdsl.types import bf16, f16, f32
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("shapes", help="MxNxdtype,... e.g. 4096x1000xbf16,32768x1024xf32")
    ap.add_argument("--sweep", action="store_true", help="every threads x groups candidate")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--json", default=os.path.join(os.environ.get("OUT", "."),
                                                   "rmsnorm_bwd_ktime.json"))
    a = ap.parse_args(argv)
    types = {"bf16": (bf16, torch.bfloat16), "f16": (f16, torch.float16),
             "f32": (f32, torch.float32)}
    info = driver.get().device(0)
    out = {"device": torch.cuda.get_device_name(), "rounds": a.rounds, "shapes": []}
    for spec in a.shapes.split(","):
        m, n, dn = spec.split("x")
        m, n = int(m), int(n)
        T, tdt = types[dn]
        sets = []
        for _ in range(8):
            x = torch.randn(m, n, device="cuda").to(tdt)
            rstd = torch.rsqrt((x.float() ** 2).mean(-1) + 1e-6)
            sets.append((torch.randn_like(x), x, torch.randn(n, device="cuda").to(tdt), rstd,
                         torch.empty_like(x)))
        fns, skipped, plans = {}, [], {}
        for name, p in candidates(m, n, T, info.sm_count, info, a.sweep).items():
            k = build_backward(p, T, T)
            if k.resources().spill_stores or prepare(k).resident_ctas(0) < p.grid:
                skipped.append(name)
                continue
            dw = torch.empty(n, device="cuda", dtype=tdt)
            ws = torch.zeros(2, device="cuda", dtype=torch.int32)
            part = torch.empty(p.grid, n, device="cuda")

            def call(r, k=k, dw=dw, ws=ws, part=part):
                dy, x, w, rstd, dx = sets[r % len(sets)]
                k(dy, x, w, rstd, ws, dx, dw, part)
            call(0)
            fns[name] = call
            plans[name] = f"T{p.threads} R{p.groups} pf{int(p.prefetch)}"
        med = kernel_times(fns, a.rounds)
        top = sorted(med.items(), key=lambda kv: kv[1])
        print(f"{m}x{n} {dn}: ops ({plans['ops']}) {med['ops']:.1f} us, chunk "
              f"({plans.get('chunk', '-')}) {med.get('chunk', float('nan')):.1f}; fastest "
              + ", ".join(f"{k} {v:.1f}" for k, v in top[:5]), flush=True)
        out["shapes"].append({"shape": [m, n], "dtype": dn, "plans": plans, "kernel_us": med,
                              "skipped": skipped})
    with open(a.json, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
