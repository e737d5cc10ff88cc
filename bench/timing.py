"""Contenders timed side by side on one GPU, fairly under a power cap.

An H200 under tensor-core load runs at its 700 W cap, and its clock follows the power the
last few milliseconds drew: a kernel timed right after a lighter one (FA2, say) starts at a
higher clock than one timed right after a heavy one. Measured (``lab/attention_sustained.py``,
``bench/results/attention_sustained_h200.json``): at head dim 128, S = 16k, FA4 timed after
FA2 in the old fixed order ran 733 TFLOP/s, in its own sustained loop 658. So each timed
block here follows an untimed block of the same contender (its own steady state), and the
order rotates every round.
"""
from __future__ import annotations

import statistics


def time_interleaved(torch, fns: dict, rounds: int, iters: int, args: tuple = ()) -> dict:
    """Median milliseconds per call of each ``fns[name](*args)``: ``rounds`` rounds, the
    contenders' order rotated by one each round; each contender runs ``iters`` untimed
    calls, then ``iters`` calls between two CUDA events."""
    names = list(fns)
    times = {n: [] for n in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
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
