"""Contenders timed side by side on one GPU, with the least bias between them.

An H200 under tensor-core load runs at its 700 W cap, and its clock follows the power
drawn over the last tens of milliseconds, so a block timed right after a lighter contender
(FA2, say) can start at a higher clock than one timed after a heavy one. With a fixed
order every round, the same contender always follows the same one. So the contenders'
order is a fresh (seeded) permutation every round, and each timed block follows an untimed
block of the same contender. Blocks of tens of milliseconds still do not reach each
kernel's sustained clock, and they share the clock between contenders: a kernel that does
the same work on less power (fewer DRAM bytes, say) gains nothing there. For that,
:func:`time_sustained` runs one contender at a time for seconds after an idle gap, with the
SM clock and power ``nvidia-smi`` samples (on the H200 one kernel's figure moved by up to
15% between the methods, ``bench/results/attention_sustained_h200.json``; the causal
attention order that read 4x fewer DRAM bytes ran 7% faster sustained and 1% slower
interleaved, ``bench/results/attention_causal_order2_h200.json``).
"""
from __future__ import annotations

import random
import statistics
import subprocess
import time

SMI = ["nvidia-smi", "--query-gpu=clocks.sm,power.draw,temperature.gpu",
       "--format=csv,noheader,nounits", "-lms", "100"]


def time_interleaved(torch, fns: dict, rounds: int, iters: int, args: tuple = (),
                     seed: int = 0) -> dict:
    """Median milliseconds per call of each ``fns[name](*args)``: ``rounds`` rounds, each
    in a new order (``random.Random(seed)``); each contender runs ``iters`` untimed calls,
    then ``iters`` calls between two CUDA events."""
    names, rnd = list(fns), random.Random(seed)
    times = {n: [] for n in names}
    for _ in range(rounds):
        for name in rnd.sample(names, len(names)):
            fn = fns[name]
            for _ in range(iters):
                fn(*args)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iters):
                fn(*args)
            end.record()
            end.synchronize()
            times[name].append(start.elapsed_time(end) / iters)
    return {n: statistics.median(t) for n, t in times.items()}


def time_sustained(torch, fn, seconds: float, idle: float = 1.5, args: tuple = (),
                   smi=SMI, sleep=time.sleep, clock=time.time) -> dict:
    """One contender alone: a call, ``idle`` seconds without work (the card cools, its
    clock recovers), then calls of ``fn(*args)`` in groups of 10 for ``seconds`` between two
    CUDA events, ``smi`` sampling the SM clock, power and temperature meanwhile.
    ``{"ms": per call, "sm_mhz", "watts", "temp_c": the samples' means past the first
    quarter (the ramp)}``; the three are None where ``smi`` cannot run or gave nothing."""
    fn(*args)
    torch.cuda.synchronize()
    sleep(idle)
    try:
        sampler = subprocess.Popen(smi, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                   text=True)
    except OSError:                     # no nvidia-smi: the time alone
        sampler = None
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    n, t0 = 0, clock()
    e0.record()
    while n == 0 or clock() - t0 < seconds:
        for _ in range(10):
            fn(*args)
        n += 10
        torch.cuda.synchronize()
    e1.record()
    e1.synchronize()
    rows = []
    if sampler is not None:
        sampler.terminate()
        for line in sampler.stdout.read().splitlines():
            try:
                rows.append([float(x) for x in line.split(",")])
            except ValueError:          # "N/A", or a line cut by the terminate
                continue
    keep = [r for r in rows[len(rows) // 4:] if len(r) == 3]
    means = [statistics.mean(c) for c in zip(*keep)] if keep else [None] * 3
    return {"ms": e0.elapsed_time(e1) / n, **dict(zip(("sm_mhz", "watts", "temp_c"), means))}


__all__ = ["time_interleaved", "time_sustained", "SMI"]
