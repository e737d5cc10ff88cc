"""The RMSNorm cluster kernels of long rows over their parameters, launched directly:
cluster sizes, threads and chunks per thread, the forward without its prefetch of w,
and the persistent forward through a ring of slices; the
backward over cluster sizes and ring stages. Checks the choices of
``ptxdsl/ops/rmsnorm/plan_long.py`` on this device (rows past 32768 elements).

Each variant is checked on its first and last rows against float64 where it can go
wrong, then timed as ``bench/rmsnorm_long.py`` times (``bench.rmsnorm.time_fn``, best of
``--rounds``). Writes ``{"tune": [{"shape", "dtype", "results": {variant: µs or
error}}]}`` after every shape.

    python lab/rmsnorm_long_tune.py [--dtypes bf16,f32] [--ns 65536,131072,262144]
        [--m 32768] [--no-forward] [--no-backward] [--rounds 2] [--json PATH]
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from bench.rmsnorm import time_fn, _warm_up_gpu  # noqa: E402
from bench.rmsnorm_long import (CHECK_ROWS, EPS, _close, _iters, _release, _torch,  # noqa: E402
                                rows_that_fit)


def tune(n, dt, m, rounds, forward=True, backward=True):
    """The cluster kernels over their parameters, launched directly: name -> µs
    (``forward`` / ``backward``: which kernels)."""
    import dataclasses
    torch = _torch()
    from ptxdsl.ops.rmsnorm.bwd_dw import build_dw_reduce
    from ptxdsl.ops.rmsnorm.bwd_cluster import build_backward_cluster, plan_backward_cluster
    from ptxdsl.ops.rmsnorm.fwd_cluster import build_forward_cluster, plan_cluster
    from ptxdsl.runtime import prepare
    from ptxdsl.types import bf16, f16, f32
    pt = {torch.float32: f32, torch.bfloat16: bf16, torch.float16: f16}[dt]
    m = rows_that_fit(m, n, dt.itemsize, 4)
    x = torch.randn(m, n, device="cuda", dtype=dt)
    w = torch.ones(n, device="cuda", dtype=dt)
    out, row = torch.empty_like(x), {}
    vec = 16 // dt.itemsize
    for c in (1, 2, 4, 8, 16) if forward else ():
        for t in (256, 512, 1024):
            k_per = n // vec // (c * t)
            if k_per < 1 or k_per * vec * dt.itemsize > 256 or c * t * k_per * vec != n:
                continue
            try:
                p = plan_cluster(n, pt, cluster=c, threads=t, per_thread=k_per)
                k = build_forward_cluster(p, pt, pt, eps=EPS)
                k(x, w, out)
                us = min(time_fn(lambda: k(x, w, out), [()], warmup=2,
                                 iters=_iters(2 * x.nbytes)) for _ in range(rounds))
                row[f"fwd C{c} T{t} K{k_per}"] = us
            except Exception as e:  # noqa: BLE001 - report and go on
                row[f"fwd C{c} T{t} K{k_per}"] = f"{type(e).__name__}: {str(e)[:80]}"
    if forward:
        _tune_forward_variants(n, pt, x, w, out, row, rounds)
    dy = torch.randn_like(x) if backward else None
    rstd = torch.ones(m, device="cuda")
    for c in (2, 4, 8, 16) if backward else ():
        for stages in (1, 2, 3):
            p = plan_backward_cluster(n, pt, cluster=c, stages=stages)
            if p is None:
                continue
            try:
                k = build_backward_cluster(p, pt, pt)
                q = prepare(k).resident_clusters(torch.cuda.current_device())
                p = dataclasses.replace(p, grid=q)
                k = build_backward_cluster(p, pt, pt)
                red = build_dw_reduce(n, q, pt)
                part = torch.empty(q, n, device="cuda")
                dw = torch.empty(n, device="cuda", dtype=dt)

                def run():
                    k(dy, x, w, rstd, out, part)
                    red(part, dw)
                run()
                us = min(time_fn(run, [()], warmup=2, iters=_iters(3 * x.nbytes))
                         for _ in range(rounds))
                row[f"bwd C{c} T{p.threads} S{stages} Q{q}"] = us
            except Exception as e:  # noqa: BLE001
                row[f"bwd C{c} S{stages}"] = f"{type(e).__name__}: {str(e)[:80]}"
    del x, dy, out
    _release()
    return m, row


def _checked(k, x, w, out, row, name) -> bool:
    """Run forward kernel ``k`` once into a NaN-filled ``out``; False (and the error in
    ``row[name]``) where its first and last rows are not x's RMSNorm (w is ones)."""
    torch = _torch()
    out.fill_(float("nan"))
    k(x, w, out)
    for rows in (slice(0, CHECK_ROWS), slice(-CHECK_ROWS, None)):
        x64 = x[rows].double()
        err = _close(out[rows], x64 * torch.rsqrt((x64 * x64).mean(-1, keepdim=True) + EPS))
        if not err < 1e-2:
            row[name] = f"wrong: {err:.3g}"
            return False
    return True


def _tune_forward_variants(n, pt, x, w, out, row, rounds):
    """The default forward plan without its prefetch of w, and the persistent forward
    through a ring of 2 or 3 slices, timed into ``row``."""
    import dataclasses
    torch = _torch()
    from ptxdsl.ops.rmsnorm.fwd_cluster import build_forward_cluster, plan_cluster
    from ptxdsl.runtime import prepare
    try:  # the default plan without the L1 prefetch of w (and x read into L1 too)
        p = dataclasses.replace(plan_cluster(n, pt), prefetch_w=False)
        k = build_forward_cluster(p, pt, pt, eps=EPS)
        k(x, w, out)
        row[f"fwd C{p.cluster} T{p.threads} K{p.per_thread} no-prefetch"] = min(
            time_fn(lambda: k(x, w, out), [()], warmup=2, iters=_iters(2 * x.nbytes))
            for _ in range(rounds))
    except Exception as e:  # noqa: BLE001
        row["fwd no-prefetch"] = f"{type(e).__name__}: {str(e)[:80]}"
    rings = [dict(stages=s) for s in (2, 3)]  # the persistent forward's default split
    rings += [dict(stages=1, threads=1024, per_thread=8)]  # one buffer of 128 KiB slices
    vec = 16 // pt.bytes
    for c in (4, 8, 16):      # and smaller slices: two CTAs per SM where two rings fit
        for t in (256, 512):
            k_per = n // vec // (c * t)
            if 1 <= k_per <= 8 and c * t * k_per * vec == n:
                rings += [dict(stages=s, cluster=c, threads=t, per_thread=k_per)
                          for s in (2, 3, 4)]
    for kw in rings:  # the persistent forward, through a ring of its slices
        p = plan_cluster(n, pt, **kw)
        if p is None:
            continue
        name = (f"fwd ring C{p.cluster} T{p.threads} K{p.per_thread} S{p.stages} "
                f"x{p.min_ctas}")
        if any(key.startswith(name) for key in row):
            continue
        try:
            q = prepare(build_forward_cluster(p, pt, pt, eps=EPS)).resident_clusters(
                torch.cuda.current_device())
            k = build_forward_cluster(dataclasses.replace(p, grid=q), pt, pt, eps=EPS)
            if not _checked(k, x, w, out, row, name):
                continue
            row[name + f" Q{q}"] = min(time_fn(lambda: k(x, w, out), [()], warmup=2,
                                               iters=_iters(2 * x.nbytes))
                                       for _ in range(rounds))
        except Exception as e:  # noqa: BLE001
            row[name] = f"{type(e).__name__}: {str(e)[:80]}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtypes", default="bf16,f32")
    ap.add_argument("--ns", default="65536,131072,262144")
    ap.add_argument("--m", type=int, default=32768)
    ap.add_argument("--no-forward", action="store_true")
    ap.add_argument("--no-backward", action="store_true")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    torch = _torch()
    names = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
    result = {"device": torch.cuda.get_device_properties(0).name,
              "date": datetime.date.today().isoformat(), "torch": torch.__version__,
              "tune": []}
    path = a.json or os.path.join(os.environ.get("OUT", "."), "rmsnorm_long_tune.json")
    _warm_up_gpu(2.0)
    for dn in a.dtypes.split(","):
        for n in (int(v) for v in a.ns.split(",")):
            m, row = tune(n, names[dn], a.m, a.rounds, not a.no_forward, not a.no_backward)
            print(f"tune {dn} {m}x{n}: " + ", ".join(
                f"{k}={v:.1f}" if isinstance(v, float) else f"{k}=ERR({v})"
                for k, v in row.items()), flush=True)
            result["tune"].append({"shape": [m, n], "dtype": dn, "results": row})
            with open(path, "w") as f:  # after every shape: a cut-off run keeps its rows
                json.dump(result, f, indent=1)
    return result


if __name__ == "__main__":
    main()
