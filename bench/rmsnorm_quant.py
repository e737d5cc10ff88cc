"""RMSNorm with FP8 output (``rms_norm_quant``) and with Gemma's ``offset``, side by side in
one run on the current GPU, against ``torch.compile`` of the same math and a device copy
of the same bytes.

Sections (``--kinds``, default all):

* ``quant``: dynamic per-row scale, ``y = e4m3((x * rstd * w) / scale)`` with
  ``scale = max(max|y| / 448, 1/(448*512))`` per row;
* ``quant_res``: the same with the residual added first and written back in place
  (vLLM's fused-add form);
* ``quant_static``: a given scale (a one-element f32 tensor), no max;
* ``offset_fwd`` / ``offset_bwd``: ``y = x * rstd * (1 + w)`` forward and backward
  (the backward timed alone, as ``bench/rmsnorm.py`` times it).

Every contender is validated against float64 before it is timed (FP8 outputs: each value
within e4m3 rounding of the exact answer divided by the scale). TB/s counts the bytes each kernel must
move once: x (and the residual) read, the FP8 bytes and the scales (and the residual)
written; the copy moves that many bytes (half read, half written), timed in the same
interleaved rounds (``bench/rmsnorm.py``'s ``_measure``: best median of each contender,
L2-beating input rotation, two passes on fresh allocations). The table prints TB/s beside
the time and ``%copy`` = copy time / ptxdsl time.

    python bench/rmsnorm_quant.py [--kinds quant,quant_res,quant_static,offset_fwd,offset_bwd]
        [--dtypes bf16,f32] [--shapes 2048x8192,...] [--quick] [--json PATH]
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from bench.rmsnorm import (EPS, _AutogradBackward, _best_of, _copies, _fresh_compile_state,  # noqa: E402
                           _host_probe, _measure, _release, _warm_for, _warm_up_gpu,
                           print_table)

FP8_MAX = 448.0
MIN_SCALE = 1.0 / (448.0 * 512.0)
OFFSET = 1.0  # Gemma
SHAPES = [(2048, 8192), (4096, 4096), (8192, 8192), (16384, 4096), (32768, 1024),
          (4096, 7168), (1024, 16384), (32768, 4096), (32768, 8192), (4096, 32768),
          (1, 8192), (7, 4096)]
KINDS = ("quant", "quant_res", "quant_static", "offset_fwd", "offset_bwd")


def _torch():
    import torch
    return torch


# ---------------------------------------------------------------- the same math, compiled
def quant_math(x, w, scale=None):
    """What rms_norm_quant computes, in torch (dynamic scale when ``scale`` is None)."""
    torch = _torch()
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS) * w.float()
    if scale is None:
        scale = (y.abs().amax(-1, keepdim=True) / FP8_MAX).clamp_min(MIN_SCALE)
    q = (y * (1.0 / scale)).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q, scale


def quant_res_math(x, r, w):
    """The fused-add form: h = x + r written back into r, then quant_math(h)."""
    h = x + r
    r.copy_(h)
    return quant_math(h, w)


def offset_math(x, w):
    torch = _torch()
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS)
            * (OFFSET + w.float())).to(x.dtype)


def _compiled(fn):
    return _torch().compile(fn, dynamic=False)


def _compiled_rounding(fn, args):
    """``torch.compile(fn)``, compiled (by one call on a copy of ``args``) with Inductor
    rounding every half-precision intermediate as eager torch does
    (``emulate_precision_casts``): without it, the fused-add form normalises the f32 sum
    x + r instead of the bf16 h it writes back, and fails the float64 check (H100,
    torch 2.11). Later calls run the graph compiled here."""
    import importlib
    compiled = _compiled(fn)
    try:
        cfg = importlib.import_module("torch._inductor.config")
    except ImportError:
        return compiled
    if not hasattr(cfg, "emulate_precision_casts"):
        return compiled
    with cfg.patch(emulate_precision_casts=True):
        compiled(*[a.clone() for a in args])
    return compiled


# ---------------------------------------------------------------- checks
def ref64(h, w, offset=0.0):
    torch = _torch()
    h64 = h.double()
    return h64 * torch.rsqrt((h64 * h64).mean(-1, keepdim=True) + EPS) * (offset + w.double())


def fp8_ok(out, want, scale_given=None) -> bool:
    """Each dequantised value within e4m3 rounding of the float64 answer (half the e4m3
    spacing at ``want / scale``, with f32 slack; 448 where that saturates); a dynamic
    scale within f32 error of max|y| / 448."""
    torch = _torch()
    q, scale = out
    s = (scale if scale_given is None else scale_given).double()
    v = want / s
    a = v.abs().clamp_min(2.0 ** -6)
    bound = torch.exp2(torch.floor(torch.log2(a)) - 3) / 2 + v.abs() * 1e-5 + 1e-30
    err = (q.double() - v.clamp(-FP8_MAX, FP8_MAX)).abs()
    if not bool((err <= bound).all()):
        return False
    if scale_given is None:
        top = want.abs().amax(-1, keepdim=True)
        expect = (top / FP8_MAX).clamp_min(MIN_SCALE)
        return float(((scale.double() - expect).abs() / expect).max()) <= 1e-5
    return True


def _close(out, want) -> float:
    return float((out.double() - want).abs().max() / want.abs().max().clamp_min(1e-30))


# ---------------------------------------------------------------- one shape
def _with_copy(contenders, sets, nbytes):
    """A device copy moving ``nbytes`` (half read, half written), one buffer pair per
    input set, made outside the timing."""
    torch = _torch()
    half = max(1, nbytes // 2)
    bufs = {id(s[0]): (torch.empty(half, dtype=torch.uint8, device="cuda"),
                       torch.empty(half, dtype=torch.uint8, device="cuda")) for s in sets}

    def copy(*args):
        a, b = bufs[id(args[0])]
        return b.copy_(a)
    return {"copy": copy, **contenders}


def bench_quant(shape, dtype, l2, rounds, variant):
    """One shape of a quant variant: ``quant``, ``quant_res`` or ``quant_static``."""
    torch = _torch()
    from ptxdsl.ops import rms_norm_quant
    _fresh_compile_state()
    m, n = shape
    es = dtype.itemsize
    res = variant == "quant_res"
    static = variant == "quant_static"
    moved = m * n * (es + 1) + n * es + (m * n * es * 2 if res else 0) + (0 if static else 4 * m)
    g = torch.Generator(device="cuda").manual_seed(m * 131 + n)
    w = (torch.randn(n, device="cuda", generator=g) * 0.5 + 1).to(dtype)
    sets = []
    for _ in range(_copies(moved, l2)):
        x = torch.randn(m, n, device="cuda", generator=g).to(dtype)
        if res:
            sets.append((x, torch.randn(m, n, device="cuda", generator=g).to(dtype), w))
        else:
            sets.append((x, w))
    s_t = None
    if static:  # the largest |y| of the first set maps to 448: no value saturates
        s_t = (ref64(sets[0][0], w).abs().max() / FP8_MAX).float().reshape(1)
    contenders = {}
    if res:
        contenders["ptxdsl"] = lambda x, r, w: rms_norm_quant(x, w, EPS, residual=r)
        contenders["torch.compile"] = _compiled_rounding(quant_res_math, sets[0])
        contenders["eager"] = quant_res_math
    elif static:
        contenders["ptxdsl"] = lambda x, w: rms_norm_quant(x, w, EPS, scale=s_t)
        compiled = _compiled(quant_math)
        contenders["torch.compile"] = lambda x, w: compiled(x, w, s_t)
        contenders["eager"] = lambda x, w: quant_math(x, w, s_t)
    else:
        contenders["ptxdsl"] = lambda x, w: rms_norm_quant(x, w, EPS)
        contenders["torch.compile"] = _compiled(quant_math)
        contenders["eager"] = quant_math

    if res:
        # A call adds x into r (in place), so _measure's check call cannot know the h it
        # normalised: each contender is checked here first, on a private copy of r (this
        # call also compiles), and replaced by an error if it is wrong.
        x0, r0, _ = sets[0]
        for name, fn in list(contenders.items()):
            r1 = r0.clone()
            h = (x0.float() + r1.float()).to(dtype)
            try:
                out = fn(x0, r1, w)
            except Exception:  # noqa: BLE001 - _measure reports it as an error cell
                continue
            if not (torch.equal(r1, h) and fp8_ok(out, ref64(h, w))):
                contenders[name] = _wrong(name)
        ok = None
    else:
        want = ref64(sets[0][0], w)

        def ok(out):
            return fp8_ok(out, want, s_t)
    row = _measure(_with_copy(contenders, sets, moved), sets, ok, iters=50, rounds=rounds,
                   warm=_warm_for(moved))
    for v in row.values():
        if "us" in v:
            v["tbps"] = moved / v["us"] / 1e6
    return row


def _wrong(name):
    def fail(*a):
        raise RuntimeError(f"{name}: wrong result against the float64 reference")
    return fail


def bench_offset_fwd(shape, dtype, l2, rounds):
    torch = _torch()
    from ptxdsl.ops import rms_norm
    _fresh_compile_state()
    m, n = shape
    nbytes = m * n * dtype.itemsize
    g = torch.Generator(device="cuda").manual_seed(m * 17 + n)
    w = (torch.randn(n, device="cuda", generator=g) * 0.1).to(dtype)
    sets = [(torch.randn(m, n, device="cuda", generator=g).to(dtype), w)
            for _ in range(_copies(2 * nbytes, l2))]
    want = ref64(sets[0][0], w, OFFSET)
    tol = 2e-6 if dtype == torch.float32 else 1e-2
    contenders = {"ptxdsl": lambda x, w: rms_norm(x, w, EPS, offset=OFFSET),
                  "torch.compile": _compiled(offset_math), "eager": offset_math}
    moved = 2 * nbytes + n * dtype.itemsize
    row = _measure(_with_copy(contenders, sets, moved), sets,
                   lambda out: _close(out, want) <= tol, iters=50, rounds=rounds,
                   warm=_warm_for(moved))
    for v in row.values():
        if "us" in v:
            v["tbps"] = moved / v["us"] / 1e6
    return row


def bench_offset_bwd(shape, dtype, l2, rounds):
    torch = _torch()
    from ptxdsl.ops import rms_norm_backward
    _fresh_compile_state()
    m, n = shape
    nbytes = m * n * dtype.itemsize
    g = torch.Generator(device="cuda").manual_seed(m * 19 + n)
    w = (torch.randn(n, device="cuda", generator=g) * 0.1).to(dtype)
    sets = []
    for _ in range(_copies(3 * nbytes, l2)):
        x = torch.randn(m, n, device="cuda", generator=g).to(dtype)
        dy = torch.randn(m, n, device="cuda", generator=g).to(dtype)
        sets.append((dy, x, w, torch.rsqrt((x.float() ** 2).mean(-1) + EPS)))
    dy, x, _, _ = sets[0]
    x64, w64 = x.double().requires_grad_(), w.double().requires_grad_()
    ref64(x64, w64, OFFSET).backward(dy.double())
    tol = 2e-5 if dtype == torch.float32 else 2e-2

    def ok(out):
        dx, dw = out
        return _close(dx, x64.grad) <= tol and _close(dw, w64.grad) <= tol * 10
    contenders = {
        "ptxdsl": lambda dy, x, w, rstd: rms_norm_backward(dy, x, w, rstd, offset=OFFSET),
        "torch.compile": _AutogradBackward(_compiled(offset_math)),
        "eager": _AutogradBackward(offset_math)}
    moved = 3 * nbytes + 2 * n * dtype.itemsize
    row = _measure(_with_copy(contenders, sets, moved), sets, ok, iters=30, rounds=rounds,
                   warm=_warm_for(moved))
    for v in row.values():
        if "us" in v:
            v["tbps"] = moved / v["us"] / 1e6
    return row


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--dtypes", default="bf16,f32")
    ap.add_argument("--quick", action="store_true", help="2048x8192 and 4096x4096 only")
    ap.add_argument("--shapes", default=None, help="e.g. 2048x8192,32768x4096")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    torch = _torch()
    kinds = [k for k in a.kinds.split(",") if k]
    bad = set(kinds) - set(KINDS)
    if bad:
        ap.error(f"unknown kinds {sorted(bad)}; choose from {', '.join(KINDS)}")
    dev = torch.cuda.get_device_properties(0)
    l2 = getattr(dev, "L2_cache_size", 50 << 20)
    names = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
    shapes = SHAPES[:2] if a.quick else SHAPES
    if a.shapes:
        shapes = [tuple(int(v) for v in s.split("x")) for s in a.shapes.split(",")]
    _warm_up_gpu()
    result = {"device": dev.name, "date": datetime.date.today().isoformat(),
              "torch": torch.__version__, "host_probe_us": _host_probe(),
              "rounds": a.rounds, "passes": a.passes, **{k: [] for k in kinds}}
    runs: dict = {}
    for pas in range(a.passes):
        for dn in a.dtypes.split(","):
            dt = names[dn]
            for kind in kinds:
                for sh in shapes:
                    if kind.startswith("quant"):
                        row = bench_quant(sh, dt, l2, a.rounds, kind)
                    elif kind == "offset_fwd":
                        row = bench_offset_fwd(sh, dt, l2, a.rounds)
                    else:
                        row = bench_offset_bwd(sh, dt, l2, a.rounds)
                    _release()
                    runs.setdefault((kind, dn, sh), []).append(row)
                    print(f"pass {pas + 1} {kind} {dn} {sh}: " + ", ".join(
                        f"{k}={v['us']:.1f}" if "us" in v else f"{k}=ERR"
                        for k, v in row.items()), flush=True)
    for (kind, dn, sh), rows in runs.items():
        result[kind].append({"shape": list(sh), "dtype": dn, "results": _best_of(rows)})
    path = a.json or os.path.join(os.environ.get("OUT", "."), "rmsnorm_quant.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    print_table(result, kinds=tuple(kinds), title="RMSNorm FP8 / offset")
    return result


if __name__ == "__main__":
    main()
