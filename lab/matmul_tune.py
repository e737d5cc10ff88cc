"""Variants of the Hopper GEMM kernel timed side by side with cuBLAS, for choosing the
plan (``ptxdsl/ops/matmul/plan.py``): the ring's depth. Each variant is validated (integer-valued inputs, bit-exact f32 output at a
ragged shape; random normal at the timed shape) before it is timed; blocks of calls as in
``bench/matmul.py``. Writes ``$OUT/matmul_tune.json`` and the SASS of the default kernel.

    python lab/matmul_tune.py [--shapes 4096x4096x4096,8192x8192x8192]
    python lab/matmul_tune.py --small        # split-K 1 / 2 / 4 at M in {1, 16, 128}

``--small`` times the one-tile-row plans of ``plan.one_row`` with the split forced to 1, 2
and 4, both B layouts
(``lin``: ``x @ w.T``, K-major; ``nn``: a row-major (K, N) b, MN-major), beside cuBLAS on
the same operands; it also records how many clusters of 2 and 4 of the kernel the device
holds at once (``cuOccupancyMaxActiveClusters``: split 4 needs 32 for N = 4096). A kernel
still running 20 s after its validation launch (a deadlock) ends the run with a message;
the JSON written so far is kept.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from bench.matmul import rel_err, time_block, warm  # noqa: E402

VARIANTS = {
    "base": {},
    "stages3": {"stages": 3},
}


def main(argv=None):
    import torch
    from ptxdsl.ops.matmul.hopper import build_hopper
    from ptxdsl.ops.matmul.plan import choose
    from ptxdsl.core.types import bf16
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="4096x4096x4096,8192x8192x8192")
    ap.add_argument("--only", default=None)
    ap.add_argument("--block-ms", type=float, default=25.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--small", action="store_true", help="split-K sweep at small M")
    ap.add_argument("--m", default="1,16,128", help="--small: the Ms")
    ap.add_argument("--layouts", default="lin,nn", help="--small: lin (x @ w.T), nn (a @ b)")
    a = ap.parse_args(argv)
    out_dir = os.environ.get("OUT", ".")
    if a.small:
        return small(a, out_dir)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    names = a.only.split(",") if a.only else list(VARIANTS)
    shapes = [tuple(int(v) for v in s.split("x")) for s in a.shapes.split(",")]
    result = {"device": torch.cuda.get_device_name(), "rows": []}
    warm(1.0)
    for m, n, k in shapes:
        base = choose(m, n, k, bf16, bf16, sms)
        g = torch.Generator(device="cuda").manual_seed(0)
        x = torch.randn(m, k, device="cuda", generator=g).to(torch.bfloat16)
        w = torch.randn(n, k, device="cuda", generator=g).to(torch.bfloat16)
        ref = x.double() @ w.double().t()
        live = {"cuBLAS": lambda x, w: torch.matmul(x, w.t())}
        row = {}
        for name in names:
            opts = dict(VARIANTS[name])
            p = dataclasses.replace(base, **opts)
            try:
                kern = build_hopper(p, bf16, bf16, sms=sms)
                if name == "base" and (m, n, k) == shapes[0]:
                    try:
                        with open(os.path.join(out_dir, "matmul_base.sass"), "w") as f:
                            f.write(kern.sass())
                    except Exception as e:  # no disassembler
                        print("sass:", e)

                def run(x, w, kern=kern):
                    c = torch.empty(x.shape[0], w.shape[0], device="cuda", dtype=torch.bfloat16)
                    kern(x, w, c)
                    return c
                xi = torch.randint(-4, 5, (300, 520), device="cuda").to(torch.bfloat16)
                wi = torch.randint(-4, 5, (264, 520), device="cuda").to(torch.bfloat16)
                ci = torch.empty(300, 264, device="cuda", dtype=torch.float32)
                build_hopper(dataclasses.replace(choose(300, 264, 520, bf16, torch_f32()),
                                                 **opts), bf16, torch_f32(), sms=sms)(xi, wi, ci)
                exact = torch.equal(ci.double(), xi.double() @ wi.double().t())
                err = rel_err(run(x, w), ref)
                if not exact or not err < 1e-2:
                    row[name] = {"error": f"exact={exact} err={err:.3g}"}
                    continue
                live[name] = run
            except Exception as e:
                row[name] = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
        del ref
        warm(0.3)
        order = list(live)
        for r in range(a.rounds):
            for name in order if r % 2 == 0 else order[::-1]:
                us = time_block(live[name], [(x, w)], a.block_ms)
                if us < row.get(name, {}).get("us", float("inf")):
                    row[name] = {"us": us, "tflops": 2.0 * m * n * k / us / 1e6}
        result["rows"].append({"shape": [m, n, k], "results": row})
        print(f"{m}x{n}x{k}: " + ", ".join(
            f"{v}={r['tflops']:.0f}" if "tflops" in r else f"{v}=ERR {r['error'][:60]}"
            for v, r in row.items()), flush=True)
    with open(os.path.join(out_dir, "matmul_tune.json"), "w") as f:
        json.dump(result, f, indent=1)


SMALL_NK = [(4096, 4096), (14336, 4096), (4096, 14336), (6144, 4096), (8192, 8192),
            (28672, 8192), (8192, 28672)]


def finish_or_exit(torch, seconds=20.0, what=""):
    """Poll the queued GPU work; a kernel still running after ``seconds`` ends the process
    (a deadlocked pipeline would otherwise hang the whole run)."""
    import time
    ev = torch.cuda.Event()
    ev.record()
    end = time.time() + seconds
    while not ev.query():
        if time.time() > end:
            print(f"\n{what}: GPU work still running after {seconds} s (deadlock?); exiting",
                  flush=True)
            os._exit(3)
        time.sleep(0.001)


def max_active_clusters(kern, torch, smem: int):
    """``cuOccupancyMaxActiveClusters`` of a launched cluster kernel with ``smem`` bytes of
    dynamic shared memory per CTA (``Launcher.resident_clusters``), or why not."""
    try:
        launcher = kern.runtime_cache.get("launcher")
        return launcher.resident_clusters(torch.cuda.current_device(), smem)
    except Exception as e:  # noqa: BLE001 - a report, not a requirement
        return f"{type(e).__name__}: {e}"[:120]


def small(a, out_dir):
    """The --small sweep (see the module docstring)."""
    import torch
    from ptxdsl.ops.matmul.hopper import build_hopper
    from ptxdsl.ops.matmul.plan import one_row
    from ptxdsl.core.types import bf16
    props = torch.cuda.get_device_properties(0)
    sms = props.multi_processor_count
    l2 = getattr(props, "L2_cache_size", 50 << 20)
    path = os.path.join(out_dir, "matmul_tune_small.json")
    result = {"device": torch.cuda.get_device_name(), "sms": sms, "rows": [],
              "max_active_clusters": {}}
    built = {}
    ms = [int(v) for v in a.m.split(",")]
    layouts = a.layouts.split(",")
    warm(1.0)
    for m in ms:
        for n, k in SMALL_NK:
            g = torch.Generator(device="cuda").manual_seed(0)
            # enough copies of the operands that B streams from HBM, not L2
            copies = max(1, min(8, -(-3 * l2 // (2 * (m + n) * k))))
            xs = [torch.randn(m, k, device="cuda", generator=g).to(torch.bfloat16)
                  for _ in range(copies)]
            ws = [torch.randn(n, k, device="cuda", generator=g).to(torch.bfloat16)
                  for _ in range(copies)]
            x, w = xs[0], ws[0]
            ref = x.double() @ w.double().t()
            for lay in layouts:
                bmats = [v if lay == "lin" else v.t().contiguous() for v in ws]   # (N,K)/(K,N)
                bmat = bmats[0]
                sets = list(zip(xs, bmats))
                major = "K" if lay == "lin" else "MN"
                live = {"cuBLAS": (lambda x, b, lay=lay: torch.matmul(x, b.t() if lay == "lin"
                                                                        else b))}
                row = {}
                for s in (1, 2, 4):
                    name = f"split{s}"
                    p = one_row(m, n, k, bf16, bf16, sms, split=s)
                    try:
                        if (p, major) not in built:
                            built[(p, major)] = build_hopper(p, bf16, bf16, sms=sms,
                                                             b_major=major)
                        kern = built[(p, major)]

                        def run(x, b, kern=kern):
                            c = torch.empty(x.shape[0], n, device="cuda", dtype=torch.bfloat16)
                            kern(x, b, c)
                            return c
                        c = run(x, bmat)
                        finish_or_exit(torch, what=f"{m}x{n}x{k} {lay} {name}")
                        err = rel_err(c, ref)
                        if not err < 1e-2:
                            row[name] = {"error": f"err={err:.3g}"}
                            continue
                        if s > 1 and str(s) not in result["max_active_clusters"]:
                            result["max_active_clusters"][str(s)] = \
                                max_active_clusters(kern, torch, p.smem_bytes(bf16, bf16))
                        live[name] = run
                    except Exception as e:  # noqa: BLE001 - reported in the table
                        row[name] = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
                warm(0.2)
                order = list(live)
                for r in range(a.rounds):
                    for name in order if r % 2 == 0 else order[::-1]:
                        us = time_block(live[name], sets, a.block_ms)
                        if us < row.get(name, {}).get("us", float("inf")):
                            row[name] = {"us": us, "tflops": 2.0 * m * n * k / us / 1e6,
                                         "gbps": 2.0 * n * k / us / 1e3}
                result["rows"].append({"shape": [m, n, k], "layout": lay, "copies": copies,
                                       "results": row})
                del sets, bmats
                with open(path, "w") as f:
                    json.dump(result, f, indent=1)
                ours = [(v["us"], kname) for kname, v in row.items()
                        if "us" in v and kname != "cuBLAS"]
                best = min(ours) if ours else (0, "-")
                cub = row.get("cuBLAS", {}).get("us")
                print(f"{m}x{n}x{k} {lay}: " + ", ".join(
                    f"{v}={r['us']:.1f}us" if "us" in r else f"{v}=ERR {r['error'][:50]}"
                    for v, r in row.items())
                    + (f"  best {best[1]} {cub / best[0]:.2f}x cuBLAS" if cub and best[0]
                       else ""), flush=True)
            del ref
    print("max active clusters:", result["max_active_clusters"])


def torch_f32():
    from ptxdsl.core.types import f32
    return f32


if __name__ == "__main__":
    main()
