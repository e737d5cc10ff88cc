"""The bf16 GEMM at the power cap: sustained throughput, board power and SM clock of
cuBLAS and ptxdsl (and pyptx), side by side in one run.

    PYTHONPATH=. python lab/matmul_power.py [--shapes 8192x8192x8192,4096x4096x4096]
        [--seconds 2] [--rounds 2] [--pyptx] [--json PATH]

A sustained bf16 GEMM of random normal inputs holds an H100 or H200 at its power limit
(700 W): the SM clock settles far below its maximum (about 1350 MHz on an H100, not 1980),
and what decides throughput is energy per FLOP as much as work per clock. Each contender
runs back to back for ``--seconds`` while ``nvidia-smi`` samples power and the SM clock
every 50 ms (the first 30% of the block is left out: the clock is still settling). The
columns: TFLOP/s; W; MHz; FLOP per clock per SM (work per cycle: 4096 is the dense bf16
peak); W per TFLOP/s (energy per FLOP, in pJ); the throttle reasons seen (0x4: the
software power cap). Rounds alternate the order. Every contender is validated against a
float64 product first; ``cuBLAS`` also prints its kernel's name (torch profiler). ``--pyptx``
adds pyptx's warp-specialized GEMM where its shape rules allow (through its C++ launch
extension: ``PYPTX_EXT=1``, as in ``bench/matmul.py``; it writes C transposed, which the
validation undoes).
Writes ``$OUT/matmul_power.json`` (or ``--json``); the table last.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from bench.matmul import rel_err, warm  # noqa: E402

class PowerLog:
    """``nvidia-smi`` sampled every 50 ms in a thread: (time, W, MHz, throttle reasons)."""

    def __init__(self):
        self.samples = []
        try:
            self.proc = subprocess.Popen(
                ["nvidia-smi", "--id=0", "--query-gpu=power.draw,clocks.sm,"
                 "clocks_throttle_reasons.active", "--format=csv,noheader,nounits",
                 "-lms", "50"], stdout=subprocess.PIPE, text=True)
        except OSError as e:
            print(f"note: no nvidia-smi ({e}): power and clock not recorded")
            self.proc = None
            return
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            f = [x.strip() for x in line.split(",")]
            try:
                self.samples.append((time.time(), float(f[0]), float(f[1]), f[2]))
            except (ValueError, IndexError):
                pass

    def window(self, t0, t1):
        """Mean W and MHz and the throttle reasons over the last 70% of [t0, t1]."""
        got = [s for s in self.samples if t0 + 0.3 * (t1 - t0) <= s[0] <= t1]
        if not got:
            return None, None, []
        return (sum(s[1] for s in got) / len(got), sum(s[2] for s in got) / len(got),
                sorted({s[3] for s in got}))

    def close(self):
        if self.proc is not None:
            self.proc.terminate()


def cublas_kernels(torch, a, b) -> list:
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        torch.matmul(a, b)
        torch.cuda.synchronize()
    return sorted({e.name for e in prof.events() if e.device_type.name == "CUDA"
                   and "Memset" not in e.name})


def sustained(torch, fn, args, seconds, log):
    """µs per call over ``seconds`` of back-to-back calls, and the power window."""
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record(); fn(*args); e.record(); torch.cuda.synchronize()
    calls = max(20, int(seconds / max(s.elapsed_time(e) / 1e3, 1e-6)))
    t0 = time.time()
    s.record()
    for _ in range(calls):
        fn(*args)
    e.record()
    torch.cuda.synchronize()
    return s.elapsed_time(e) * 1e3 / calls, log.window(t0, time.time())


def contenders(torch, m, n, k, sms, device, pyptx=None):
    """The live contenders of one shape (``pyptx``: ``bench.matmul.pyptx_gemm()``'s
    ``(run, rule)``, added where its rule allows the shape) and the op's plan."""
    from ptxdsl.ops import matmul
    from ptxdsl.ops.matmul.plan import choose
    from ptxdsl.core.types import bf16
    live = {"cuBLAS": lambda a, b: torch.matmul(a, b), "ptxdsl": lambda a, b: matmul(a, b)}
    base = choose(m, n, k, bf16, bf16, sms, device=device)
    if pyptx is not None and pyptx[1](m, n, k) is None:
        live["pyptx"] = pyptx[0]
    return live, base


def main(argv=None):
    import torch
    from ptxdsl.ops.matmul.plan import device_class
    from ptxdsl.runtime import driver
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="8192x8192x8192,4096x4096x4096")
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--pyptx", action="store_true",
                    help="add pyptx's GEMM (needs PYPTX_EXT=1 and pyptx importable)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    dev = torch.cuda.get_device_properties(0)
    sms = dev.multi_processor_count
    cls = device_class(driver.get().device(torch.cuda.current_device()))
    path = args.json or os.path.join(os.environ.get("OUT", "."), "matmul_power.json")
    pyptx = None
    if args.pyptx:
        from bench.matmul import pyptx_gemm
        pyptx = pyptx_gemm()     # raises with the reason where pyptx cannot be timed
    log = PowerLog()
    result = {"device": dev.name, "sms": sms,
              "date": datetime.datetime.now().isoformat(timespec="minutes"),
              "torch": torch.__version__, "seconds": args.seconds, "rounds": args.rounds,
              "rows": []}
    warm(1.0)
    for shape in args.shapes.split(","):
        m, n, k = (int(v) for v in shape.split("x"))
        g = torch.Generator(device="cuda").manual_seed(0)
        a = torch.randn(m, k, device="cuda", generator=g).to(torch.bfloat16)
        b = torch.randn(n, k, device="cuda", generator=g).to(torch.bfloat16).t()
        live, plan = contenders(torch, m, n, k, sms, cls, pyptx)
        ref = a.double() @ b.double()
        row = {"shape": [m, n, k], "plan": str(plan),
               "cublas_kernels": cublas_kernels(torch, a, b), "results": {}}
        for name in list(live):
            out = live[name](a, b)
            err = rel_err(out.t() if name == "pyptx" else out, ref)  # pyptx: C as (N, M)
            if not err < 1e-2:
                row["results"][name] = {"error": f"relative error {err:.3g}"}
                live.pop(name)
        del ref
        flop = 2.0 * m * n * k
        for r in range(args.rounds):
            for name in (list(live) if r % 2 == 0 else list(live)[::-1]):
                us, (w, mhz, why) = sustained(torch, live[name], (a, b), args.seconds, log)
                tf = flop / us / 1e6
                got = {"us": us, "tflops": tf, "watts": w, "mhz": mhz, "throttle": why}
                if w and mhz:
                    got["flop_per_clk_sm"] = tf * 1e12 / (mhz * 1e6) / sms
                    got["w_per_tflops"] = w / tf
                row["results"].setdefault(name, {"runs": []})["runs"].append(got)
                print(f"{m}x{n}x{k} round {r} {name:11} {tf:5.0f} TFLOP/s  "
                      f"{w or 0:4.0f} W {mhz or 0:5.0f} MHz", flush=True)
        for got in row["results"].values():
            if "runs" in got:
                got["best"] = max(got["runs"], key=lambda x: x["tflops"])
        result["rows"].append(row)
        with open(path, "w") as f:
            json.dump(result, f, indent=1)
    log.close()
    print_table(result)
    return result


def print_table(result):
    print(f"\n{result['device']} ({result['date']}), {result['seconds']} s sustained blocks, "
          f"best of {result['rounds']} rounds")
    print(f"{'shape':>16} {'contender':11} {'TFLOP/s':>7} {'W':>5} {'MHz':>5} "
          f"{'FLOP/clk/SM':>11} {'W/TF':>5} {'vs cuBLAS':>9}")
    for row in result["rows"]:
        shape = "x".join(map(str, row["shape"]))
        cub = row["results"].get("cuBLAS", {}).get("best", {}).get("tflops")
        for name, got in row["results"].items():
            if "best" not in got:
                print(f"{shape:>16} {name:11} {got.get('error', '')}")
                continue
            b = got["best"]
            print(f"{shape:>16} {name:11} {b['tflops']:7.0f} {b.get('watts') or 0:5.0f} "
                  f"{b.get('mhz') or 0:5.0f} {b.get('flop_per_clk_sm', 0):11.0f} "
                  f"{b.get('w_per_tflops', 0):5.3f} "
                  f"{b['tflops'] / cub if cub else float('nan'):9.3f}")
        print(f"{'':>16} cuBLAS kernel: {', '.join(row['cublas_kernels'])}")


if __name__ == "__main__":
    main()
