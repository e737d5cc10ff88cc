"""float8 GEMM side by side in one run on the current GPU: cuBLAS's scaled fp8 GEMM
(``torch._scaled_mm``), ``ptxdsl.ops.matmul`` with the same operands and scales, and
cuBLAS bf16 (``torch.matmul`` on bf16 copies of the same values) for scale, in one of the
scaling modes (``--mode``):

* ``tensor``: per-tensor scales 0.5 and 0.25 (one-element f32 tensors on the GPU);
* ``row``: ``scale_a`` (M, 1) and ``scale_b`` (1, N), uniform in [0.5, 1.5) (cuBLAS's
  row-wise ``_scaled_mm``);
* ``block``: ``scale_a`` (M, ceil(K/128)) column-major, ``scale_b`` (ceil(K/128),
  ceil(N/128)), powers of two; beside cuBLAS's block-wise ``_scaled_mm`` (1x128 by
  128x128) where this torch runs it, given ``scale_b``'s values K-blocks-contiguous as
  torch requires (:func:`torch_block_scale_b`, made once per shape in the untimed
  validation call; a row-major ``scale_b`` is refused, and its transpose view of a square
  shape runs but reads the blocks transposed), the dequantize-then-bf16-GEMM path a
  framework without a block-scaled kernel runs
  (``dequant+bf16``: expand the scales, multiply, ``torch.matmul``; K a multiple of 128),
  and cuBLAS's per-tensor fp8 GEMM on the same operands (what the scales cost).

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
    PYTHONPATH=. python bench/matmul_fp8.py --mode block --quick
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


def mode_scales(mode, m, n, k, g):
    """The mode's (scale_a, scale_b) f32 tensors on the GPU (see the module docstring)."""
    import torch
    if mode == "tensor":
        return tuple(torch.tensor([s], device="cuda") for s in SCALES)
    if mode == "row":
        return (torch.rand(m, 1, device="cuda", generator=g) + 0.5,
                torch.rand(1, n, device="cuda", generator=g) + 0.5)
    kb, nb = -(-k // 128), -(-n // 128)
    return ((2.0 ** torch.randint(-2, 2, (kb, m), device="cuda", generator=g)).float().t(),
            (2.0 ** torch.randint(-2, 2, (kb, nb), device="cuda", generator=g)).float())


def reference(a, b, sa, sb, mode, plain=None):
    """float64 ``a @ b`` under the mode's scales (``plain``: ``a @ b`` in float64, known)."""
    import torch
    a, b = a.double(), b.double()
    if mode == "tensor":
        return (a @ b if plain is None else plain) * (float(sa) * float(sb))
    if mode == "row":
        return (a @ b if plain is None else plain) * sa.double() * sb.double()
    k, n = b.shape
    out = torch.zeros(a.shape[0], n, dtype=torch.float64, device=a.device)
    for kb in range(-(-k // 128)):
        ks = slice(128 * kb, 128 * kb + 128)
        out += (a[:, ks] @ b[ks]) * sa[:, kb:kb + 1].double() * \
            sb[kb].double().repeat_interleave(128)[:n]
    return out


def make_sets(m, n, k, l2, seed=0, mode="tensor"):
    import torch
    g = torch.Generator(device="cuda").manual_seed(seed)
    per = m * k + n * k
    copies = 1 if per >= 2 * l2 else min(8, max(2, math.ceil(3 * l2 / max(per, 1))))
    sa, sb = mode_scales(mode, m, n, k, g)
    sets = []
    for _ in range(copies):
        a = torch.randn(m, k, device="cuda", generator=g).to(torch.float8_e4m3fn)
        w = torch.randn(n, k, device="cuda", generator=g).to(torch.float8_e4m3fn)
        sets.append((a, w.t(), sa, sb))
    return sets


def contenders(mode="tensor"):
    import torch
    from ptxdsl.ops import matmul
    bf = {}
    if mode == "block":
        return block_contenders(bf)

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


def torch_block_scale_b(sb):
    """``scale_b`` (ceil(K/128), ceil(N/128)) as ``torch._scaled_mm``'s 128x128 block-wise
    mode reads it: the same values with the K-blocks contiguous (its transpose row-major,
    torch's check of ``scale_b.t()`` against ``b.t()``); ptxdsl takes them row-major."""
    return sb.t().contiguous().t()


def block_contenders(bf):
    """Block-wise: ptxdsl, cuBLAS block-wise, dequantize + bf16 GEMM, and cuBLAS
    per-tensor fp8 on the same operands (scales 1: its time only)."""
    import torch
    from ptxdsl.ops import matmul
    one, cm = {}, {}

    def cublas_block(a, b, sa, sb):     # scale_b re-laid out once per shape, untimed
        if cm.get("of") is not sb:      # (holding sb: no later tensor can take its place)
            cm.update(of=sb, laid=torch_block_scale_b(sb))
        return torch._scaled_mm(a, b, scale_a=sa, scale_b=cm["laid"],
                                out_dtype=torch.bfloat16)

    def dequant(a, b, sa, sb):
        m, k = a.shape
        n = b.shape[1]
        xa = (a.float().view(m, k // 128, 128) * sa.unsqueeze(-1)).view(m, k)
        sbe = sb.repeat_interleave(128, 0).repeat_interleave(128, 1)[:k, :n]
        return torch.matmul(xa.to(torch.bfloat16), (b.float() * sbe).to(torch.bfloat16))

    def per_tensor(a, b, sa, sb):
        if "s" not in one:
            one["s"] = torch.ones(1, device="cuda")
        return torch._scaled_mm(a, b, scale_a=one["s"], scale_b=one["s"],
                                out_dtype=torch.bfloat16)
    return {
        "ptxdsl fp8": (lambda a, b, sa, sb: matmul(a, b, scale_a=sa, scale_b=sb), True),
        "cuBLAS fp8": (cublas_block, True),
        "dequant+bf16": (dequant, True),
        "cuBLAS fp8 tensor": (per_tensor, False),
    }


def bench_shape(m, n, k, cands, args, l2):
    mode = getattr(args, "mode", "tensor")
    sets = make_sets(m, n, k, l2, mode=mode)
    a, b, sa, sb = sets[0]
    plain = a.double() @ b.double()
    ref = reference(a, b, sa, sb, mode, plain)
    row, live = {}, {}
    for name, (fn, scaled) in cands.items():
        validate(name, fn, sets[0], ref if scaled else plain, row, live)
    del ref, plain
    flop = 2.0 * m * n * k
    warm(args.warm)
    return timed_rounds(live, sets, args.rounds, args.block_ms, flop, row)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--shapes", default=None, help="MxNxK,... (overrides the sweep)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--block-ms", type=float, default=25.0)
    ap.add_argument("--warm", type=float, default=0.3)
    ap.add_argument("--json", default=None)
    ap.add_argument("--mode", default="tensor", choices=("tensor", "row", "block"))
    args = ap.parse_args(argv)
    import torch                  # after --help, which needs no torch
    dev = torch.cuda.get_device_properties(0)
    l2 = getattr(dev, "L2_cache_size", 50 << 20)
    todo = shapes(args.quick)
    if args.shapes:
        todo = [tuple(int(v) for v in s.split("x")) + ("given",) for s in args.shapes.split(",")]
    cands = contenders(args.mode)
    from ptxdsl.ops.matmul.api import describe
    from ptxdsl.ops.matmul.plan import device_class
    from ptxdsl.runtime import driver
    from ptxdsl.types import bf16, e4m3
    cls = device_class(driver.get().device(torch.cuda.current_device()))
    warm(1.0)
    result = {"device": dev.name, "sms": dev.multi_processor_count,
              "date": datetime.datetime.now().isoformat(timespec="minutes"),
              "torch": torch.__version__, "dtype": "e4m3 -> bf16", "mode": args.mode,
              "scales": SCALES if args.mode == "tensor" else args.mode,
              "rounds": args.rounds, "block_ms": args.block_ms, "rows": []}
    suffix = "" if args.mode == "tensor" else f"_{args.mode}"
    path = args.json or os.path.join(os.environ.get("OUT", "."), f"matmul_fp8{suffix}.json")
    for m, n, k, group in todo:
        row = bench_shape(m, n, k, cands, args, l2)
        row.setdefault("ptxdsl fp8", {})["kernel"] = describe(
            m, n, k, e4m3, bf16, sms=dev.multi_processor_count, device=cls,
            scaling=args.mode)
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
    print(f"\nGEMM fp8 e4m3 -> bf16, {result.get('mode', 'tensor')} scales, on "
          f"{result['device']} ({result['date']}), TFLOP/s (sustained); ratios are ptxdsl "
          f"fp8 / peer")
    peers = [n for n in names if n != "ptxdsl fp8"]
    print(f"{'M x N x K':>20s} " + " ".join(f"{n:>12s}" for n in names)
          + "".join(f"  vs {p:>12s}" for p in peers))
    ratios = {p: [] for p in peers}
    for r in rows:
        res = r["results"]
        cells = [f"{res[n]['tflops']:12.0f}" if "tflops" in res.get(n, {}) else f"{'ERR':>12s}"
                 for n in names]
        ours = res.get("ptxdsl fp8", {}).get("tflops")
        tail = ""
        for peer in ratios:
            p = res.get(peer, {}).get("tflops")
            if ours and p:
                tail += f"  {ours / p:14.2f}x"
                ratios[peer].append(ours / p)
            else:
                tail += f"  {'-':>15s}"
        print(f"{'x'.join(map(str, r['shape'])):>20s} " + " ".join(cells) + tail)
    print("geomean ptxdsl fp8 / " + "; / ".join(
        f"{p}: {_geomean(r):.3f}" for p, r in ratios.items() if r))


if __name__ == "__main__":
    main()
