"""Warp tensor-core (mma.sync) bf16 GEMMs side by side in one run: examples/hopper/gemm_mma.py,
pyptx's three Ampere examples loaded on ptxdsl (imports renamed) and on pyptx itself, and
cuBLAS (torch.matmul) as the reference point.

    PYTHONPATH=.:/tmp/site python bench/ampere_gemm.py [--sizes 2048,4096] [--rounds 5]
        [--json PATH]

pyptx and its examples come from ``bench/install_wheels.py`` / the mirror (see
``bench/pyptx_examples.py``); a contender that cannot run is reported, not fatal. Every
contender is validated against a float32 torch reference before it is timed (timing as
bench/rmsnorm.py: CUDA events, interleaved rounds, best median). Prints the table last
and writes JSON to ``--json`` or ``$OUT/ampere_gemm.json`` when ``$OUT`` is set.
"""
from __future__ import annotations

import argparse
import datetime
import os
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path[:0] = [ROOT, os.path.join(ROOT, "examples", "hopper")]

from bench import pyptx_examples  # noqa: E402
from bench.save import save_result  # noqa: E402
from bench.rmsnorm import _measure  # noqa: E402

PYPTX = [("gemm", "build_gemm"), ("gemm_pipelined", "build_gemm_pipelined"),
         ("gemm_highperf_ampere", "build_gemm_highperf")]


def _case(size: int, rounds: int) -> dict:
    import torch
    import gemm_mma
    g = torch.Generator(device="cuda")
    g.manual_seed(size)
    a = (torch.randn((size, size), device="cuda", generator=g)).to(torch.bfloat16)
    bt = (torch.randn((size, size), device="cuda", generator=g)).to(torch.bfloat16)
    b = bt.T.contiguous()                      # (K, N) for gemm_mma and cuBLAS
    ref = a.float() @ b.float()
    c16 = torch.empty((size, size), device="cuda", dtype=torch.bfloat16)
    c32 = torch.empty((size, size), device="cuda", dtype=torch.float32)
    ours = gemm_mma.build_gemm()
    contenders = {"ptxdsl gemm_mma": lambda: ours(a, b, c16),
                  "cuBLAS (torch.matmul)": lambda: torch.matmul(a, b, out=c16)}
    for name, build in PYPTX:
        for original in (False, True):
            label = f"{name} on {'pyptx' if original else 'ptxdsl'}"
            try:
                mod = pyptx_examples.load(name, "ampere", original=original)
                k = getattr(mod, build)(size, size, size)
            except Exception as e:  # noqa: BLE001 - reported in the table
                contenders[label] = _fails(e)
                continue
            contenders[label] = (lambda k=k: k(a, bt))

    def ok(out):
        out = out[0] if isinstance(out, (tuple, list)) else out
        if out is None:
            out = c16
        err = ((out.float() - ref).abs() / (ref.abs() + size ** 0.5)).max()
        return bool(err < 2 ** -6)

    iters = 5 if size >= 4096 else 20
    row = _measure({k: (lambda *_, f=f: f()) for k, f in contenders.items()}, [()], ok,
                   iters, rounds=rounds)
    flop = 2 * size ** 3
    for r in row.values():
        if "us" in r:
            r["tflops"] = flop / r["us"] / 1e6
    return {"size": size, "row": row}


def _fails(e):
    def f(*_):
        raise e
    return f


def print_table(result: dict) -> None:
    print(f"\nmma.sync bf16 GEMM on {result['device']} ({result['date']})")
    for case in result["cases"]:
        s = case["size"]
        cublas = case["row"].get("cuBLAS (torch.matmul)", {}).get("tflops")
        print(f"  {s}^3:")
        for name, r in case["row"].items():
            if "tflops" in r:
                frac = f"  {100 * r['tflops'] / cublas:5.1f}% of cuBLAS" if cublas else ""
                print(f"    {name:34s} {r['tflops']:7.1f} TFLOP/s  {r['us']:9.1f} µs{frac}")
            else:
                print(f"    {name:34s} {r['error']}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="2048,4096")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    import torch
    cases = [_case(int(s), a.rounds) for s in filter(None, a.sizes.split(","))]
    result = {"device": torch.cuda.get_device_name(),
              "date": datetime.datetime.now().isoformat(timespec="seconds"), "cases": cases}
    save_result(result, a.json, "ampere_gemm")
    print_table(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
