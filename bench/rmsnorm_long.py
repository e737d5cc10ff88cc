"""RMSNorm of long rows (issue 21): M=32768 x N from 4096 to 262144, forward and backward.

Contenders, each validated on its first rows against float64 before it is timed: a
device copy of the same bytes, ptxdsl (which takes a cluster of CTAs per row past
N=32768 on sm_90), ``ptxdsl:1cta`` (the same call with the cluster plans switched off:
the row-per-CTA kernels, to show what the clusters buy), torch.compile, ``F.rms_norm``
and Liger and Quack where installed (as ``bench/rmsnorm.py``; ``--skip quack`` leaves Quack
out). TB/s counts x read and y written
once (forward), x and dy read and dx written once (backward), plus the weights.

Rows of 262144 at M=32768 are 16 GiB per bf16 tensor, so this bench differs from
``bench/rmsnorm.py`` where memory makes it: one input set (the tensors dwarf L2 anyway),
contenders timed one after another (each one's outputs and autograd graph freed before
the next), validation on the first 64 rows, and M lowered (to a multiple of 1024,
printed) where the tensors a contender needs at once would not fit the free memory. The
backward's copy moves x's bytes and is scaled by 1.5 (x + dy read, dx written: linear at
these sizes).

The cluster kernels' own parameters (cluster sizes, threads, ring depths) are timed by
``lab/rmsnorm_long_tune.py``.

    python bench/rmsnorm_long.py [--dtypes bf16,f32] [--ns 4096,...] [--m 32768]
        [--no-forward] [--no-backward] [--skip torch.compile,liger] [--json PATH]
"""
from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from bench.rmsnorm import (EPS, LIGER_ARGS, _AutogradBackward, _compiled_rms_norm,  # noqa: E402
                           _fresh_compile_state, _quiet_host, _warm_up_gpu, peers,
                           print_table, time_fn)
from bench.rmsnorm_contenders import quack_bwd, quack_fwd  # noqa: E402

NS = [4096, 8192, 16384, 32768, 65536, 131072, 262144]
CHECK_ROWS = 64
# Tensors of the shape alive at once while a contender is timed (inputs, the copy's
# destination or two outputs, an autograd graph's output, Liger's own dy), with room.
FWD_TENSORS, BWD_TENSORS = 4.5, 6.5


def _torch():
    import torch
    return torch


def rows_that_fit(m: int, n: int, es: int, tensors: float) -> int:
    """``m`` or fewer rows (a multiple of 1024) so that ``tensors`` (M, N) arrays fit in
    90% of the free device memory."""
    torch = _torch()
    free, _ = torch.cuda.mem_get_info()
    fit = int(0.9 * free / (tensors * n * es))
    return min(m, max(1024, fit // 1024 * 1024))


def _iters(nbytes: int) -> int:
    """Calls per timing round: about a quarter second of DRAM traffic at 3 TB/s."""
    return max(3, min(50, int(0.25 / max(nbytes / 3e12, 1e-6))))


def _release():
    gc.collect()
    _torch().cuda.empty_cache()


class _OneCta:
    """ptxdsl with the cluster plans switched off for the duration of its timing (the
    ops' recorded launches are forgotten before and after, so neither variant runs the
    other's)."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, *a):
        return self.fn(*a)

    def __enter__(self):
        from ptxdsl.ops.rmsnorm import api, plan, plan_long
        self._saved = plan.long_rows
        plan.long_rows = lambda *a, **k: plan_long._LongRows(None, None)
        api.clear()
        return self

    def __exit__(self, *exc):
        from ptxdsl.ops.rmsnorm import api, plan
        plan.long_rows = self._saved
        api.clear()


class _Plain:
    """A contender without set-up (ptxdsl's recorded launches forgotten first)."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, *a):
        return self.fn(*a)

    def __enter__(self):
        from ptxdsl.ops.rmsnorm import api
        api.clear()
        return self

    def __exit__(self, *exc):
        pass


def _time_each(contenders, args, ok, nbytes, rounds):
    """Each contender alone: set up, validate (``ok(out)``), time ``rounds`` rounds of
    :func:`~bench.rmsnorm.time_fn` (its best median), free everything it made."""
    row = {}
    iters = _iters(nbytes)
    for name, fn in contenders.items():
        try:
            with fn if hasattr(fn, "__enter__") else _Plain(fn):
                prepare = getattr(fn, "prepare", None)
                if prepare is not None:
                    prepare([args])
                out = fn(*args)
                good = ok is None or name == "copy" or ok(out)
                del out
                if not good:
                    row[name] = {"error": "wrong result against the float64 reference"}
                    continue
                with _quiet_host():
                    row[name] = {"us": min(time_fn(fn, [args], warmup=2, iters=iters)
                                           for _ in range(rounds))}
        except Exception as e:  # a contender that cannot run is reported, not fatal
            row[name] = {"error": f"{type(e).__name__}: {str(e)[:120]}"}
        finally:
            if hasattr(fn, "graphs"):
                fn.graphs.clear()
            _release()
    return row


def _skipped(skip: set, n: int) -> set:
    """The contenders left out at rows of ``n``: those asked, and ``ptxdsl:1cta`` where
    no cluster plan applies (N <= 16384: it would time ptxdsl again)."""
    return skip | ({"ptxdsl:1cta"} if n <= 16384 else set())


def _close(out, ref) -> float:
    return ((out.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()


def bench_forward(n, dt, m, skip, rounds):
    torch = _torch()
    import torch.nn.functional as F
    from ptxdsl.ops import rms_norm
    m = rows_that_fit(m, n, dt.itemsize, FWD_TENSORS)
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(m, n, device="cuda", generator=g, dtype=dt)
    w = (torch.randn(n, device="cuda", generator=g) * 0.1 + 1).to(dt)
    x64 = x[:CHECK_ROWS].double()
    ref = x64 * torch.rsqrt((x64 * x64).mean(-1, keepdim=True) + EPS) * w.double()
    tol = 2e-6 if dt == torch.float32 else 1e-2
    dst = torch.empty_like(x)
    _fresh_compile_state()
    p = peers()
    contenders = {"copy": lambda x, w: dst.copy_(x),
                  "ptxdsl": lambda x, w: rms_norm(x, w, EPS),
                  "ptxdsl:1cta": _OneCta(lambda x, w: rms_norm(x, w, EPS)),
                  "torch.compile": _compiled_rms_norm(),
                  "F.rms_norm": lambda x, w: F.rms_norm(x, (n,), w, EPS)}
    if p["liger"] is not None:
        liger = p["liger"]
        contenders["liger"] = lambda x, w: liger.apply(x, w, *LIGER_ARGS)
    if p["quack"] is not None:
        contenders["quack"] = quack_fwd(p["quack"], EPS)
    contenders = {k: v for k, v in contenders.items() if k not in _skipped(skip, n)}
    nbytes = 2 * m * n * dt.itemsize + n * dt.itemsize
    row = _time_each(contenders, (x, w), lambda out: _close(out[:CHECK_ROWS], ref) <= tol,
                     nbytes, rounds)
    for v in row.values():
        if "us" in v:
            v["tbps"] = nbytes / v["us"] / 1e6
    del x, dst
    _release()
    return m, row


def bench_backward(n, dt, m, skip, rounds):
    torch = _torch()
    import torch.nn.functional as F
    from ptxdsl.ops import rms_norm_backward
    m = rows_that_fit(m, n, dt.itemsize, BWD_TENSORS)
    g = torch.Generator(device="cuda").manual_seed(1)
    w = (torch.randn(n, device="cuda", generator=g) * 0.1 + 1).to(dt)
    x = torch.randn(m, n, device="cuda", generator=g, dtype=dt)
    dy = torch.randn(m, n, device="cuda", generator=g, dtype=dt)
    # in blocks of rows: x.float() of the whole would be twice x's size again
    rstd = torch.cat([torch.rsqrt((x[i:i + 1024].float() ** 2).mean(-1) + EPS)
                      for i in range(0, m, 1024)])
    x64 = x[:CHECK_ROWS].double().requires_grad_()
    w64 = w.double().requires_grad_()
    y64 = x64 * torch.rsqrt((x64 * x64).mean(-1, keepdim=True) + EPS) * w64
    y64.backward(dy[:CHECK_ROWS].double())
    gx = x64.grad
    del x64, y64, w64
    tol = 2e-5 if dt == torch.float32 else 2e-2
    dst = torch.empty_like(x)
    _fresh_compile_state()
    p = peers()
    contenders = {"copy": lambda dy, x, w, rstd: dst.copy_(x),
                  "ptxdsl": lambda dy, x, w, rstd: rms_norm_backward(dy, x, w, rstd),
                  "ptxdsl:1cta": _OneCta(lambda dy, x, w, rstd:
                                         rms_norm_backward(dy, x, w, rstd)),
                  "torch.compile": _AutogradBackward(_compiled_rms_norm()),
                  "F.rms_norm": _AutogradBackward(lambda x, w: F.rms_norm(x, (n,), w, EPS))}
    if p["liger"] is not None:
        liger = p["liger"]
        contenders["liger"] = _AutogradBackward(
            lambda x, w: liger.apply(x, w, *LIGER_ARGS, True), own_dy=True)
    if p["quack"] is not None:
        contenders["quack"] = quack_bwd(p["quack"])
    contenders = {k: v for k, v in contenders.items() if k not in _skipped(skip, n)}
    nbytes = 3 * m * n * dt.itemsize + 2 * n * dt.itemsize
    # dW is only compared on the rows checked for dx when M is the check's size; here
    # dx's first rows say whether the kernel ran right (dW: tests/gpu)
    row = _time_each(contenders, (dy, x, w, rstd),
                     lambda out: _close(out[0][:CHECK_ROWS], gx) <= tol, nbytes, rounds)
    if "us" in row.get("copy", {}):
        row["copy"]["us"] *= 1.5  # x's bytes copied; the backward moves 1.5 times them
    for v in row.values():
        if "us" in v:
            v["tbps"] = nbytes / v["us"] / 1e6
    del x, dy, dst
    _release()
    return m, row


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtypes", default="bf16,f32")
    ap.add_argument("--ns", default=",".join(map(str, NS)))
    ap.add_argument("--m", type=int, default=32768)
    ap.add_argument("--no-forward", action="store_true")
    ap.add_argument("--no-backward", action="store_true")
    ap.add_argument("--skip", default="", help="contenders to leave out, e.g. torch.compile")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    torch = _torch()
    dev = torch.cuda.get_device_properties(0)
    names = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
    ns = [int(v) for v in a.ns.split(",")]
    skip = set(filter(None, a.skip.split(",")))
    result = {"device": dev.name, "date": datetime.date.today().isoformat(),
              "torch": torch.__version__, "forward": [], "backward": []}
    path = a.json or os.path.join(os.environ.get("OUT", "."), "rmsnorm_long.json")
    _warm_up_gpu(2.0)
    for dn in a.dtypes.split(","):
        dt = names[dn]
        for n in ns:
            jobs = [k for k in (("forward", bench_forward), ("backward", bench_backward))
                    if not (a.no_forward and k[0] == "forward")
                    and not (a.no_backward and k[0] == "backward")]
            for kind, fn in jobs:
                m, row = fn(n, dt, a.m, skip, a.rounds)
                print(f"{kind[:3]} {dn} {m}x{n}: " + ", ".join(
                    f"{k}={v['us']:.1f}" if "us" in v else f"{k}=ERR({v['error']})"
                    for k, v in row.items()), flush=True)
                result[kind].append({"shape": [m, n], "dtype": dn, "results": row})
                with open(path, "w") as f:  # after every shape: a cut-off run keeps its rows
                    json.dump(result, f, indent=1)
    print_table(result, title="RMSNorm, long rows")
    return result


if __name__ == "__main__":
    main()
