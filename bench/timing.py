"""Contenders timed side by side on one GPU, with the least bias between them.

An H200 under tensor-core load runs at its 700 W cap, and its clock follows the power
drawn over the last tens of milliseconds, so a block timed right after a lighter contender
(FA2, say) can start at a higher clock than one timed after a heavy one. With a fixed
order every round, the same contender always follows the same one. So the contenders'
order is a fresh (seeded) permutation every round, and each timed block follows an untimed
block of the same contender. Blocks of tens of milliseconds still do not reach each
kernel's sustained clock: for that, ``lab/attention_sustained.py`` runs one contender at a
time for seconds after an idle gap (on the H200 one kernel's figure moved by up to 15%
between the methods, ``bench/results/attention_sustained_h200.json``).
"""
from __future__ import annotations

import random
import statistics


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


__all__ = ["time_interleaved"]
