"""RMSNorm forward and backward, side by side in one run, on the current GPU.

Contenders (each validated against a float64 reference before it is timed; see
``bench/rmsnorm_contenders.py``): device copy of the same bytes, ptxdsl, torch eager
formula, F.rms_norm, torch.compile, a plain Triton kernel, and Liger / pyptx / Quack when
installed (``bash bench/gpu_session.sh`` installs Liger and pyptx from the wheels in
``.whl/``; Quack needs NVIDIA's CUTLASS DSL as well). A peer that is not installed is
named in a note and left out; ``--only`` keeps the contenders named (the copy always runs).
Timing: CUDA events around each call, median of many runs, inputs rotated
over enough copies to exceed L2, the whole sweep in two passes on fresh
allocations (each contender's faster pass kept). Prints a table last and
writes JSON (after every shape; ``passes_done`` says how many passes were complete).

Fairness: torch.compile gets a fresh compile for every (shape, dtype) (dynamo
is reset before each contender set, so no shape is silently run in eager after
dynamo's recompile limit), and every compile, autotune and JIT (Triton, Quack's CuTe
DSL) happens in the validation call, before timing. The backward times the backward
alone for every contender: the autograd ones run their forward once per input set before
timing and are timed on ``torch.autograd.grad(..., retain_graph=True)``, as ptxdsl and
Quack are timed on their backward from a saved ``rstd``. A peer that cannot run a shape or
dtype (pyptx: float32 only, N a multiple of 32, no backward) gets an error cell.

Bytes: the forward's TB/s counts x, y and w. The backward's has two counts, both in the
JSON: the copy's (x, dY, dX: 3·M·N elements, what the timed copy moves; '%copy' is the
copy's time over the contender's) and Quack's (its benchmark's: also w, rstd and the dW
partials, 2·SMs·N float32; '%copyQ' is the contender's bandwidth by that count over the
copy's). The printed table names the count of each column.

    python bench/rmsnorm.py [--quick] [--dtypes f32,bf16,f16] [--only ptxdsl,quack] [--json PATH]
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import gc
import json
import math
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

# The contenders live in rmsnorm_contenders; the names other benches import from here stay.
from bench.rmsnorm_contenders import (  # noqa: E402,F401
    CONTENDERS, EPS, LIGER_ARGS, _AutogradBackward, _compiled_rms_norm, _fresh_compile_state,
    bwd_contenders, fwd_contenders, only_contenders, parse_only, peers, quack_bwd_bytes,
    triton_rms_fwd)

SHAPES = [(2048, 8192), (4096, 4096), (8192, 8192), (16384, 4096), (32768, 1024),
          (4096, 5120), (4096, 7168), (1024, 16384), (4096, 1000), (1, 8192), (7, 4096)]


def _torch():
    import torch
    return torch


def time_fn(fn, sets, warmup=5, iters=50, block=10):
    """Median µs per call of ``fn(*sets[i % len(sets)])`` over ``iters`` calls in blocks
    of ``block`` calls, each block between two CUDA events.

    Calls are queued back to back (one synchronisation at the end), as a model's
    layers are: a call's time is its GPU time when the host keeps ahead of the
    GPU, and includes the host's launch work when it does not (small shapes), so
    host overhead counts exactly where it would in real use. Events go around blocks,
    not single calls, because recording one costs the host as much as a launch (9.0 µs
    on the H100 benchmark host, 2026-11-24): two around every call made kernels of
    20-35 µs wait for the host, and the copy of the same 64 MiB took 25.4 µs in blocks
    of 10 and 26-35 µs with events around each call, from one shape to the next
    (``bench/results/rmsnorm_timing_blocks_h100.json``).

    Each call's result is kept until the input set it came from comes round again, as
    a model keeps a layer's output for the next layer: a contender that allocates its
    output then writes a rotation of ``len(sets)`` buffers, as the inputs rotate,
    rather than one buffer over and over. With one buffer, where the allocator happened
    to place it decided a shape (H200: at 4096x4096 bf16 F.rms_norm ran 2% under the
    copy of the same bytes, and ptxdsl 5% over it, in one run; the next run they
    swapped places).
    """
    torch = _torch()
    keep = [None] * len(sets)
    for i in range(warmup):
        keep[i % len(sets)] = fn(*sets[i % len(sets)])
    torch.cuda.synchronize()
    block = max(1, min(block, iters))
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(max(1, iters // block))]
    i = 0
    for s, e in events:
        s.record()
        for _ in range(block):
            j = i % len(sets)
            keep[j] = fn(*sets[j])
            i += 1
        e.record()
    torch.cuda.synchronize()
    del keep
    return statistics.median(s.elapsed_time(e) * 1000.0 / block for s, e in events)


def ref_fwd(x, w):
    torch = _torch()
    x64 = x.double()
    return (x64 * torch.rsqrt((x64 * x64).mean(-1, keepdim=True) + EPS) * w.double())


def close(out, ref, dtype) -> float:
    """Max error relative to the largest reference value."""
    err = (out.double() - ref).abs().max().item()
    scale = ref.abs().max().item() or 1.0
    return err / scale


def _copies(per_call: int, l2_bytes: int) -> int:
    """Input copies to rotate over: enough that one pass moves four times the L2, and at
    least 8, so that no single allocation's placement in DRAM decides a shape's number
    (seen on an H200: the same 32 MiB copy took 20 or 28 µs from one process to the next)."""
    return min(64, max(8, math.ceil(4 * l2_bytes / max(per_call, 1))))


def bench_forward(shape, dtype, contenders, l2_bytes, rounds=7, device="cuda"):
    torch = _torch()
    m, n = shape
    nbytes = m * n * dtype.itemsize
    copies = _copies(2 * nbytes, l2_bytes)
    g = torch.Generator(device=device).manual_seed(0)
    sets = []
    w = (torch.randn(n, device=device, generator=g) * 0.1 + 1).to(dtype)
    for _ in range(copies):
        x = torch.randn(m, n, device=device, generator=g).to(dtype)
        sets.append((x, w))
    ref = ref_fwd(*sets[0])
    tol = 2e-6 if dtype == torch.float32 else 1e-2
    # The copy reads x and writes y: the same bytes as the forward. Its outputs are
    # made once per input set, outside the timing.
    copy_out = {id(x): torch.empty_like(x) for x, _ in sets}
    contenders = {"copy": lambda x, w: copy_out[id(x)].copy_(x), **contenders}
    row = _measure(contenders, sets, lambda out: close(out, ref, dtype) <= tol, iters=100,
                   rounds=_rounds_for(rounds, 2 * nbytes), warm=_warm_for(2 * nbytes))
    moved = 2 * nbytes + n * dtype.itemsize
    for v in row.values():
        if "us" in v:
            v["tbps"] = moved / v["us"] / 1e6
    return row


def _warm_for(nbytes: int) -> float:
    """Seconds of GPU warm-up before timing a shape whose calls move ``nbytes``: none for
    calls under 8 MiB (a few µs of GPU work, bound by the host, not by clocks)."""
    return 0.0 if nbytes < (8 << 20) else 0.3


def _rounds_for(rounds: int, nbytes: int) -> int:
    """Timing rounds for a shape whose calls move ``nbytes``: three times as many for
    host-bound calls (under 8 MiB, as :func:`_warm_for`). Their numbers are the host's,
    and a busy host slows a whole round of every contender: on H100 hosts of one day
    the copy of 1 x 8192 f32 took 8.3 us in one sweep and 13.0 in the next, from 7 rounds
    of 2 passes. A round of them takes a few ms, so more rounds cost nothing."""
    return 3 * rounds if nbytes < (8 << 20) else rounds


def interleaved(runs: dict, rounds: int, time_one) -> dict:
    """name -> the times ``time_one(runs[name])`` gave in ``rounds`` rounds over every
    entry, every other round in reverse order, so that none is favoured by when it ran."""
    names, times = list(runs), {name: [] for name in runs}
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            times[name].append(time_one(runs[name]))
    return times


def _measure(contenders, sets, ok, iters, rounds=7, warm=0.3):
    """Validate each contender once, then time them all in ``rounds`` interleaved
    rounds (every other one in reverse order) and keep each one's best median, so that
    no contender is favoured by when it happened to run (clocks, memory placement, a
    busy host). Between validation and timing the GPU is kept busy for ``warm`` seconds:
    the compiles of the validation calls leave it idle for seconds, and the first rounds
    after such a pause ran up to 30% slow for every contender (H200, the first bf16 shape
    after the f32 ones). While timing, Python's garbage collector is off (as ``timeit``
    does) and the timing thread stays on one CPU (no migration in the middle of a
    host-bound round)."""
    row, live = {}, {}
    for name, fn in contenders.items():
        try:
            prepare = getattr(fn, "prepare", None)
            if prepare is not None:  # untimed set-up per input set (see _AutogradBackward)
                prepare(sets)
            out = fn(*sets[0])  # also the compile / autotune call: before any timing
            if ok is not None and name != "copy" and not ok(out):
                row[name] = {"error": "wrong result against the float64 reference"}
                continue
            live[name] = fn
        except Exception as e:  # a contender that cannot run is reported, not fatal
            row[name] = {"error": f"{type(e).__name__}: {str(e)[:120]}"}
    if warm:
        _warm_up_gpu(warm, nbytes=64 << 20)
    with _quiet_host():
        times = interleaved(live, rounds, lambda fn: time_fn(fn, sets, iters=iters))
    for name in contenders:
        if name in times:
            row[name] = {"us": min(times[name])}
    return row


@contextlib.contextmanager
def _quiet_host():
    """The timing thread pinned to one CPU (the highest it may use: the lowest ones tend
    to take the interrupts) and the garbage collector off, both restored after."""
    cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    gc_on = gc.isenabled()
    try:
        if cpus and len(cpus) > 1:
            os.sched_setaffinity(0, {max(cpus)})
        gc.disable()
        yield
    finally:
        if gc_on:
            gc.enable()
        if cpus and len(cpus) > 1:
            os.sched_setaffinity(0, cpus)


def bench_backward(shape, dtype, contenders, l2_bytes, rounds=7, device="cuda", sms=None):
    """One backward shape: the row of every contender's time, with TB/s by the copy's
    count (``tbps``: x, dY, dX and dW) and by Quack's (``tbps_quack``,
    :func:`~bench.rmsnorm_peers.quack_bwd_bytes` with ``sms``, by default the GPU's)."""
    torch = _torch()
    m, n = shape
    nbytes = m * n * dtype.itemsize
    copies = _copies(3 * nbytes, l2_bytes)
    g = torch.Generator(device=device).manual_seed(1)
    w = (torch.randn(n, device=device, generator=g) * 0.1 + 1).to(dtype)
    sets = []
    for _ in range(copies):
        x = torch.randn(m, n, device=device, generator=g).to(dtype)
        dy = torch.randn(m, n, device=device, generator=g).to(dtype)
        rstd = torch.rsqrt((x.float() ** 2).mean(-1) + EPS)
        sets.append((dy, x, w, rstd))
    dy, x, w, rstd = sets[0]
    x64 = x.double().requires_grad_()
    w64 = w.double().requires_grad_()
    y64 = x64 * torch.rsqrt((x64 * x64).mean(-1, keepdim=True) + EPS) * w64
    y64.backward(dy.double())
    tol = 2e-5 if dtype == torch.float32 else 2e-2
    # Copy-equivalent: one device copy moving the bytes of x + dy (read) and dx (write),
    # i.e. 1.5x the tensor read and written; a pair of buffers per input set, timed in
    # the same rounds as the contenders.
    half = (3 * nbytes) // 2
    bufs = {id(x): (torch.empty(half, dtype=torch.uint8, device=device),
                    torch.empty(half, dtype=torch.uint8, device=device)) for _, x, _, _ in sets}

    def copy(dy, x, w, rstd):
        a, b = bufs[id(x)]
        return b.copy_(a)

    def ok(out):
        dx, dw = out
        return close(dx, x64.grad, dtype) <= tol and close(dw, w64.grad, dtype) <= tol * 10
    row = _measure({"copy": copy, **contenders}, sets, ok, iters=60,
                   rounds=_rounds_for(rounds, 3 * nbytes), warm=_warm_for(3 * nbytes))
    moved = 3 * nbytes + 2 * n * dtype.itemsize
    if sms is None:
        sms = torch.cuda.get_device_properties(0).multi_processor_count
    quack = quack_bwd_bytes(m, n, dtype.itemsize, w.element_size(), sms)
    for v in row.values():
        if "us" in v:
            v["tbps"] = moved / v["us"] / 1e6
            v["tbps_quack"] = quack / v["us"] / 1e6
    return row


def _release():
    """Free one shape's inputs, outputs and retained graphs before the next shape."""
    gc.collect()
    torch = _torch()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _warm_up_gpu(seconds: float = 3.0, nbytes: int = 256 << 20) -> None:
    """Keep the GPU busy for a few seconds before timing, so that the first shape is
    not measured while clocks and memory are still settling (seen on an H200: the
    first shape of a cold run was 10-20% slower for every contender)."""
    import time
    torch = _torch()
    a = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(20):
            b.copy_(a)
        torch.cuda.synchronize()
    del a, b


def _host_probe(calls: int = 20000) -> float:
    """Host µs per ``torch.empty_like`` of a small CUDA tensor (median of 5 loops): how
    fast this machine's CPU is right now. Launch-bound shapes (one row, a few rows) time
    the host, so a busy or slow host shows in them and this number says so."""
    import time
    torch = _torch()
    x = torch.empty(1024, device="cuda")
    runs = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(calls):
            torch.empty_like(x)
        runs.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(runs)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtypes", default="f32,bf16,f16")
    ap.add_argument("--quick", action="store_true", help="2048x8192 and 4096x4096 only")
    ap.add_argument("--no-backward", action="store_true")
    ap.add_argument("--no-forward", action="store_true")
    ap.add_argument("--shapes", default=None, help="e.g. 2048x8192,1x8192")
    ap.add_argument("--json", default=None)
    ap.add_argument("--rounds", type=int, default=7,
                    help="interleaved timing rounds per shape; each contender keeps its "
                         "best median (more rounds: less noise where contenders tie)")
    ap.add_argument("--passes", type=int, default=2,
                    help="passes over the whole sweep, each on fresh allocations; each "
                         "contender keeps its best time per shape (see _best_of)")
    ap.add_argument("--only", default=None,
                    help="contenders to run besides the copy, e.g. ptxdsl,quack (default: "
                         f"all that are installed; known: {','.join(CONTENDERS)})")
    a = ap.parse_args(argv)
    only = parse_only(a.only, ap.error)
    torch = _torch()
    dev = torch.cuda.get_device_properties(0)
    l2 = getattr(dev, "L2_cache_size", 50 << 20)
    sms = dev.multi_processor_count
    names = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
    shapes = SHAPES[:2] if a.quick else SHAPES
    if a.shapes:
        shapes = [tuple(int(v) for v in s.split("x")) for s in a.shapes.split(",")]
    _warm_up_gpu()
    host_us = _host_probe()
    print(f"host probe: torch.empty_like of a small CUDA tensor {host_us:.2f} µs "
          f"(about 1.6 on a quiet H200 host; small shapes are host-bound, so their numbers "
          f"scale with it)", flush=True)
    result = {"device": dev.name, "sms": sms, "date": datetime.date.today().isoformat(),
              "torch": torch.__version__, "host_probe_us": host_us, "rounds": a.rounds,
              "passes": a.passes, "only": sorted(only) if only else None,
              "backward_bytes": BACKWARD_BYTES, "forward": [], "backward": []}
    p = peers()
    result["peers"] = dict(p["versions"])
    result["notes"] = list(p["notes"])
    for note in result["notes"]:
        print(f"note: {note}", flush=True)
    fwd_set, bwd_set = only_contenders(fwd_contenders, only), only_contenders(bwd_contenders, only)
    # A throwaway shape first: each library's first call in a process (Triton's driver
    # and launcher set-up, module loads, Inductor's first autotune, the CUTLASS DSL's
    # start) happens here and not in the first measured shape. Without it the peers ran
    # slow there (H200: Triton 53.5 µs at 2048x8192 f32 as the first shape, 36.9 after
    # other shapes).
    first = names[a.dtypes.split(",")[0]]
    bench_forward((1024, 4096), first, fwd_set(first), l2, 1)
    _release()
    path = a.json or os.path.join(os.environ.get("OUT", "."), "rmsnorm.json")
    runs: dict = {}  # (kind, dtype, shape) -> one row per pass
    for pas in range(a.passes):
        for dn in a.dtypes.split(","):
            dt = names[dn]
            # Contenders are built per (shape, dtype): a fresh torch.compile for each.
            for kind, bench, contenders in (("forward", bench_forward, fwd_set),
                                            ("backward", bench_backward, bwd_set)):
                if (a.no_forward and kind == "forward") or (a.no_backward and
                                                            kind == "backward"):
                    continue
                for sh in shapes:
                    row = bench(sh, dt, contenders(dt), l2, a.rounds)
                    _release()
                    runs.setdefault((kind, dn, sh), []).append(row)
                    print(f"pass {pas + 1} {kind[:3]} {dn} {sh}: " + ", ".join(
                        f"{k}={v['us']:.1f}" if "us" in v else f"{k}=ERR({v['error'][:80]})"
                        for k, v in row.items()), flush=True)
                    # after every shape: a run cut short keeps what it measured
                    _collect(result, runs, names, sms, pas)
                    with open(path, "w") as f:
                        json.dump(result, f, indent=1)
    _collect(result, runs, names, sms, a.passes)
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    for note in result["notes"]:
        print(f"note: {note}")
    print_table(result)
    return result


BACKWARD_BYTES = ("backward rows: bytes.copy = x, dY read and dX written (3·M·N elements, "
                  "what the copy moves; pct_copy = the copy's time over the contender's); "
                  "bytes.quack = Quack's count, with the weight, rstd and the dW partials "
                  "(2·SMs·N float32) as well (pct_copy_quack = the contender's bandwidth by "
                  "that count over the copy's)")


def backward_bytes(shape, itemsize: int, sms: int) -> dict:
    """The two byte counts of one backward shape (see :data:`BACKWARD_BYTES`)."""
    m, n = shape
    return {"copy": 3 * m * n * itemsize, "quack": quack_bwd_bytes(m, n, itemsize, itemsize, sms)}


def copy_shares(entry: dict) -> dict:
    """Each timed contender's share of the copy's speed in one shape's merged ``entry``:
    ``pct_copy`` (the copy's time over its time: both move the bytes the copy moves) and,
    where ``entry`` has Quack's byte count (the backward), ``pct_copy_quack`` (its
    bandwidth by that count over the copy's bandwidth by its own)."""
    res, counts = entry["results"], entry.get("bytes")
    cp = res.get("copy", {}).get("us")
    for name, v in res.items():
        if name == "copy" or not cp or "us" not in v:
            continue
        v["pct_copy"] = 100.0 * cp / v["us"]
        if counts:
            v["pct_copy_quack"] = v["pct_copy"] * counts["quack"] / counts["copy"]
    return entry


def _collect(result: dict, runs: dict, names: dict, sms: int, passes_done: int) -> None:
    """``result``'s forward and backward rows from every pass in ``runs`` so far."""
    result["forward"], result["backward"] = [], []
    result["passes_done"] = passes_done
    for (kind, dn, sh), rows in runs.items():
        entry = {"shape": list(sh), "dtype": dn, "results": _best_of(rows)}
        if kind == "backward":
            entry["bytes"] = backward_bytes(sh, names[dn].itemsize, sms)
        result[kind].append(copy_shares(entry))


def _best_of(rows: list) -> dict:
    """One shape's rows from several passes, merged: each contender's fastest pass (an
    error in any pass is reported instead).

    A shape is timed in passes over the whole sweep, minutes apart and on fresh
    allocations, because two things outside any kernel moved single shapes between
    runs: where the buffers lie in DRAM (H200, ``lab/placement.py``: twelve pairs of
    separately allocated 32 MiB buffers copied in 25.4 to 27.1 µs; a CUDA C++ probe of
    the same kind, in another process, copied 128 MiB pairs in 69.1-69.9 µs for seven
    pairs and 76.5-76.7 µs for the other five), and bursts of a slow host lasting a few
    shapes, which raise every host-bound time (4096x1000 f32: the copy 23.0 µs in one
    run, 16.7 in the next)."""
    merged = {}
    for name in rows[0]:
        got = [r[name] for r in rows if name in r]
        timed = [v for v in got if "us" in v]
        merged[name] = (min(timed, key=lambda v: v["us"]) if len(timed) == len(got)
                        else next(v for v in got if "us" not in v))
    return merged


def print_table(result, kinds=("forward", "backward"), title="RMSNorm"):
    """The table printed last: one block per kind, one line per shape (and dtype).

    Where Quack ran, a 'vs quack' column (Quack's time over ptxdsl's). Backward rows that
    carry both byte counts (:func:`backward_bytes`) get '%copyQ' beside '%copy', and a
    second block gives every contender's % of the copy by both counts."""
    print(f"\n{title} on {result['device']} ({result['date']}), median µs (TB/s); "
          f"'vs best' = best other time / ptxdsl time, '%copy' = copy time / ptxdsl time")
    for kind in kinds:
        rows = result.get(kind) or []
        if not rows:
            continue
        names = list(dict.fromkeys(k for r in rows for k in r["results"]))
        quack = "quack" in names
        counted = any("bytes" in r for r in rows)
        if counted:
            print("backward bytes: TB/s and '%copy' count x, dY and dX (3·M·N elements, the "
                  "copy's bytes); '%copyQ' counts Quack's (+ w, rstd, dW partials 2·SMs·N f32)")
        print(f"{kind:10s} {'dtype':5s} {'shape':>12s} " + " ".join(f"{n:>14s}" for n in names)
              + "   vs best" + ("  vs quack" if quack else "") + "  %copy"
              + (" %copyQ" if counted else ""))
        for r in rows:
            res = r["results"]
            cells = []
            for n in names:
                v = res.get(n, {})
                cells.append(f"{v['us']:8.1f}({v['tbps']:.2f})" if "us" in v else f"{'-':>14s}")
            ours = res.get("ptxdsl", {}).get("us")
            # ptxdsl's own variants ("ptxdsl:1cta") are not peers
            peers = [v["us"] for k, v in res.items()
                     if k != "copy" and not k.startswith("ptxdsl") and "us" in v]
            vs = f"{min(peers) / ours:8.2f}x" if ours and peers else "       -"
            if quack:
                q = res.get("quack", {}).get("us")
                vs += f" {q / ours:8.2f}x" if ours and q else "         -"
            cp = res.get("copy", {}).get("us")
            pc = f"{100 * cp / ours:5.0f}%" if ours and cp else "     -"
            if counted:
                share = (res.get("ptxdsl") or {}).get("pct_copy_quack")
                pc += f" {share:5.0f}%" if share else "      -"
            shp = "x".join(map(str, r["shape"]))
            print(f"{'':10s} {r.get('dtype', ''):5s} {shp:>12s} "
                  + " ".join(f"{c:>14s}" for c in cells) + f"  {vs} {pc}")
        if counted:
            _print_shares(rows, [n for n in names if n != "copy"])
    for line in quack_summary(result):
        print(line)


def quack_summary(result) -> list[str]:
    """Issue 50's figures against Quack, where it ran: per direction, at how many shapes
    ptxdsl is as fast or faster (and where not), Quack's time over ptxdsl's, and ptxdsl's
    % of the copy over the shapes of at least 1024 rows (the rest time the host)."""
    out = []
    for kind in ("forward", "backward"):
        rows = [r for r in result.get(kind) or [] if _us_of(r, "quack") and _us_of(r, "ptxdsl")]
        if not rows:
            continue
        ratio = {id(r): _us_of(r, "quack") / _us_of(r, "ptxdsl") for r in rows}
        behind = [r for r in rows if ratio[id(r)] < 1.0]
        geo = math.exp(sum(math.log(v) for v in ratio.values()) / len(ratio))
        out.append(f"{kind} against Quack: ptxdsl as fast or faster at {len(rows) - len(behind)} "
                   f"of {len(rows)} shapes; Quack's time / ptxdsl's "
                   f"{min(ratio.values()):.2f}-{max(ratio.values()):.2f}x, geomean {geo:.2f}x")
        for r in behind:
            res = r["results"]
            out.append(f"  behind at {r['dtype']} {'x'.join(map(str, r['shape']))}: "
                       f"{ratio[id(r)]:.3f}x, % of copy ptxdsl "
                       f"{res['ptxdsl'].get('pct_copy', 0):.1f} / quack "
                       f"{res['quack'].get('pct_copy', 0):.1f}")
        big = [r["results"]["ptxdsl"] for r in rows if r["shape"][0] >= 1024]
        for key, what in (("pct_copy", "the copy's bytes"), ("pct_copy_quack", "Quack's bytes")):
            got = [v[key] for v in big if key in v]
            if got:
                out.append(f"  ptxdsl % of copy ({what}), M >= 1024: "
                           f"{min(got):.1f}-{max(got):.1f}")
    return out


def _us_of(row, name):
    return (row["results"].get(name) or {}).get("us")


def _print_shares(rows, names):
    """Every contender's % of the copy by the copy's count / by Quack's, per shape."""
    print(f"{'% of copy':10s} {'dtype':5s} {'shape':>12s} " + " ".join(f"{n:>14s}" for n in names)
          + "   (copy's count / Quack's count)")
    for r in rows:
        cells = []
        for n in names:
            v = r["results"].get(n, {})
            cells.append(f"{v['pct_copy']:.0f}/{v['pct_copy_quack']:.0f}"
                         if "pct_copy_quack" in v else "-")
        shp = "x".join(map(str, r["shape"]))
        print(f"{'':10s} {r.get('dtype', ''):5s} {shp:>12s} "
              + " ".join(f"{c:>14s}" for c in cells))


if __name__ == "__main__":
    main()
