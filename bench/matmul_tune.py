"""Variants of the Hopper GEMM kernel timed side by side with cuBLAS, for choosing the
plan (``ptxdsl/ops/matmul/plan.py``): ring depth, wgmma groups in flight, TMA L2
promotion, rasterization group, and the epilogue's share (a variant without C stores,
timed only). Each variant is validated (integer-valued inputs, bit-exact f32 output at a
ragged shape; random normal at the timed shape) before it is timed; blocks of calls as in
``bench/matmul.py``. Writes ``$OUT/matmul_tune.json`` and the SASS of the default kernel.

    python bench/matmul_tune.py [--shapes 4096x4096x4096,8192x8192x8192]
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
    "wait0": {"in_flight": 0},
    "l2p256": {"l2_promotion": 256},
    "wait0+l2p256": {"in_flight": 0, "l2_promotion": 256},
    "group16": {"group_m": 16},
    "group4": {"group_m": 4},
    "stages3": {"stages": 3},
    "no-store": {"_store": False},
}


def main(argv=None):
    import torch
    from ptxdsl.ops.matmul.hopper import build_hopper
    from ptxdsl.ops.matmul.plan import choose
    from ptxdsl.types import bf16
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="4096x4096x4096,8192x8192x8192")
    ap.add_argument("--only", default=None)
    ap.add_argument("--block-ms", type=float, default=25.0)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args(argv)
    out_dir = os.environ.get("OUT", ".")
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
            store = opts.pop("_store", True)
            p = dataclasses.replace(base, **opts)
            try:
                kern = build_hopper(p, bf16, bf16, sms=sms, _store=store)
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
                if store:
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


def torch_f32():
    from ptxdsl.types import f32
    return f32


if __name__ == "__main__":
    main()
