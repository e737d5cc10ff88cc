"""``bench/launch_overhead.py --host``: the fast path's host cost with no GPU.

CPU torch tensors pose as cuda:0 tensors (``tests/helpers/runtime_fakes.cpu_torch_as_cuda``:
torch's own tensor guards and allocator) on a fake driver whose launch does nothing,
so what is timed is ptxdsl's Python beside the same work written by hand (the
"floor"). Use it to see where the host time goes; it is not a GPU figure.
"""
from __future__ import annotations

import ctypes
import datetime
import json
import os
import platform
import struct
import tempfile
import threading

from bench import launch_overhead as lo


def main(a) -> int:
    """The fast path's host cost without a GPU: CPU torch tensors posing as cuda:0
    tensors, a fake driver, and a launch that does nothing (the same Python call for
    ptxdsl and for the "floor" it is compared with)."""
    json_path = a.json or os.path.join(os.environ.get("OUT", "."), "launch_overhead_host.json")
    os.environ.setdefault("PTXDSL_CACHE_DIR", tempfile.mkdtemp(prefix="ptxdsl-host-bench-"))
    os.environ["PTXDSL_COMPILER"] = "jit"  # the fake driver "JITs" PTX; no ptxas needed
    import torch

    import ptxdsl
    from ptxdsl.runtime import driver as rdriver
    from ptxdsl.runtime import prepare
    from runtime_fakes import FakeCuda, cpu_torch_as_cuda, vadd_impl
    from runtime_kernels import build_vadd

    cu = FakeCuda()
    drv = rdriver.Driver(cu=cu)
    rdriver._driver, rdriver._driver_error = drv, None
    cpu_torch_as_cuda()
    k = build_vadd(name="vadd_host")
    cu.register(k, vadd_impl)
    n = a.n
    x, y = torch.randn(n), torch.randn(n)
    z = torch.empty_like(x)
    launcher = prepare(k, x, y, z)
    # Right answers first (the fake GPU runs vadd on the tensors' memory) ...
    assert torch.equal(launcher(x, y), x + y) and torch.equal(k(x, y), x + y)
    z.zero_()
    k(x, y, z)
    assert torch.equal(z, x + y)
    # ... then the launch does nothing, so what is timed is ptxdsl's Python.
    ok = (cu.CUresult.CUDA_SUCCESS,)

    def noop(*args):
        return ok

    launcher._g["LAUNCH"] = noop
    x2, y2 = torch.randn(n + 1), torch.randn(n + 1)
    launcher(x2, y2)  # a second signature's entry
    slow_before = launcher.slow_calls
    versions = {"python": platform.python_version(), "torch": torch.__version__,
                "ptxdsl": ptxdsl.__version__}
    lo.log(f"host only (fake driver, CPU tensors as cuda:0, no-op launch), {versions}")
    lo.log(f"N={n}, {a.calls} calls x {a.repeats} repeats, host ns per call\n")
    nothing = lambda: None  # noqa: E731

    streams, raw, cs_of = drv._streams, torch._C._cuda_getCurrentRawStream, drv.stream
    buf = ctypes.create_string_buffer(32)
    pack3 = struct.Struct("<QQQ").pack_into
    from torch._C._dynamo import guards
    empty_strided = guards._empty_strided_cuda  # the CPU one, under cpu_torch_as_cuda

    def floor(calls):
        for _ in range(calls):
            s = streams.get(raw(0)) or cs_of(raw(0))
            pack3(buf, 0, x.data_ptr(), y.data_ptr(), z.data_ptr())
            noop(1, 1, 1, 1, 256, 1, 1, 0, s, 0, 0)

    def floor_alloc(calls, shape=(n,), stride=(1,), dt=torch.float32):
        for _ in range(calls):
            s = streams.get(raw(0)) or cs_of(raw(0))
            o = empty_strided(shape, stride, dt)
            pack3(buf, 0, x.data_ptr(), y.data_ptr(), o.data_ptr())
            noop(1, 1, 1, 1, 256, 1, 1, 0, s, 0, 0)

    def loop(fn, *args):
        def run(calls):
            for _ in range(calls):
                fn(*args)
        return run

    def alternating(calls):
        for _ in range(calls // 2):
            launcher(x, y)
            launcher(x2, y2)

    runs = {
        "no-op launch (11 args), alone": loop(noop, 1, 1, 1, 1, 256, 1, 1, 0, 0, 0, 0),
        "floor: 3 data_ptr + stream + pack + no-op launch": floor,
        "floor + output allocation (_empty_strided)": floor_alloc,
        "ptxdsl launcher(x, y, out)": loop(launcher, x, y, z),
        "ptxdsl launcher(x, y) allocates": loop(launcher, x, y),
        "ptxdsl kernel(x, y, out)": loop(k, x, y, z),
        "ptxdsl kernel(x, y) allocates": loop(k, x, y),
        "ptxdsl launcher(x, x) allocates (aliased inputs)": loop(launcher, x, x),
        "ptxdsl launcher, two shapes alternating, allocates": alternating,
    }
    h2h = lo.head_to_head(runs, a.calls, a.repeats, nothing)
    slow = launcher.slow_calls - slow_before
    if slow:
        lo.NOTES.append(f"{slow} general-path calls while timing: the fast path was missed")

    lo.log("\nbuilding blocks (us per call):")
    mc, mr = max(a.calls, 20000), a.repeats
    entry_all = launcher.entries.get(launcher._g["KEY_ALL"]((x, y, z)))
    entry_in = launcher.entries.get(launcher._g["KEY_IN"]((x, y)))
    lo.micro("x.data_ptr()", x.data_ptr, mc, mr)
    lo.micro("signature key of 3 tensors", lambda: launcher._g["KEY_ALL"]((x, y, z)), mc, mr)
    key = launcher._g["KEY_ALL"]((x, y, z))
    lo.micro("entries dict lookup of that key", lambda: launcher.entries.get(key), mc, mr)
    if entry_all is not None:
        lo.micro("entry guard of 3 tensors", lambda: entry_all[0](x, y, z), mc, mr)
    if entry_in is not None and entry_in[-1]:
        lo.micro("entry's output allocator", entry_in[-1][0], mc, mr)
    lo.micro("torch.empty_like(x)", lambda: torch.empty_like(x), mc, mr)
    lo.micro("threading.get_ident()", threading.get_ident, mc, mr)
    lo.micro("threading.Lock acquire+release (with)", lo._with_lock(), mc, mr)

    result = {"when": datetime.datetime.now().isoformat(timespec="seconds"),
              "device": "none (host only: fake driver, no-op launch)", "arch": "-",
              "versions": versions, "n": n, "calls": a.calls, "repeats": a.repeats,
              "results": h2h, "micro": lo.MICRO, "notes": lo.NOTES}
    os.makedirs(os.path.dirname(os.path.abspath(json_path)), exist_ok=True)
    with open(json_path, "w") as f:
        json.dump(result, f, indent=1, default=str)
    floor_us = h2h["floor: 3 data_ptr + stream + pack + no-op launch"]["median_us"]
    floor_alloc_us = h2h["floor + output allocation (_empty_strided)"]["median_us"]
    print(f"\nHost-only fast path (no GPU), N={n}: ns per call, and above the floor "
          f"(the same work written by hand)")
    w = max(len(name) for name in h2h)
    print(f"{'contender'.ljust(w)}  {'median':>7}  {'min':>7}  {'above floor':>11}")
    print(f"{'-' * w}  {'-' * 7}  {'-' * 7}  {'-' * 11}")
    for name, r in h2h.items():
        ref = None if "ptxdsl" not in name else floor_alloc_us if "allocat" in name \
            else floor_us
        extra = f"{(r['median_us'] - ref) * 1e3:+11.0f}" if ref is not None else ""
        print(f"{name.ljust(w)}  {r['median_us'] * 1e3:7.0f}  {r['min_us'] * 1e3:7.0f}  {extra}")
    if lo.NOTES:
        print("notes: " + "; ".join(lo.NOTES))
    print(f"JSON: {json_path}")
    return 0 if not slow else 1
