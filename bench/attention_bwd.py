"""Attention backward side by side in one run on the current GPU:
``ptxdsl.ops.attention_backward`` (default and deterministic), torch SDPA's backward with
its cuDNN and its flash (FA2) backends, and FlashAttention-4 (``flash_attn.cute``) when it
imports, in its default and its deterministic mode (``fa4_det``: ``deterministic=True``).
Both deterministic contenders are run twice more after validation and their gradients
compared bitwise (``bitwise_repeat``).

Shapes: the FA3 paper's grid (B·S = 16k tokens, H·D = 2048; S 1k/4k/16k, D 64/128, causal
and not); bf16, random normal inputs. Each contender's dq, dk, dv are validated against
cuDNN's (max error over the largest value ≤ 3e-2) before timing. Timing: after a warm-up,
``--rounds`` rounds in which every contender in turn (a new seeded order each round) runs
``--iters`` untimed calls, then ``--iters`` backward calls between
two CUDA events (the peers: ``torch.autograd.grad`` of a recorded forward); the median per
call is reported. TFLOP/s counts 2.5 x the forward's ``4 B H S² D`` (half of it causal).
JSON goes to ``$OUT/attention_bwd.json`` (or ``--json``); the table is printed last.
``--head-dims 192,256`` runs other head dims on the same grid (H = 2048 // D; a peer that
refuses a head dim sits that row out, and the reference is then FA2's). ``--varlen`` adds
packed rows: ragged lengths (uniform in 1 .. 2·S, 16k tokens in all) through
``attention_varlen_backward`` (one launch each over every sequence), validated per
sequence against SDPA's flash backward, beside the dense backward on B = 16k / S.

    PYTHONPATH=. python bench/attention_bwd.py [--head-dims 64,128] [--varlen]
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from bench.timing import time_interleaved  # noqa: E402


def shapes(quick: bool, dims=(64, 128)):
    """(B, S, H, Hkv, D, causal) in run order."""
    return [(16384 // s, s, 2048 // d, 2048 // d, d, causal)
            for d in dims for s in ((4096,) if quick else (1024, 4096, 16384))
            for causal in (False, True)]


def varlen_row(torch, s, d, causal, rounds, iters):
    """Ragged sequences (16k tokens) through attention_varlen_backward, default and
    deterministic; each sequence's gradients checked against SDPA flash's backward."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import ptxdsl.ops as ops
    g = torch.Generator(device="cpu").manual_seed(s + d)
    lens = []
    while sum(lens) < 16384:
        lens.append(int(torch.randint(1, 2 * s + 1, (1,), generator=g)))
    lens[-1] -= sum(lens) - 16384
    h = 2048 // d
    gd = torch.Generator(device="cuda").manual_seed(s)
    q, k, v, do = (torch.randn(16384, h, d, device="cuda", dtype=torch.bfloat16, generator=gd)
                   for _ in range(4))
    cu = torch.tensor([0] + lens, dtype=torch.int64).cumsum(0).to(torch.int32).cuda()
    out, lse = ops.attention_varlen(q, k, v, cu, cu, max(lens), max(lens), causal=causal,
                                    return_lse=True)
    fns = {"ptxdsl": lambda: ops.attention_varlen_backward(
        do, q, k, v, out, lse, cu, cu, max(lens), max(lens), causal=causal),
        "ptxdsl_det": lambda: ops.attention_varlen_backward(
        do, q, k, v, out, lse, cu, cu, max(lens), max(lens), causal=causal,
        deterministic=True)}
    row = {"varlen": True, "S_mean": s, "sequences": len(lens), "H": h, "D": d,
           "causal": causal, "results": {}}
    got = {n: f() for n, f in fns.items()}
    err = {n: 0.0 for n in fns}
    c = cu.tolist()
    for i in range(len(lens)):
        a, e = c[i], c[i + 1]
        leaves = [x[a:e].detach().clone().requires_grad_() for x in (q, k, v)]
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            o = F.scaled_dot_product_attention(*(x.transpose(0, 1)[None] for x in leaves),
                                               is_causal=causal)[0].transpose(0, 1)
            ref = torch.autograd.grad(o, leaves, do[a:e])
        for n in fns:
            for x, r in zip(got[n], ref):
                err[n] = max(err[n], float((x[a:e].float() - r.float()).abs().max()
                                           / r.float().abs().max().clamp_min(1e-2)))
    for n in list(fns):
        row["results"][n] = {"max_rel_err_vs_fa2": err[n]}
        if err[n] > 3e-2:
            row["results"][n]["error"] = "wrong result, not timed"
            del fns[n]
    ms = time_all(torch, fns, rounds, iters)
    flops = sum(2.5 * 4 * h * x * x * d * (0.5 if causal else 1.0) for x in lens)
    for n, t in ms.items():
        row["results"][n].update(ms=t, tflops=flops / t / 1e9)
    return row


def contenders(torch, q, k, v, do, causal):
    """name -> a call returning (dq, dk, dv)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F
    import ptxdsl.ops as ops

    out, lse = ops.attention(q, k, v, causal=causal, return_lse=True)
    found = {"ptxdsl": lambda: ops.attention_backward(do, q, k, v, out, lse, causal=causal),
             "ptxdsl_det": lambda: ops.attention_backward(do, q, k, v, out, lse,
                                                          causal=causal, deterministic=True)}
    leaves = [x.detach().clone().requires_grad_() for x in (q, k, v)]

    def sdpa(backend):
        with sdpa_kernel(backend):
            o = F.scaled_dot_product_attention(*(x.transpose(1, 2) for x in leaves),
                                               is_causal=causal).transpose(1, 2)

        def run():
            with sdpa_kernel(backend):
                return torch.autograd.grad(o, leaves, do, retain_graph=True)
        return run

    found["cudnn"] = sdpa(SDPBackend.CUDNN_ATTENTION)
    found["fa2"] = sdpa(SDPBackend.FLASH_ATTENTION)
    try:
        from flash_attn.cute import flash_attn_func
        o4 = flash_attn_func(*leaves, causal=causal)[0]
        found["fa4"] = lambda: torch.autograd.grad(o4, leaves, do, retain_graph=True)
    except Exception as e:  # noqa: BLE001 - a peer that is not installed sits out
        print(f"fa4 sits out: {type(e).__name__}: {e}")
        return found
    try:                        # FA4's own deterministic backward (its dQ semaphores)
        o4d = flash_attn_func(*leaves, causal=causal, deterministic=True)[0]
        found["fa4_det"] = lambda: torch.autograd.grad(o4d, leaves, do, retain_graph=True)
    except Exception as e:  # noqa: BLE001 - an FA4 without the mode sits that contender out
        print(f"fa4_det sits out: {type(e).__name__}: {e}")
    return found


def time_all(torch, fns, rounds, iters):
    """Median milliseconds per call of each function (no arguments; :mod:`bench.timing`)."""
    return time_interleaved(torch, fns, rounds, iters)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--head-dims", default="64,128")
    ap.add_argument("--varlen", action="store_true")
    ap.add_argument("--json", default=os.path.join(os.environ.get("OUT", "."),
                                                   "attention_bwd.json"))
    a = ap.parse_args()
    import torch
    rows = []
    dims = tuple(int(x) for x in a.head_dims.split(","))
    for b, s, h, hk, d, causal in shapes(a.quick, dims):
        g = torch.Generator(device="cuda").manual_seed(s + d)
        q, k, v, do = (torch.randn(b, s, x, d, device="cuda", dtype=torch.bfloat16, generator=g)
                       for x in (h, hk, hk, h))
        fns = contenders(torch, q, k, v, do, causal)
        try:
            ref = [x.float() for x in fns["cudnn"]()]
        except Exception as e:  # noqa: BLE001 - cuDNN refuses some head dims: FA2 instead
            print(f"cudnn sits out (reference FA2): {type(e).__name__}: {e}"[:300])
            ref = [x.float() for x in fns["fa2"]()]
        row = {"B": b, "S": s, "H": h, "Hkv": hk, "D": d, "causal": causal, "results": {}}
        for n in list(fns):
            try:
                got = fns[n]()
                err = max(float((x.float() - r).abs().max() / r.abs().max())
                          for x, r in zip(got, ref))
            except Exception as e:  # noqa: BLE001 - a contender that fails is reported
                row["results"][n] = {"error": f"{type(e).__name__}: {e}"[:300]}
                del fns[n]
                continue
            row["results"][n] = {"max_rel_err_vs_cudnn": err}
            if err > 3e-2:
                row["results"][n]["error"] = "wrong result, not timed"
                del fns[n]
        for n in ("ptxdsl_det", "fa4_det"):
            if n in fns:
                again, first = fns[n](), fns[n]()
                row["results"][n]["bitwise_repeat"] = all(
                    torch.equal(x, y) for x, y in zip(again, first))
        ms = time_all(torch, fns, a.rounds, a.iters)
        flops = 2.5 * 4 * b * h * s * s * d * (0.5 if causal else 1.0)
        for n, t in ms.items():
            row["results"][n].update(ms=t, tflops=flops / t / 1e9)
        rows.append(row)
        print(json.dumps(row), flush=True)
        del q, k, v, do, fns
        torch.cuda.empty_cache()
    if a.varlen:
        for s in ((4096,) if a.quick else (1024, 4096)):
            for causal in (False, True):
                rows.append(varlen_row(torch, s, 128, causal, a.rounds, a.iters))
                print(json.dumps(rows[-1]), flush=True)
    doc = {"benchmark": "attention_bwd", "device": torch.cuda.get_device_name(),
           "date": datetime.date.today().isoformat(), "torch": torch.__version__,
           "tflops_counts": "2.5 x forward 4 B H S^2 D, causal half", "rows": rows}
    os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
    with open(a.json, "w") as f:
        json.dump(doc, f, indent=1)
    names = ["ptxdsl", "ptxdsl_det", "cudnn", "fa2", "fa4", "fa4_det"]
    print(f"\n{'D':>4} {'S':>6} {'mask':>6} " + " ".join(f"{n:>10}" for n in names))
    for r in rows:
        cells = [f"{r['results'].get(n, {}).get('tflops', float('nan')):10.1f}" for n in names]
        size = f"~{r['S_mean']}" if r.get("varlen") else str(r["S"])
        print(f"{r['D']:>4} {size:>6} {'causal' if r['causal'] else 'full':>6} "
              + " ".join(cells))


if __name__ == "__main__":
    main()
