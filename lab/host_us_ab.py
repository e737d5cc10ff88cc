"""Host µs per repeat call of each op through its public API (tiny shapes, queued calls).

Public API only, so the same script times two trees (e.g. before and after a refactoring),
run alternately from each tree's root on the GPU machine:

    PYTHONPATH=. python lab/host_us_ab.py > after.json
    (cd OLD_TREE && PYTHONPATH=. python /path/to/lab/host_us_ab.py) > before.json

Prints JSON {case: µs per call, the median of 5 blocks of 3000 calls}.
"""
import argparse
import json
import time


def per_call(fn, n=3000):
    import torch
    for _ in range(100):
        fn()
    torch.cuda.synchronize()
    best = []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
        best.append((time.perf_counter() - t) / n * 1e6)
    best.sort()
    return best[len(best) // 2]


def main():
    import torch

    import ptxdsl.ops as ops
    dev = "cuda"
    out = {}
    for m, n, dt in ((1, 8192, torch.bfloat16), (7, 4096, torch.bfloat16), (1, 8192, torch.float32)):
        x = torch.randn(m, n, device=dev, dtype=dt)
        w = torch.randn(n, device=dev, dtype=dt)
        name = f"{m}x{n}x{str(dt)[6:]}"
        out[f"copy_ {name}"] = per_call(lambda: torch.empty_like(x).copy_(x))
        out[f"rms_norm {name}"] = per_call(lambda: ops.rms_norm(x, w))
        y, rstd = ops.rms_norm(x, w, return_rstd=True)
        dy = torch.randn_like(y)
        out[f"rms_norm_backward {name}"] = per_call(lambda: ops.rms_norm_backward(dy, x, w, rstd))
        if hasattr(ops, "rms_norm_quant"):
            out[f"rms_norm_quant {name}"] = per_call(lambda: ops.rms_norm_quant(x, w))
    a = torch.randn(16, 256, device=dev, dtype=torch.bfloat16)
    b = torch.randn(256, 256, device=dev, dtype=torch.bfloat16)
    out["matmul 16x256x256 bf16"] = per_call(lambda: ops.matmul(a, b))
    print(json.dumps(out))


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    main()
