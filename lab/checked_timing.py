"""The forward labs' candidate loop (``lab/attention_varlen_plans.py``,
``lab/attention_packed_plans.py``): each call run once and checked against a float32
reference (max error over the largest value), a failing or wrong one reported and left
out, the rest timed in interleaved rounds (:func:`bench.timing.time_interleaved`)."""
from __future__ import annotations


def time_checked(torch, calls: dict, ref, rounds: int, iters: int, flops: float,
                 tol: float = 2e-2) -> dict:
    """``{label: {"max_err", "ms", "tflops"} or {"error", ...}}`` for ``calls`` (label ->
    a function returning the output)."""
    from bench.timing import time_interleaved
    results, fns = {}, {}
    for label, call in calls.items():
        try:
            out = call()
            torch.cuda.synchronize()
            err = float((out.float() - ref).abs().max() / ref.abs().max())
        except Exception as e:                  # a candidate the layout refuses
            results[label] = {"error": f"{type(e).__name__}: {e}"[:300]}
            continue
        results[label] = {"max_err": err}
        if err > tol:
            results[label]["error"] = "wrong result"
            continue
        fns[label] = call
    for label, t in time_interleaved(torch, fns, rounds, iters).items():
        results[label].update(ms=t, tflops=flops / t / 1e9)
    return results
