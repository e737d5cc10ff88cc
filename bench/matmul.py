"""GEMM side by side in one run on the current GPU: cuBLAS (``torch.matmul``), a
Triton ``tl.dot`` kernel (grouped order, autotuned over four tile configs), pyptx's
warp-specialized Hopper GEMM where its shape rules allow, and ``ptxdsl.ops.matmul``.

Operands: ``a`` (M, K) row-major and ``b`` in two layouts: ``b = W.T`` for a row-major
``W`` (N, K), the layout of a linear layer (``x @ W.T``, ``--layout linear``) and the one
pyptx's kernel takes, and a row-major (K, N) ``b`` (``a @ b``, ``--layout nn``; pyptx sits
out). By default (``--layout both``) every shape runs both: ``b`` and a row-major copy of
the same values, one float64 reference, and each contender twice (``NAME`` on ``x @ W.T``,
``NAME a@b`` on ``a @ b``), all in the same interleaved rounds, so the two layouts are
timed under the same clocks; the JSON has one row per shape and layout (``layout``), each
compared with cuBLAS in its own layout. Random normal bf16 inputs (power-limited clocks
make zeros look faster), f32 accumulation, bf16 output.

Every result is validated against a float64 product of the same inputs before it is
timed (relative Frobenius error under 1e-2, every element finite; outputs are fresh
allocations each call, so an unwritten element shows as garbage). pyptx's kernel
writes C transposed ((N, M), its documented layout): it is validated transposed.

Timing is sustained and shares the power state: after validation the GPU is kept busy
for a third of a second, then in each of ``--rounds`` rounds every contender runs at least
``--block-ms`` of calls, cut into slices of about 2 ms that take turns, all queued back
to back with a CUDA event between slices (``timed_rounds``: at the power cap a kernel's
clock depends on what ran in the last tens of ms, and this gives every contender the same
clocks). Each contender's time per call is the median over the rounds.
Inputs rotate over enough copies to exceed L2 for the small shapes. The table is
printed last; JSON goes to ``$OUT/matmul.json`` (or ``--json``).

pyptx sits out unless ``PYPTX_EXT=1``: only through its C++ launch extension (built with
ninja on its first call) does it launch without re-tracing its kernel every call.

    PYPTX_EXT=1 PYTHONPATH=.:/tmp/site python bench/matmul.py   # with pyptx from .whl
    python bench/matmul.py --quick                  # 4096^3, 8192^3 and a few LLM shapes
    python bench/matmul.py                          # squares 1024..16384 and the LLM shapes
    python bench/matmul.py --shapes 4096x4096x4096,128x14336x4096
    python bench/matmul.py --layout linear          # x @ W.T only (the sweep of earlier runs)
"""
from __future__ import annotations

import argparse
import datetime
import functools
import json
import math
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

SQUARES = [1024, 2048, 4096, 8192, 16384]
LLM_NK = [(4096, 4096), (14336, 4096), (4096, 14336), (6144, 4096), (8192, 8192),
          (28672, 8192), (8192, 28672)]
LLM_M = [128, 1024, 4096, 16384]
SMALL_M = [1, 16]


def shapes(quick: bool) -> list[tuple[int, int, int, str]]:
    """(M, N, K, group) in run order."""
    if quick:
        return [(4096, 4096, 4096, "square"), (8192, 8192, 8192, "square"),
                (4096, 14336, 4096, "llm"), (4096, 4096, 14336, "llm"), (1024, 6144, 4096, "llm"),
                (128, 8192, 8192, "llm"), (16, 4096, 4096, "small"), (379, 1000, 65, "ragged")]
    out = [(s, s, s, "square") for s in SQUARES]
    out += [(m, n, k, "llm") for m in LLM_M for n, k in LLM_NK]
    out += [(m, n, k, "small") for m in SMALL_M for n, k in LLM_NK]
    return out


def _torch():
    import torch
    return torch


# ---------------------------------------------------------------- contenders
@functools.lru_cache(maxsize=None)
def triton_matmul():
    """A plain Triton GEMM: ``tl.dot`` on BMxBK and BKxBN blocks, grouped program order,
    autotuned per (M, N, K) over four configs (the autotune runs in the validation call)."""
    import triton
    import triton.language as tl

    configs = [triton.Config({"BM": 128, "BN": 256, "BK": 64, "G": 8}, num_warps=8, num_stages=3),
               triton.Config({"BM": 128, "BN": 128, "BK": 64, "G": 8}, num_warps=4, num_stages=4),
               triton.Config({"BM": 128, "BN": 128, "BK": 64, "G": 8}, num_warps=8, num_stages=3),
               triton.Config({"BM": 64, "BN": 128, "BK": 64, "G": 8}, num_warps=4, num_stages=4)]

    @triton.autotune(configs=configs, key=["M", "N", "K"])
    @triton.jit
    def _k(A, B, C, M, N, K, sam, sak, sbk, sbn, scm, scn,
           BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, G: tl.constexpr):
        pid = tl.program_id(0)
        npm, npn = tl.cdiv(M, BM), tl.cdiv(N, BN)
        width = G * npn
        first = (pid // width) * G
        gm = min(npm - first, G)
        pm = first + (pid % width) % gm
        pn = (pid % width) // gm
        rm = (pm * BM + tl.arange(0, BM)) % M
        rn = (pn * BN + tl.arange(0, BN)) % N
        rk = tl.arange(0, BK)
        pa = A + rm[:, None] * sam + rk[None, :] * sak
        pb = B + rk[:, None] * sbk + rn[None, :] * sbn
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for kk in range(0, tl.cdiv(K, BK)):
            left = K - kk * BK
            a = tl.load(pa, mask=rk[None, :] < left, other=0.0)
            b = tl.load(pb, mask=rk[:, None] < left, other=0.0)
            acc = tl.dot(a, b, acc)
            pa += BK * sak
            pb += BK * sbk
        om = pm * BM + tl.arange(0, BM)
        on = pn * BN + tl.arange(0, BN)
        tl.store(C + om[:, None] * scm + on[None, :] * scn, acc.to(C.dtype.element_ty),
                 mask=(om[:, None] < M) & (on[None, :] < N))

    def run(a, b):
        m, k = a.shape
        n = b.shape[1]
        c = _torch().empty((m, n), dtype=a.dtype, device=a.device)
        grid = lambda meta: (triton.cdiv(m, meta["BM"]) * triton.cdiv(n, meta["BN"]),)  # noqa
        _k[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                 c.stride(0), c.stride(1))
        return c
    return run


@functools.lru_cache(maxsize=None)
def pyptx_gemm():
    """pyptx's ``gemm_warp_specialized`` (the wheel's examples/hopper/gemm_highperf_hopper):
    A (M, K), B (N, K) row-major, C (N, M); M and N multiples of 256, K of 64, at most
    128 tiles per cluster of its fixed 128-CTA grid. Returns (run, rule) or raises."""
    from pyptx.examples.hopper import gemm_highperf_hopper as g
    if os.environ.get("PYPTX_EXT") != "1":
        # Without its C++ launch extension (built by ninja on first use, PYPTX_EXT=1)
        # pyptx 0.1.1 traces, emits and registers its kernel again on every call (about
        # 4 ms per 4096^3 call on an H100 or H200, its emitter and torch.library in
        # cProfile): host time, not its kernel, so it would be timed unfairly.
        raise RuntimeError("pyptx is timed only through its C++ launch extension: set "
                           "PYPTX_EXT=1 (ninja and a C++ compiler on PATH)")
    torch = _torch()
    scheds: dict = {}

    def rule(m, n, k):
        if m % 256 or n % 256 or k % 64 or k < 128:
            return "M, N multiples of 256 and K of 64 (>= 128) only"
        if -(-(m // 256) * (n // 256) // g.NUM_CLUSTERS) > g.SPACE_LEN:
            return f"more tiles than its schedule holds ({g.SPACE_LEN} per cluster)"
        return None

    def run(a, b):
        m, n = a.shape[0], b.shape[1]
        key = (m, n)
        if key not in scheds:
            scheds[key] = torch.tensor(g.create_hilbert_schedule(m // 256, n // 256),
                                       device=a.device, dtype=torch.int32)
        return g.gemm_warp_specialized(a, b.t(), scheds[key])   # b.t(): the (N, K) W itself
    return run, rule


def ptxdsl_matmul():
    from ptxdsl.ops import matmul
    return lambda a, b: matmul(a, b)


# ---------------------------------------------------------------- measuring
def make_sets(m, n, k, layout, l2, seed=0, device="cuda"):
    """Input sets ``(a, b)``; for ``layout="both"`` ``(a, b, b_nn)``: ``b = W.T`` and
    ``b_nn`` a row-major copy of the same values (one reference serves both)."""
    torch = _torch()
    g = torch.Generator(device=device).manual_seed(seed)
    per = (m * k + n * k) * (3 if layout == "both" else 2)
    copies = 1 if per >= 2 * l2 else min(8, max(2, math.ceil(3 * l2 / max(per, 1))))
    sets = []
    for _ in range(copies):
        a = torch.randn(m, k, device=device, generator=g).to(torch.bfloat16)
        if layout == "nn":
            b = torch.randn(k, n, device=device, generator=g).to(torch.bfloat16)
        else:
            b = torch.randn(n, k, device=device, generator=g).to(torch.bfloat16).t()
        sets.append((a, b, b.contiguous()) if layout == "both" else (a, b))
    return sets


NN = " a@b"   # the suffix of a contender's name on the row-major (K, N) b in --layout both


def both_layouts(contenders: dict) -> dict:
    """``--layout both``: each ``name -> (fn(a, b), rule)`` as ``name`` on ``(a, b, _)``
    (``x @ W.T``) and ``name + NN`` on ``(a, _, b_nn)`` (``a @ b``); pyptx, whose kernel
    takes ``W`` itself, on the first only."""
    out = {}
    for name, (fn, rule) in contenders.items():
        out[name] = ((lambda f: lambda a, b, b_nn: f(a, b))(fn), rule)
        if name != "pyptx":
            out[name + NN] = ((lambda f: lambda a, b, b_nn: f(a, b_nn))(fn), rule)
    return out


def split_layouts(row: dict) -> dict:
    """One ``--layout both`` row of results as ``{"linear": {...}, "nn": {...}}``, the
    contenders under their own names in each."""
    out = {"linear": {}, "nn": {}}
    for name, v in row.items():
        if name.endswith(NN):
            out["nn"][name[:-len(NN)]] = v
        else:
            out["linear"][name] = v
    return out


def rel_err(out, ref) -> float:
    torch = _torch()
    o = out.double()
    if not bool(torch.isfinite(o).all()):
        return float("inf")
    return float((o - ref).norm() / ref.norm().clamp_min(1e-30))


def time_block(fn, sets, block_ms: float) -> float:
    """µs per call over one sustained block of back-to-back calls (at least block_ms)."""
    torch = _torch()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    # one call to size the block
    s.record(); fn(*sets[0]); e.record(); torch.cuda.synchronize()
    one = max(s.elapsed_time(e), 1e-3)
    calls = max(10, min(5000, int(block_ms / one)))
    keep = [None] * len(sets)
    s.record()
    for i in range(calls):
        j = i % len(sets)
        keep[j] = fn(*sets[j])
    e.record()
    torch.cuda.synchronize()
    return s.elapsed_time(e) * 1000.0 / calls


def round_orders(names: list, rounds: int) -> list[list]:
    """The contenders' order in each timing round: every other round reversed, then
    rotated by ``r * len / rounds``, so that over the rounds each contender runs early and
    late, after different ones. At the power cap the clocks depend on what ran just
    before: in one plan sweep (``lab/matmul_plans.py``, H200, e4m3 8192^3) the same kernel
    timed 1395 TFLOP/s second in line and 1305 third; alternating one order only kept
    the contender in the middle in the middle."""
    out, n = [], len(names)
    for r in range(rounds):
        base = names if r % 2 == 0 else names[::-1]
        k = (r * n) // max(rounds, 1) if n else 0
        out.append(base[k:] + base[:k])
    return out


SLICE_MS = 2.0   # the contenders alternate in slices of about this many ms of calls


def slice_calls(one_ms: float, slice_ms: float = SLICE_MS) -> int:
    """Calls in one slice of a contender whose call takes ``one_ms``: about ``slice_ms``
    of them, at least one."""
    return max(1, min(5000, int(slice_ms / max(one_ms, 1e-4))))


def timed_rounds(live: dict, sets, rounds: int, block_ms: float, flop: float, row: dict,
                 slice_ms: float = SLICE_MS):
    """Each contender's sustained µs per call into ``row[name]``: ``us`` (the median over
    ``rounds`` rounds), ``best_us``, and ``tflops`` (from ``us``).

    The contenders share the GPU's power state. In a round every contender runs at least
    ``block_ms`` of calls, cut into slices of about ``slice_ms`` that take turns (A B C A
    B C ..., the order rotated per round by :func:`round_orders`), all queued back to back
    with a CUDA event between slices: the GPU never idles, and slice ``i`` is timed by
    events ``i`` and ``i + 1``. At the power cap the clock a kernel gets depends on what
    ran in the last tens of milliseconds (an H100 running 8192^3 bf16 sits near 1350 MHz,
    and the first of several 25 ms blocks after a lighter phase ran up to 7% faster,
    ``bench/results/matmul_power_h100.json``), so whole blocks in turn favoured whichever
    contender followed the lightest one; 2 ms slices put every contender under the same
    clocks."""
    torch = _torch()
    names = list(live)
    calls, slices = {}, {}
    for name in names:                     # one call each to size the slices (after
        live[name](*sets[0])               # one more: a first call may compile)
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); live[name](*sets[0]); e.record(); torch.cuda.synchronize()
        one = s.elapsed_time(e)
        calls[name] = slice_calls(one, slice_ms)
        slices[name] = max(1, math.ceil(block_ms / max(calls[name] * one, 1e-3)))
    turns = max(slices.values())
    per_round = {name: [] for name in names}
    keep = [None] * len(sets)
    for order in round_orders(names, rounds):
        plan = [name for t in range(turns) for name in order if t < slices[name]]
        events = [torch.cuda.Event(enable_timing=True) for _ in range(len(plan) + 1)]
        events[0].record()
        j = 0
        for i, name in enumerate(plan):
            fn = live[name]
            for _ in range(calls[name]):
                keep[j] = fn(*sets[j])
                j = (j + 1) % len(sets)
            events[i + 1].record()
        torch.cuda.synchronize()
        spent = {name: 0.0 for name in names}
        for i, name in enumerate(plan):
            spent[name] += events[i].elapsed_time(events[i + 1])
        for name in names:
            per_round[name].append(spent[name] * 1000.0 / (slices[name] * calls[name]))
    for name in names:
        us = statistics.median(per_round[name])
        row.setdefault(name, {}).update(us=us, best_us=min(per_round[name]),
                                        rounds_us=per_round[name], tflops=flop / us / 1e6)
    return row


def warm(seconds: float) -> None:
    torch = _torch()
    x = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(10):
            x @ x
        torch.cuda.synchronize()


def bench_shape(m, n, k, contenders, args, l2):
    sets = make_sets(m, n, k, args.layout, l2)
    a, b = sets[0][:2]
    ref = a.double() @ b.double()
    row, live = {}, {}
    for name, (fn, rule) in contenders.items():
        why = rule(m, n, k) if rule else None
        if why:
            row[name] = {"skip": why}
            continue
        # pyptx writes C transposed ((N, M), its documented layout)
        validate(name, fn, sets[0], ref, row, live,
                 view=(lambda o: o.t()) if name == "pyptx" else None)
    del ref
    flop = 2.0 * m * n * k
    warm(args.warm)
    return timed_rounds(live, sets, args.rounds, args.block_ms, flop, row)


def validate(name, fn, args, want, row: dict, live: dict, view=None) -> None:
    """One call of contender ``fn`` on ``args`` against the float64 ``want`` (relative
    Frobenius error under 1e-2, every element finite; ``view`` maps the output first):
    ``fn`` joins ``live`` and ``row[name]`` gets its error, or ``row[name]`` says why not
    (a contender that cannot run is reported, not fatal)."""
    torch = _torch()
    try:
        out = fn(*args)
        torch.cuda.synchronize()
        err = rel_err(view(out) if view else out, want)
        if not err <= 1e-2:
            row[name] = {"error": f"wrong result: relative error {err:.3g}"}
            return
        row[name] = {"err": err}
        live[name] = fn
    except Exception as ex:  # noqa: BLE001 - reported in the table
        row[name] = {"error": f"{type(ex).__name__}: {str(ex)[:160]}"}


def host_cost(contenders, calls=3000, repeats=5) -> dict:
    """Host µs per call of a tiny product (1x256x256), back to back, synchronised once:
    what each contender's Python and launch path costs when the GPU is not the limit.
    Each contender's best of ``repeats`` loops, the contenders taking turns (a busy host
    moment then costs one loop, not one contender's figure)."""
    torch = _torch()
    a = torch.randn(1, 256, device="cuda").to(torch.bfloat16)
    b = torch.randn(256, 256, device="cuda").to(torch.bfloat16).t()
    out = {}
    names = ("cuBLAS", "ptxdsl")
    for name in names:
        for _ in range(50):
            contenders[name][0](a, b)
    torch.cuda.synchronize()
    for _ in range(repeats):
        for name in names:
            fn = contenders[name][0]
            t0 = time.perf_counter()
            for _ in range(calls):
                fn(a, b)
            torch.cuda.synchronize()
            us = (time.perf_counter() - t0) / calls * 1e6
            out[name] = min(out.get(name, us), us)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--shapes", default=None, help="MxNxK,... (overrides the sweep)")
    ap.add_argument("--layout", default="both", choices=["both", "linear", "nn"],
                    help="x @ W.T (linear), a @ b with a row-major b (nn), or both in the "
                         "same rounds (default)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--block-ms", type=float, default=100.0)
    ap.add_argument("--warm", type=float, default=0.3)
    ap.add_argument("--only", default=None, help="comma-separated contenders")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    torch = _torch()
    dev = torch.cuda.get_device_properties(0)
    l2 = getattr(dev, "L2_cache_size", 50 << 20)
    todo = shapes(args.quick)
    if args.shapes:
        todo = [tuple(int(v) for v in s.split("x")) + ("given",) for s in args.shapes.split(",")]
    contenders, notes = {"cuBLAS": (lambda a, b: torch.matmul(a, b), None)}, []
    try:
        contenders["triton"] = (triton_matmul(), None)
    except Exception as ex:
        notes.append(f"triton not available: {type(ex).__name__}: {ex}")
    if args.layout != "nn":
        try:
            run, rule = pyptx_gemm()
            contenders["pyptx"] = (run, rule)
        except Exception as ex:
            notes.append(f"pyptx not available ({type(ex).__name__}: {str(ex)[:160]}); "
                         "install it from .whl with bench/install_wheels.py")
    else:
        notes.append("pyptx's kernel takes B as (N, K) only: left out of --layout nn")
    contenders["ptxdsl"] = (ptxdsl_matmul(), None)
    if args.only:
        keep = set(args.only.split(","))
        contenders = {k: v for k, v in contenders.items() if k in keep}
    timed = both_layouts(contenders) if args.layout == "both" else contenders
    for note in notes:
        print("note:", note, flush=True)
    warm(1.0)
    result = {"device": dev.name, "sms": dev.multi_processor_count,
              "date": datetime.datetime.now().isoformat(timespec="minutes"),
              "torch": torch.__version__, "layout": args.layout, "dtype": "bf16",
              "rounds": args.rounds, "block_ms": args.block_ms, "notes": notes, "rows": []}
    try:
        from ptxdsl.ops.matmul.api import describe
        from ptxdsl.ops.matmul.plan import device_class
        from ptxdsl.runtime import driver
        cls = device_class(driver.get().device(torch.cuda.current_device()))
        result["ptxdsl_kernels"] = {}
    except ImportError:
        describe = None
    path = args.json or os.path.join(os.environ.get("OUT", "."), "matmul.json")
    for m, n, k, group in todo:
        row = bench_shape(m, n, k, timed, args, l2)
        if describe is not None and "ptxdsl" in row:    # the plan of the K-major b = W.T
            row["ptxdsl"]["kernel"] = describe(m, n, k, sms=dev.multi_processor_count,
                                               device=cls)
        parts = split_layouts(row) if args.layout == "both" else {args.layout: row}
        for layout, res in parts.items():
            result["rows"].append({"shape": [m, n, k], "group": group, "layout": layout,
                                   "results": res})
        with open(path, "w") as f:  # after every shape: a run cut short keeps what it measured
            json.dump(result, f, indent=1)
        print(f"{m}x{n}x{k}: " + ", ".join(
            f"{c}={v['tflops']:.0f}" if "tflops" in v else f"{c}=" +
            ("skip" if "skip" in v else "ERR " + v.get("error", "")[:80])
            for c, v in row.items()), flush=True)
        torch.cuda.empty_cache()
    if "cuBLAS" in contenders and "ptxdsl" in contenders:
        try:
            result["host_us"] = host_cost(contenders)
        except Exception as ex:
            result["notes"].append(f"host cost not measured: {ex}")
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    print_table(result)
    return result


def _geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


LAYOUTS = {"linear": "x @ W.T", "nn": "a @ b"}


def print_table(result):
    """One block per layout (rows without ``layout``: the run's), ratios against the
    peers in the same layout, then the host cost."""
    layouts = list(dict.fromkeys(r.get("layout", result["layout"]) for r in result["rows"]))
    for layout in layouts:
        _print_layout(result, layout, [r for r in result["rows"]
                                       if r.get("layout", result["layout"]) == layout])
    if "host_us" in result:
        h = result["host_us"]
        print("host µs per tiny call: " + ", ".join(f"{k} {v:.1f}" for k, v in h.items()))


def _print_layout(result, layout, rows):
    names = list(dict.fromkeys(c for r in rows for c in r["results"]))
    print(f"\nGEMM bf16 ({layout}: {LAYOUTS.get(layout, layout)}) on {result['device']} "
          f"({result['date']}), TFLOP/s (sustained); ratios are ptxdsl / peer")
    print(f"{'M x N x K':>20s} " + " ".join(f"{n:>8s}" for n in names) + "  vs cuBLAS  vs pyptx")
    # issue 19's target: the LLM shapes with M >= 128; squares and M < 128 apart
    ratios = {"cuBLAS": [], "pyptx": [], "cuBLAS squares": []}
    for r in rows:
        res = r["results"]
        cells = []
        for n in names:
            v = res.get(n, {})
            cells.append(f"{v['tflops']:8.0f}" if "tflops" in v else
                         f"{'skip' if 'skip' in v else 'ERR' if v else '-':>8s}")
        ours = res.get("ptxdsl", {}).get("tflops")
        tail = ""
        for peer in ("cuBLAS", "pyptx"):
            p = res.get(peer, {}).get("tflops")
            if ours and p:
                tail += f"  {ours / p:7.2f}x"
                if r["group"] == "square" and peer == "cuBLAS":
                    ratios["cuBLAS squares"].append(ours / p)
                elif r["group"] != "small" and (peer != "cuBLAS" or r["shape"][0] >= 128):
                    ratios[peer].append(ours / p)
            else:
                tail += "         -"
        print(f"{'x'.join(map(str, r['shape'])):>20s} " + " ".join(cells) + tail)
    print(f"geomean ptxdsl/cuBLAS over the LLM shapes with M >= 128: "
          f"{_geomean(ratios['cuBLAS']):.3f} (squares: {_geomean(ratios['cuBLAS squares']):.3f});"
          f" ptxdsl/pyptx where pyptx runs: {_geomean(ratios['pyptx']):.3f}")


if __name__ == "__main__":
    main()
