"""Attention forward side by side in one run on the current GPU: ``ptxdsl.ops.attention``,
torch SDPA with its cuDNN backend and with its flash (FA2) backend, and FlashAttention-4
(``flash_attn.cute``) when it is importable (``../shared/peers/README.md`` installs it).

Shapes: the FA3 paper's grid (B·S = 16k tokens, H·D = 2048; S 1k/4k/16k, D 64/128/256,
causal and not), head dim 96, GQA (H = 32, Hkv = 8, D = 128; also Sq = 32 against Sk = 4096,
where ptxdsl packs the 4 query heads of a group into one tile) and varlen (packed
sequences of 512 to 2048 tokens, 16k in all, H = 16 and GQA 32 / 8: ptxdsl's one launch,
FA4's varlen, and cuDNN SDPA on the same sequences padded to a batch, which counts only the
real tokens' FLOPs); bf16, random normal inputs. Every
contender's output is validated against SDPA's math backend in float32 (max error over the
largest value ≤ 2e-2) before it is timed, and ptxdsl's LSE against a float32 log-sum-exp on
the first shape of each head dim. Timing: after a warm-up, ``--rounds`` rounds in which every
contender in turn (a new seeded order each round) runs ``--iters`` untimed calls, then
``--iters`` calls between two CUDA events (:mod:`bench.timing`); the median per call is
reported. ``--sustained SECONDS``: then each of ``--sustained-contenders`` (ptxdsl and FA4)
alone, after an idle gap, for that long with the SM clock and power sampled
(:func:`bench.timing.time_sustained`): the interleaved blocks share the card's clock
between contenders, so a kernel's power shows only here. TFLOP/s counts ``4 B H Sq Sk D``
(half of it under a causal mask). Host µs per
call: a tiny shape's calls queued back to back (median of 5 blocks), ptxdsl against SDPA's
default. JSON goes to ``$OUT/attention.json`` (or ``--json``); the table is printed last.

    PYTHONPATH=. python bench/attention.py            # the grid, GQA, varlen, host µs
    PYTHONPATH=. python bench/attention.py --quick    # S = 4096 only
    PYTHONPATH=. python bench/attention.py --only 1024,gqa,varlen,host
    PYTHONPATH=. python bench/attention.py --only 16384 --sustained 1.5
"""
from __future__ import annotations

import argparse
import datetime
import itertools
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from bench.timing import time_interleaved, time_sustained  # noqa: E402


def shapes(quick: bool, only=None):
    """(tag, B, Sq, Sk, H, Hkv, D, causal) in run order; ``only``: the tags to keep (an S
    of the grid, ``d96``, ``gqa``)."""
    out = []
    for d in (64, 128, 256):
        for s in ((4096,) if quick else (1024, 4096, 16384)):
            for causal in (False, True):
                out.append((str(s), 16384 // s, s, s, 2048 // d, 2048 // d, d, causal))
    for causal in (False, True):
        out.append(("d96", 4, 4096, 4096, 16, 16, 96, causal))
    for causal in (False, True):
        out.append(("gqa", 4, 4096, 4096, 32, 8, 128, causal))
    out.append(("gqa", 64, 32, 4096, 32, 8, 128, False))
    return [r for r in out if only is None or r[0] in only]


def varlen_lengths(total=16384, seed=0):
    """Sequence lengths from 512 to 2048 summing to ``total``."""
    import random
    rnd, out = random.Random(seed), []
    while sum(out) < total:
        out.append(min(rnd.randint(512, 2048), total - sum(out)))
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
        found["fa4"] = lambda q, k, v, causal: _first(flash_attn_func(q, k, v, causal=causal))
    except Exception as e:  # noqa: BLE001 - a peer that is not installed sits out
        print(f"fa4 sits out: {type(e).__name__}: {e}")
    return found


def _first(r):
    """FA4 returns (out, lse) or out, by version."""
    return r[0] if isinstance(r, tuple) else r


def varlen_contenders(torch, lens):
    """Packed-sequence contenders: (q, k, v, cu, max_len, causal) -> packed out."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F
    import ptxdsl.ops as ops
    n, m = len(lens), max(lens)
    idx = torch.cat([torch.arange(x, device="cuda") + i * m for i, x in enumerate(lens)])

    keys = torch.zeros(n, 1, 1, m, dtype=torch.bool, device="cuda")
    for i, x in enumerate(lens):
        keys[i, ..., :x] = True

    def padded(q, k, v, cu, mx, causal):
        # the same sequences as a zero-padded batch (B, max, H, D), the real rows kept;
        # causal: the padded keys come after every real one (cuDNN); full: a key-padding
        # mask (SDPA picks the backend that takes one)
        def pad(x):
            buf = x.new_zeros(n * m, *x.shape[1:])
            buf[idx] = x
            return buf.view(n, m, *x.shape[1:]).transpose(1, 2)
        gqa = q.shape[1] != k.shape[1]
        if causal:
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                o = F.scaled_dot_product_attention(pad(q), pad(k), pad(v), is_causal=True,
                                                   enable_gqa=gqa)
        else:
            o = F.scaled_dot_product_attention(pad(q), pad(k), pad(v), attn_mask=keys,
                                               enable_gqa=gqa)
        return o.transpose(1, 2).reshape(n * m, *q.shape[1:])[idx]

    found = {"ptxdsl": lambda q, k, v, cu, mx, causal: ops.attention_varlen(
        q, k, v, cu, cu, mx, mx, causal=causal), "sdpa_padded": padded}
    try:
        from flash_attn.cute import flash_attn_varlen_func
        # by keyword: the fourth positional parameter is ``qv`` (MLA), not cu_seqlens_q
        found["fa4"] = lambda q, k, v, cu, mx, causal: _first(flash_attn_varlen_func(
            q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=mx, max_seqlen_k=mx,
            causal=causal))
    except Exception as e:  # noqa: BLE001 - a peer that is not installed sits out
        print(f"fa4 varlen sits out: {type(e).__name__}: {e}")
    return found


def host_us(torch, ops, n=2000):
    """Host µs per call of a tiny attention (B 1, S 128, H 8, D 128, bf16) through the
    public API and through SDPA's default, calls queued back to back; the median of 5
    blocks."""
    import time
    import torch.nn.functional as F
    q, k, v = (torch.randn(1, 128, 8, 128, device="cuda", dtype=torch.bfloat16)
               for _ in range(3))
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    fns = {"ptxdsl": lambda: ops.attention(q, k, v),
           "ptxdsl_causal_lse": lambda: ops.attention(q, k, v, causal=True, return_lse=True),
           "sdpa": lambda: F.scaled_dot_product_attention(qt, kt, vt),
           "sdpa_causal": lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=True)}
    out = {}
    for name, fn in fns.items():
        for _ in range(200):
            fn()
        torch.cuda.synchronize()
        blocks = []
        for _ in range(5):
            t = time.perf_counter()
            for _ in range(n):
                fn()
            torch.cuda.synchronize()
            blocks.append((time.perf_counter() - t) / n * 1e6)
        out[name] = sorted(blocks)[2]
    return out


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
    """Median milliseconds per call of each function (:mod:`bench.timing`)."""
    return time_interleaved(torch, fns, rounds, iters, args)


def sustain(torch, live, call_args, flops, row, opts) -> None:
    """``--sustained``: each live contender named in ``--sustained-contenders`` alone
    (:func:`bench.timing.time_sustained`), into its result's ``sustained``."""
    if not opts.sustained:
        return
    for name in opts.sustained_contenders.split(","):
        if name in live:
            sus = time_sustained(torch, live[name], opts.sustained, opts.idle, call_args)
            row["results"][name]["sustained"] = {**sus, "tflops": flops / sus["ms"] / 1e9}


def sustained_table(rows, names) -> list[str]:
    """The ``--sustained`` figures as lines: TFLOP/s at SM MHz per contender, ptxdsl / FA4."""
    out = []
    for r in rows:
        got = {n: r["results"][n]["sustained"] for n in names
               if "sustained" in r["results"].get(n, {})}
        if not got:
            continue
        cells = [f"{got[n]['tflops']:7.1f} @ {got[n]['sm_mhz'] or 0:4.0f}" if n in got
                 else f"{'-':>14}" for n in names]
        ratio = (got["ptxdsl"]["tflops"] / got["fa4"]["tflops"]
                 if "ptxdsl" in got and "fa4" in got else float("nan"))
        out.append(f"{r['tag']:>6} {r['D']:>4} {r['S']:>6} {r['Sk']:>6} {r['H']:>3}/{r['Hkv']:<2} "
                   f"{'causal' if r['causal'] else 'full':>7} " + " ".join(cells)
                   + f" {ratio:6.2f}")
    return out


def validate(torch, fns, call_args, ref, row):
    """Each contender's output against ``ref`` (its first rows); returns the live ones."""
    scale = float(ref.abs().max())
    live = {}
    for name, fn in fns.items():
        try:
            out = fn(*call_args)
            torch.cuda.synchronize()
            err = float((out[:ref.shape[0]].float() - ref).abs().max()) / scale
        except Exception as e:  # noqa: BLE001 - recorded, the contender sits out
            row["results"][name] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
            continue
        row["results"][name] = {"max_err": err}
        if err <= 2e-2 and bool(torch.isfinite(out).all()):
            live[name] = fn
        else:
            row["results"][name]["error"] = "wrong result"
    return live


def varlen_rows(torch, args, result, path):
    lens = varlen_lengths()
    fns = varlen_contenders(torch, lens)
    cu = torch.tensor([0] + [sum(lens[:i + 1]) for i in range(len(lens))], device="cuda",
                      dtype=torch.int32)
    d, total, mx = 128, sum(lens), max(lens)
    for (h, hk), causal in itertools.product(((16, 16), (32, 8)), (False, True)):
        torch.manual_seed(0)
        q = torch.randn(total, h, d, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(total, hk, d, device="cuda", dtype=torch.bfloat16)
                for _ in range(2))
        row = {"tag": "varlen", "B": len(lens), "S": mx, "Sk": mx, "H": h, "Hkv": hk, "D": d,
               "causal": causal, "lengths": lens, "results": {}}
        n0 = lens[0] + lens[1]          # the first two sequences, each alone
        ref = torch.cat([reference(torch, q[None, a:b], k[None, a:b], v[None, a:b], causal)[0]
                         for a, b in ((0, lens[0]), (lens[0], n0))])
        live = validate(torch, fns, (q, k, v, cu, mx, causal), ref, row)
        flops = sum(4 * h * x * x * d * (0.5 if causal else 1.0) for x in lens)
        for fn in live.values():
            fn(q, k, v, cu, mx, causal)
        ms = time_all(torch, live, (q, k, v, cu, mx, causal), args.rounds, args.iters)
        for name, t in ms.items():
            row["results"][name].update(ms=t, tflops=flops / t / 1e9)
        sustain(torch, live, (q, k, v, cu, mx, causal), flops, row, args)
        result["rows"].append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "lengths"}), flush=True)
        with open(path, "w") as f:
            json.dump(result, f, indent=1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default=None, help="comma-separated tags: 1024, 4096, 16384, "
                    "d96, gqa, varlen, host")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--json", default=None)
    ap.add_argument("--sustained", type=float, default=0.0, metavar="SECONDS",
                    help="also time each of --sustained-contenders alone for this long")
    ap.add_argument("--sustained-contenders", default="ptxdsl,fa4")
    ap.add_argument("--idle", type=float, default=1.5,
                    help="seconds without work before each sustained loop")
    args = ap.parse_args()
    known = {"ptxdsl", "cudnn", "fa2", "fa4", "sdpa_padded"}
    unknown = set(args.sustained_contenders.split(",")) - known
    if unknown or args.sustained < 0 or args.idle < 0:
        ap.error(f"--sustained-contenders names of {sorted(known)} (got unknown "
                 f"{sorted(unknown)}); --sustained and --idle seconds >= 0")
    only = None if args.only is None else set(args.only.split(","))
    import torch
    import ptxdsl.ops as ops
    dev = torch.cuda.get_device_name()
    fns = contenders(torch)
    result = {"benchmark": "attention", "device": dev,
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "torch": torch.__version__, "dtype": "bf16", "rows": []}
    path = args.json or os.path.join(os.environ.get("OUT", "."), "attention.json")
    seen_d = set()
    for tag, b, s, sk, h, hk, d, causal in shapes(args.quick, only):
        torch.manual_seed(0)
        q = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(b, sk, hk, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(b, sk, hk, d, device="cuda", dtype=torch.bfloat16)
        row = {"tag": tag, "B": b, "S": s, "Sk": sk, "H": h, "Hkv": hk, "D": d,
               "causal": causal, "results": {}}
        # Validate on the first batch (the float32 math reference of all of it is large).
        live = validate(torch, fns, (q, k, v, causal),
                        reference(torch, q[:1], k[:1], v[:1], causal), row)
        if "ptxdsl" in live:
            again = fns["ptxdsl"](q, k, v, causal)
            row["results"]["ptxdsl"]["deterministic"] = bool(torch.equal(again, fns["ptxdsl"](
                q, k, v, causal)))
            if d not in seen_d and s == sk:
                row["results"]["ptxdsl"]["lse_rel_err"] = check_lse(torch, ops, q, k, v, causal)
                seen_d.add(d)
        flops = 4 * b * h * s * sk * d * (0.5 if causal else 1.0)
        for name, fn in live.items():
            fn(q, k, v, causal)                 # warm-up (FA4 compiles on its first call)
        ms = time_all(torch, live, (q, k, v, causal), args.rounds, args.iters)
        for name, t in ms.items():
            row["results"][name].update(ms=t, tflops=flops / t / 1e9)
        sustain(torch, live, (q, k, v, causal), flops, row, args)
        result["rows"].append(row)
        print(json.dumps(row), flush=True)
        with open(path, "w") as f:
            json.dump(result, f, indent=1)
    if only is None or "varlen" in only:
        varlen_rows(torch, args, result, path)
    if only is None or "host" in only:
        result["host_us"] = host_us(torch, ops)
        with open(path, "w") as f:
            json.dump(result, f, indent=1)
    names = list(fns) + ["sdpa_padded"]
    print(f"\n{dev}, bf16 TFLOP/s (causal counts half); ratio = ptxdsl / cudnn (SDPA padded for "
          f"varlen)")
    print(f"{'tag':>6} {'D':>4} {'Sq':>6} {'Sk':>6} {'H/Hkv':>6} {'mask':>7} "
          + " ".join(f"{n:>12}" for n in names) + f" {'ratio':>6}")
    for r in result["rows"]:
        res = r["results"]
        cells = [f"{res[n]['tflops']:12.1f}" if "tflops" in res.get(n, {}) else f"{'-':>12}"
                 for n in names]
        base = res.get("cudnn", res.get("sdpa_padded", {}))
        ratio = (res["ptxdsl"]["tflops"] / base["tflops"]
                 if "tflops" in res.get("ptxdsl", {}) and "tflops" in base else float("nan"))
        print(f"{r['tag']:>6} {r['D']:>4} {r['S']:>6} {r['Sk']:>6} {r['H']:>3}/{r['Hkv']:<2} "
              f"{'causal' if r['causal'] else 'full':>7} " + " ".join(cells) + f" {ratio:6.2f}")
    lines = sustained_table(result["rows"], args.sustained_contenders.split(","))
    if lines:
        print(f"\nsustained {args.sustained:g} s each after {args.idle:g} s idle: TFLOP/s @ SM "
              f"MHz ({args.sustained_contenders}); ratio = ptxdsl / fa4")
        print("\n".join(lines))
    if "host_us" in result:
        print("host µs per call (1x128x8x128 bf16): " + ", ".join(
            f"{k} {v:.1f}" for k, v in result["host_us"].items()))


if __name__ == "__main__":
    main()
