"""How much where a buffer lies in DRAM moves a copy's time, on the current GPU.

Allocates ``--pairs`` separate (source, destination) pairs of ``--mib`` MiB each, as a
caching allocator hands them out, and times a device copy within each pair (median of
CUDA-event timings over back-to-back calls). Same kernel, same sizes: any spread
between pairs is the buffers' placement. ``bench/rmsnorm.py`` times every shape in
more than one pass, on fresh allocations (``--passes``), partly because of it.

    python lab/placement.py [--mib 128] [--pairs 12] [--json PATH]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=128)
    ap.add_argument("--pairs", type=int, default=12)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    import torch
    n = a.mib << 20
    pairs = [(torch.ones(n, dtype=torch.uint8, device="cuda"),
              torch.empty(n, dtype=torch.uint8, device="cuda")) for _ in range(a.pairs)]
    for src, dst in pairs:  # first touch and clocks up, outside the timing
        dst.copy_(src)
    torch.cuda.synchronize()
    rows = []
    for i, (src, dst) in enumerate(pairs):
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(a.iters)]
        for s, e in ev:
            s.record()
            dst.copy_(src)
            e.record()
        torch.cuda.synchronize()
        us = statistics.median(s.elapsed_time(e) * 1000 for s, e in ev[3:])
        rows.append({"pair": i, "src": src.data_ptr(), "dst": dst.data_ptr(), "us": us})
        print(f"pair {i:2d}  src {src.data_ptr():#x}  dst {dst.data_ptr():#x}  {us:7.2f} µs",
              flush=True)
    times = [r["us"] for r in rows]
    out = {"device": torch.cuda.get_device_name(), "mib": a.mib, "pairs": rows,
           "min_us": min(times), "max_us": max(times)}
    print(f"{out['device']}: {a.pairs} pairs of {a.mib} MiB, copy {min(times):.2f} to "
          f"{max(times):.2f} µs ({100 * (max(times) / min(times) - 1):.1f}% apart)")
    path = a.json or os.path.join(os.environ.get("OUT", "."), "placement.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    return out


if __name__ == "__main__":
    main()
