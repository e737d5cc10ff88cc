"""pyptx's Hopper GEMM examples, loaded on ptxdsl (imports renamed) and on pyptx itself,
timed side by side in one run on the current GPU, with cuBLAS (torch.matmul) as the
reference point.

    PYTHONPATH=.:/tmp/site python bench/pyptx_compat.py [--sizes 4096,8192]
        [--grouped 8x2048x64x2048,8x512x64x512] [--rounds 5] [--json PATH]

pyptx comes from ``bench/install_wheels.py`` (its wheel also ships the examples, which
``bench/pyptx_examples.py`` reads). Every contender is validated against a float32
torch reference before it is timed; a contender that fails or cannot run is reported,
not fatal. Timing as in bench/rmsnorm.py (CUDA events, median per round, interleaved
rounds, best round kept). Prints the table last and writes JSON to ``--json`` or
``$OUT/pyptx_compat.json`` when ``$OUT`` is set.
"""
from __future__ import annotations

import argparse
import datetime
import os
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

from bench import pyptx_examples  # noqa: E402
from bench.save import save_result  # noqa: E402
from bench.rmsnorm import _measure  # noqa: E402


def _gemm_case(size: int, rounds: int) -> dict:
    import torch
    ours = pyptx_examples.load("gemm_highperf_hopper")
    gen = torch.Generator(device="cuda")
    gen.manual_seed(size)
    a = torch.randn((size, size), device="cuda", dtype=torch.bfloat16, generator=gen)
    b = torch.randn((size, size), device="cuda", dtype=torch.bfloat16, generator=gen)
    sched_np = ours.create_hilbert_schedule(size // (ours.BM * ours.CLUSTER_M), size // ours.BN)
    sched = torch.tensor(sched_np, device="cuda", dtype=torch.int32)
    ref = torch.matmul(b.float(), a.float().T)  # (N, M): the kernel's output layout

    def ok(out):
        return bool(torch.allclose(out.float(), ref, atol=1e-2, rtol=1e-2))

    contenders = {"ptxdsl": lambda a, b, s: ours.gemm_warp_specialized(a, b, s.view(torch.uint32))}
    try:
        theirs = pyptx_examples.load("gemm_highperf_hopper", original=True)
        contenders["pyptx"] = lambda a, b, s: theirs.gemm_warp_specialized(a, b, s)
    except Exception as e:  # noqa: BLE001 - reported in the table
        print(f"pyptx unavailable: {type(e).__name__}: {e}")
    contenders["cuBLAS"] = lambda a, b, s: torch.matmul(b, a.T)
    row = _measure(contenders, [(a, b, sched)], ok, iters=20 if size >= 8192 else 50,
                   rounds=rounds)
    flops = 2 * size ** 3
    for r in row.values():
        if "us" in r:
            r["tflops"] = flops / r["us"] * 1e-6
    return {"case": f"gemm {size}^3 bf16", "results": row}


def _grouped_case(G: int, M: int, N: int, K: int, rounds: int) -> dict:
    import numpy as np
    import torch
    ours = pyptx_examples.load("grouped_gemm")
    k_ours = ours.build_grouped_gemm(G, M, N, K)
    np.random.seed(G * 1009 + M * 997 + N * 17 + K)
    a3 = torch.tensor((np.random.randn(G, M, K) * 0.1).astype(np.float32), device="cuda",
                      dtype=torch.bfloat16)
    b3 = torch.tensor((np.random.randn(G, K, N) * 0.1).astype(np.float32), device="cuda",
                      dtype=torch.bfloat16)
    a2, b2 = a3.reshape(G * M, K), b3.reshape(G * K, N)
    ref = torch.einsum("gmk,gkn->gmn", a3.float(), b3.float()).reshape(G * M, N)

    def ok(out):
        # f32 outputs (the grouped kernels) to 1e-3; torch.bmm's bf16 output to its own
        # rounding (half a bf16 ulp: 2^-9 relative, with room)
        rtol = 1e-3 if out.dtype == torch.float32 else 2.0 ** -7
        return bool(torch.allclose(out.reshape(G * M, N).float(), ref, atol=1e-4, rtol=rtol))

    contenders = {"ptxdsl": k_ours}
    try:
        theirs = pyptx_examples.load("grouped_gemm", original=True)
        contenders["pyptx"] = theirs.build_grouped_gemm(G, M, N, K)
    except Exception as e:  # noqa: BLE001
        print(f"pyptx unavailable: {type(e).__name__}: {e}")
    contenders["torch.bmm"] = lambda a, b: torch.bmm(a.view(G, M, K), b.view(G, K, N))
    row = _measure(contenders, [(a2, b2)], ok, iters=100, rounds=rounds)
    flops = 2 * G * M * N * K
    for r in row.values():
        if "us" in r:
            r["tflops"] = flops / r["us"] * 1e-6
    return {"case": f"grouped G={G} M={M} N={N} K={K}", "results": row}


def print_table(result: dict) -> None:
    print(f"\npyptx Hopper examples on {result['device']} ({result['date']}): median µs "
          f"(TFLOP/s); 'ptxdsl/pyptx' = pyptx time / ptxdsl time")
    names = list(dict.fromkeys(n for c in result["cases"] for n in c["results"]))
    head = f"{'case':<34}" + "".join(f"{n:>22}" for n in names) + f"{'ptxdsl/pyptx':>14}"
    print(head)
    print("-" * len(head))
    for c in result["cases"]:
        cells = []
        for n in names:
            r = c["results"].get(n, {})
            if "us" in r:
                cells.append(f"{r['us']:>12.1f} ({r['tflops']:>6.1f})")
            else:
                cells.append(f"{'error' if 'error' in r else '-':>22}")
        ours, theirs = c["results"].get("ptxdsl", {}), c["results"].get("pyptx", {})
        ratio = (f"{theirs['us'] / ours['us']:>14.3f}" if "us" in ours and "us" in theirs
                 else f"{'-':>14}")
        print(f"{c['case']:<34}" + "".join(f"{x:>22}" for x in cells) + ratio)
    for c in result["cases"]:
        for n, r in c["results"].items():
            if "error" in r:
                print(f"  {c['case']}: {n}: {r['error']}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="4096,8192")
    ap.add_argument("--grouped", default="8x2048x64x2048,8x512x64x512")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    import torch
    cases = []
    for s in filter(None, a.sizes.split(",")):
        cases.append(_gemm_case(int(s), a.rounds))
    for g in filter(None, a.grouped.split(",")):
        G, M, N, K = (int(x) for x in g.split("x"))
        cases.append(_grouped_case(G, M, N, K, a.rounds))
    result = {"device": torch.cuda.get_device_name(), "date": datetime.datetime.now().isoformat(
        timespec="seconds"), "cases": cases}
    save_result(result, a.json, "pyptx_compat")
    print_table(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
