"""The PTX of every RMSNorm kernel the plans choose, as a manifest to compare across a
refactoring of the plans: ``{key: sha256 of the kernel's .ptx()}``.

A key names one call of a plan entry point (``forward``, ``backward`` (and its dW
reduction where unfused), ``quant``): the device (the interpreter's default, or the
H100/H200 stand-ins of tests/hopper_devices.py), the dtypes, ``m`` x ``n``, the chunk
width and the options. The N grid runs from 1 to 1M elements through every plan
boundary; M through the few-rows and many-rows switches of each device.

No GPU is needed: ptxas answers the register questions (its answers are kept in a
cache file, keyed by the PTX), and the driver's occupancy calculator, which the plans
ask on a GPU, is replaced by a fixed model of Hopper's limits from those answers (the
same model on both sides of a comparison, so only the plans' choices count).

    PYTHONPATH=. python lab/ptx_manifest_rmsnorm.py --out after.json
    PYTHONPATH=. python lab/ptx_manifest_rmsnorm.py --compare before.json after.json
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

from hopper_devices import H100, H200  # noqa: E402

import ptxdsl.runtime as runtime  # noqa: E402
import ptxdsl.kernel  # noqa: E402,F401
kernel_mod = sys.modules["ptxdsl.kernel"]
from ptxdsl import toolchain  # noqa: E402
from ptxdsl.core.types import bf16, f16, f32  # noqa: E402
from ptxdsl.ops.rmsnorm import plan  # noqa: E402
from ptxdsl.ops.rmsnorm.fwd import max_vec  # noqa: E402

DEVICES = {"interp": (None, 2), "H100": (H100, 132), "H200": (H200, 132)}
DTYPES = {"f32": f32, "f16": f16, "bf16": bf16}
# f16 plans as bf16 does (the plans read a dtype's size): swept at the option sizes only

# Row lengths: tiny and odd rows, the short-row lane groups, the thread-count steps,
# the register / loop / two-pass / cluster / wide-slice / ring boundaries of every
# element size (n, and n + 8: the next row of 16-byte chunks past it), odd sizes, to 1M.
N_GRID = sorted({
    1, 33, 257, 1000, 1001, 1024, 2048, 4096, 8192, 12288, 16384, 16392, 20000, 32768,
    32776, 65536, 65544, 98312, 131072, 131080, 196616, 262144, 262152, 393216, 400000,
    524288, 524296, 1048576})
# Options of the wider sweeps (the other calls take the plain variant).
OPTION_N = (1000, 16384, 131072, 262144)


def m_grid(n: int, sms: int) -> list[int]:
    """Row counts for rows of ``n``: few (a grid cut to a power of two) and many; the
    forward loop's rows-per-CTA limit (one CTA per SM) where the loop may run (rows of
    4096 to 65536 elements); the backward's many-rows switch for short rows; one row at
    the option sizes."""
    ms = {3, 192 * sms}
    if 4096 <= n <= 65536:
        ms |= {8 * sms, 8 * sms + 1}
    if n <= 4096:
        ms.add(192 * sms - 1)
    if n in OPTION_N:
        ms.add(1)
    return sorted(ms)


# ------------------------------------------------------------------ ptxas and occupancy
_RES_FILE = os.environ.get("PTX_MANIFEST_CACHE", "/tmp/ptx_manifest_rmsnorm_resources.json")
_RES: dict = {}
_RES_NEW = [0]
_real_resources = kernel_mod.Kernel.resources


def _resources(self, arch=None):
    """ptxas' answer for this kernel, from the cache file where it was asked before."""
    mine = self.__dict__.get("_manifest_resources")
    if mine is not None and mine[0] == arch:
        return mine[1]
    r = _cached_resources(self, arch)
    self.__dict__["_manifest_resources"] = (arch, r)
    return r


def _cached_resources(self, arch):
    key = hashlib.sha256((self.ptx(arch) + "\0" + self.name).encode()).hexdigest()
    hit = _RES.get(key)
    if hit is None:
        try:
            r = _real_resources(self, arch)
        except toolchain.ToolchainError as e:
            _RES[key] = {"error": str(e)}
            _RES_NEW[0] += 1
            raise
        hit = _RES[key] = dict(vars(r))
        _RES_NEW[0] += 1
    if "error" in hit:
        raise toolchain.ToolchainError(hit["error"])
    return toolchain.Resources(**hit)


class _Occupancy:
    """The occupancy calculator's answers by Hopper's limits (2048 threads, 64K registers
    in 8-register steps, 32 CTAs and 228 KiB of shared memory per SM, 1 KiB reserved per
    CTA) for the device under test; clusters: whole clusters of a GPC of 18 SMs."""
    sms = 132

    def __init__(self, k):
        self.k = k

    def _per_sm(self, smem):
        r = self.k.resources()
        block = self.k.block[0] * self.k.block[1] * self.k.block[2]
        regs = -(-max(1, r.registers) // 8) * 8
        per = min(32, 2048 // block, 65536 // (block * regs))
        return min(per, 228 * 1024 // (r.shared + smem + 1024))

    def _smem(self, smem):
        return int(self.k.dynamic_shared or 0) if smem is None else smem

    def resident_ctas(self, ordinal, smem=None):
        return self._per_sm(self._smem(smem)) * self.sms

    def resident_clusters(self, ordinal, smem=None):
        c = self.k.cluster[0] if self.k.cluster else 1
        per_gpc = 18 * self._per_sm(self._smem(smem)) // c
        return per_gpc * (self.sms // 18) + (self.sms % 18) * self._per_sm(self._smem(smem)) // c


def _prepare(k, *a, **kw):
    return _Occupancy(k)


def install_stand_ins():
    """ptxas answers through the cache file; the driver's occupancy by :class:`_Occupancy`."""
    if os.path.exists(_RES_FILE):
        with open(_RES_FILE) as f:
            _RES.update(json.load(f))
    kernel_mod.Kernel.resources = _resources
    runtime.prepare = _prepare


def save_cache():
    if _RES_NEW[0]:
        tmp = _RES_FILE + ".tmp"
        with open(tmp, "w") as f:
            json.dump(_RES, f)
        os.replace(tmp, _RES_FILE)


# ------------------------------------------------------------------ the plans' entry points
# (adapters: the one place to follow a renamed plan API)
def forward(n, dt, wdt, vec, residual, rstd, offset, info, sms, m):
    return [plan.forward_kernel(n, dt, wdt, vec, residual, rstd, 1e-6, "sm_90a", sms, info,
                                offset, m=m)]


def backward(n, dt, wdt, vec, offset, info, sms, m):
    p, k = plan.backward_kernel(n, dt, wdt, vec, "sm_90a", sms, info, offset, m=m)
    ks = [k]
    if not p.fused:
        ks.append(plan.dw_reduce_kernel(n, wdt, p.grid, k.arch))
    return ks


def quant(n, dt, wdt, vec, residual, dynamic, offset):
    return [plan.quant_kernel(n, dt, wdt, vec, residual, dynamic, 1e-6, offset, "sm_90a")]


# ------------------------------------------------------------------ the sweep
def calls(quick=False):
    """(key, thunk) for every call of the sweep."""
    ns = N_GRID if not quick else OPTION_N
    if os.environ.get("PTX_MANIFEST_N"):  # a subset, for a quick look
        ns = [int(v) for v in os.environ["PTX_MANIFEST_N"].split(",")]
    for dev, (info, sms) in DEVICES.items():
        for dname, dt in DTYPES.items():
            wdts = [dt] if dt is f32 else [dt, f32]
            for n in ns:
                if dname == "f16" and n not in OPTION_N:
                    continue
                vecs = sorted({max_vec(n, dt), 1}, reverse=True)
                opt = n in OPTION_N
                for wdt in wdts:
                    for vec in vecs:
                        if (wdt is not dt or vec == 1) and not opt:
                            continue
                        base = f"{dev}/{dname}/w{wdt.name}/n{n}/v{vec}"
                        fopts = ([(False, False, 0.0), (False, True, 0.0), (True, False, 0.0),
                                  (True, True, 0.0), (False, True, 1.0), (True, False, 1.0)]
                                 if opt and wdt is dt and vec > 1 else [(False, True, 0.0)])
                        for m in m_grid(n, sms):
                            for res, rstd, off in (fopts if m in (3, 192 * sms) else fopts[:1]):
                                yield (f"fwd/{base}/m{m}/res{int(res)}/rstd{int(rstd)}/off{off}",
                                       lambda n=n, dt=dt, wdt=wdt, vec=vec, res=res, rstd=rstd,
                                       off=off, m=m: forward(n, dt, wdt, vec, res, rstd, off,
                                                             info, sms, m))
                            for off in ((0.0, 1.0) if opt and vec > 1 and m == 3 else (0.0,)):
                                yield (f"bwd/{base}/m{m}/off{off}",
                                       lambda n=n, dt=dt, wdt=wdt, vec=vec, off=off, m=m:
                                       backward(n, dt, wdt, vec, off, info, sms, m))
                        if dev == "interp":  # quant asks no device
                            qopts = ([(r, d, o) for r in (False, True) for d in (True, False)
                                      for o in (0.0, 1.0)] if opt and wdt is dt and vec > 1
                                     else [(False, True, 0.0), (False, False, 0.0)])
                            for res, dyn, off in qopts:
                                yield (f"quant/any/{dname}/w{wdt.name}/n{n}/v{vec}"
                                       f"/res{int(res)}/{'dynamic' if dyn else 'static'}/off{off}",
                                       lambda n=n, dt=dt, wdt=wdt, vec=vec, res=res, dyn=dyn,
                                       off=off: quant(n, dt, wdt, vec, res, dyn, off))


def manifest(quick=False, verbose=False):
    out, hashes, t0 = {}, {}, time.time()
    for i, (key, thunk) in enumerate(calls(quick)):
        try:
            ks = thunk()
        except Exception as e:  # noqa: BLE001 - a refusal is part of the manifest
            out[key] = f"error: {type(e).__name__}: {e}"
            continue
        hs = []
        for k in ks:
            h = hashes.get(id(k))
            if h is None:
                h = hashes[id(k)] = (k, hashlib.sha256(k.ptx().encode()).hexdigest())
            hs.append(h[1])
        out[key] = " ".join(hs)
        if verbose and i % 500 == 0:
            print(f"{i} calls, {len(hashes)} kernels, {time.time() - t0:.0f} s", flush=True)
            save_cache()
    return out


def compare(a: dict, b: dict) -> int:
    keys = set(a) | set(b)
    diff = sorted(k for k in keys if a.get(k) != b.get(k))
    kernels = {h for v in a.values() if not v.startswith("error") for h in v.split()}
    print(f"{len(a)} keys before, {len(b)} after; {len(kernels)} distinct kernels before; "
          f"{len(diff)} keys differ")
    for k in diff[:40]:
        print(f"  {k}: {a.get(k)} -> {b.get(k)}")
    return 1 if diff else 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="write the manifest JSON here")
    ap.add_argument("--quick", action="store_true", help="only the option sizes")
    ap.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"),
                    help="compare two manifests (exit 1 where they differ)")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    if args.compare:
        with open(args.compare[0]) as f, open(args.compare[1]) as g:
            return compare(json.load(f), json.load(g))
    install_stand_ins()
    try:
        out = manifest(args.quick, args.verbose)
    finally:
        save_cache()
    kernels = {h for v in out.values() if not v.startswith("error") for h in v.split()}
    print(f"{len(out)} keys, {len(kernels)} distinct kernels, "
          f"{sum(v.startswith('error') for v in out.values())} refusals")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=0, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
