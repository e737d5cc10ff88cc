"""A/B of the grouped GEMM's tile width on the current GPU: ``grouped.plan_for`` with 128- and
256-column tiles (no cluster, the deepest ring that fits), bf16 and e4m3, on the MoE shapes of
``bench/matmul_grouped.py`` (same token counts), timed by that bench's sustained rounds.

    PYTHONPATH=. python lab/grouped_plans.py [--quick]    # JSON: $OUT/grouped_plans.json
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from bench.matmul import timed_rounds, validate, warm  # noqa: E402
from bench.matmul_grouped import QUICK, SHAPES, make_set, reference, sizes_for  # noqa: E402


def main(argv=None):
    import torch
    from ptxdsl.ops import grouped_matmul
    from ptxdsl.ops.matmul import grouped
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--widths", default="128,256")
    args = ap.parse_args(argv)
    base = grouped.plan_for
    widths = [int(w) for w in args.widths.split(",")]
    out = {"device": torch.cuda.get_device_name(), "rows": []}
    warm(1.0)
    for g, n, k, lo, hi in QUICK if args.quick else SHAPES:
        sizes = sizes_for(g, lo, hi)
        for dtype in (torch.bfloat16, torch.float8_e4m3fn):
            s = make_set(g, n, k, sizes, dtype)
            ref = reference(s[0], s[1], sizes)
            row, live = {}, {}
            for bn in widths:
                def fn(a, b, offs, sz, bn=bn):
                    grouped.plan_for = lambda dt, odt, n=0: grouped.fitted(
                        dataclasses.replace(base(dt, odt, n), bn=bn), dt, odt)
                    try:
                        return grouped_matmul(a, b, offs)
                    finally:
                        grouped.plan_for = base
                validate(f"bn={bn}", fn, s, ref, row, live)
            del ref
            timed_rounds(live, [s], 2, 20.0, 2.0 * sum(sizes) * n * k, row)
            out["rows"].append({"shape": [g, n, k], "dtype": str(dtype), "results": row})
            print(f"G={g} N={n} K={k} {dtype}: " + ", ".join(
                f"{c}={v['tflops']:.0f}" if "tflops" in v else f"{c}=ERR" for c, v in row.items()),
                flush=True)
    with open(os.path.join(os.environ.get("OUT", "."), "grouped_plans.json"), "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
