"""Grouped GEMM (mixture-of-experts layers) side by side in one run on the current GPU:
``ptxdsl.ops.grouped_matmul`` (one launch over every group), ``torch._grouped_mm`` (where
this torch has it) and a loop of ``torch.mm`` over the groups, bf16; with ``--fp8`` the
float8 forms too (e4m3, bf16 out), in both scalings ``grouped_matmul`` takes: per-tensor
scales beside a loop of cuBLAS's ``torch._scaled_mm``, and row-wise scales (``scale_a``
(total_M,), ``scale_b`` (G, N), uniform in [0.5, 1.5)) beside ``torch._scaled_grouped_mm``
(where this torch has it) and a loop of row-wise ``torch._scaled_mm``.

Each shape is ``G`` experts with weights ``w`` (G, N, K) (the operand is its transpose
view, (G, K, N) K-major, as ``nn.Linear`` experts keep them) and ragged token counts per
expert drawn once from a seeded generator between ``lo`` and ``hi`` (one expert left empty
where G >= 8); offs are int32 on the GPU. Every result is checked against the float64
product per group (relative Frobenius error under 1e-2) before it is timed by
``bench/matmul.py``'s sustained interleaved rounds. FLOP counts only the real rows.
The table is printed last; JSON goes to ``$OUT/matmul_grouped.json`` (or ``--json``).

    PYTHONPATH=. python bench/matmul_grouped.py            # the MoE shapes
    PYTHONPATH=. python bench/matmul_grouped.py --quick    # three of them
    PYTHONPATH=. python bench/matmul_grouped.py --fp8      # and the float8 rows
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


def make_set(g, n, k, sizes, dtype, seed=0, device="cuda"):
    import torch
    gen = torch.Generator(device=device).manual_seed(seed)
    a = torch.randn(sum(sizes), k, device=device, generator=gen).to(dtype)
    w = torch.randn(g, n, k, device=device, generator=gen).to(dtype)
    offs = torch.tensor(sizes, device=device).cumsum(0).to(torch.int32)
    return a, w.transpose(1, 2), offs, tuple(sizes)


def row_scales(g, n, total, seed=0, device="cuda"):
    """Row-wise scales: ``scale_a`` (total_M,) and ``scale_b`` (G, N), uniform in [0.5, 1.5)."""
    import torch
    gen = torch.Generator(device=device).manual_seed(seed + 1)
    return (torch.rand(total, device=device, generator=gen) + 0.5,
            torch.rand(g, n, device=device, generator=gen) + 0.5)


def reference(a, b, sizes, sa=None, sb=None):
    """float64 product per group (row-wise: times ``sa`` per row and ``sb[g]`` per column)."""
    import torch
    parts, start = [], 0
    for i, s in enumerate(sizes):
        part = a[start:start + s].double() @ b[i].double()
        if sa is not None:
            part = part * sa[start:start + s, None].double() * sb[i][None, :].double()
        parts.append(part)
        start += s
    return torch.cat(parts)


def row_contenders():
    """Row-wise float8 (the set is ``(a, b, offs, sizes, scale_a, scale_b)``)."""
    import torch
    from ptxdsl.ops import grouped_matmul

    def loop(a, b, offs, sizes, sa, sb):
        return torch.cat([torch._scaled_mm(x, b[i], scale_a=s.view(-1, 1),
                                           scale_b=sb[i].view(1, -1), out_dtype=torch.bfloat16)
                          for i, (x, s) in enumerate(zip(a.split(sizes), sa.split(sizes)))
                          if x.shape[0]])
    c = {"ptxdsl fp8": lambda a, b, offs, sizes, sa, sb: grouped_matmul(
            a, b, offs, scale_a=sa, scale_b=sb),
         "loop _scaled_mm": loop}
    if hasattr(torch, "_scaled_grouped_mm"):
        c["torch._scaled_grouped_mm"] = lambda a, b, offs, sizes, sa, sb: \
            torch._scaled_grouped_mm(a, b, sa, sb, offs=offs, out_dtype=torch.bfloat16)
    return c


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


def bench_shape(g, n, k, lo, hi, args, fp8: bool, scales: str = "tensor"):
    """One shape's row; ``scales`` ("tensor" or "row") for the float8 rows."""
    import torch
    sizes = sizes_for(g, lo, hi)
    dtype = torch.float8_e4m3fn if fp8 else torch.bfloat16
    s = make_set(g, n, k, sizes, dtype)
    if fp8 and scales == "row":
        s = s + row_scales(g, n, sum(sizes))
        ref, cands = reference(*s[:2], sizes, *s[4:]), row_contenders()
    else:   # per-tensor scales 0.5 and 2.0: the unscaled product
        ref, cands = reference(s[0], s[1], sizes), contenders(fp8)
    row, live = {}, {}
    for name, fn in cands.items():
        validate(name, fn, s, ref, row, live)
    del ref
    warm(args.warm)
    flop = 2.0 * sum(sizes) * n * k
    return timed_rounds(live, [s], args.rounds, args.block_ms, flop, row), sizes


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--fp8", action="store_true", help="also the float8 rows")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--block-ms", type=float, default=25.0)
    ap.add_argument("--warm", type=float, default=0.3)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    import torch                  # after --help, which needs no torch
    dev = torch.cuda.get_device_properties(0)
    warm(1.0)
    result = {"device": dev.name, "sms": dev.multi_processor_count,
              "date": datetime.datetime.now().isoformat(timespec="minutes"),
              "torch": torch.__version__, "rounds": args.rounds, "block_ms": args.block_ms,
              "kernel": "ptxdsl grouped Hopper kernel, 128 x 128 tiles (untuned)", "rows": []}
    path = args.json or os.path.join(os.environ.get("OUT", "."), "matmul_grouped.json")
    kinds = [(False, None)] + ([(True, "tensor"), (True, "row")] if args.fp8 else [])
    for shape in QUICK if args.quick else SHAPES:
        for fp8, scales in kinds:
            row, sizes = bench_shape(*shape, args, fp8, scales)
            result["rows"].append({"shape": list(shape), "fp8": fp8, "scales": scales,
                                   "sizes": sizes, "results": row})
            with open(path, "w") as f:
                json.dump(result, f, indent=1)
            print(f"{shape} {'fp8 ' + scales if fp8 else 'bf16'}: " + ", ".join(
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
        kind = f"fp8 {r.get('scales') or 'tensor'}" if r["fp8"] else "bf16"
        cells = []
        for name, v in res.items():
            cells.append(f"{name} {v['tflops']:.0f}" if "tflops" in v else f"{name} ERR")
            p = v.get("tflops")
            if name != ours_name and ours and p:
                cells[-1] += f" ({ours / p:.2f}x)"
                ratios.setdefault(f"{name} ({kind})", []).append(ours / p)
        g, n, k, lo, hi = r["shape"]
        print(f"G={g:>3d} N={n:>5d} K={k:>5d} tokens {sum(r['sizes']):>6d} "
              f"{kind:10s}: " + ", ".join(cells))
    print("geomean ptxdsl / " + "; / ".join(f"{p}: {_geomean(v):.3f}"
                                            for p, v in ratios.items()))


if __name__ == "__main__":
    main()
