"""The persistent forward against the row-per-CTA kernels, over the call's row count.

``ptxdsl.ops`` takes the persistent forward (``fwd_loop``: a fixed grid of one CTA per
SM walking the rows, the next row's loads in flight while this one is reduced) for f32
rows of 16384 only while each CTA walks at most ``RowConfig.loop_rows_per_cta`` (plans.json) rows, and the
two-pass kernel of 1024 threads (``plan.two_pass_1024``) past that. This times, for each
row count, the op as planned, both kernels, the one-pass 512-thread row-per-CTA kernel
(w held in registers, or loaded after the reduction), torch.compile of the same math
and a device copy of the same bytes, each checked against ``F.rms_norm`` first, in
interleaved rounds (every other one in reverse order; each keeps its median).

    python lab/rmsnorm_loop_rows.py [--n 16384] [--ms 1024,2048,...] [--json PATH]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

MS = (1024, 1536, 2048, 4096, 16384, 32768)


def kernels(n: int, sms: int, device) -> dict:
    """name -> forward kernel of f32 rows of ``n`` (16-byte chunks)."""
    from ptxdsl.ops.rmsnorm.fwd import build_forward, plan
    from ptxdsl.ops.rmsnorm.fwd_loop import build_forward_loop, loop_ctas_per_sm
    from ptxdsl.ops.rmsnorm.plan import row_config, two_pass_1024
    from ptxdsl.core.types import f32
    base = plan(n, f32)
    late = dict(preload_w=False, w_hints=("L1::evict_last",), w_policy="evict_last")
    out = {"two_pass_1024": build_forward(two_pass_1024(plan(n, f32, threads=1024),
                                                        row_config(n, f32, 4, device)),
                                          f32, f32),
           f"T{base.threads} one-pass": build_forward(
               dataclasses.replace(base, two_pass=False, preload_w=True), f32, f32),
           f"T{base.threads} one-pass late w": build_forward(
               dataclasses.replace(base, two_pass=False, **late), f32, f32)}
    cps = loop_ctas_per_sm(base)
    if cps:
        out[f"loop T{base.threads} x{cps}"] = build_forward_loop(base, f32, f32, sms * cps)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=16384)
    ap.add_argument("--ms", default=",".join(map(str, MS)))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    ms = [int(v) for v in a.ms.split(",")]

    import torch
    import torch.nn.functional as F

    from bench.rmsnorm import interleaved, time_fn
    from ptxdsl.ops.rmsnorm.plan import forward_kernel
    from ptxdsl.runtime import driver
    from ptxdsl.core.types import f32

    n, eps = a.n, 1e-6
    device = driver.get().device(0)
    props = torch.cuda.get_device_properties(0)
    sms, l2 = props.multi_processor_count, getattr(props, "L2_cache_size", 50 << 20)
    ks = kernels(n, sms, device)
    compiled = torch.compile(lambda x, w: F.rms_norm(x, (n,), w, eps), dynamic=False)
    res = {"device": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%dT%H:%M"),
           "n": n, "dtype": "f32", "rounds": a.rounds, "rows": []}
    for m in ms:
        nbytes = 2 * m * n * 4
        copies = min(64, max(4, -(-3 * l2 // nbytes)))  # the rotation is 3x L2: DRAM numbers
        sets = [(torch.randn(m, n, device="cuda"), torch.randn(n, device="cuda"),
                 torch.empty(m, n, device="cuda")) for _ in range(copies)]
        ops = forward_kernel(n, f32, f32, 4, False, False, eps, "sm_90a", sms, device, m=m)
        live = {"copy": lambda x, w, y: y.copy_(x),
                "torch.compile": lambda x, w, y: compiled(x, w),
                f"op ({ops.name})": lambda x, w, y, k=ops: k(x, w, y)}
        live.update({name: (lambda x, w, y, k=k: k(x, w, y)) for name, k in ks.items()})
        x0, w0, y0 = sets[0]
        ref = F.rms_norm(x0, (n,), w0, eps)
        for name, fn in live.items():
            if name == "copy":
                continue
            y0.fill_(float("nan"))
            got = fn(x0, w0, y0)
            if name != "torch.compile":  # the kernels write y0
                got = y0
            err = ((got - ref).abs().max() / ref.abs().max()).item()
            if not err < 2e-6:
                raise SystemExit(f"{name} at {m}x{n}: wrong, max error {err:.3g}")
        iters = max(20, min(200, int(0.2 / (nbytes / 4e12))))
        times = interleaved(live, a.rounds,
                            lambda fn, sets=sets: time_fn(fn, sets, warmup=3, iters=iters))
        med = {k: statistics.median_high(v) for k, v in times.items()}
        res["rows"].append({"m": m, "us": med, "rounds": times})
        tc = med["torch.compile"]
        print(f"== {m}x{n} f32 (copy {med['copy']:.1f} us)", flush=True)
        for k, v in sorted(med.items(), key=lambda kv: kv[1]):
            print(f"   {k:40s} {v:9.2f} us {100 * med['copy'] / v:6.1f}% of copy "
                  f"{tc / v:6.3f}x torch.compile", flush=True)
        del sets
        torch.cuda.empty_cache()
        if a.json:
            with open(a.json, "w") as fh:
                json.dump(res, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
