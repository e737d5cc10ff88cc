"""The gallery's memory-bound kernels side by side in one run, on the current GPU.

For softmax, LayerNorm, SwiGLU and vector add (examples/hopper/*.py), and RMSNorm
(ptxdsl.ops) for reference, at 2048x8192 and 4096x4096 f32 (vector add: 16M
elements). Contenders, each validated against a float64 torch reference before it is
timed: a device copy of the same bytes, ptxdsl (the example's kernel, outputs
preallocated per input set), the torch eager equivalent and torch.compile of it
(dynamic=False). Timing as in bench/rmsnorm.py: CUDA events, median of many calls,
three interleaved rounds, inputs rotated over enough copies to exceed L2. Prints a table
last and writes JSON (one list of rows per kernel, bench/rmsnorm.py's layout).

    python bench/examples.py [--kinds softmax,swiglu] [--no-compile] [--json PATH]
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import sys
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

from bench.rmsnorm import _measure, _warm_up_gpu, print_table  # noqa: E402

SHAPES = [(2048, 8192), (4096, 4096)]
EPS_LN = 1e-5
EPS_RMS = 1e-6
KINDS = ("softmax", "layer_norm", "swiglu", "vector_add", "rms_norm")


def _example(name):
    from ptxdsl.cli import command as cli
    return cli._import_file(os.path.join(ROOT, "examples", "hopper", f"{name}.py"))


class Case:
    """One kernel at one shape: input sets, float64 reference, bytes moved, contenders."""

    def __init__(self, kind, shape, l2_bytes):
        import torch
        import torch.nn.functional as F
        self.kind, self.shape = kind, shape
        numel = math.prod(shape)
        n = shape[-1]
        nbytes = numel * 4
        # Arrays of the tensor's size each call reads and writes (vectors aside).
        arrays = 3 if kind in ("swiglu", "vector_add") else 2
        self.moved = arrays * nbytes + {"layer_norm": 2 * n * 4, "rms_norm": n * 4}.get(kind, 0)
        copies = min(64, max(2, math.ceil(3 * l2_bytes / self.moved)))
        g = torch.Generator(device="cuda").manual_seed(0)

        def randn(*s):
            return torch.randn(*s, device="cuda", generator=g)

        if kind == "softmax":
            sets = [(randn(*shape) * 3,) for _ in range(copies)]
            self.ref = torch.softmax(sets[0][0].double(), -1)
            self.tol = 1e-5
            eager = lambda x: torch.softmax(x, -1)  # noqa: E731
        elif kind == "layer_norm":
            w, b = randn(n) * 0.1 + 1, randn(n) * 0.1
            sets = [(randn(*shape) * 2 + 5, w, b) for _ in range(copies)]
            x0 = sets[0][0].double()
            self.ref = F.layer_norm(x0, (n,), w.double(), b.double(), EPS_LN)
            self.tol = 5e-5
            eager = lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, EPS_LN)  # noqa: E731
        elif kind == "swiglu":
            sets = [(randn(*shape) * 4, randn(*shape)) for _ in range(copies)]
            g0, u0 = (t.double() for t in sets[0])
            self.ref = g0 * torch.sigmoid(g0) * u0
            self.tol = 1e-5
            eager = lambda g, u: F.silu(g) * u  # noqa: E731
        elif kind == "vector_add":
            sets = [(randn(*shape), randn(*shape)) for _ in range(copies)]
            self.ref = sets[0][0].double() + sets[0][1].double()
            self.tol = 1e-6
            eager = lambda a, b: a + b  # noqa: E731
        elif kind == "rms_norm":
            w = randn(n) * 0.1 + 1
            sets = [(randn(*shape), w) for _ in range(copies)]
            x0 = sets[0][0].double()
            self.ref = x0 * torch.rsqrt((x0 * x0).mean(-1, keepdim=True) + EPS_RMS) * w.double()
            self.tol = 2e-6
            eager = lambda x, w: F.rms_norm(x, (x.shape[-1],), w, EPS_RMS)  # noqa: E731
        else:
            raise ValueError(kind)
        self.sets = sets
        self.eager = eager
        # Outputs made once per input set, outside the timing.
        self.out = {id(s[0]): torch.empty_like(s[0]) for s in sets}
        # The copy moves the same bytes: half of them read, half written.
        half = self.moved // 2
        self.copy_bufs = {id(s[0]): (torch.empty(half, dtype=torch.uint8, device="cuda"),
                                     torch.empty(half, dtype=torch.uint8, device="cuda"))
                          for s in sets}

    def ok(self, out) -> bool:
        err = (out.double() - self.ref).abs().max().item()
        return err <= self.tol * (self.ref.abs().max().item() or 1.0)

    def contenders(self, compile_: bool) -> dict:
        import torch
        bufs = self.copy_bufs

        def copy(x, *_):
            src, dst = bufs[id(x)]
            return dst.copy_(src)

        c = {"copy": copy, "ptxdsl": self.ptxdsl(), "eager": self.eager}
        if compile_:
            c["torch.compile"] = torch.compile(self.eager, dynamic=False)
        return c

    def ptxdsl(self):
        out, n = self.out, self.shape[-1]
        if self.kind == "rms_norm":
            from ptxdsl.ops import rms_norm
            return lambda x, w: rms_norm(x, w, EPS_RMS, out=out[id(x)])
        mod = _example(self.kind)
        k = {"softmax": lambda: mod.build_softmax(n),
             "layer_norm": lambda: mod.build_layer_norm(n, EPS_LN),
             "swiglu": lambda: mod.build_swiglu(n),
             "vector_add": lambda: mod.build_vector_add()}[self.kind]()

        def run(*args):
            y = out[id(args[0])]
            k(*args, y)
            return y
        return run


def bench(kind, shape, l2_bytes, compile_: bool) -> dict:
    case = Case(kind, shape, l2_bytes)
    contenders = case.contenders(compile_)
    # _measure builds/compiles every contender first (its validation call; torch.compile
    # takes seconds), then warms the GPU up again, so that no contender is timed on an
    # idle, cooled-down GPU.
    row = _measure(contenders, case.sets, case.ok, iters=50, warm=1.0)
    for v in row.values():
        if "us" in v:
            v["tbps"] = case.moved / v["us"] / 1e6
    return row


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kinds", default=",".join(KINDS), help=f"subset of {','.join(KINDS)}")
    ap.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
    ap.add_argument("--json", default=None, help="default: $OUT/examples.json")
    a = ap.parse_args(argv)
    import torch
    dev = torch.cuda.get_device_properties(0)
    l2 = getattr(dev, "L2_cache_size", 50 << 20)
    t0 = time.perf_counter()
    _warm_up_gpu()
    result = {"title": "Gallery kernels (examples/hopper) and RMSNorm, f32",
              "device": dev.name, "date": datetime.date.today().isoformat(),
              "torch": torch.__version__}
    for kind in a.kinds.split(","):
        if kind not in KINDS:
            raise SystemExit(f"unknown kind {kind!r}: one of {', '.join(KINDS)}")
        shapes = [(2048 * 8192,)] if kind == "vector_add" else SHAPES
        result[kind] = []
        for sh in shapes:
            row = bench(kind, sh, l2, not a.no_compile)
            result[kind].append({"shape": list(sh), "dtype": "f32", "results": row})
            print(f"[{time.perf_counter() - t0:5.0f} s] {kind} {sh}: " + ", ".join(
                f"{k}={v['us']:.1f}" if "us" in v else f"{k}=ERR({v['error']})"
                for k, v in row.items()), flush=True)
    path = a.json or os.path.join(os.environ.get("OUT", "."), "examples.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    print_table(result, KINDS, result["title"])
    return result


if __name__ == "__main__":
    main()
