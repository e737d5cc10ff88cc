"""Host µs per call of the RMSNorm ops path vs its parts and vs torch (tiny shapes).

At 1x8192 the GPU work is a few µs, so queued calls are host-bound and
wall time / calls is the host cost of one call.
"""
from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))


def per_call(fn, n=3000):
    import torch
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / n * 1e6


def main():
    import torch
    import torch.nn.functional as F
    from ptxdsl.ops import rms_norm, rms_norm_backward, KERNELS
    from ptxdsl.runtime import prepare
    x = torch.randn(1, 8192, device="cuda")
    w = torch.randn(8192, device="cuda")
    y = torch.empty_like(x)
    dy = torch.randn_like(x)
    rstd = torch.rsqrt((x ** 2).mean(-1) + 1e-6)
    rows = [("F.rms_norm", lambda: F.rms_norm(x, (8192,), w, 1e-6)),
            ("torch.empty_like", lambda: torch.empty_like(x)),
            ("ptxdsl rms_norm(x, w)", lambda: rms_norm(x, w, 1e-6)),
            ("ptxdsl rms_norm(x, w, out=y)", lambda: rms_norm(x, w, 1e-6, out=y)),
            ("ptxdsl rms_norm_backward", lambda: rms_norm_backward(dy, x, w, rstd))]
    rms_norm(x, w, 1e-6)
    fwd = [k for key, k in KERNELS._kernels.items() if key[0].startswith("fwd")][0]
    lf = prepare(fwd)
    rows.append(("launcher(x, w, y) of the fwd kernel", lambda: lf(x, w, y)))
    for name, fn in rows:
        print(f"{name:40s} {per_call(fn):7.2f} µs/call")
    for key, k in KERNELS._kernels.items():
        la = k.runtime_cache.get("launcher")
        print("  ", key[:2], "slow calls:", getattr(la, "slow_calls", None),
              "entries:", len(getattr(la, "entries", {})))


if __name__ == "__main__":
    main()
