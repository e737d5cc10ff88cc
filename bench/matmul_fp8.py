"""float8 GEMM side by side in one run on the current GPU: cuBLAS's scaled fp8 GEMM
(``torch._scaled_mm``, per-tensor scales), ``ptxdsl.ops.matmul`` with the same operands
and scales, and cuBLAS bf16 (``torch.matmul`` on bf16 copies of the same values) for
scale.

Operands: ``a`` (M, K) e4m3 row-major and ``b = W.T`` for a row-major e4m3 ``W`` (N, K):
the layout both fp8 kernels read (K-major), from random normal values; scales 0.5 and
0.25 as one-element f32 tensors on the GPU; bf16 output. Every result is validated
against the float64 product of the same 8-bit values times the scales (relative Frobenius
error under 1e-2, all finite) before it is timed, as in ``bench/matmul.py``, whose
sustained timing (``timed_rounds``: the contenders take turns in 2 ms slices of calls
queued back to back, median over the rounds) this uses. The table is printed last; JSON goes to
``$OUT/matmul_fp8.json`` (or ``--json``).

    PYTHONPATH=. python bench/matmul_fp8.py            # squares and the LLM shapes
    PYTHONPATH=. python bench/matmul_fp8.py --quick    # 4096^3, 8192^3 and three LLM shapes
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from bench.matmul import LLM_NK, _geomean, timed_rounds, validate, warm  # noqa: E402

SQUARES = [2048, 4096, 8192, 16384]
LLM_M = [128, 4096, 16384]
SCALES = (0.5, 0.25)


def shapes(quick: bool) -> list[tuple[int, int, int, str]]:
    if quick:
        return [(4096, 4096, 4096, "square"), (8192, 8192, 8192, "square"),
                (4096, 14336, 4096, "llm"), (4096, 4096, 14336, "llm"), (128, 8192, 8192, "llm")]
    return [(s, s, s, "square") for s in SQUARES] + [
        (m, n, k, "llm") for m in LLM_M for n, k in LLM_NK]


def make_sets(m, n, k, l2, seed=0):
    import torch
    g = torch.Generator(device="cuda").manual_seed(seed)
    per = m * k + n * k
    copies = 1 if per >= 2 * l2 else min(8, max(2, math.ceil(3 * l2 / max(per, 1))))
    sa, sb = (torch.tensor([s], device="cuda") for s in SCALES)
    sets = []
    for _ in range(copies):
        a = torch.randn(m, k, device="cuda", generator=g).to(torch.float8_e4m3fn)
        w = torch.randn(n, k, device="cuda", generator=g).to(torch.float8_e4m3fn)
        sets.append((a, w.t(), sa, sb))
    return sets


def contenders():
    import torch
    from ptxdsl.ops import matmul
    bf = {}

    def cublas_bf16(a, b, sa, sb):     # the same values in bf16 (made once per operand)
        key = (a.data_ptr(), b.data_ptr())
        if key not in bf:
            bf[key] = (a.to(torch.bfloat16), b.to(torch.bfloat16))
        x, y = bf[key]
        return torch.matmul(x, y)
    return {
        "cuBLAS fp8": (lambda a, b, sa, sb: torch._scaled_mm(a, b, scale_a=sa, scale_b=sb,
                                                             out_dtype=torch.bfloat16), True),
        "ptxdsl fp8": (lambda a, b, sa, sb: matmul(a, b, scale_a=sa, scale_b=sb), True),
        "cuBLAS bf16": (cublas_bf16, False),
    }


def bench_shape(m, n, k, cands, args, l2):
    sets = make_sets(m, n, k, l2)
    a, b, sa, sb = sets[0]
    ref = a.double() @ b.double()
    row, live = {}, {}
    for name, (fn, scaled) in cands.items():
        validate(name, fn, sets[0], ref * (SCALES[0] * SCALES[1]) if scaled else ref, row,
                 live)
    del ref
    flop = 2.0 * m * n * k
    warm(args.warm)
    return timed_rounds(live, sets, args.rounds, args.block_ms, flop, row)


def main(argv=None):
    import torch
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--shapes", default=None, help="MxNxK,... (overrides the sweep)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--block-ms", type=float, default=25.0)
    ap.add_argument("--warm", type=float, default=0.3)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    dev = torch.cuda.get_device_properties(0)
    l2 = getattr(dev, "L2_cache_size", 50 << 20)
    todo = shapes(args.quick)
    if args.shapes:
        todo = [tuple(int(v) for v in s.split("x")) + ("given",) for s in args.shapes.split(",")]
    cands = contenders()
    from ptxdsl.ops.matmul.api import describe
    from ptxdsl.ops.matmul.plan import device_class
    from ptxdsl.runtime import driver
    from ptxdsl.types import bf16, e4m3
    cls = device_class(driver.get().device(torch.cuda.current_device()))
    warm(1.0)
    result = {"device": dev.name, "sms": dev.multi_processor_count,
              "date": datetime.datetime.now().isoformat(timespec="minutes"),
              "torch": torch.__version__, "dtype": "e4m3 -> bf16", "scales": SCALES,
              "rounds": args.rounds, "block_ms": args.block_ms, "rows": []}
    path = args.json or os.path.join(os.environ.get("OUT", "."), "matmul_fp8.json")
    for m, n, k, group in todo:
        row = bench_shape(m, n, k, cands, args, l2)
        row.setdefault("ptxdsl fp8", {})["kernel"] = describe(
            m, n, k, e4m3, bf16, sms=dev.multi_processor_count, device=cls)
        result["rows"].append({"shape": [m, n, k], "group": group, "results": row})
        with open(path, "w") as f:  # after every shape: a run cut short keeps what it measured
            json.dump(result, f, indent=1)
        print(f"{m}x{n}x{k}: " + ", ".join(
            f"{c}={v['tflops']:.0f}" if "tflops" in v else f"{c}=ERR {v.get('error', '')[:80]}"
            for c, v in row.items()), flush=True)
        torch.cuda.empty_cache()
    print_table(result)
    return result


def print_table(result):
    rows = result["rows"]
    names = list(dict.fromkeys(c for r in rows for c in r["results"]))
    print(f"\nGEMM fp8 e4m3 -> bf16 on {result['device']} ({result['date']}), TFLOP/s "
          f"(sustained); ratios are ptxdsl fp8 / peer")
    print(f"{'M x N x K':>20s} " + " ".join(f"{n:>12s}" for n in names)
          + "  vs cuBLAS fp8  vs cuBLAS bf16")
    ratios = {"cuBLAS fp8": [], "cuBLAS bf16": []}
    for r in rows:
        res = r["results"]
        cells = [f"{res[n]['tflops']:12.0f}" if "tflops" in res.get(n, {}) else f"{'ERR':>12s}"
                 for n in names]
        ours = res.get("ptxdsl fp8", {}).get("tflops")
        tail = ""
        for peer in ratios:
            p = res.get(peer, {}).get("tflops")
            if ours and p:
                tail += f"  {ours / p:13.2f}x"
                ratios[peer].append(ours / p)
            else:
                tail += "              -"
        print(f"{'x'.join(map(str, r['shape'])):>20s} " + " ".join(cells) + tail)
    print("geomean ptxdsl fp8 / cuBLAS fp8: "
          f"{_geomean(ratios['cuBLAS fp8']):.3f}; / cuBLAS bf16: "
          f"{_geomean(ratios['cuBLAS bf16']):.3f}")


if __name__ == "__main__":
    main()
