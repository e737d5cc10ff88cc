"""Host µs per call of the RMSNorm ops' hot paths, their pieces and torch (tiny shapes).

At a few rows the GPU work is a few µs, so calls queued back to back are host-bound and
wall time / calls is the host cost of one call. For each shape this times, in
interleaved rounds (every other one in reverse order; each row keeps its median):
``copy_`` of the same tensor (the benchmark's ceiling), ``F.rms_norm``, the forward and
the backward through the API, and the pieces of their hot paths: the C++ tensor guard
(of x and weight; of dy, x, weight and rstd, inside the memo's entry), the memo's
entries (``hot``: guard, pointers, allocations and launch; ``run``: the same without the
guard: Y; dX and dW), one allocation from the launcher's allocator, the
pointer reads, and the alternative to the backward's two allocations: one buffer for
both outputs, cut into dX and dW by torch's ``_reinterpret_tensor`` (where torch has it).

    python bench/rmsnorm_host.py [--shapes 1x8192xbf16,7x4096xbf16] [--json PATH]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

SHAPES = "1x8192xbf16,7x4096xbf16,1x8192xf32"


def per_call(fn, n=2000):
    """µs per call of ``fn`` over ``n`` calls queued back to back (one sync at the end)."""
    import torch
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / n * 1e6


def rows_for(m: int, n: int, dtype) -> dict:
    """name -> no-argument call, for one shape (the ops' hot paths recorded first)."""
    import torch
    import torch.nn.functional as F

    from ptxdsl.ops import rms_norm, rms_norm_backward
    from ptxdsl.ops.rmsnorm import api
    from ptxdsl.runtime import torch_private
    x = torch.randn(m, n, device="cuda", dtype=dtype)
    w = torch.randn(n, device="cuda", dtype=dtype)
    dy, y = torch.randn_like(x), torch.empty_like(x)
    rstd = torch.rsqrt((x.float() ** 2).mean(-1) + 1e-6)
    api.clear()
    for _ in range(2):  # the first call takes the general path and records the entry
        rms_norm(x, w)
        rms_norm_backward(dy, x, w, rstd)
    fwd_args, bwd_args = (x, w, None, None, 1e-6, 0.0, False), (dy, x, w, rstd, 0.0)
    fwd, bwd = api.FORWARD.hot, api.BACKWARD.hot
    if fwd(*fwd_args) is None or bwd(*bwd_args) is None:
        raise SystemExit(f"{m}x{n}: the hot paths were not recorded for these tensors")
    fwd_run = api.FORWARD.entries[api.FORWARD.key(fwd_args)].run
    bwd_run = api.BACKWARD.entries[api.BACKWARD.key(bwd_args)].run
    hooks = torch_private.hooks(torch)
    fwd_guard, bwd_guard = hooks.guard((x, w)), hooks.guard((dy, x, w, rstd))
    alloc = hooks.allocator(x.shape, x.stride(), x.dtype, x.get_device())
    rows = {
        "copy_": lambda: y.copy_(x),
        "F.rms_norm": lambda: F.rms_norm(x, (n,), w, 1e-6),
        "rms_norm(x, w)": lambda: rms_norm(x, w),
        "rms_norm_backward": lambda: rms_norm_backward(dy, x, w, rstd),
        "fwd guard (x, w)": lambda: fwd_guard(x, w),
        "fwd memo hot (guard + launch + Y allocation)": lambda: fwd(*fwd_args),
        "fwd memo run (launch + Y allocation)": lambda: fwd_run(*fwd_args),
        "bwd guard (dy, x, w, rstd)": lambda: bwd_guard(dy, x, w, rstd),
        "bwd memo hot (guard + launch + dX, dW allocations)": lambda: bwd(*bwd_args),
        "bwd memo run (launch + dX, dW allocations)": lambda: bwd_run(*bwd_args),
        "one allocation (launcher's allocator)": alloc,
        "four data_ptr() reads": lambda: (dy.data_ptr(), x.data_ptr(), w.data_ptr(),
                                          rstd.data_ptr()),
    }
    guards = getattr(getattr(torch._C, "_dynamo", None), "guards", None)
    cut = getattr(guards, "_reinterpret_tensor", None)
    if cut is not None:
        # dX at 0 and dW on the next 16-byte boundary of one buffer: one allocation and
        # two tensor headers, against two allocations
        at = -(-m * n * x.element_size() // 16) * 16 // x.element_size()
        both = hooks.allocator((at + n,), (1,), x.dtype, x.get_device())

        def shared():
            buf = both()
            return cut(buf, (m, n), (n, 1), 0), cut(buf, (n,), (1,), at)
        rows["dX, dW from one allocation (2 _reinterpret_tensor)"] = shared
        rows["one _reinterpret_tensor"] = lambda: cut(w, (n,), (1,), 0)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    import torch

    from bench.rmsnorm import interleaved
    dts = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
    res = {"device": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d"),
           "torch": torch.__version__, "rounds": a.rounds, "shapes": {}}
    for spec in a.shapes.split(","):
        m, n, dn = spec.split("x")
        rows = rows_for(int(m), int(n), dts[dn])
        samples = interleaved(rows, a.rounds, per_call)
        med = {k: statistics.median_high(v) for k, v in samples.items()}
        res["shapes"][spec] = med
        print(f"== {spec} (host µs per call, median of {a.rounds} rounds)")
        for k, v in med.items():
            print(f"   {k:40s} {v:7.2f}")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(res, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
