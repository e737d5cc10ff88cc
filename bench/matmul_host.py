"""Host microseconds per ``ptxdsl.ops.matmul`` call, and where they go.

On a GPU (``python bench/matmul_host.py``): back-to-back calls of a tiny product (1 x 256
x 256, bf16) timed on the host, synchronised once per loop, for ``torch.matmul`` and
ptxdsl in both B layouts (``lin``: ``x @ w.T``; ``nn``: a row-major ``b``), and the
pieces of ptxdsl's call one by one: the output allocation, the signature key, the
kernel launched with pointers (no op layer), one ``cuTensorMapReplaceAddress``, one
``cuLaunchKernelEx`` and one ``cuLaunchKernel`` of the same cluster kernel. JSON to
``$OUT/matmul_host.json``.

Without a GPU (``--fake``): CPU torch tensors pose as cuda:0 tensors on a fake driver
whose launch does nothing (``tests/helpers/runtime_fakes``), and the op's Python path is timed
and profiled (``--profile``): ptxdsl's own Python, not the driver's.

    python bench/matmul_host.py [--calls N] [--repeats R] [--json PATH]
    python bench/matmul_host.py --fake [--profile]          # no GPU
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "helpers"))


def per_call(fn, calls=3000, repeats=5, sync=None) -> float:
    """Best over ``repeats`` of host us per call of ``calls`` back-to-back calls."""
    for _ in range(50):
        fn()
    if sync:
        sync()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        if sync:
            sync()
        best = min(best, (time.perf_counter() - t0) / calls * 1e6)
    return best


def fake_setup():
    """The fake GPU: a Hopper-looking device 0 whose launches do nothing, CPU torch as
    CUDA torch, and ops.matmul's frame told the tensors are on the GPU."""
    os.environ.setdefault("PTXDSL_CACHE_DIR", tempfile.mkdtemp(prefix="ptxdsl-mm-host-"))
    os.environ["PTXDSL_COMPILER"] = "jit"
    from runtime_fakes import cpu_torch_as_cuda, fake_driver
    from ptxdsl.runtime import adapter as fr
    from ptxdsl.ops.matmul import api
    from ptxdsl.runtime import driver as rdriver
    drv, cu = fake_driver()
    rdriver._driver, rdriver._driver_error = drv, None
    if not os.environ.get("FAKE_TMAP_SERIAL"):
        # the fake keeps an encode serial beside the address; without it the maps hold
        # only the address, and bound launches write it directly (FAKE_TMAP_SERIAL=1:
        # the cuTensorMapReplaceAddress path)
        import ctypes
        real = cu.cuTensorMapEncodeTiled

        def encode(*args):
            r = real(*args)
            if not r[0]:
                ctypes.c_uint64.from_address(r[1].ptr + 8).value = 0
            return r
        cu.cuTensorMapEncodeTiled = encode
    torch = cpu_torch_as_cuda()
    real_init = fr.Frame.__init__

    def init(self, x, op):
        real_init(self, x, op)
        self.cpu = False
    fr.Frame.__init__ = init
    real_hk = api.hopper_kernel

    def hopper_kernel(*a, **kw):
        k = real_hk(*a, **kw)
        cu.register(k)            # parameter types for the fake; no implementation
        return k
    api.hopper_kernel = hopper_kernel
    return torch, drv, cu


def fake_main(a) -> dict:
    torch, drv, cu = fake_setup()
    from ptxdsl.ops import matmul
    from ptxdsl.ops.matmul import api as mm_api
    x = torch.randn(1, 256).to(torch.bfloat16)
    w = torch.randn(256, 256).to(torch.bfloat16)
    out = {}
    ok = (cu.CUresult.CUDA_SUCCESS,)

    def noop(*args):
        return ok
    # the driver's launches do nothing (what is timed is ptxdsl's Python); the tensor
    # maps keep the real fake's encode and re-point
    cu.cuLaunchKernel = cu.cuLaunchKernelEx = noop
    for lay, b in (("lin", w.t()), ("nn", w)):
        matmul(x, b)
        matmul(x, b)
        assert mm_api.MATMUL.lookup(x, b, None, None, None, None, None) is not None, lay
    for lay, b in (("lin", w.t()), ("nn", w)):
        out[f"ptxdsl {lay}"] = per_call(lambda b=b: matmul(x, b), a.calls, a.repeats)
    out["torch.empty (1, 256)"] = per_call(
        lambda: torch.empty((1, 256), dtype=torch.bfloat16, device="cpu"), a.calls, a.repeats)
    args = (x, w, None, None, None, None, None)
    out["memo key"] = per_call(lambda: mm_api.MATMUL.key(args), a.calls, a.repeats)
    if a.profile:
        import cProfile
        import pstats
        pr = cProfile.Profile()
        pr.enable()
        for _ in range(20000):
            matmul(x, w.t())
        pr.disable()
        pstats.Stats(pr).sort_stats("tottime").print_stats(14)
    return out


def gpu_main(a) -> dict:
    import torch
    from ptxdsl.ops import matmul
    from ptxdsl.ops.matmul import api
    x = torch.randn(1, 256, device="cuda").to(torch.bfloat16)
    w = torch.randn(256, 256, device="cuda").to(torch.bfloat16)
    sync = torch.cuda.synchronize
    out = {"torch.matmul lin": per_call(lambda: torch.matmul(x, w.t()), a.calls, a.repeats,
                                        sync),
           "torch.matmul nn": per_call(lambda: torch.matmul(x, w), a.calls, a.repeats, sync)}
    for lay, b in (("lin", w.t()), ("nn", w)):
        c = matmul(x, b)
        assert torch.allclose(c.float(), (x.float() @ b.float()), rtol=2e-2, atol=2e-2), lay
        out[f"ptxdsl {lay}"] = per_call(lambda b=b: matmul(x, b), a.calls, a.repeats, sync)
        out[f"ptxdsl {lay} memo entry"] = api.MATMUL.key((x, b, None, None, None, None, None)) \
            in api.MATMUL.entries
    out["torch.empty (1, 256)"] = per_call(
        lambda: torch.empty((1, 256), dtype=torch.bfloat16, device="cuda"), a.calls, a.repeats)
    args = (x, w, None, None, None, None, None)
    out["memo key"] = per_call(lambda: api.MATMUL.key(args), a.calls, a.repeats)
    # the kernel itself, called with the tensors (the launcher's generated fast path)
    k = next(v for key, v in api.KERNELS._kernels.items() if key[0] == "hopper"
             and key[-1] == "MN")
    c = torch.empty(1, 256, device="cuda", dtype=torch.bfloat16)
    k(x, w, c)
    out["kernel(x, w, c) launcher fast path"] = per_call(lambda: k(x, w, c), a.calls,
                                                         a.repeats, sync)
    launcher = k.runtime_cache.get("launcher")
    drv = launcher.drv
    e = next(iter(launcher.entries.values()))
    tm = e.tmap_own[0]
    rep = drv.cu.cuTensorMapReplaceAddress
    p = x.data_ptr()
    out["cuTensorMapReplaceAddress"] = per_call(lambda: rep(tm, p), a.calls, a.repeats)
    kf = launcher.function(torch.cuda.current_device())
    cfg = drv._ex_config(e.grid, e.block, e.smem, 0, launcher.cluster or (1, 1, 1), False)
    s = drv.stream(0)
    ex = drv.cu.cuLaunchKernelEx
    params = e.params
    out["cuLaunchKernelEx"] = per_call(lambda: ex(cfg, kf.func, params, 0), a.calls,
                                       a.repeats, sync)
    lk = drv.cu.cuLaunchKernel
    gx, gy, gz = e.grid
    bx, by, bz = e.block
    try:   # the kernel carries .reqnctapercluster: a plain launch takes its cluster shape
        r = lk(kf.func, gx, gy, gz, bx, by, bz, e.smem, s, params, 0)
        sync()
        out["cuLaunchKernel result"] = str(r[0])
        if not int(r[0]):
            out["cuLaunchKernel"] = per_call(
                lambda: lk(kf.func, gx, gy, gz, bx, by, bz, e.smem, s, params, 0),
                a.calls, a.repeats, sync)
    except Exception as ex_:  # noqa: BLE001 - a report
        out["cuLaunchKernel result"] = f"{type(ex_).__name__}: {ex_}"
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fake", action="store_true", help="no GPU: fake driver, CPU torch")
    ap.add_argument("--profile", action="store_true", help="--fake: cProfile the op call")
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    res = fake_main(a) if a.fake else gpu_main(a)
    path = a.json or os.path.join(os.environ.get("OUT", "."),
                                  "matmul_host_fake.json" if a.fake else "matmul_host.json")
    import datetime
    import torch
    device = ("fake driver (CPU torch)" if a.fake
              else torch.cuda.get_device_name(torch.cuda.current_device()))
    with open(path, "w") as f:   # the docs' results tables read device, date and rows
        json.dump({"device": device, "date": datetime.date.today().isoformat(),
                   "torch": torch.__version__,
                   "rows": [{"piece": k, "host µs per call" if isinstance(v, float) else
                             "value": v} for k, v in res.items()]}, f, indent=1)
    width = max(len(k) for k in res)
    for k, v in res.items():
        print(f"{k:>{width}s}  " + (f"{v:8.2f} us" if isinstance(v, float) else str(v)))
    return res


if __name__ == "__main__":
    main()
