"""Attention forward side by side in one run on the current GPU: ``ptxdsl.ops.attention``,
torch SDPA with its cuDNN backend and with its flash (FA2) backend, and FlashAttention-4
(``flash_attn.cute``) when it is importable (``../shared/peers/README.md`` installs it).

Shapes: the FA3 paper's grid (B·S = 16k tokens, H·D = 2048; S 1k/4k/16k, D 64/128/256,
causal and not) and GQA (H = 32, Hkv = 8, D = 128); bf16, random normal inputs. Every
contender's output is validated against SDPA's math backend in float32 (max error over the
largest value ≤ 2e-2) before it is timed, and ptxdsl's LSE against a float32 log-sum-exp on
the first shape of each head dim. Timing: after a warm-up, ``--rounds`` rounds in which every
contender in turn runs ``--iters`` calls between two CUDA events; the median per call is
reported. TFLOP/s counts ``4 B H Sq Sk D`` (half of it under a causal mask). JSON goes to
``$OUT/attention.json`` (or ``--json``); the table is printed last.

    PYTHONPATH=. python bench/attention.py            # the grid and GQA
    PYTHONPATH=. python bench/attention.py --quick    # S = 4096 only
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))


def shapes(quick: bool):
    """(B, S, H, Hkv, D, causal) in run order."""
    out = []
    for d in (64, 128, 256):
        for s in ((4096,) if quick else (1024, 4096, 16384)):
            for causal in (False, True):
                out.append((16384 // s, s, 2048 // d, 2048 // d, d, causal))
    out += [(4, 4096, 32, 8, 128, False), (4, 4096, 32, 8, 128, True)]
    return out


def contenders(torch):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F
    import ptxdsl.ops as ops

    def sdpa(backend):
        def run(q, k, v, causal):
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(
                    q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal,
                    enable_gqa=q.shape[2] != k.shape[2]).transpose(1, 2)
        return run

    found = {"ptxdsl": lambda q, k, v, causal: ops.attention(q, k, v, causal=causal),
             "cudnn": sdpa(SDPBackend.CUDNN_ATTENTION),
             "fa2": sdpa(SDPBackend.FLASH_ATTENTION)}
    try:
        from flash_attn.cute import flash_attn_func
        found["fa4"] = lambda q, k, v, causal: flash_attn_func(q, k, v, causal=causal)[0]
    except Exception as e:  # noqa: BLE001 - a peer that is not installed sits out
        print(f"fa4 sits out: {type(e).__name__}: {e}")
    return found


def reference(torch, q, k, v, causal):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F
    rep = q.shape[2] // k.shape[2]
    kk, vv = (x.repeat_interleave(rep, dim=2) for x in (k, v))
    with sdpa_kernel(SDPBackend.MATH):
        return F.scaled_dot_product_attention(
            q.transpose(1, 2).float(), kk.transpose(1, 2).float(), vv.transpose(1, 2).float(),
            is_causal=causal).transpose(1, 2)


def check_lse(torch, ops, q, k, v, causal):
    """ptxdsl's LSE against a float32 log-sum-exp (on the first batch, first 2 heads)."""
    out, lse = ops.attention(q, k, v, causal=causal, return_lse=True)
    qq, kk = q[:1, :, :2].float(), k[:1, :, :2].float()
    s = torch.einsum("bqhd,bkhd->bhqk", qq, kk) * q.shape[-1] ** -0.5
    if causal:
        sq, sk = q.shape[1], k.shape[1]
        keep = torch.ones(sq, sk, dtype=torch.bool, device=q.device).tril(sk - sq)
        s = s.masked_fill(~keep, float("-inf"))
    want = torch.logsumexp(s, -1)
    return float(((lse[:1, :2] - want).abs() / want.abs().clamp_min(1)).max())


def time_all(torch, fns, args, rounds, iters):
    """Median milliseconds per call of each function, rounds interleaved."""
    times = {n: [] for n in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iters):
                fn(*args)
            end.record()
            end.synchronize()
            times[name].append(start.elapsed_time(end) / iters)
    return {n: statistics.median(t) for n, t in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    import torch
    import ptxdsl.ops as ops
    dev = torch.cuda.get_device_name()
    fns = contenders(torch)
    result = {"benchmark": "attention", "device": dev,
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "torch": torch.__version__, "dtype": "bf16", "rows": []}
    path = args.json or os.path.join(os.environ.get("OUT", "."), "attention.json")
    seen_d = set()
    for b, s, h, hk, d, causal in shapes(args.quick):
        torch.manual_seed(0)
        q = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(b, s, hk, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(b, s, hk, d, device="cuda", dtype=torch.bfloat16)
        row = {"B": b, "S": s, "H": h, "Hkv": hk, "D": d, "causal": causal, "results": {}}
        # Validate on the first batch (the float32 math reference of all of it is large).
        ref = reference(torch, q[:1], k[:1], v[:1], causal)
        scale = float(ref.abs().max())
        live = {}
        for name, fn in fns.items():
            try:
                out = fn(q, k, v, causal)
                torch.cuda.synchronize()
                err = float((out[:1].float() - ref).abs().max()) / scale
            except Exception as e:  # noqa: BLE001 - recorded, the contender sits out
                row["results"][name] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
                continue
            row["results"][name] = {"max_err": err}
            if err <= 2e-2 and bool(torch.isfinite(out).all()):
                live[name] = fn
            else:
                row["results"][name]["error"] = "wrong result"
        if "ptxdsl" in live:
            again = fns["ptxdsl"](q, k, v, causal)
            row["results"]["ptxdsl"]["deterministic"] = bool(torch.equal(again, fns["ptxdsl"](
                q, k, v, causal)))
            if d not in seen_d:
                row["results"]["ptxdsl"]["lse_rel_err"] = check_lse(torch, ops, q, k, v, causal)
                seen_d.add(d)
        flops = 4 * b * h * s * s * d * (0.5 if causal else 1.0)
        for name, fn in live.items():
            fn(q, k, v, causal)                 # warm-up (FA4 compiles on its first call)
        ms = time_all(torch, live, (q, k, v, causal), args.rounds, args.iters)
        for name, t in ms.items():
            row["results"][name].update(ms=t, tflops=flops / t / 1e9)
        result["rows"].append(row)
        print(json.dumps(row), flush=True)
        with open(path, "w") as f:
            json.dump(result, f, indent=1)
    names = list(fns)
    print(f"\n{dev}, bf16 TFLOP/s (causal counts half); ratio = ptxdsl / cudnn")
    print(f"{'D':>4} {'S':>6} {'H/Hkv':>6} {'mask':>7} " + " ".join(f"{n:>8}" for n in names)
          + f" {'ratio':>6}")
    for r in result["rows"]:
        res = r["results"]
        cells = [f"{res[n]['tflops']:8.1f}" if "tflops" in res.get(n, {}) else f"{'-':>8}"
                 for n in names]
        ratio = (res["ptxdsl"]["tflops"] / res["cudnn"]["tflops"]
                 if "tflops" in res.get("ptxdsl", {}) and "tflops" in res.get("cudnn", {})
                 else float("nan"))
        print(f"{r['D']:>4} {r['S']:>6} {r['H']:>3}/{r['Hkv']:<2} "
              f"{'causal' if r['causal'] else 'full':>7} " + " ".join(cells) + f" {ratio:6.2f}")


if __name__ == "__main__":
    main()
