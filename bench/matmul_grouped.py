"""Grouped GEMM (mixture-of-experts layers) side by side in one run on the current GPU:
``ptxdsl.ops.grouped_matmul`` (one launch over every group), ``torch._grouped_mm`` (where
this torch has it) and a loop of ``torch.mm`` over the groups, bf16; and the ptxdsl float8
form (e4m3, per-tensor scales) beside the loop of cuBLAS's ``torch._scaled_mm``.

Each shape is ``G`` experts with weights ``w`` (G, N, K) (the operand is its transpose
view, (G, K, N) K-major, as ``nn.Linear`` experts keep them) and ragged token counts per
expert drawn once from a seeded generator between ``lo`` and ``hi`` (one expert left empty
where G >= 8); offs are int32 on the GPU. Every result is checked against the float64
product per group (relative Frobenius error under 1e-2) before it is timed by
``bench/matmul.py``'s sustained interleaved rounds. FLOP counts only the real rows.
The table is printed last; JSON goes to ``$OUT/matmul_grouped.json`` (or ``--json``).

    PYTHONPATH=. python bench/matmul_grouped.py            # the MoE shapes
    PYTHONPATH=. python bench/matmul_grouped.py --quick    # three of them
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from bench.matmul import _geomean, timed_rounds, validate, warm  # noqa: E402

# (G, N, K, lo, hi): Mixtral-like (8 experts, 4096 <-> 14336), DeepSeek-V3-like experts
# (hidden 7168, expert width 2048) on a GPU holding 16 or 32, fine-grained 64 experts.
SHAPES = [(8, 14336, 4096, 256, 4096), (8, 4096, 14336, 256, 4096),
          (16, 4096, 7168, 64, 2048), (16, 7168, 2048, 64, 2048),
          (32, 4096, 7168, 64, 1024), (64, 1408, 2048, 64, 1024), (64, 2048, 1408, 64, 1024)]
QUICK = [SHAPES[0], SHAPES[2], SHAPES[5]]


def sizes_for(g, lo, hi, seed=0):
    import random
    r = random.Random(seed * 1000 + g)
    sizes = [r.randint(lo, hi) for _ in range(g)]
    if g >= 8:
        sizes[g // 2] = 0
    return sizes


def make_set(g, n, k, sizes, dtype, seed=0):
    import torch
    gen = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(sum(sizes), k, device="cuda", generator=gen).to(dtype)
    w = torch.randn(g, n, k, device="cuda", generator=gen).to(dtype)
    offs = torch.tensor(sizes, device="cuda").cumsum(0).to(torch.int32)
    return a, w.transpose(1, 2), offs, tuple(sizes)


def reference(a, b, sizes):
    import torch
    parts, start = [], 0
    for i, s in enumerate(sizes):
        parts.append(a[start:start + s].double() @ b[i].double())
        start += s
    return torch.cat(parts)


def contenders(fp8: bool):
    import torch
    from ptxdsl.ops import grouped_matmul
    if fp8:
        one = {}

        def scales():
            if not one:
                one["sa"], one["sb"] = (torch.tensor([v], device="cuda") for v in (0.5, 2.0))
            return one["sa"], one["sb"]

        def ours(a, b, offs, sizes):
            sa, sb = scales()
            return grouped_matmul(a, b, offs, scale_a=sa, scale_b=sb)

        def loop(a, b, offs, sizes):
            sa, sb = scales()
            return torch.cat([torch._scaled_mm(x, b[i], scale_a=sa, scale_b=sb,
                                               out_dtype=torch.bfloat16)
                              for i, x in enumerate(a.split(sizes)) if x.shape[0]])
        return {"ptxdsl fp8": ours, "loop _scaled_mm": loop}
    c = {"ptxdsl": lambda a, b, offs, sizes: grouped_matmul(a, b, offs),
         "loop torch.mm": lambda a, b, offs, sizes: torch.cat(
             [x @ b[i] for i, x in enumerate(a.split(sizes))])}
    if hasattr(torch, "_grouped_mm"):
        c["torch._grouped_mm"] = lambda a, b, offs, sizes: torch._grouped_mm(a, b, offs=offs)
    return c


def bench_shape(g, n, k, lo, hi, args, fp8: bool):
    import torch
    sizes = sizes_for(g, lo, hi)
    dtype = torch.float8_e4m3fn if fp8 else torch.bfloat16
    s = make_set(g, n, k, sizes, dtype)
    ref = reference(s[0], s[1], sizes)
    row, live = {}, {}
    for name, fn in contenders(fp8).items():
        validate(name, fn, s, ref, row, live)
    del ref
    warm(args.warm)
    flop = 2.0 * sum(sizes) * n * k
    return timed_rounds(live, [s], args.rounds, args.block_ms, flop, row), sizes


def main(argv=None):
    import torch
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--fp8", action="store_true", help="also the float8 rows")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--block-ms", type=float, default=25.0)
    ap.add_argument("--warm", type=float, default=0.3)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    dev = torch.cuda.get_device_properties(0)
    warm(1.0)
    result = {"device": dev.name, "sms": dev.multi_processor_count,
              "date": datetime.datetime.now().isoformat(timespec="minutes"),
              "torch": torch.__version__, "rounds": args.rounds, "block_ms": args.block_ms,
              "kernel": "ptxdsl grouped Hopper kernel, 128 x 128 tiles (untuned)", "rows": []}
    path = args.json or os.path.join(os.environ.get("OUT", "."), "matmul_grouped.json")
    for shape in QUICK if args.quick else SHAPES:
        for fp8 in (False, True) if args.fp8 else (False,):
            row, sizes = bench_shape(*shape, args, fp8)
            result["rows"].append({"shape": list(shape), "fp8": fp8, "sizes": sizes,
                                   "results": row})
            with open(path, "w") as f:
                json.dump(result, f, indent=1)
            print(f"{shape} {'fp8' if fp8 else 'bf16'}: " + ", ".join(
                f"{c}={v['tflops']:.0f}" if "tflops" in v else
                f"{c}=ERR {v.get('error', '')[:80]}" for c, v in row.items()), flush=True)
            torch.cuda.empty_cache()
    print_table(result)
    return result


def print_table(result):
    print(f"\nGrouped GEMM on {result['device']} ({result['date']}), TFLOP/s (sustained, real "
          f"rows); ratios are ptxdsl / peer")
    ratios: dict = {}
    for r in result["rows"]:
        res = r["results"]
        ours_name = "ptxdsl fp8" if r["fp8"] else "ptxdsl"
        ours = res.get(ours_name, {}).get("tflops")
        cells = []
        for name, v in res.items():
            cells.append(f"{name} {v['tflops']:.0f}" if "tflops" in v else f"{name} ERR")
            p = v.get("tflops")
            if name != ours_name and ours and p:
                cells[-1] += f" ({ours / p:.2f}x)"
                ratios.setdefault(name, []).append(ours / p)
        g, n, k, lo, hi = r["shape"]
        print(f"G={g:>3d} N={n:>5d} K={k:>5d} tokens {sum(r['sizes']):>6d} "
              f"{'fp8 ' if r['fp8'] else 'bf16'}: " + ", ".join(cells))
    print("geomean ptxdsl / " + "; / ".join(f"{p}: {_geomean(v):.3f}"
                                            for p, v in ratios.items()))


if __name__ == "__main__":
    main()
