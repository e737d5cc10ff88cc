"""``Plan.uniform_cons`` against the plans the GEMM runs now (issue #50): the consumer
warpgroup index taken from lane 0 through ``shfl.sync.idx``, so ptxas keeps A's wgmma
descriptors (offset by the consumer's 64 rows of the stage) in uniform registers instead
of moving them there (``R2UR``, two per wgmma) before every wgmma of the main loop.

Per case of :data:`CASES` (bf16 ``x @ W.T`` and ``a @ b``, fp8 per tensor, fp8
block-wise), ``current`` is the plan ``ptxdsl.ops.matmul`` picks (``plan.choose``,
``plan.for_majors``, ``plan.for_scaling``) without ``uniform_cons`` and ``uc`` it with
``uniform_cons=True``.

``--sass`` (CPU only): assemble both kernels of every case with ptxas, find the main loop
(the innermost predicated back edge whose body issues wgmmas) in the SASS and count its
instructions, wgmmas (``HGMMA`` / ``QGMMA``), ``R2UR`` and other uniform-datapath
instructions per iteration; ptxas -v registers, spills and warnings beside. Writes
``$OUT/matmul_uniform_sass.json``.

Default (GPU): each contender is validated before it is timed (at the timed shape against
a float64 product of the same inputs, 512 rows of it for fp8, output prefilled with NaN,
and at a ragged shape: 379 x 1000 x 528 bf16, 380 x 1000 x 528 fp8), then each case's
contenders (``current``, ``uc``, cuBLAS in the same mode: ``torch.matmul``,
``torch._scaled_mm`` per tensor or block-wise) take turns in ``bench.matmul.timed_rounds``
slices. Writes ``$OUT/matmul_uniform.json`` after every case; about 100 s on an H200.

``--grouped`` (GPU): the grouped GEMM (``ptxdsl.ops.grouped_matmul``, bf16, experts'
weights as the K-major transpose view, ragged tokens per expert with one empty expert,
``bench/matmul_grouped.py``'s sets) at the MoE shapes of :data:`GROUPED`: ``current``
(``grouped.plan_for``'s plan), ``uc`` (it with ``uniform_cons``) and
``torch._grouped_mm``, each validated against the float64 product per group, then timed
in turns. Writes ``$OUT/matmul_uniform_grouped.json`` after every shape; an estimated
60 s on an H200 (not yet run; the float64 references take most). ``--sass`` covers the
grouped kernels of those shapes too (both B majors, fp8).

    PYTHONPATH=. python lab/matmul_uniform.py --sass
    PYTHONPATH=. python lab/matmul_uniform.py
    PYTHONPATH=. python lab/matmul_uniform.py --grouped
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

LIN, NN = "linear", "nn"
# (dtype, M, N, K, layouts, scales)
CASES = [("bf16", 4096, 4096, 4096, (LIN, NN), None),
         ("bf16", 128, 8192, 8192, (NN, LIN), None),
         ("bf16", 1024, 14336, 4096, (LIN, NN), None),
         ("bf16", 128, 6144, 4096, (NN, LIN), None),
         ("e4m3", 4096, 4096, 4096, (LIN,), "tensor"),
         ("e4m3", 4096, 7168, 16384, (LIN,), "block")]
# Grouped (G, N, K, lo, hi) of bench/matmul_grouped.py: 128 x 128 tiles (N < 4096) over many
# small experts, the same at K = 7168, and 128 x 256 tiles (DeepSeek-V3-like experts).
GROUPED = [(64, 1408, 2048, 64, 1024), (64, 2048, 7168, 64, 512), (16, 4096, 7168, 64, 2048)]


def plans(dt, m, n, k, layout, scaled, sms=132, device="H200"):
    """``{"current": Plan, "uc": Plan}``: the op's plan without and with ``uniform_cons``
    (the many-row plans take it since this lab's first run)."""
    from ptxdsl.core.types import bf16, e4m3
    from ptxdsl.ops.matmul.plan import choose, for_majors, for_scaling
    t = bf16 if dt == "bf16" else e4m3
    bm = "K" if layout == LIN else "MN"
    p = for_majors(choose(m, n, k, t, bf16, sms, device=device, b_major=bm), t, bf16, "K", bm)
    if scaled:      # block-wise: scale_a through the ring, as the op takes M % 4 == 0
        p = for_scaling(p, scaled, t, bf16, scaled == "block")
    return {"current": dataclasses.replace(p, uniform_cons=False),
            "uc": dataclasses.replace(p, uniform_cons=True)}


def build(p, dt, layout, scaled, sms=132):
    from ptxdsl.core.types import bf16, e4m3
    from ptxdsl.ops.matmul.hopper import build_hopper
    t = bf16 if dt == "bf16" else e4m3
    return build_hopper(p, t, bf16, sms=sms, b_major="K" if layout == LIN else "MN",
                        scaled=scaled or False)


def grouped_plans(dt, n):
    """``{"current": Plan, "uc": Plan}`` of the grouped kernel for N columns (its plan
    takes ``uniform_cons`` since this lab's first run)."""
    from ptxdsl.core.types import bf16, e4m3
    from ptxdsl.ops.matmul.grouped import plan_for
    p = plan_for(bf16 if dt == "bf16" else e4m3, bf16, n)
    return {"current": dataclasses.replace(p, uniform_cons=False),
            "uc": dataclasses.replace(p, uniform_cons=True)}


def sass_cases():
    """``(case name, {name: kernel builder})`` of every case ``--sass`` reads."""
    from ptxdsl.core.types import bf16, e4m3
    from ptxdsl.ops.matmul.hopper import build_hopper
    for dt, m, n, k, layouts, scaled in CASES:
        for lay in layouts:
            yield (f"{dt} {m}x{n}x{k} {lay}" + (f" {scaled}" if scaled else ""),
                   {name: (lambda p=p, lay=lay, dt=dt, scaled=scaled: build(p, dt, lay, scaled))
                    for name, p in plans(dt, m, n, k, lay, scaled).items()})
    for g, n, k, _, _ in GROUPED:
        for dt, lay, scaled in (("bf16", LIN, False), ("bf16", NN, False),
                                ("e4m3", LIN, "row")):
            t = bf16 if dt == "bf16" else e4m3
            yield (f"grouped {dt} G={g} N={n} K={k} {lay}" + (f" {scaled}" if scaled else ""),
                   {name: (lambda p=p, t=t, lay=lay, scaled=scaled: build_hopper(
                       p, t, bf16, sms=132, b_major="K" if lay == LIN else "MN",
                       scaled=scaled, grouped=True))
                    for name, p in grouped_plans(dt, n).items()})


# ---------------------------------------------------------------- SASS
_INST = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
_BRA = re.compile(r"\bBRA(?:\.\S+)?\s+0x([0-9a-f]+)")


def main_loops(sass: str) -> list[list[str]]:
    """The bodies of the innermost loops that issue wgmmas: a predicated branch back to an
    earlier address (an unconditional one is a spin-wait's out-of-line retry)."""
    ins = [(int(a, 16), t) for a, t in _INST.findall(sass)]
    spans = []
    for addr, text in ins:
        m = _BRA.search(text)
        if m and text.startswith("@") and int(m.group(1), 16) < addr:
            lo = int(m.group(1), 16)
            if any("GMMA" in t for a, t in ins if lo <= a <= addr):
                spans.append((lo, addr))
    inner = [s for s in spans if not any(o != s and s[0] <= o[0] and o[1] <= s[1]
                                         for o in spans)]
    return [[t for a, t in ins if lo <= a <= hi] for lo, hi in inner]


def loop_counts(body: list[str]) -> dict:
    ops = [re.sub(r"^@!?U?P\w+\s+", "", t).split()[0] for t in body]
    return {"instructions": len(ops), "wgmma": sum("GMMA" in o for o in ops),
            "R2UR": sum(o.startswith("R2UR") for o in ops),
            "S2UR": sum(o.startswith("S2UR") for o in ops),
            "uniform": sum(o.startswith("U") for o in ops)}


def sass_report() -> int:
    """CPU: the main-loop counts of every case's two kernels; 1 if ``uc`` spills, warns,
    or leaves more R2UR per wgmma than ``current``."""
    out, bad = [], 0
    for case, kernels in sass_cases():
        row = {"case": case}
        for name, make in kernels.items():
            kern = make()
            r, warns = kern.resources(), kern.check().warnings
            loops = [loop_counts(b) for b in main_loops(kern.sass())]
            row[name] = {"kernel": kern.name, "registers": r.registers,
                         "spills": r.spill_stores + r.spill_loads + r.local,
                         "warnings": [str(w) for w in warns], "loops": loops}
        cu, uc = row["current"], row["uc"]
        per = [max((lp["R2UR"] / lp["wgmma"] for lp in x["loops"]), default=0.0)
               for x in (cu, uc)]
        bad |= bool(uc["spills"] or uc["warnings"] or per[1] > per[0])
        out.append(row)
        print(row["case"], flush=True)
        for name in ("current", "uc"):
            x = row[name]
            print(f"  {name:8s} {x['kernel']}: regs {x['registers']}, spills "
                  f"{x['spills']}, warnings {len(x['warnings'])}; main loop " + "; ".join(
                      f"{lp['instructions']} instr, {lp['wgmma']} wgmma, {lp['R2UR']} "
                      f"R2UR, {lp['uniform']} uniform" for lp in x["loops"]), flush=True)
    path = os.path.join(os.environ.get("OUT", "."), "matmul_uniform_sass.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    return bad


# ---------------------------------------------------------------- GPU
def bf16_case(torch, m, n, k, layouts, l2, sms, cls, row, live, plan_rows, ragged):
    """Validate the bf16 contenders of one shape (both layouts): ``row``/``live``."""
    from bench.matmul import make_sets, rel_err, validate
    from lab.matmul_trailing import contender
    sets = make_sets(m, n, k, "both", l2)
    x, b, b_nn = sets[0]
    ref = x.double() @ b.double()
    ra, rw, rref = ragged
    for lay in layouts:
        sfx = "" if lay == LIN else " a@b"
        validate("cuBLAS" + sfx, (lambda x, b, b_nn: torch.matmul(x, b)) if lay == LIN else
                 (lambda x, b, b_nn: torch.matmul(x, b_nn)), sets[0], ref, row, live)
        for name, p in plans("bf16", m, n, k, lay, None, sms, cls).items():
            key = name + sfx
            plan_rows[key] = {f.name: getattr(p, f.name) for f in dataclasses.fields(p)}
            try:
                kern = build(p, "bf16", lay, None, sms)
                c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
                kern(x, b.t() if lay == LIN else b_nn, c)
                cr = torch.full((379, 1000), float("nan"), device="cuda", dtype=torch.bfloat16)
                kern(ra, rw if lay == LIN else rw.t().contiguous(), cr)
                torch.cuda.synchronize()
                e1, e2 = rel_err(c, ref), rel_err(cr, rref)
                if not (e1 < 1e-2 and e2 < 1e-2):
                    row[key] = {"error": f"err={e1:.3g} ragged={e2:.3g}"}
                    continue
                row[key] = {"err": e1}
                live[key] = contender(kern, lay, (m, n))
            except Exception as ex:  # noqa: BLE001 - reported in the table
                row[key] = {"error": f"{type(ex).__name__}: {str(ex)[:200]}"}
    return sets


def fp8_case(torch, m, n, k, scaled, l2, sms, cls, row, live, plan_rows, ragged):
    """Validate the fp8 contenders (``scaled``: "tensor" or "block") of one shape."""
    from bench.matmul import rel_err, validate
    from bench.matmul_fp8 import make_sets, torch_block_scale_b
    from lab.fp8_block_plans import picked, reference_rows
    from ptxdsl.runtime import prepare
    sets = make_sets(m, n, k, l2, mode=scaled)
    x, b, sa, sb = sets[0]
    bd, x64 = b.double(), picked(x, m)
    if scaled == "block":
        ref = reference_rows(x64, bd, picked(sa, m), sb)
        laid = torch_block_scale_b(sb)
        cub = lambda x, b, sa, sb: torch._scaled_mm(x, b, scale_a=sa, scale_b=laid,  # noqa
                                                    out_dtype=torch.bfloat16)
    else:
        ref = (x64 @ bd) * (float(sa) * float(sb))
        cub = lambda x, b, sa, sb: torch._scaled_mm(x, b, scale_a=sa, scale_b=sb,  # noqa
                                                    out_dtype=torch.bfloat16)
    del bd, x64
    view = lambda o: picked(o, m)  # noqa: E731
    validate("cuBLAS", cub, sets[0], ref, row, live, view=view)
    ra, rw, rsa, rsb, rref = ragged[scaled]
    for name, p in plans("e4m3", m, n, k, LIN, scaled, sms, cls).items():
        plan_rows[name] = {f.name: getattr(p, f.name) for f in dataclasses.fields(p)}
        try:
            kern = build(p, "e4m3", LIN, scaled, sms)
            cr = torch.full((380, 1000), float("nan"), device="cuda", dtype=torch.bfloat16)
            kern(ra, rw, rsa, rsb, cr)
            torch.cuda.synchronize()
            e2 = rel_err(cr, rref)
            if not e2 < 1e-2:
                row[name] = {"error": f"ragged 380x1000x528: relative error {e2:.3g}"}
                continue
            c0 = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            args = (lambda x, b, sa, sb, c: (x, b.t(), sa.t() if scaled == "block" else sa,
                                             sb, c))
            bound = prepare(kern).bind(*args(x, b, sa, sb, c0))

            def run(x, b, sa, sb, kern=kern, bound=bound, args=args):
                c = torch.empty(x.shape[0], b.shape[1], device="cuda", dtype=torch.bfloat16)
                if bound is None:
                    kern(*args(x, b, sa, sb, c))
                else:
                    bound(*(t.data_ptr() for t in args(x, b, sa, sb, c)))
                return c
            validate(name, run, sets[0], ref, row, live, view=view)
        except Exception as ex:  # noqa: BLE001
            row[name] = {"error": f"{type(ex).__name__}: {str(ex)[:200]}"}
    return sets


def fp8_ragged(torch):
    """380 x 1000 x 528 e4m3 operands and float64 references, per tensor and block-wise."""
    from lab.fp8_block_plans import reference_rows
    g = torch.Generator(device="cuda").manual_seed(3)
    ra = torch.randn(380, 528, device="cuda", generator=g).to(torch.float8_e4m3fn)
    rw = torch.randn(1000, 528, device="cuda", generator=g).to(torch.float8_e4m3fn)
    rsa = (2.0 ** torch.randint(-2, 2, (5, 380), device="cuda", generator=g)).float()
    rsb = (2.0 ** torch.randint(-2, 2, (5, 8), device="cuda", generator=g)).float()
    s1, s2 = torch.tensor([0.5], device="cuda"), torch.tensor([2.0], device="cuda")
    return {"block": (ra, rw, rsa, rsb, reference_rows(ra.double(), rw.t().double(),
                                                       rsa.t().double(), rsb)),
            "tensor": (ra, rw, s1, s2, ra.double() @ rw.double().t())}


def grouped_main(a) -> int:
    """GPU: ``current``, ``uc`` and ``torch._grouped_mm`` at each shape of :data:`GROUPED`,
    validated, then timed in turns (see the module docstring)."""
    import torch
    from bench.matmul import timed_rounds, validate, warm
    from bench.matmul_grouped import make_set, reference, sizes_for
    from lab.grouped_plans import contender
    props = torch.cuda.get_device_properties(0)
    path = os.path.join(os.environ.get("OUT", "."), "matmul_uniform_grouped.json")
    result = {"device": props.name, "sms": props.multi_processor_count,
              "torch": torch.__version__, "date": time.strftime("%Y-%m-%dT%H:%M"),
              "block_ms": a.block_ms, "rounds": a.rounds, "rows": []}
    t0 = time.time()
    warm(1.0)
    for g, n, k, lo, hi in GROUPED:
        sizes = sizes_for(g, lo, hi)
        s = make_set(g, n, k, sizes, torch.bfloat16)
        ref = reference(s[0], s[1], sizes)
        row, live, plan_rows = {}, {}, {}
        for name, p in grouped_plans("bf16", n).items():
            plan_rows[name] = {f.name: getattr(p, f.name) for f in dataclasses.fields(p)}
            fn, _ = contender({"uniform_cons": p.uniform_cons}, {})
            validate(name, fn, s, ref, row, live)
        if hasattr(torch, "_grouped_mm"):
            validate("torch._grouped_mm", lambda a, b, offs, sz: torch._grouped_mm(
                a, b, offs=offs), s, ref, row, live)
        del ref
        warm(0.2)
        timed_rounds(live, [s], a.rounds, a.block_ms, 2.0 * sum(sizes) * n * k, row)
        result["rows"].append({"shape": [g, n, k, lo, hi], "sizes": sizes, "results": row,
                               "plans": plan_rows})
        with open(path, "w") as f:      # after every shape: a run cut short keeps it
            json.dump(result, f, indent=1)
        tf = {nm: row.get(nm, {}).get("tflops") for nm in ("current", "uc", "torch._grouped_mm")}
        print(f"grouped G={g} N={n} K={k} ({time.time() - t0:.0f}s): " + ", ".join(
            f"{nm} {v:.0f}" if v else f"{nm} ERR {row.get(nm, {}).get('error', '?')[:80]}"
            for nm, v in tf.items())
            + (f"; uc/current {tf['uc'] / tf['current']:.3f}" if tf["uc"] and tf["current"]
               else "")
            + (f", uc/torch {tf['uc'] / tf['torch._grouped_mm']:.3f}, current/torch "
               f"{tf['current'] / tf['torch._grouped_mm']:.3f}"
               if tf["uc"] and tf["current"] and tf["torch._grouped_mm"] else ""), flush=True)
        del s
        torch.cuda.empty_cache()
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sass", action="store_true", help="CPU only: the main loops' SASS")
    ap.add_argument("--grouped", action="store_true", help="GPU: the grouped GEMM's plans")
    ap.add_argument("--block-ms", type=float, default=40.0)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args(argv)
    if a.sass:
        return sass_report()
    if a.grouped:
        return grouped_main(a)
    import torch
    from bench.matmul import timed_rounds, warm
    from ptxdsl.ops.matmul.plan import device_class
    from ptxdsl.runtime import driver
    props = torch.cuda.get_device_properties(0)
    sms, l2 = props.multi_processor_count, getattr(props, "L2_cache_size", 50 << 20)
    cls = device_class(driver.get().device(torch.cuda.current_device()))
    path = os.path.join(os.environ.get("OUT", "."), "matmul_uniform.json")
    result = {"device": props.name, "sms": sms, "class": cls, "torch": torch.__version__,
              "date": time.strftime("%Y-%m-%dT%H:%M"), "block_ms": a.block_ms,
              "rounds": a.rounds, "rows": []}
    g = torch.Generator(device="cuda").manual_seed(1)
    ra = torch.randn(379, 528, device="cuda", generator=g).to(torch.bfloat16)
    rw = torch.randn(1000, 528, device="cuda", generator=g).to(torch.bfloat16)
    ragged, ragged8 = (ra, rw, ra.double() @ rw.double().t()), fp8_ragged(torch)
    t0 = time.time()
    warm(1.0)
    for dt, m, n, k, layouts, scaled in CASES:
        row, live, plan_rows = {}, {}, {}
        if dt == "bf16":
            sets = bf16_case(torch, m, n, k, layouts, l2, sms, cls, row, live, plan_rows,
                             ragged)
        else:
            sets = fp8_case(torch, m, n, k, scaled, l2, sms, cls, row, live, plan_rows,
                            ragged8)
        warm(0.2)
        timed_rounds(live, sets, a.rounds, a.block_ms, 2.0 * m * n * k, row)
        result["rows"].append({"dtype": dt, "scales": scaled, "shape": [m, n, k],
                               "results": row, "plans": plan_rows})
        with open(path, "w") as f:      # after every case: a run cut short keeps it
            json.dump(result, f, indent=1)
        for lay in layouts:
            sfx = "" if lay == LIN else " a@b"
            res = {nm: row.get(nm + sfx, {}) for nm in ("cuBLAS", "current", "uc")}
            cub, cur = res["cuBLAS"].get("tflops"), res["current"].get("tflops")
            print(f"{dt}{' ' + scaled if scaled else ''} {m}x{n}x{k} {lay} "
                  f"({time.time() - t0:.0f}s): " + ", ".join(
                      f"{nm} {v['tflops']:.0f}" if "tflops" in v else
                      f"{nm} ERR {v.get('error', '?')[:80]}" for nm, v in res.items())
                  + (f"; uc/current {res['uc']['tflops'] / cur:.3f}"
                     if cur and "tflops" in res["uc"] else "")
                  + (f", current/cuBLAS {cur / cub:.3f}" if cur and cub else ""), flush=True)
        del sets
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
