"""Kernel time (the GPU's, host work excluded) of RMSNorm backward plans.

Short rows' calls are partly host-bound, so ``lab/rmsnorm_tune.py``'s per-call times
(host work included where the GPU waits for it) hide kernel differences of 10-15%
under the host's noise. Here the torch profiler reports each kernel's own duration:
every candidate runs once per round, in an order shuffled per round (each kernel
follows different neighbours), for ``--rounds`` rounds over inputs rotated through 8
sets, a different set for each call (see :func:`kernel_times`); the median per
candidate is reported.

No copy runs in the same rounds: a kernel right after a device copy pays for writing
back the copy's dirty lines from L2 (4096x1000 bf16 on an H100: 13.7 against 9.8 us
for the same plan after another backward kernel).

Candidates: ``ops`` (what ``ptxdsl.ops`` runs for that call), ``partials`` (where ops
sums dW of a few rows as one cluster: the same kernel through global partial rows and
the last CTA's sum), ``chunk`` (one 16-byte
chunk a thread and about 40 KiB of rows an SM: ops' plan for many rows, and for every
call before 2026-11-24), and ``T{threads} R{groups}`` with ``--sweep`` (every power of
two from 32 threads a row and row groups of 2-12, with and without the register
prefetch, ``nopf``), else a few. ``--staged`` adds the one-CTA kernel staging rows
through 2-6 shared-memory buffers, ``S{stages} x{CTAs per SM}``. ``--clusters`` adds
the cluster backward (:mod:`ptxdsl.ops.rmsnorm.bwd_cluster`) in clusters of 2, 4 and 8
with 1-3 ring buffers, ``C{cluster} S{stages}``: its time is that of its two kernels
(the rows, then the dW sum). ``--copy`` also times a device copy of the bytes the
backward moves, in rounds of its own (see above). ``--parts`` adds ops' kernel without
its dW sum and without its whole dW tail (:func:`tail_variants`), and
``torch.add(x, dy, out=dx)``: the backward's own bytes, read and written by an
elementwise kernel.

    python3 lab/rmsnorm_bwd_ktime.py 4096x1000xbf16,32768x1024xf32 [--sweep]
    python3 lab/rmsnorm_bwd_ktime.py 1024x16384xf32 --clusters --copy
    python3 lab/rmsnorm_bwd_ktime.py 4096x1000xbf16 --parts --copy
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

FEW = ((64, 8, True), (64, 6, True), (128, 5, True))


def candidates(m, n, T, sms, info, sweep):
    """``{name: plan}`` for ``m`` rows of ``n`` (dtype ``T``): ops' (and, where that is a
    cluster plan, the one-CTA plan it replaced, ``one``) and one-CTA ``BwdPlan`` s."""
    from ptxdsl.ops.rmsnorm import plan as choice
    from ptxdsl.ops.rmsnorm.bwd import plan_backward
    from ptxdsl.ops.rmsnorm.config import choose
    from ptxdsl.ops.rmsnorm.devices import Device
    from ptxdsl.ops.rmsnorm.fwd import max_vec
    vec = max_vec(n, T)
    ops_p, _ = choice.backward_kernel(n, T, T, vec, "sm_90a", sms, info, 0.0, m=m)
    out = {"ops": ops_p}
    cfg = choose("backward", Device.of(info).plan_class("sm_90a"), T, vec, n, m, sms)
    if not hasattr(ops_p, "l2_ahead"):  # a cluster plan: the one-CTA kernel beside it
        one, _ = choice._device_backward(n, T, T, vec, "sm_90a", sms, info, 0.0, cfg)
        out["one"] = one.for_rows(m)

    def add(name, **kw):
        try:
            p = plan_backward(n, T, sms, vec=vec, ctas_per_sm=1, **kw)
        except ValueError:  # that shape does not fit (threads, groups, shared memory)
            return
        if p.fused and p.prefetch == kw.get("prefetch", p.prefetch):
            out[name] = dataclasses.replace(p, l2_ahead=getattr(ops_p, "l2_ahead", False))

    chunks = -(-n // vec)
    t, g = choice.short_row_shape(n, T, vec, dataclasses.replace(
        cfg, short_rows_bytes=40 * 1024, short_chunks=1))  # the many-rows shape
    if t <= 256:  # short rows (row groups)
        add("chunk", threads=t, groups=g)
    shapes = ([(t, g, pf) for t in (32, 64, 128, 256, 512) if chunks <= 8 * t <= 16 * chunks
               for g in (2, 3, 4, 5, 6, 8, 10, 12) for pf in (True, False)]
              if sweep else [(t, g, pf) for t, g, pf in FEW if chunks <= 8 * t])
    for t, g, pf in shapes:
        add(f"T{t} R{g}{'' if pf else ' nopf'}", threads=t, groups=g, prefetch=pf)
    return out


def staged_candidates(n, T, sms):
    """``{name: BwdPlan}``: the one-CTA kernel staging rows of dy and x through a ring of
    2 to 6 shared-memory buffers (``S{stages}``, :mod:`ptxdsl.ops.rmsnorm.bwd_staged`),
    with the CTAs per SM its shared memory and registers allow, where it fits."""
    from ptxdsl.ops.rmsnorm.bwd import plan_backward
    from ptxdsl.ops.rmsnorm.fwd import max_vec
    out = {}
    for stages in (2, 3, 4, 5, 6):
        try:
            p = plan_backward(n, T, sms, vec=max_vec(n, T), stages=stages)
        except ValueError:  # that many buffers do not fit
            continue
        if p.fused:
            out[f"S{stages} x{p.grid // sms}"] = p
    return out


def cluster_candidates(n, T, sms):
    """``{name: BwdClusterPlan}``: the cluster backward in clusters of 2, 4 and 8 with
    1 to 3 ring buffers, where its split fits."""
    from ptxdsl.ops.rmsnorm.bwd_cluster import plan_backward_cluster
    from ptxdsl.ops.rmsnorm.fwd import max_vec
    out = {}
    for c in (2, 4, 8):
        for stages in (1, 2, 3):
            try:
                q = plan_backward_cluster(n, T, sms=sms, vec=max_vec(n, T), cluster=c,
                                          stages=stages)
            except ValueError:  # a split that leaves a CTA without columns
                continue
            if q is not None and q.stages == stages:
                out[f"C{c} S{stages}"] = q
    return out


def tail_kernels(p, T) -> dict:
    """``{name: kernel}``: ops' one-CTA plan ``p`` built without parts of its dW tail
    (dW is then wrong; the time is what counts). ``no dW sum`` keeps the late arrivals'
    wait and skips the sum of the partial rows; ``no dW tail`` also skips the arrivals
    and the row groups' shared-memory sum (nothing waits for another CTA). The
    module's functions are replaced while each kernel is built *and traced*: kernels
    trace on first use, and one traced after the originals are back is the full kernel
    again (what an earlier study of the tail timed, twice)."""
    from ptxdsl import reg
    from ptxdsl.ops.rmsnorm import bwd
    from ptxdsl.core.types import u32

    def noop(*args, **kw):
        return None

    def no_slot(*args, **kw):  # a slot past every summing one: nobody sums
        return reg.scalar(u32, init=0xFFFFFFFF)
    out = {}
    for name, parts in (("no dW sum", {"sum_partials": noop}),
                        ("no dW tail", {"sum_partials": noop, "late_arrivals": no_slot,
                                        "_add_groups": noop})):
        saved = {a: getattr(bwd, a) for a in parts}
        try:
            for a, f in parts.items():
                setattr(bwd, a, f)
            k = bwd.build_backward(p, T, T)
            k.ptx()
        finally:
            for a, f in saved.items():
                setattr(bwd, a, f)
        out[name] = k
    return out


def tail_variants(p, T, tdt, n, sets) -> dict:
    """``--parts``: ``{name: call}`` of the :func:`tail_kernels` that run here (no
    spills, resident), launched as :func:`_call` launches ops' own kernel."""
    out = {}
    for name, k in tail_kernels(p, T).items():
        got = _call(p, T, tdt, n, sets, kernel=k)
        if got is not None:
            out[name] = got[0]
    return out


def kernel_times(fns: dict, rounds: int, kernels: dict | None = None) -> dict:
    """Median kernel µs of each ``fns[name](i)``: the sum of its ``kernels[name]``
    kernels (default one) a call. ``i`` counts the calls of all candidates, so that
    calls in a row take different input sets (``sets[i % len(sets)]``): with the
    round's number instead, every candidate of a round read the same set, and where a
    set fits in the L2 the later ones found it there (4096x1000 bf16, 25 MB, on an
    H200: the same kernel as two candidates took 8.4 and 11.3 us, the medians of a
    mixture of L2 hits and misses)."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    names = list(fns)
    order = []
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as pr:
        for r in range(rounds):
            shuffled = names[:]
            random.Random(r).shuffle(shuffled)
            for name in shuffled:
                fns[name](len(order))
                order.append(name)
        torch.cuda.synchronize()
    evs = sorted((e for e in pr.events() if e.device_type.name == "CUDA"
                  and "memset" not in e.name.lower()), key=lambda e: e.time_range.start)
    kernels = kernels or {}
    want = sum(kernels.get(name, 1) for name in order)
    if len(evs) != want:
        raise RuntimeError(f"{len(evs)} kernels profiled for {want} in {len(order)} calls")
    times: dict = {name: [] for name in names}
    i = 0
    for name in order:
        k = kernels.get(name, 1)
        times[name].append(sum(e.device_time_total for e in evs[i:i + k]))
        i += k
    return {name: statistics.median(v) for name, v in times.items()}


def _call(p, T, tdt, n, sets, kernel=None):
    """``(call(round), kernels a call, plan name)`` of plan ``p`` (a one-CTA ``BwdPlan``,
    fused, or a cluster plan and its dW sum), or None where it spills or is not
    resident. ``kernel``: a one-CTA plan's kernel built otherwise (:func:`tail_kernels`),
    in place of ``build_backward(p)``."""
    import torch
    from ptxdsl.ops.rmsnorm.bwd import build_backward
    from ptxdsl.ops.rmsnorm.bwd_cluster import BwdClusterPlan, build_backward_cluster
    from ptxdsl.ops.rmsnorm.bwd_dw import build_dw_reduce
    from ptxdsl.runtime import prepare
    # dW and its partials rotate through as many buffers as the input sets: one buffer
    # of partials, wherever the allocator placed it, made identical kernels differ by up
    # to 30% (4096x1000 bf16 on an H200: 8.6 against 11.2 us)
    dws = [torch.empty(n, device="cuda", dtype=tdt) for _ in sets]
    parts = [torch.empty(p.grid, n, device="cuda") for _ in sets]
    if isinstance(p, BwdClusterPlan):
        k, kr = build_backward_cluster(p, T, T), build_dw_reduce(n, p.grid, T)
        if k.resources().spill_stores or prepare(k).resident_ctas(0) < p.grid * p.cluster:
            return None

        def call(r):
            dy, x, w, rstd, dx = sets[r % len(sets)]
            part = parts[r % len(sets)]
            k(dy, x, w, rstd, dx, part)
            kr(part, dws[r % len(sets)])
        call(0)
        return call, 2, f"C{p.cluster} T{p.threads} K{p.per_thread} S{p.stages} Q{p.grid}"
    k = kernel or build_backward(p, T, T)
    if k.resources().spill_stores or prepare(k).resident_ctas(0) < p.grid:
        return None
    ws = torch.zeros(2, device="cuda", dtype=torch.int32)

    def call(r):
        dy, x, w, rstd, dx = sets[r % len(sets)]
        k(dy, x, w, rstd, ws, dx, dws[r % len(sets)], parts[r % len(sets)])
    call(0)
    return call, 1, (f"T{p.threads} R{p.groups} pf{int(p.prefetch)} S{p.stages} "
                     f"G{p.grid}" + (" cluster dW" if getattr(p, "cluster_dw", 0) else ""))


def copy_time(m, n, tdt, rounds, l2_bytes) -> float:
    """Median kernel µs of a device copy of the backward's bytes (x and dy read, dx
    written: 1.5 times the tensor each way), in rounds of its own, rotating through
    enough buffer pairs that each copy reads from DRAM (twice the L2 size in all, as
    the kernels' eight input sets do at these shapes)."""
    import torch
    half = 3 * m * n * tdt.itemsize // 2
    pairs = max(1, min(16, -(-2 * l2_bytes // (2 * half))))
    bufs = [(torch.empty(half, dtype=torch.uint8, device="cuda"),
             torch.empty(half, dtype=torch.uint8, device="cuda")) for _ in range(pairs)]

    def copy(r):
        a, b = bufs[r % pairs]
        b.copy_(a)
    return kernel_times({"copy": copy}, rounds)["copy"]


def main(argv=None):
    import torch
    from ptxdsl.ops.rmsnorm.bwd import BwdPlan
    from ptxdsl.runtime import driver
    from ptxdsl.core.types import bf16, f16, f32
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("shapes", help="MxNxdtype,... e.g. 4096x1000xbf16,32768x1024xf32")
    ap.add_argument("--sweep", action="store_true", help="every threads x groups candidate")
    ap.add_argument("--clusters", action="store_true", help="the cluster backward too")
    ap.add_argument("--staged", action="store_true",
                    help="the one-CTA kernel through 2-6 shared-memory row buffers too")
    ap.add_argument("--copy", action="store_true", help="a device copy of the same bytes")
    ap.add_argument("--parts", action="store_true",
                    help="ops' kernel without its dW sum, without its whole dW tail, and "
                         "torch.add(x, dy, out=dx) (the same bytes read and written)")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--json", default=os.path.join(os.environ.get("OUT", "."),
                                                   "rmsnorm_bwd_ktime.json"))
    a = ap.parse_args(argv)
    types = {"bf16": (bf16, torch.bfloat16), "f16": (f16, torch.float16),
             "f32": (f32, torch.float32)}
    info = driver.get().device(0)
    out = {"device": torch.cuda.get_device_name(), "rounds": a.rounds, "shapes": []}
    for spec in a.shapes.split(","):
        m, n, dn = spec.split("x")
        m, n = int(m), int(n)
        T, tdt = types[dn]
        sets = []
        for _ in range(8):
            x = torch.randn(m, n, device="cuda").to(tdt)
            rstd = torch.rsqrt((x.float() ** 2).mean(-1) + 1e-6)
            sets.append((torch.randn_like(x), x, torch.randn(n, device="cuda").to(tdt), rstd,
                         torch.empty_like(x)))
        fns, kernels, skipped, plans = {}, {}, [], {}
        cands = candidates(m, n, T, info.sm_count, info, a.sweep)
        if a.staged:
            cands.update(staged_candidates(n, T, info.sm_count))
        if a.clusters:
            cands.update(cluster_candidates(n, T, info.sm_count))
        for name, p in cands.items():
            got = _call(p, T, tdt, n, sets)
            if got is None:
                skipped.append(name)
                continue
            fns[name], kernels[name], plans[name] = got
        ops = cands["ops"]
        # the variants remove the late arrivals' tail: ops' plans that sum dW that way
        if a.parts and isinstance(ops, BwdPlan) and ops.grid_sum:
            fns.update(tail_variants(ops, T, tdt, n, sets))
            fns["torch.add"] = lambda r: torch.add(sets[r % 8][1], sets[r % 8][0],
                                                   out=sets[r % 8][4])
        med = kernel_times(fns, a.rounds, kernels)
        row = {"shape": [m, n], "dtype": dn, "plans": plans, "kernel_us": med,
               "skipped": skipped}
        top = sorted(med.items(), key=lambda kv: kv[1])
        line = (f"{m}x{n} {dn}: ops ({plans['ops']}) {med['ops']:.1f} us, chunk "
                f"({plans.get('chunk', '-')}) {med.get('chunk', float('nan')):.1f}; fastest "
                + ", ".join(f"{k} {v:.1f}" for k, v in top[:5]))
        if a.copy:
            row["copy_us"] = copy_time(m, n, tdt, a.rounds, info.l2_bytes or (64 << 20))
            line += f"; copy {row['copy_us']:.1f}"
        print(line, flush=True)
        out["shapes"].append(row)
    with open(a.json, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
