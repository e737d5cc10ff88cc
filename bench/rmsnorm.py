"""RMSNorm forward and backward, side by side in one run, on the current GPU.

Contenders (each validated against a float64 reference before it is timed):
device copy of the same bytes, ptxdsl, torch eager formula, F.rms_norm,
torch.compile, a plain Triton kernel, and Liger / pyptx when installed.
Timing: CUDA events around each call, median of many runs, inputs rotated
over enough copies to exceed L2. Prints a table last and writes JSON.

    python bench/rmsnorm.py [--quick] [--dtypes f32,bf16,f16] [--json PATH]
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

SHAPES = [(2048, 8192), (4096, 4096), (8192, 8192), (16384, 4096), (32768, 1024),
          (4096, 5120), (4096, 7168), (1024, 16384), (4096, 1000), (1, 8192), (7, 4096)]
EPS = 1e-6


def _torch():
    import torch
    return torch


def triton_rms_fwd():
    """A plain Triton RMSNorm (one program per row, the row in one block)."""
    import triton
    import triton.language as tl

    @triton.jit
    def _k(X, W, Y, stride, N, eps, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < N
        x = tl.load(X + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
        rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / N + eps)
        w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(Y + row * stride + cols, (x * rstd * w).to(Y.dtype.element_ty), mask=mask)

    def run(x, w):
        y = _torch().empty_like(x)
        n = x.shape[-1]
        block = triton.next_power_of_2(n)
        warps = min(max(block // 256, 1), 16)
        _k[(x.shape[0],)](x, w, y, x.stride(0), n, EPS, BLOCK=block, num_warps=warps)
        return y
    return run


def time_fn(fn, sets, warmup=5, iters=50):
    """Median µs of ``fn(*sets[i % len(sets)])``, each call between two CUDA events.

    Calls are queued back to back (one synchronisation at the end), as a model's
    layers are: a call's time is its GPU time when the host keeps ahead of the
    GPU, and includes the host's launch work when it does not (small shapes), so
    host overhead counts exactly where it would in real use.
    """
    torch = _torch()
    for i in range(warmup):
        fn(*sets[i % len(sets)])
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(iters)]
    for i, (s, e) in enumerate(events):
        args = sets[i % len(sets)]
        s.record()
        fn(*args)
        e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) * 1000.0 for s, e in events)


def ref_fwd(x, w):
    torch = _torch()
    x64 = x.double()
    return (x64 * torch.rsqrt((x64 * x64).mean(-1, keepdim=True) + EPS) * w.double())


def close(out, ref, dtype) -> float:
    """Max error relative to the largest reference value."""
    err = (out.double() - ref).abs().max().item()
    scale = ref.abs().max().item() or 1.0
    return err / scale


def bench_forward(shape, dtype, contenders, l2_bytes):
    torch = _torch()
    m, n = shape
    nbytes = m * n * dtype.itemsize
    copies = max(2, math.ceil(3 * l2_bytes / max(2 * nbytes, 1)))
    copies = min(copies, 64)
    g = torch.Generator(device="cuda").manual_seed(0)
    sets = []
    w = (torch.randn(n, device="cuda", generator=g) * 0.1 + 1).to(dtype)
    for _ in range(copies):
        x = torch.randn(m, n, device="cuda", generator=g).to(dtype)
        sets.append((x, w))
    ref = ref_fwd(*sets[0])
    tol = 2e-6 if dtype == torch.float32 else 1e-2
    # The copy reads x and writes y: the same bytes as the forward. Its outputs are
    # made once per input set, outside the timing.
    copy_out = {id(x): torch.empty_like(x) for x, _ in sets}
    contenders = {"copy": lambda x, w: copy_out[id(x)].copy_(x), **contenders}
    row = _measure(contenders, sets, lambda out: close(out, ref, dtype) <= tol, iters=50)
    moved = 2 * nbytes + n * dtype.itemsize
    for v in row.values():
        if "us" in v:
            v["tbps"] = moved / v["us"] / 1e6
    return row


def _measure(contenders, sets, ok, iters, rounds=2):
    """Validate each contender once, then time them all in ``rounds`` interleaved
    rounds and keep each one's best median, so that no contender is favoured by
    when it happened to run (clocks, memory placement)."""
    row, live = {}, {}
    for name, fn in contenders.items():
        try:
            out = fn(*sets[0])
            if ok is not None and name != "copy" and not ok(out):
                row[name] = {"error": "wrong result against the float64 reference"}
                continue
            live[name] = fn
        except Exception as e:  # a contender that cannot run is reported, not fatal
            row[name] = {"error": f"{type(e).__name__}: {str(e)[:120]}"}
    best: dict[str, float] = {}
    for _ in range(rounds):
        for name, fn in live.items():
            t = time_fn(fn, sets, iters=iters)
            best[name] = min(best.get(name, t), t)
    for name in contenders:
        if name in best:
            row[name] = {"us": best[name]}
    return row


def bench_backward(shape, dtype, contenders, l2_bytes):
    torch = _torch()
    m, n = shape
    nbytes = m * n * dtype.itemsize
    copies = min(64, max(2, math.ceil(3 * l2_bytes / max(3 * nbytes, 1))))
    g = torch.Generator(device="cuda").manual_seed(1)
    w = (torch.randn(n, device="cuda", generator=g) * 0.1 + 1).to(dtype)
    sets = []
    for _ in range(copies):
        x = torch.randn(m, n, device="cuda", generator=g).to(dtype)
        dy = torch.randn(m, n, device="cuda", generator=g).to(dtype)
        rstd = torch.rsqrt((x.float() ** 2).mean(-1) + EPS)
        sets.append((dy, x, w, rstd))
    dy, x, w, rstd = sets[0]
    x64 = x.double().requires_grad_()
    w64 = w.double().requires_grad_()
    y64 = x64 * torch.rsqrt((x64 * x64).mean(-1, keepdim=True) + EPS) * w64
    y64.backward(dy.double())
    tol = 2e-5 if dtype == torch.float32 else 2e-2
    row = {}
    # Copy-equivalent: one device copy moving the bytes of x + dy (read) and dx (write),
    # i.e. 1.5x the tensor read and written.
    half = (3 * nbytes) // 2
    bufs = [(torch.empty(half, dtype=torch.uint8, device="cuda"),
             torch.empty(half, dtype=torch.uint8, device="cuda")) for _ in range(copies)]
    copy = {"copy": lambda a, b: b.copy_(a)}
    row = _measure(copy, bufs, None, iters=30)

    def ok(out):
        dx, dw = out
        return close(dx, x64.grad, dtype) <= tol and close(dw, w64.grad, dtype) <= tol * 10
    row.update(_measure(contenders, sets, ok, iters=30))
    moved = 3 * nbytes + 2 * n * dtype.itemsize
    for v in row.values():
        if "us" in v:
            v["tbps"] = moved / v["us"] / 1e6
    return row


def fwd_contenders(dtype):
    torch = _torch()
    import torch.nn.functional as F
    from ptxdsl.ops import rms_norm
    out = {}
    # The same bytes as the forward: read x, write y.
    out["ptxdsl"] = lambda x, w: rms_norm(x, w, EPS)
    out["eager"] = lambda x, w: (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True)
                                                          + EPS) * w.float()).to(x.dtype)
    out["F.rms_norm"] = lambda x, w: F.rms_norm(x, (x.shape[-1],), w, EPS)
    compiled = torch.compile(lambda x, w: F.rms_norm(x, (x.shape[-1],), w, EPS), dynamic=False)
    out["torch.compile"] = compiled
    try:
        out["triton"] = triton_rms_fwd()
    except Exception:
        pass
    try:
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction
        out["liger"] = lambda x, w: LigerRMSNormFunction.apply(x, w, EPS)
    except Exception:
        pass
    return out


def bwd_contenders(dtype):
    torch = _torch()
    import torch.nn.functional as F
    from ptxdsl.ops import rms_norm_backward
    out = {}

    out["ptxdsl"] = lambda dy, x, w, rstd: rms_norm_backward(dy, x, w, rstd)

    def autograd_of(f):
        def run(dy, x, w, rstd):
            xg = x.detach().requires_grad_()
            wg = w.detach().requires_grad_()
            y = f(xg, wg)
            gx, gw = torch.autograd.grad(y, (xg, wg), dy)
            return gx, gw
        return run
    out["F.rms_norm"] = autograd_of(lambda x, w: F.rms_norm(x, (x.shape[-1],), w, EPS))
    out["torch.compile"] = autograd_of(torch.compile(
        lambda x, w: F.rms_norm(x, (x.shape[-1],), w, EPS), dynamic=False))
    try:
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction
        out["liger"] = autograd_of(lambda x, w: LigerRMSNormFunction.apply(x, w, EPS))
    except Exception:
        pass
    return out


def _warm_up_gpu(seconds: float = 3.0) -> None:
    """Keep the GPU busy for a few seconds before timing, so that the first shape is
    not measured while clocks and memory are still settling (seen on an H200: the
    first shape of a cold run was 10-20% slower for every contender)."""
    import time
    torch = _torch()
    a = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(20):
            b.copy_(a)
        torch.cuda.synchronize()
    del a, b


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtypes", default="f32,bf16,f16")
    ap.add_argument("--quick", action="store_true", help="2048x8192 and 4096x4096 only")
    ap.add_argument("--no-backward", action="store_true")
    ap.add_argument("--no-forward", action="store_true")
    ap.add_argument("--shapes", default=None, help="e.g. 2048x8192,1x8192")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    torch = _torch()
    dev = torch.cuda.get_device_properties(0)
    l2 = getattr(dev, "L2_cache_size", 50 << 20)
    names = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
    shapes = SHAPES[:2] if a.quick else SHAPES
    if a.shapes:
        shapes = [tuple(int(v) for v in s.split("x")) for s in a.shapes.split(",")]
    _warm_up_gpu()
    result = {"device": dev.name, "date": datetime.date.today().isoformat(),
              "torch": torch.__version__, "forward": [], "backward": []}
    for dn in a.dtypes.split(","):
        dt = names[dn]
        fc = {} if a.no_forward else fwd_contenders(dt)
        for sh in shapes if fc else ():
            row = bench_forward(sh, dt, fc, l2)
            result["forward"].append({"shape": list(sh), "dtype": dn, "results": row})
            print(f"fwd {dn} {sh}: " + ", ".join(
                f"{k}={v['us']:.1f}" if "us" in v else f"{k}=ERR" for k, v in row.items()),
                flush=True)
        if a.no_backward:
            continue
        bc = bwd_contenders(dt)
        for sh in shapes:
            row = bench_backward(sh, dt, bc, l2)
            result["backward"].append({"shape": list(sh), "dtype": dn, "results": row})
            print(f"bwd {dn} {sh}: " + ", ".join(
                f"{k}={v['us']:.1f}" if "us" in v else f"{k}=ERR" for k, v in row.items()),
                flush=True)
    path = a.json or os.path.join(os.environ.get("OUT", "."), "rmsnorm.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    print_table(result)
    return result


def print_table(result, kinds=("forward", "backward"), title="RMSNorm"):
    """The table printed last: one block per kind, one line per shape (and dtype)."""
    print(f"\n{title} on {result['device']} ({result['date']}), median µs (TB/s); "
          f"'vs best' = best other time / ptxdsl time, '%copy' = copy time / ptxdsl time")
    for kind in kinds:
        rows = result.get(kind) or []
        if not rows:
            continue
        names = list(dict.fromkeys(k for r in rows for k in r["results"]))
        print(f"{kind:10s} {'dtype':5s} {'shape':>12s} " + " ".join(f"{n:>14s}" for n in names)
              + "   vs best  %copy")
        for r in rows:
            res = r["results"]
            cells = []
            for n in names:
                v = res.get(n, {})
                cells.append(f"{v['us']:8.1f}({v['tbps']:.2f})" if "us" in v else f"{'-':>14s}")
            ours = res.get("ptxdsl", {}).get("us")
            peers = [v["us"] for k, v in res.items() if k not in ("ptxdsl", "copy") and "us" in v]
            vs = f"{min(peers) / ours:8.2f}x" if ours and peers else "       -"
            cp = res.get("copy", {}).get("us")
            pc = f"{100 * cp / ours:5.0f}%" if ours and cp else "     -"
            shp = "x".join(map(str, r["shape"]))
            print(f"{'':10s} {r.get('dtype', ''):5s} {shp:>12s} "
                  + " ".join(f"{c:>14s}" for c in cells) + f"  {vs} {pc}")

if __name__ == "__main__":
    main()
