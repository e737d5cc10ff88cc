"""Try ``rms_norm_quant`` kernel schedules on the current GPU and print them fastest first.

Used to choose ``ptxdsl/ops/rmsnorm/plan.quant_kernel``'s schedule (the measurements:
``bench/results/rmsnorm_quant_tune_h100.md``). Per shape, in the same interleaved rounds:
a device copy of the bytes the kernel must move (x read, the FP8 bytes and the scales
written), the op as users call it (dynamic, static number, static tensor), and kernels
launched directly through a bound launch on preallocated outputs (no ops-layer host
work), over rotated inputs (``bench/rmsnorm.py``'s ``time_fn``). The difference between
the op and its own kernel launched directly is host time the GPU waited for, or the
placement of the outputs the op allocates: the ``(loop)`` rows tell which (the copy, the
op and its kernel timed over 200 calls queued between two events only: a GPU that never
waits gives the kernel's time there however slow each call's host work).

Kernel variants: threads per row (the row in registers, one pass), ``.minnctapersm``
(all the CTAs the threads allow) or ptxas' own registers, x read with the forward's
cache hints (``L1::evict_last``) or without them (x keeps its L2 evict_last policy). Each is
checked against float64 before it is timed. (16-byte stores of y, four or two lanes
pooling their 4- or 8-byte chunks through shuffles, were tried too and were no faster
than the per-chunk stores on an H100: see the results file.)

    python lab/rmsnorm_quant_tune.py [--shapes 2048x8192xbf16,...] [--static]
        [--only REGEX] [--rounds 3] [--json PATH]
"""
from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import json
import math
import os
import re
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from bench.rmsnorm import time_fn  # noqa: E402
from bench.rmsnorm_quant import EPS, fp8_ok, ref64  # noqa: E402

SHAPES = "2048x8192xbf16,4096x4096xbf16,2048x8192xf32,4096x4096xf32"


def variants(n, dt, full: bool) -> dict:
    """name -> plan for rows of ``n`` of ``dt`` (``full``: every width; else the
    default's width alone)."""
    from ptxdsl.ops.rmsnorm.fwd import plan
    from ptxdsl.ops.rmsnorm.quant import plan_quant
    base = plan_quant(n, dt)
    out = {}
    plain = dict(x_hints=())
    for t in (128, 256, 512, 1024):
        p = plan(n, dt, threads=t)
        if t * p.vec > n or p.per_thread * p.vec > 32 or not (full or t == base.threads):
            continue
        p = dataclasses.replace(p, two_pass=False, preload_w=True)
        for mc in (2048 // t, None):
            for hn, hk in (("", {}), (" plain", plain)):
                out[f"T{t}{' min%d' % mc if mc else ''}{hn}"] = dataclasses.replace(
                    p, min_ctas=mc, **hk)
    return out


def time_loop(fn, sets, calls: int = 200, rounds: int = 3) -> float:
    """µs per call of ``fn`` over ``calls`` calls queued back to back between two CUDA
    events (the best of ``rounds``): the GPU's time per call wherever the host keeps
    ahead of it on average, with no per-call events to slow the host down."""
    import torch
    best = float("inf")
    keep = [None] * len(sets)
    for r in range(rounds):
        for i in range(len(sets)):
            keep[i] = fn(*sets[i])
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for i in range(calls):
            j = i % len(sets)
            keep[j] = fn(*sets[j])
        e.record()
        torch.cuda.synchronize()
        best = min(best, s.elapsed_time(e) * 1000.0 / calls)
    return best


def main(argv=None):
    import torch
    from ptxdsl.ops import rms_norm_quant
    from ptxdsl.ops.rmsnorm.plan import quant_kernel
    from ptxdsl.ops.rmsnorm.quant import build_quant
    from ptxdsl.runtime import prepare
    from ptxdsl.core.types import bf16, f16, f32
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--static", action="store_true", help="also every static-scale variant")
    ap.add_argument("--only", default=None, help="keep kernel variants matching this regex")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=8, help="kernels built at once")
    ap.add_argument("--json", default=os.path.join(os.environ.get("OUT", "."),
                                                   "quant_tune.json"))
    a = ap.parse_args(argv)
    types = {"f32": (f32, torch.float32), "bf16": (bf16, torch.bfloat16),
             "f16": (f16, torch.float16)}
    props = torch.cuda.get_device_properties(0)
    l2 = getattr(props, "L2_cache_size", 50 << 20)
    out = {"device": torch.cuda.get_device_name(), "shapes": []}
    print(f"device: {out['device']}", flush=True)
    for spec in a.shapes.split(","):
        m, n, dn = spec.split("x")
        m, n = int(m), int(n)
        dt, tdt = types[dn]
        moved = m * n * (tdt.itemsize + 1) + 4 * m
        copies = min(64, max(8, math.ceil(4 * l2 / moved)))
        g = torch.Generator(device="cuda").manual_seed(m + n)
        w = (torch.randn(n, device="cuda", generator=g) * 0.5 + 1).to(tdt)
        sets = [(torch.randn(m, n, device="cuda", generator=g).to(tdt), w,
                 torch.empty(m, n, device="cuda", dtype=torch.uint8),
                 torch.empty(m, device="cuda", dtype=torch.float32)) for _ in range(copies)]
        want = ref64(sets[0][0], w)
        s_val = float((want.abs().max() / 448.0).item())
        s_t = torch.tensor([s_val], device="cuda", dtype=torch.float32)
        half = moved // 2
        bufs = {id(s[0]): (torch.empty(half, dtype=torch.uint8, device="cuda"),
                           torch.empty(half, dtype=torch.uint8, device="cuda")) for s in sets}
        live = {"copy": lambda x, w, y, s: bufs[id(x)][1].copy_(bufs[id(x)][0])}
        res: dict = {}
        live["api dyn"] = lambda x, w, y, s: rms_norm_quant(x, w, EPS)
        live["api static float"] = lambda x, w, y, s: rms_norm_quant(x, w, EPS, scale=s_val)
        live["api static tensor"] = lambda x, w, y, s: rms_norm_quant(x, w, EPS, scale=s_t)
        # Kernels: what the op runs, then the variants.
        jobs = {"ops dyn": ("ops", True), "ops static": ("ops", False)}
        for name, v in variants(n, dt, True).items():
            jobs["dyn " + name] = (v, True)
        for name, v in variants(n, dt, a.static).items():
            jobs["static " + name] = (v, False)
        if a.only:
            keep = re.compile(a.only)
            jobs = {k: v for k, v in jobs.items() if k.startswith("ops") or keep.search(k)}

        def build(item):
            name, (v, dyn) = item
            if v == "ops":
                k = quant_kernel(n, dt, dt, 16 // dt.bytes, False, dyn, EPS, 0.0, "sm_90a")
            else:
                k = build_quant(v, dt, dt, eps=EPS, dynamic=dyn)
            return name, k, k.resources()
        t0 = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(a.workers) as ex:
            built = list(ex.map(build, jobs.items()))
        print(f"{spec}: built {len(built)} kernels in {time.perf_counter() - t0:.1f} s",
              flush=True)
        regs = {}
        for name, k, r in built:
            if r.spill_stores or r.local:
                res[name] = f"spills ({r})"
                continue
            regs[name] = r.registers
            dyn = jobs[name][1]
            try:
                x0, w0, y0, s0 = sets[0]
                if dyn:
                    lb = prepare(k).bind(x0, w0, y0, s0)
                else:
                    lb = prepare(k).bind(x0, w0, s_t, y0)
                y0.fill_(0xFF)
                if dyn:
                    lb(x0.data_ptr(), w0.data_ptr(), y0.data_ptr(), s0.data_ptr())
                    got = (y0.view(torch.float8_e4m3fn), s0.view(m, 1))
                    ok = fp8_ok(got, want)
                else:
                    lb(x0.data_ptr(), w0.data_ptr(), s_t.data_ptr(), y0.data_ptr())
                    ok = fp8_ok((y0.view(torch.float8_e4m3fn), s_t), want, s_t)
                if not ok:
                    res[name] = "WRONG against float64"
                    continue
                sp = s_t.data_ptr()
                if dyn:
                    live[name] = (lambda x, w, y, s, lb=lb:
                                  lb(x.data_ptr(), w.data_ptr(), y.data_ptr(), s.data_ptr()))
                else:
                    live[name] = (lambda x, w, y, s, lb=lb, sp=sp:
                                  lb(x.data_ptr(), w.data_ptr(), sp, y.data_ptr()))
            except Exception as e:  # noqa: BLE001
                res[name] = f"{type(e).__name__}: {str(e)[:100]}"
        for name in ("api dyn", "api static float", "api static tensor"):
            out_ = live[name](*sets[0])
            if not fp8_ok(out_, want, None if name == "api dyn" else
                          torch.tensor([s_val], device="cuda")):
                res[name] = "WRONG against float64"
                live.pop(name)
        names = list(live)
        best: dict = {}
        for r in range(a.rounds):
            for name in names if r % 2 == 0 else names[::-1]:
                t = time_fn(live[name], sets, iters=40)
                best[name] = min(best.get(name, t), t)
        for name in ("copy", "ops dyn", "api dyn", "ops static", "api static float"):
            if name in live:
                best[name + " (loop)"] = time_loop(live[name], sets)
        res.update(best)
        copy_us = best["copy"]
        print(f"{spec}: copy {copy_us:.2f} µs ({moved / copy_us / 1e6:.2f} TB/s)", flush=True)
        for k_, v in sorted(best.items(), key=lambda kv: kv[1]):
            print(f"    {k_:34s} {v:7.2f} µs  {copy_us / v:6.1%} of copy"
                  + (f"  {regs[k_]} regs" if k_ in regs else ""), flush=True)
        for k_, v in res.items():
            if isinstance(v, str):
                print(f"    {k_:34s} {v}")
        out["shapes"].append({"shape": [m, n], "dtype": dn, "moved": moved, "results": res,
                              "registers": regs})
        sets = bufs = live = None  # free this shape's tensors
        torch.cuda.empty_cache()
    # Host time of one op call where the GPU is never the bottleneck (one short row).
    x = torch.randn(1, 1024, device="cuda")
    w1 = torch.randn(1024, device="cuda")
    st1 = torch.tensor([0.01], device="cuda")
    for name, fn in (("dyn", lambda: rms_norm_quant(x, w1)),
                     ("static float", lambda: rms_norm_quant(x, w1, scale=0.01)),
                     ("static tensor", lambda: rms_norm_quant(x, w1, scale=st1))):
        for _ in range(100):
            fn()
        torch.cuda.synchronize()
        runs = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(2000):
                fn()
            runs.append((time.perf_counter() - t0) / 2000 * 1e6)
        torch.cuda.synchronize()
        out.setdefault("host_us", {})[name] = min(runs)
        print(f"host µs per call (1x1024, {name}): {min(runs):.2f}", flush=True)
    with open(a.json, "w") as f:
        json.dump(out, f, indent=1)
    return out


if __name__ == "__main__":
    main()
