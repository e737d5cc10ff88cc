"""Every Hopper and Ampere example kernel of pyptx, built on ptxdsl (imports renamed) and on
pyptx itself, validated against a float64 torch reference and timed side by side.

    PYTHONPATH=.:/tmp/site python bench/pyptx_examples_speed.py [--only rms,gemm]
        [--budget 240] [--rounds 5] [--json PATH] [--no-ptx]

The examples are read from the pyptx mirror or the pyptx wheel (``bench/pyptx_examples.py``),
never copied here; pyptx comes from ``bench/install_wheels.py``. Each case is built both
ways at each of its shapes and each build's output is compared with the reference
(``allclose`` to the case's tolerance); the last shape is then timed with
``bench.timing.time_interleaved`` (the contenders' order reshuffled every round). A build
or run that fails either way is reported with its reason, not fatal. The experimental
flash-attention kernels are built from the text with the ``fence.proxy.async`` they lack
(``tests/helpers/pyptx_fixes.py``) on both sides; the Ampere norm wrappers import the
Hopper builders (``tests/helpers/pyptx_blackwell.linked``). Before timing, each case's two
PTX texts are compared on the host: instruction counts per opcode and ``ptxas -v``
registers and spills (``--no-ptx`` skips this). ``--budget`` seconds bound the run: a case
that would start after it is reported as skipped. Prints the table last and writes JSON to
``--json`` or ``$OUT/pyptx_examples_speed.json`` when ``$OUT`` is set.
"""
from __future__ import annotations

import argparse
import collections
import datetime
import math
import os
import re
import sys
import time
from dataclasses import dataclass, field
from typing import Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
if os.path.join(ROOT, "tests", "helpers") not in sys.path:  # the fixes, read at run time
    sys.path.append(os.path.join(ROOT, "tests", "helpers"))

from bench import pyptx_examples  # noqa: E402
from bench.save import save_result  # noqa: E402
from bench.timing import time_interleaved  # noqa: E402


@dataclass(frozen=True)
class Case:
    """One example kernel: how to build it from its module at a shape, its inputs (torch
    tensors on a device), its float64 reference, its tolerance and the work one call does
    (``("flop", n)`` or ``("byte", n)``)."""

    name: str
    example: str
    arch_dir: str
    build: Callable
    shapes: tuple            # validated at each; the last one is timed
    inputs: Callable         # (torch, shape, device) -> tuple of tensors
    reference: Callable      # (torch, args, shape) -> float64 tensor shaped like the output
    work: Callable           # shape -> ("flop" | "byte", count)
    tol: tuple = (1e-5, 1e-4)  # (atol, rtol)
    patch: str | None = None   # "fenced": the fix, both sides; "linked": ptxdsl's imports
    call: Callable = field(default=lambda k, args: k(*args))


def _gen(torch, shape, device):
    g = torch.Generator(device=device)
    g.manual_seed(sum(int(s) * 7919 ** i for i, s in enumerate(shape)) % (2 ** 31))
    return g


def _randn(torch, g, dims, device, scale=1.0, shift=0.0, dtype=None):
    x = torch.randn(dims, generator=g, device=device) * scale + shift
    return x.to(dtype) if dtype is not None else x


# --------------------------------------------------------------- references (float64)

def _layer_norm_ref(torch, args, shape):
    x, w, b = (t.double() for t in args)
    return torch.nn.functional.layer_norm(x, (shape[1],), w, b, eps=1e-5)


def _rms_norm_ref(torch, args, shape):
    x, w = (t.double() for t in args)
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * w


def _softmax_ref(torch, args, shape):
    return torch.softmax(args[0].double(), dim=-1)


def _swiglu_ref(torch, args, shape):
    g, u = (t.double() for t in args)
    return torch.nn.functional.silu(g) * u


def _gemm_ref(torch, args, shape):  # A (M, K) @ B_T (N, K)^T
    return args[0].double() @ args[1].double().T


def _grouped_ref(torch, args, shape):
    G, M, N, K = shape
    a, b = (t.double() for t in args)
    return torch.bmm(a.view(G, M, K), b.view(G, K, N)).reshape(G * M, N)


def _hopper_gemm_ref(torch, args, shape):  # C (N, M) = B (N, K) @ A (M, K)^T
    return args[1].double() @ args[0].double().T


def _attention_ref(torch, args, shape):
    q, k_t, v = (t.double() for t in args)
    s = q @ k_t / math.sqrt(q.shape[1])
    return torch.softmax(s, dim=-1) @ v


# --------------------------------------------------------------- inputs

def _norm_inputs(n_weights, scale=1.0, shift=0.0):
    def make(torch, shape, device):
        g = _gen(torch, shape, device)
        B, N = shape
        x = _randn(torch, g, (B, N), device, scale, shift)
        ws = [_randn(torch, g, (N,), device, 0.1, 1.0 if i == 0 else 0.0)
              for i in range(n_weights)]
        return (x, *ws)
    return make


def _swiglu_inputs(torch, shape, device):
    g = _gen(torch, shape, device)
    return tuple(_randn(torch, g, shape, device, 0.5) for _ in range(2))


def _gemm_inputs(torch, shape, device):
    M, N, K = shape
    g = _gen(torch, shape, device)
    return (_randn(torch, g, (M, K), device, 0.1, dtype=torch.bfloat16),
            _randn(torch, g, (N, K), device, 0.1, dtype=torch.bfloat16))


def _grouped_inputs(torch, shape, device):
    G, M, N, K = shape
    g = _gen(torch, shape, device)
    return (_randn(torch, g, (G * M, K), device, 0.1, dtype=torch.bfloat16),
            _randn(torch, g, (G * K, N), device, 0.1, dtype=torch.bfloat16))


def _hopper_gemm_inputs(torch, shape, device):
    (size,) = shape
    mod = pyptx_examples.load("gemm_highperf_hopper")
    g = _gen(torch, shape, device)
    a = _randn(torch, g, (size, size), device, dtype=torch.bfloat16)
    b = _randn(torch, g, (size, size), device, dtype=torch.bfloat16)
    sched = mod.create_hilbert_schedule(size // (mod.BM * mod.CLUSTER_M), size // mod.BN)
    return a, b, torch.tensor(sched, device=device, dtype=torch.int32)


def _attention_inputs(torch, shape, device):
    M, N, HD = shape
    g = _gen(torch, shape, device)
    q, k, v = (_randn(torch, g, d, device, dtype=torch.bfloat16)
               for d in ((M, HD), (N, HD), (N, HD)))
    return q, k.T.contiguous(), v


def _is_pyptx(k) -> bool:
    return type(k).__module__.startswith("pyptx")


def _gemm_hopper_call(k, args):
    import torch
    a, b, sched = args  # ptxdsl's spec is u32, pyptx's runner passes int32: same bits
    return k(a, b, sched if _is_pyptx(k) else sched.view(torch.uint32))


# --------------------------------------------------------------- work per call

def _bytes(*per):  # per: shape -> element counts moved (4-byte floats)
    return lambda shape: ("byte", 4 * sum(f(shape) for f in per))


_BN_NORM2 = _bytes(lambda s: 2 * s[0] * s[1], lambda s: 2 * s[1])   # x, y; w, b
_BN_NORM1 = _bytes(lambda s: 2 * s[0] * s[1], lambda s: s[1])       # x, y; w
_BN_SOFTMAX = _bytes(lambda s: 2 * s[0] * s[1])
_BN_SWIGLU = _bytes(lambda s: 3 * s[0] * s[1])


def _gemm_flop(shape):
    M, N, K = shape
    return "flop", 2 * M * N * K


def _attention_flop(shape):
    M, N, HD = shape
    return "flop", 4 * M * N * HD


_GEMM_TOL = (1e-2, 1e-2)
_ATT_TOL = (1e-3, 2e-2)  # P is rounded to bf16 for the second wgmma


def _norm_cases(arch_dir: str) -> list:
    return [
        Case(f"{arch_dir} layer_norm", "layer_norm", arch_dir,
             lambda m, s: m.build_layer_norm(*s), ((16, 512), (4096, 4096)),
             _norm_inputs(2, 2.0, -1.0), _layer_norm_ref, _BN_NORM2,
             patch=None if arch_dir == "hopper" else "linked"),
        Case(f"{arch_dir} rms_norm", "rms_norm", arch_dir,
             lambda m, s: m.build_rms_norm(*s), ((16, 512), (4096, 4096)),
             _norm_inputs(1, 0.3), _rms_norm_ref, _BN_NORM1,
             patch=None if arch_dir == "hopper" else "linked"),
        Case(f"{arch_dir} softmax", "softmax", arch_dir,
             lambda m, s: m.build_softmax(*s), ((16, 512), (4096, 4096)),
             _norm_inputs(0), _softmax_ref, _BN_SOFTMAX, (1e-7, 1e-4),
             patch=None if arch_dir == "hopper" else "linked"),
        Case(f"{arch_dir} swiglu", "swiglu", arch_dir,
             lambda m, s: m.build_fused_silu_mul(*s), ((16, 512), (2048, 8192)),
             _swiglu_inputs, _swiglu_ref, _BN_SWIGLU,
             patch=None if arch_dir == "hopper" else "linked"),
    ]


CASES: list[Case] = [
    *_norm_cases("hopper"),
    Case("hopper gemm_highperf_hopper", "gemm_highperf_hopper", "hopper",
         lambda m, s: m.gemm_warp_specialized, ((4096,),), _hopper_gemm_inputs,
         _hopper_gemm_ref, lambda s: ("flop", 2 * s[0] ** 3), _GEMM_TOL,
         call=_gemm_hopper_call),
    Case("hopper grouped_gemm", "grouped_gemm", "hopper",
         lambda m, s: m.build_grouped_gemm(*s), ((4, 256, 32, 128), (8, 2048, 64, 2048)),
         _grouped_inputs, _grouped_ref,
         lambda s: ("flop", 2 * s[0] * s[1] * s[2] * s[3]), (1e-3, 1e-3)),
    Case("hopper flash_attention_hopper", "flash_attention_hopper", "hopper/experimental",
         lambda m, s: m.build_flash_attention_hopper(*s), ((256, 512, 64), (2048, 2048, 64)),
         _attention_inputs, _attention_ref, _attention_flop, _ATT_TOL, patch="fenced"),
    Case("hopper flash_attention_parallel", "flash_attention_parallel", "hopper/experimental",
         lambda m, s: m.build_flash_attention_parallel(s[0], s[1]),
         ((256, 512, 16), (4096, 4096, 16)),
         _attention_inputs, _attention_ref, _attention_flop, _ATT_TOL, patch="fenced"),
    Case("hopper flash_attention_wgmma_kloop", "flash_attention_wgmma_kloop",
         "hopper/experimental", lambda m, s: m.build_flash_attention_kloop(s[1]),
         ((64, 128, 16), (64, 512, 16)),
         _attention_inputs, _attention_ref, _attention_flop, _ATT_TOL, patch="fenced"),
    Case("ampere gemm", "gemm", "ampere", lambda m, s: m.build_gemm(*s),
         ((128, 64, 128), (1024, 1024, 1024)), _gemm_inputs, _gemm_ref, _gemm_flop, _GEMM_TOL),
    Case("ampere gemm_pipelined", "gemm_pipelined", "ampere",
         lambda m, s: m.build_gemm_pipelined(*s), ((256, 256, 256), (4096, 4096, 4096)),
         _gemm_inputs, _gemm_ref, _gemm_flop, _GEMM_TOL),
    Case("ampere gemm_highperf_ampere", "gemm_highperf_ampere", "ampere",
         lambda m, s: m.build_gemm_highperf(*s), ((256, 256, 256), (4096, 4096, 4096)),
         _gemm_inputs, _gemm_ref, _gemm_flop, _GEMM_TOL),
    *_norm_cases("ampere"),
]


def _patch(name):
    if name is None:
        return None
    if name == "fenced":
        from pyptx_fixes import fenced
        return fenced
    if name == "linked":
        from pyptx_blackwell import linked
        return linked
    raise ValueError(f"unknown patch {name!r}")


def module(case: Case, side: str):
    """The example's module on ``side`` ("ptxdsl" or "pyptx")."""
    patch = _patch(case.patch)
    if side == "pyptx" and case.patch == "linked":
        patch = None  # pyptx resolves its own sibling imports
    return pyptx_examples.load(case.example, case.arch_dir, original=side == "pyptx",
                               patch=patch)


def build(case: Case, side: str, shape):
    return case.build(module(case, side), shape)


def check(case: Case, torch, out, ref) -> str | None:
    """None when ``out`` matches the float64 reference to the case's tolerance, else why."""
    out = out[0] if isinstance(out, (tuple, list)) else out
    out = torch.as_tensor(out).double().reshape(ref.shape)
    atol, rtol = case.tol
    if not bool(torch.isfinite(out).all()):
        return "non-finite values in the output"
    err = (out - ref).abs()
    bad = err > atol + rtol * ref.abs()
    if bool(bad.any()):
        return (f"wrong result against the float64 reference: {int(bad.sum())} of "
                f"{bad.numel()} elements beyond atol={atol} rtol={rtol}, "
                f"max abs error {float(err.max()):.3g}")
    return None


def _err(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"


class Interpreted:
    """A ptxdsl kernel run on the interpreter with torch CPU tensors, called as a launch
    would be (the CPU tests' stand-in for the GPU)."""

    def __init__(self, kernel):
        self.kernel = kernel

    def __call__(self, *args):
        import numpy as np
        import torch
        arrays = []
        for t in args:
            if t.dtype == torch.bfloat16:
                import ml_dtypes
                arrays.append(t.view(torch.int16).numpy().view(ml_dtypes.bfloat16))
            else:
                arrays.append(t.numpy())
        out = self.kernel.interpret(*arrays)
        out = out[0] if isinstance(out, (tuple, list)) else out
        return torch.from_numpy(np.asarray(out).astype(np.float64))


# --------------------------------------------------------------- PTX on the host

_OPCODE = re.compile(r"^\s*(?:@!?%\w+\s+)?([a-z][\w.:]*)")


def opcode_counts(ptx: str) -> collections.Counter:
    """Static instruction count per opcode (with its modifiers) of a PTX text: lines inside
    a function body that are neither directives, labels nor braces."""
    counts: collections.Counter = collections.Counter()
    for line in ptx.splitlines():
        line = line.split("//")[0].strip()
        if not line or line.startswith((".", "{", "}", "$")) or line.endswith(":"):
            continue
        m = _OPCODE.match(line)
        if m and not line.startswith(("(", ")")):
            counts[re.sub(r"\.(?:[sub]\d+|f\d+|bf16(?:x2)?|f16x2|pred)$", "", m.group(1))] += 1
    return counts


def ctas_by_registers(registers: int, threads: int) -> int:
    """CTAs one SM can hold as far as registers go (sm_80/sm_90: 64K registers, allocated
    per warp in units of 256, at most 64 warps and 32 CTAs)."""
    warps = -(-threads // 32)
    per_warp = -(-max(registers, 1) * 32 // 256) * 256
    return min(32, min(64, 65536 // per_warp) // warps)


def ptx_compare(case: Case, shape) -> dict:
    """Both sides' PTX at ``shape``: totals, the opcodes whose counts differ, and ptxas -v
    registers/spills of each where ptxas is found."""
    from ptxdsl import toolchain
    out: dict = {}
    texts, threads = {}, {}
    for side in ("ptxdsl", "pyptx"):
        try:
            k = build(case, side, shape)
            texts[side] = k.ptx()
            threads[side] = math.prod(k.block)
        except Exception as e:  # noqa: BLE001 - reported
            out[side] = {"error": _err(e)}
    for side, text in texts.items():
        c = opcode_counts(text)
        out[side] = {"instructions": sum(c.values())}
        arch = re.search(r"^\.target\s+(\w+)", text, re.M)
        if toolchain.find_ptxas() and arch:
            try:
                res = toolchain.assemble(text, arch.group(1)).resources
                r = next(iter(res.values()))
                out[side].update(registers=r.registers, spill_bytes=r.spill_stores + r.spill_loads,
                                 ctas_by_registers=ctas_by_registers(r.registers, threads[side]))
            except Exception as e:  # noqa: BLE001
                out[side]["ptxas"] = _err(e)
        out[side]["_counts"] = c
    if len(texts) == 2:
        a, b = out["ptxdsl"].pop("_counts"), out["pyptx"].pop("_counts")
        diff = {op: (a[op], b[op]) for op in sorted(set(a) | set(b)) if a[op] != b[op]}
        out["differs"] = dict(sorted(diff.items(), key=lambda kv: -abs(kv[1][0] - kv[1][1]))[:12])
    else:
        for side in texts:
            out[side].pop("_counts", None)
    return out


# --------------------------------------------------------------- GPU

def validate(case: Case, side: str, torch, shapes, device: str = "cuda", wrap=None):
    """Build ``side``'s kernel at each shape, run it (``wrap(kernel)`` in its place, e.g.
    :class:`Interpreted`) and compare with the reference; raises AssertionError naming the
    shape and the error. Returns the kernel built at the last shape."""
    k = None
    for shape in shapes:
        k = build(case, side, shape)
        args = case.inputs(torch, shape, device)
        out = case.call(k if wrap is None else wrap(k), args)
        if device == "cuda":
            torch.cuda.synchronize()
        why = check(case, torch, out, case.reference(torch, args, shape))
        if why:
            raise AssertionError(f"{side} at {'x'.join(map(str, shape))}: {why}")
    return k


def run_case(case: Case, torch, rounds: int, iters: int | None, device: str = "cuda",
             wrap=None) -> dict:
    """Validate both sides at every shape of ``case``, then time those that passed at the
    last one; ``device``/``wrap`` as in :func:`validate` (the CPU tests use them)."""
    row: dict = {"case": case.name, "shape": list(case.shapes[-1]), "results": {}}
    live = {}
    for side in ("ptxdsl", "pyptx"):
        try:
            k = validate(case, side, torch, case.shapes, device, wrap)
            live[side] = k if wrap is None else wrap(k)
        except Exception as e:  # noqa: BLE001 - a contender that fails is reported
            row["results"][side] = {"error": _err(e)}
    if not live:
        return row
    args = case.inputs(torch, case.shapes[-1], device)
    fns = {side: (lambda k=k: case.call(k, args)) for side, k in live.items()}
    kind, amount = case.work(case.shapes[-1])
    if iters is None:  # ~20 ms of calls per timed block
        t0 = time_interleaved(torch, fns, 1, 3)
        iters = max(3, min(200, int(20.0 / max(min(t0.values()), 1e-3))))
    ms = time_interleaved(torch, fns, rounds, iters)
    for side, t in ms.items():
        r = {"us": t * 1e3, "iters": iters}
        r["tflops" if kind == "flop" else "gbps"] = amount / (t * 1e-3) / (1e12 if kind == "flop"
                                                                             else 1e9)
        row["results"][side] = r
    if len(ms) == 2:
        row["ptxdsl/pyptx"] = ms["pyptx"] / ms["ptxdsl"]
    return row


def _pair(ptx: dict, key: str) -> str:
    a, b = ptx.get("ptxdsl", {}).get(key), ptx.get("pyptx", {}).get(key)
    return "-" if a is None or b is None else f"{a}/{b}"


def _cell(r: dict) -> str:
    return f"{r['us']:.1f}" if "us" in r else ("error" if "error" in r else "-")


def print_table(result: dict) -> None:
    print(f"\npyptx's Hopper/Ampere examples on {result['device']} ({result['date']}): median µs "
          f"per call; 'ptxdsl/pyptx' = pyptx time / ptxdsl time (> 1: ptxdsl faster)")
    head = (f"{'case':<36}{'shape':>18}{'ptxdsl µs':>12}{'pyptx µs':>12}{'rate (ptxdsl)':>18}"
            f"{'ptxdsl/pyptx':>14}{'instr ptxdsl/pyptx':>20}{'regs':>10}")
    lines = [head, "-" * len(head)]
    notes = []
    for row in result["cases"]:
        rs = row.get("results", {})
        ours, theirs = rs.get("ptxdsl", {}), rs.get("pyptx", {})
        rate = ""
        if "tflops" in ours:
            rate = f"{ours['tflops']:.1f} TFLOP/s"
        elif "gbps" in ours:
            rate = f"{ours['gbps']:.0f} GB/s"
        ptx = row.get("ptx", {})
        ins, regs = _pair(ptx, "instructions"), _pair(ptx, "registers")
        ratio = f"{row['ptxdsl/pyptx']:.3f}" if "ptxdsl/pyptx" in row else "-"
        shape = "x".join(map(str, row.get("shape", [])))
        lines.append(f"{row['case']:<36}{shape:>18}{_cell(ours):>12}{_cell(theirs):>12}"
                     f"{rate:>18}{ratio:>14}{ins:>20}{regs:>10}")
        for side in ("ptxdsl", "pyptx"):
            for src in (rs.get(side, {}), ptx.get(side, {})):
                for key in ("error", "ptxas"):
                    if key in src:
                        notes.append(f"  {row['case']}: {side}: {src[key]}")
        if row.get("skipped"):
            notes.append(f"  {row['case']}: skipped: {row['skipped']}")
        occ = [ptx.get(side, {}).get("ctas_by_registers") for side in ("ptxdsl", "pyptx")]
        if None not in occ and occ[0] != occ[1]:
            notes.append(f"  {row['case']}: CTAs per SM by registers differ (ptxdsl/pyptx): "
                         f"{occ[0]}/{occ[1]}")
        if ptx.get("differs"):
            top = ", ".join(f"{op} {a}/{b}" for op, (a, b) in list(ptx["differs"].items())[:6])
            notes.append(f"  {row['case']}: opcodes that differ (ptxdsl/pyptx): {top}")
    print("\n".join(lines + notes))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated substrings of case names")
    ap.add_argument("--budget", type=float, default=240.0, help="seconds for the whole run")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=None, help="calls per timed block "
                    "(default: about 20 ms of calls)")
    ap.add_argument("--no-ptx", action="store_true", help="skip the PTX comparison")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    # Some examples import jax (and pyptx may use it): never let XLA take the GPU's memory.
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    import torch
    wanted = [w.strip() for w in a.only.split(",") if w.strip()]
    cases = [c for c in CASES if not wanted or any(w in c.name for w in wanted)]
    start, rows = time.monotonic(), []
    result = {"device": torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU",
              "date": datetime.datetime.now().isoformat(timespec="seconds"),
              "rounds": a.rounds, "cases": rows}
    for case in cases:
        if time.monotonic() - start > a.budget:
            rows.append({"case": case.name, "skipped": f"past the {a.budget:.0f} s budget"})
            continue
        t = time.monotonic()
        try:
            row = run_case(case, torch, a.rounds, a.iters)
        except Exception as e:  # noqa: BLE001 - e.g. inputs the device cannot hold
            row = {"case": case.name, "results": {}, "error": _err(e)}
        if not a.no_ptx:
            row["ptx"] = ptx_compare(case, case.shapes[-1])
        row["seconds"] = round(time.monotonic() - t, 1)
        print(f"{case.name}: {row.get('ptxdsl/pyptx', '-')} ({row['seconds']} s)", flush=True)
        rows.append(row)
        save_result(result, a.json, "pyptx_examples_speed")   # a run cut short keeps its rows
    save_result(result, a.json, "pyptx_examples_speed")
    print_table(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
