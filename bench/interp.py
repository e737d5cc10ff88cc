"""Interpreter speed: RMSNorm 64x4096, the gallery examples, the warp-specialized ring and
the shipped Hopper GEMM (one 128x256x64 tile step, and a K=512 ring of 8 k-blocks).
``--imported`` times each case a second time with its PTX printed and parsed back by
``ptxdsl.parse_ptx`` (the PTX front end's programs: issue 45's speed target is imported
code no slower than the same kernel traced).

    PYTHONPATH=. python bench/interp.py [--reps 3] [--imported] [--json out.json]

Best of ``--reps`` runs per case, wall-clock and CPU (process) seconds, on the CPU (no GPU
needed); on a shared machine the CPU seconds are the steadier number. Run it on two
checkouts to compare (the interpreter's speed target is stated relative to an earlier
commit). The table is printed last.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOPPER = os.path.join(ROOT, "examples", "hopper")
SNIPPETS = os.path.join(ROOT, "docs", "snippets")


def _module(path):
    from ptxdsl.cli import command as cli
    return cli._import_file(path)


def cases():
    from ptxdsl.ops import rms_norm
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 4096)).astype(np.float32)
    w = rng.standard_normal(4096).astype(np.float32)
    xs = rng.standard_normal((2, 8192)).astype(np.float32)
    wb = rng.standard_normal(8192).astype(np.float32)
    a = rng.standard_normal(4096).astype(np.float32)
    out = {"rmsnorm 64x4096 (ops)": lambda: rms_norm(x, w, 1e-6)}
    va = _module(os.path.join(HOPPER, "vector_add.py"))
    k = va.build_vector_add()
    out["vector_add 4096"] = lambda: k.interpret(a, a)
    for name, build, args in (("softmax", "build_softmax", (xs,)),
                              ("swiglu", "build_swiglu", (xs, xs)),
                              ("layer_norm", "build_layer_norm", (xs, wb, wb))):
        mod = _module(os.path.join(HOPPER, f"{name}.py"))
        kk = getattr(mod, build)(8192)
        out[f"{name} 2x8192"] = (lambda kk=kk, args=args: kk.interpret(*args))
    rn = _module(os.path.join(HOPPER, "rms_norm.py"))
    kr = rn.build_rms_norm(4096)
    xr = rng.standard_normal((8, 4096)).astype(np.float32)
    out["rms_norm example 8x4096"] = lambda: kr.interpret(xr, w)
    ring_path = os.path.join(SNIPPETS, "producer_consumer.py")
    if os.path.exists(ring_path):
        ring = _module(ring_path)
        for first in (False, True):
            kr2 = ring.build_ring(first)
            out[f"ring 2 warpgroups x64 ({'consumer' if first else 'producer'} first)"] = \
                kr2.interpret
    out.update(_hopper_cases())
    return out


def _hopper_cases():
    """The shipped warp-specialized wgmma + TMA GEMM (3 warpgroups), f32 output: issue 18's
    target is one 128x256x64 tile step (a cluster of 2) in < 30 s on a 2-core CI machine."""
    import dataclasses

    from ptxdsl.ops.matmul.hopper import build_hopper
    from ptxdsl.ops.matmul.plan import choose
    from ptxdsl.types import bf16, f32, f32_to_bf16_bits
    rng = np.random.default_rng(1)
    out = {}
    for m, n, k, cluster in ((128, 256, 64, 1), (128, 256, 512, 1), (256, 256, 64, 2)):
        p = dataclasses.replace(choose(m, n, k, bf16, f32, sms=2), cluster=cluster)
        try:
            kern = build_hopper(p, bf16, f32, sms=2)
        except Exception:   # noqa: BLE001 - a plan this checkout cannot build
            continue
        from ptxdsl.interp import unsupported
        if {i.match.spec.opcode for i in kern.program().walk()} & set(unsupported()):
            continue        # (clusters: once the interpreter runs them)
        a = f32_to_bf16_bits(rng.integers(-4, 5, (m, k)).astype(np.float32))
        b = f32_to_bf16_bits(rng.integers(-4, 5, (n, k)).astype(np.float32))
        out[f"hopper gemm {m}x{n}x{k} cluster {cluster}"] = \
            (lambda kern=kern, a=a, b=b: kern.interpret(a, b))
    return out


class _Imported:
    """While active, every interpreter run executes its program printed as PTX and parsed
    back (the front end's IR) instead of the traced one."""

    def __enter__(self):
        import dataclasses

        import ptxdsl
        import ptxdsl.interp as interp
        from ptxdsl.core.emit import emit
        self.interp, self.original, cache = interp, interp.run_program, {}

        def parsed(prog):
            if id(prog) not in cache:
                text = emit(prog).text
                back = ptxdsl.parse_ptx(text).kernels[prog.name].program()
                # parsed parameters carry PTX types only: the traced ones name the tensors
                cache[id(prog)] = (prog, dataclasses.replace(
                    back, params=list(prog.params), shared=list(prog.shared),
                    cluster=prog.cluster))
            return cache[id(prog)][1]

        interp.run_program = lambda prog, *a, **kw: self.original(parsed(prog), *a, **kw)
        return self

    def __exit__(self, *exc):
        self.interp.run_program = self.original


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--imported", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    sys.path.insert(0, HOPPER)
    results = {}
    for name, fn in cases().items():
        fn()   # trace, compile, warm
        runs = [_timed(fn) for _ in range(args.reps)]
        results[name] = {"wall": min(r[0] for r in runs), "cpu": min(r[1] for r in runs)}
        if args.imported:
            with _Imported():
                fn()
                runs = [_timed(fn) for _ in range(args.reps)]
            results[name + " [imported]"] = {"wall": min(r[0] for r in runs),
                                             "cpu": min(r[1] for r in runs)}
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"seconds": results}, f, indent=1)
    print(f"{'case':48s} {'wall s':>8s} {'cpu s':>8s}")
    for name, r in results.items():
        print(f"{name:48s} {r['wall']:8.3f} {r['cpu']:8.3f}")


def _timed(fn) -> tuple[float, float]:
    t0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - t0, time.process_time() - c0


if __name__ == "__main__":
    main()
