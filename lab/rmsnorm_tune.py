"""Try RMSNorm kernel schedules on the current GPU and print the fastest per shape.

Used to choose the defaults in ``ptxdsl/ops/rmsnorm/fwd.plan``,
``bwd.plan_backward`` and the choices of ``ptxdsl/ops/rmsnorm/plan.py`` (the
measurements: ``bench/results/rmsnorm_tune_h200.md``); it times kernels directly (no ops-layer host
work) with CUDA events over rotated inputs.

    python lab/rmsnorm_tune.py [--json PATH]
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from bench.rmsnorm import time_fn  # noqa: E402

FWD_SHAPES = [(2048, 8192, "f32"), (4096, 4096, "f32"), (8192, 8192, "f32"),
              (16384, 4096, "f32"), (32768, 1024, "f32"), (4096, 5120, "f32"),
              (4096, 7168, "f32"), (1024, 16384, "f32"), (4096, 1000, "f32"),
              (2048, 8192, "bf16"), (8192, 8192, "bf16"), (4096, 4096, "f16"),
              (32768, 1024, "f16"), (4096, 1000, "bf16")]
BWD_SHAPES = [(2048, 8192, "bf16")]


# Cache hints tried on the default plan (--mode hints): x loads x y stores.
X_HINTS = ((), ("cs",), ("lu",), ("nc",), ("L2::256B",), ("L1::no_allocate",))
Y_HINTS = ((), ("cs",))


def _row_kinds(n, dt, base, plan, *, late_w: bool):
    """(threads, name, plan) of the row-per-CTA kernels at every width: two-pass ("2p"),
    one-pass where the row fits in registers ("1p"), and with ``late_w`` one-pass with w
    loaded after the reduction (and the two-pass one's w late too)."""
    import dataclasses
    late = dict(preload_w=False, w_hints=("L1::evict_last",), w_policy="evict_last")
    out = []
    for t in (128, 256, 512, 1024):
        if t * base.vec > n * 2:
            continue
        p = plan(n, dt, threads=t)
        two = dataclasses.replace(p, two_pass=True, **(late if late_w else
                                                       dict(preload_w=False)))
        out.append((t, "2p", two))
        if p.per_thread * p.vec <= 32:
            out.append((t, "1p", dataclasses.replace(p, two_pass=False, preload_w=True)))
            if late_w:
                out.append((t, "1p late-w", dataclasses.replace(p, two_pass=False, **late)))
    return out


def _variants(mode, n, dt, base, plan, loop_ctas_per_sm, staging) -> dict:
    """name -> (plan, None | CTAs per SM of the loop kernel | Staging)."""
    import dataclasses
    variants = {f"T{base.threads}": (base, None)}
    if mode == "reload":
        # the two-pass plan as the device takes it (``base``: plan.wide_row_plan's), its
        # second read issued 1, 2, 4 or 8 chunks ahead of the stores, with its own hints
        # or Inductor's (x kept in L1 and L2 for the re-read, w kept, y plain)
        inductor = dict(x_hints=("L1::evict_last",),
                        w_hints=("L1::evict_last",), w_policy="evict_last", y_hints=())
        for batch in (1, 2, 4, 8):
            if not base.two_pass or batch > base.per_thread:
                continue
            p = dataclasses.replace(base, reload_batch=batch)
            variants[f"T{base.threads} batch{batch}"] = (p, None)
            variants[f"T{base.threads} batch{batch} inductor-hints"] = (
                dataclasses.replace(p, **inductor), None)
        return variants
    if mode == "hints":
        for xh in X_HINTS:
            for yh in Y_HINTS:
                variants[f"T{base.threads} x{'.'.join(xh) or '-'} y{'.'.join(yh) or '-'}"] = (
                    dataclasses.replace(base, x_hints=xh, y_hints=yh), None)
        # w's L2 priority on the one-pass kernel, and the two-pass schedule as Inductor
        # writes it (x kept for the re-read, w kept, y plain).
        plain = dataclasses.replace(base, x_hints=(), y_hints=())
        for name, kw in {
            "x:L1last": dict(x_hints=("L1::evict_last",)),
            "x:L1first": dict(x_hints=("L1::evict_first",)),
            "w:L1last+evict_last": dict(w_hints=("L1::evict_last",), w_policy="evict_last"),
            "reload inductor": dict(two_pass=True, preload_w=False,
                                    x_hints=("L1::evict_last",),
                                    w_hints=("L1::evict_last",), w_policy="evict_last"),
            "reload plain": dict(two_pass=True, preload_w=False),
        }.items():
            variants[f"T{base.threads} {name}"] = (dataclasses.replace(plain, **kw), None)
        return variants
    if mode == "store":
        # Cache priority of y's stores, on the default plan and (for halves) the
        # one-pass row of 256 threads.
        bases = {f"T{base.threads}": base}
        p256 = plan(n, dt, threads=256)
        if dt.bytes == 2 and p256.per_thread * p256.vec <= 32 and 256 * base.vec <= n * 2:
            bases["T256 one-pass"] = dataclasses.replace(p256, two_pass=False, preload_w=True)
            variants["T256 one-pass"] = (bases["T256 one-pass"], None)
        for bname, b in bases.items():
            for name, kw in {"y:cs": dict(y_hints=("cs",)),
                             "y:L1::no_allocate": dict(y_hints=("L1::no_allocate",)),
                             "y:L1::evict_last": dict(y_hints=("L1::evict_last",))}.items():
                variants[f"{bname} {name}"] = (dataclasses.replace(b, **kw), None)
        return variants
    if mode == "regs":
        # Row-per-CTA kernels of every width, x kept (1p) or re-read (2p), w loaded
        # before or after the reduction, each also under .minnctapersm (Plan.min_ctas):
        # more CTAs per SM through fewer registers, where ptxas finds them without spills.
        for t, kn, kp in _row_kinds(n, dt, base, plan, late_w=True):
            variants[f"T{t} {kn}"] = (kp, None)
            for mc in (3, 4, 5, 6, 8, 10, 12, 16):
                if mc * t <= 2048:
                    variants[f"T{t} {kn} min{mc}"] = (dataclasses.replace(kp, min_ctas=mc), None)
        return variants
    if mode == "loop":
        # Persistent (one-pass) kernels where the default is one CTA per row: the grid
        # shrinks to the fewest CTAs that keep the longest CTA's rows (balanced_grid), so
        # the last wave's partial fill is gone. Halves are one-pass here too.
        for t in (128, 256, 512, 1024):
            p = plan(n, dt, threads=t)
            if t * base.vec > n * 2 or p.per_thread * p.vec > 32:
                continue
            p = dataclasses.replace(p, two_pass=False, preload_w=True)
            values = p.per_thread * p.vec
            cmax = min(32, 2048 // p.block, 65536 // (p.block * (32 + 3 * values)))
            variants[f"T{t} one-pass"] = (p, None)
            for cps in range(1, cmax + 1):
                variants[f"loop T{t} cps{cps}"] = (p, cps)
        return variants
    for t in sorted({base.threads, 128, 256, 512, 1024}):
        if t * base.vec > n * 2 and t > 32:
            continue
        p = plan(n, dt, threads=t)
        if mode == "all":
            variants[f"T{t}"] = (p, None)
            if p.preload_w and not p.two_pass:
                # w loaded after the reduction: fewer registers, more rows per SM
                variants[f"T{t} w-late"] = (dataclasses.replace(p, preload_w=False), None)
            if t == base.threads:
                # the two-pass (x re-read from L2) schedule
                variants[f"T{t} two-pass"] = (dataclasses.replace(p, two_pass=True), None)
                for xh, yh in (((), ()), ((), ("cs",))):
                    variants[f"T{t} two-pass x{xh} y{yh}"] = (
                        dataclasses.replace(p, two_pass=True, preload_w=False, x_hints=xh,
                                            y_hints=yh), None)
            cmax = loop_ctas_per_sm(p)
            for cps in sorted({1, 2, 3, 4, cmax}):
                if 1 <= cps <= cmax:
                    variants[f"loop T{t} cps{cps}"] = (p, cps)
        # cp.async-staged persistent kernel: stages x CTAs per SM (as they fit)
        seen = set()
        for stages in (2, 3, 4, 6):
            for cps in (1, 2, 3, 4):
                stg = staging(p, dt, False, stages=stages, ctas_per_sm=cps)
                if stg is None or stg in seen:
                    continue
                seen.add(stg)
                variants[f"async T{t} S{stg.stages} cps{stg.ctas_per_sm}"] = (p, stg)
    return variants


def main(argv=None):
    import dataclasses

    import torch
    from lab.rmsnorm_fwd_async import build_forward_async, staging
    from ptxdsl.ops.rmsnorm.bwd import build_backward, plan_backward
    from ptxdsl.ops.rmsnorm.bwd_dw import build_dw_reduce
    from ptxdsl.ops.rmsnorm.fwd import build_forward, plan
    from ptxdsl.ops.rmsnorm.fwd_loop import build_forward_loop, loop_ctas_per_sm
    from ptxdsl.ops.rmsnorm.plan import forward_kernel, row_config, wide_row_plan
    from ptxdsl.runtime import driver, prepare
    from ptxdsl.core.types import bf16, f16, f32
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=os.path.join(os.environ.get("OUT", "."), "tune.json"))
    ap.add_argument("--shapes", default=None, help="forward shapes, e.g. 8192x8192xf32,...")
    ap.add_argument("--no-backward", action="store_true")
    ap.add_argument("--no-forward", action="store_true")
    ap.add_argument("--no-torch-compile", action="store_true")
    ap.add_argument("--only", default=None,
                    help="forward: keep the variants whose name matches this regex "
                         "(the default plan is always kept)")
    ap.add_argument("--rounds", type=int, default=2, help="timing rounds (alternating order)")
    ap.add_argument("--mode", choices=("all", "async", "hints", "both", "loop", "store",
                                           "regs", "reload"),
                    default="all",
                    help="forward variants: every family, the default plan beside the "
                         "cp.async-staged kernels, the default plan under each cache hint, "
                         "one-pass persistent kernels of every width and occupancy, or "
                         "the default plan under each hint of y's stores, or "
                         "row-per-CTA kernels under a floor (.minnctapersm), or the device's two-pass plan with its "
                         "second read batched ahead of the stores (reload)")
    ap.add_argument("--bwd-shapes", default=None, help="backward shapes, e.g. 4096x4096xbf16")
    ap.add_argument("--bwd-threads", default="", type=lambda s: [int(v) for v in s.split(",")
                                                                 if v],
                    help="backward: thread counts to try beside the default plan's "
                         "(else 512 and 1024), e.g. 128,256; 0: the default plan's alone")
    ap.add_argument("--bwd-only", default=None,
                    help="backward: keep the variants whose name matches this regex "
                         "(the default plan is always kept)")
    ap.add_argument("--bwd-cps", default="1,2,3,4",
                    type=lambda s: [int(v) for v in s.split(",") if v],
                    help="backward: CTAs per SM to try")
    ap.add_argument("--bwd-stages", default="",
                    type=lambda s: [int(v) for v in s.split(",") if v],
                    help="backward: shared-memory ring sizes to try (0: stream long rows "
                         "instead; BwdPlan.stages), e.g. 0,1,2,3")
    ap.add_argument("--bwd-groups", default="1",
                    type=lambda s: [int(v) for v in s.split(",") if v],
                    help="backward: rows per CTA to try (BwdPlan.groups), e.g. 1,2,4")
    ap.add_argument("--bwd-hints", default=None,
                    help="backward: keep the cache-hint variants whose name matches this "
                         "regex ('^$': plain loads only)")
    ap.add_argument("--bwd-no-prefetch", action="store_true",
                    help="backward: also each resident-row plan without the next row "
                         "prefetched into registers (fewer registers, more row groups)")
    ap.add_argument("--bwd-unfused", action="store_true",
                    help="backward: also each fused plan with dW summed by a second launch")
    a = ap.parse_args(argv)
    import torch.nn.functional as F
    fwd_shapes = FWD_SHAPES
    if a.shapes:
        fwd_shapes = [(int(m), int(n), d)
                      for m, n, d in (s.split("x") for s in a.shapes.split(","))]
    types = {"f32": (f32, torch.float32), "bf16": (bf16, torch.bfloat16),
             "f16": (f16, torch.float16)}
    props = torch.cuda.get_device_properties(0)
    device = driver.get().device(0)  # what ptxdsl.ops plans for
    sms = props.multi_processor_count
    l2 = getattr(props, "L2_cache_size", 50 << 20)
    out = {"device": torch.cuda.get_device_name(), "forward": [], "backward": []}
    bwd_shapes = BWD_SHAPES
    if a.bwd_shapes:
        bwd_shapes = [(int(m), int(n), d)
                      for m, n, d in (s.split("x") for s in a.bwd_shapes.split(","))]
    for m, n, dn in () if a.no_forward else fwd_shapes:
        dt, tdt = types[dn]
        # Enough input copies that the rotation exceeds L2 three times (DRAM numbers).
        nbytes = 2 * m * n * tdt.itemsize
        copies = min(64, max(4, -(-3 * l2 // nbytes)))
        sets = [(torch.randn(m, n, device="cuda").to(tdt), torch.randn(n, device="cuda").to(tdt),
                 torch.empty(m, n, device="cuda", dtype=tdt)) for _ in range(copies)]
        base = plan(n, dt)
        if a.mode == "reload":
            base = wide_row_plan(base, row_config(n, dt, base.vec, device))
        modes = ("all", "hints") if a.mode == "both" else (a.mode,)
        variants = {}
        for mode in modes:
            variants.update(_variants(mode, n, dt, base, plan, loop_ctas_per_sm, staging))
        if a.only:
            import re
            keep = re.compile(a.only)
            variants = {k: v for k, v in variants.items()
                        if k == f"T{base.threads}" or keep.search(k)}
        res, live = {}, {"copy": lambda x, w, y: y.copy_(x)}
        # What ptxdsl.ops runs for this shape (the plan, or a kernel chosen from it).
        kops = forward_kernel(n, dt, dt, base.vec, False, False, 1e-6, "sm_90a", sms,
                              device, m=m)
        live["ops"] = lambda x, w, y, k=kops: k(x, w, y)
        ref = F.rms_norm(sets[0][0].float(), (n,), sets[0][1].float(), 1e-6)
        if a.no_torch_compile:
            res["torch.compile"] = "skipped (--no-torch-compile)"
        else:
            torch._dynamo.reset()  # a fresh compile per shape (no recompile limit)
            compiled = torch.compile(lambda x, w: F.rms_norm(x, (x.shape[-1],), w, 1e-6),
                                     dynamic=False)
            try:
                compiled(*sets[0][:2])
                live["torch.compile"] = lambda x, w, y: compiled(x, w)
            except Exception as e:  # noqa: BLE001
                res["torch.compile"] = f"{type(e).__name__}: {str(e)[:80]}"
        for name, (p, cps) in variants.items():
            try:
                if cps is None:
                    k = build_forward(p, dt, dt)
                elif isinstance(cps, int):
                    k = build_forward_loop(p, dt, dt, sms * cps)
                else:
                    k = build_forward_async(p, cps, dt, dt, sms * cps.ctas_per_sm)
                r = k.resources()
                if r.spill_stores:
                    continue
                if p.min_ctas:  # keep a floor only where it changes the registers
                    r0 = build_forward(dataclasses.replace(p, min_ctas=None), dt, dt).resources()
                    if r.registers == r0.registers:
                        continue
                if a.mode == "regs":
                    res.setdefault("occupancy", {})[name] = prepare(k).resident_ctas(0) // sms
                x0, w0, y0 = sets[0]
                y0.fill_(float("nan"))
                k(x0, w0, y0)
                err = ((y0.float() - ref).abs().max() / ref.abs().max()).item()
                if not err <= (2e-6 if dn == "f32" else 1e-2):
                    res[name] = f"WRONG: max error {err:.3g} of the largest value"
                    continue
                live[name] = lambda x, w, y, k=k: k(x, w, y)
            except Exception as e:
                res[name] = f"{type(e).__name__}: {str(e)[:80]}"
        # Two rounds, the second in reverse order; each variant keeps its better median,
        # so none is favoured by when it ran (clocks settling after the compiles).
        names = list(live)
        for order in [names if r % 2 == 0 else names[::-1] for r in range(a.rounds)]:
            for name in order:
                t = time_fn(live[name], sets, iters=40)
                res[name] = min(res.get(name, t), t)
        copy_us = res.pop("copy")
        ok = {k: v for k, v in res.items() if isinstance(v, float)}
        top = sorted(ok.items(), key=lambda kv: kv[1])[:5]
        print(f"fwd {dn} {m}x{n}: copy {copy_us:.1f} µs; ops {ok.get('ops', float('nan')):.1f}; "
              f"default T{base.threads}: {ok.get(f'T{base.threads}', float('nan')):.1f}; top " +
              ", ".join(f"{k} {v:.1f}" for k, v in top), flush=True)
        if a.mode == "regs":  # every variant, fastest first
            occ = res.get("occupancy", {})
            for k, v in sorted(ok.items(), key=lambda kv: kv[1]):
                print(f"    {k:28s} {v:7.2f}  {copy_us / v:6.1%} of copy"
                      + (f"  {occ[k]} CTAs/SM" if k in occ else ""))
        out["forward"].append({"shape": [m, n], "dtype": dn, "copy_us": copy_us, "results": res})
    for m, n, dn in () if a.no_backward else bwd_shapes:
        dt, tdt = types[dn]
        copies = min(64, max(4, -(-4 * l2 // (3 * m * n * tdt.itemsize))))
        sets = []
        for _ in range(copies):
            x = torch.randn(m, n, device="cuda").to(tdt)
            sets.append((torch.randn(m, n, device="cuda").to(tdt), x,
                         torch.randn(n, device="cuda").to(tdt),
                         torch.rsqrt((x.float() ** 2).mean(-1) + 1e-6),
                         torch.empty(m, n, device="cuda", dtype=tdt)))
        base = plan_backward(n, dt, sms)
        variants = {"default": base}
        hints = {"": {}, " l2-ahead": dict(l2_ahead=True)}
        if a.bwd_hints is not None:
            import re
            keep_hint = re.compile(a.bwd_hints)
            hints = {k: v for k, v in hints.items() if keep_hint.search(k.strip())}
        extra = [t for t in a.bwd_threads if t] if a.bwd_threads else [512, 1024]
        for t in sorted({base.threads, *extra}):
            for cps in a.bwd_cps:
                for g in a.bwd_groups:
                    if cps * t * g > 2048:
                        continue
                    for st in a.bwd_stages or [None]:
                        sn = ("" if st is None else f" S{st}") + (f" R{g}" if g > 1 else "")
                        for hn, kw in hints.items():
                            try:
                                p = plan_backward(n, dt, sms, threads=t, ctas_per_sm=cps,
                                                  stages=st, groups=g)
                            except ValueError:  # that many row buffers / groups do not fit
                                continue
                            variants[f"T{t} cps{cps}{sn}{hn}"] = dataclasses.replace(p, **kw)
                            if a.bwd_no_prefetch and not (p.stages or p.streaming):
                                q = plan_backward(n, dt, sms, threads=t, ctas_per_sm=cps,
                                                  stages=st, groups=g, prefetch=False)
                                variants[f"T{t} cps{cps}{sn} no-pf{hn}"] = \
                                    dataclasses.replace(q, **kw)
                            if a.bwd_unfused and p.fused:
                                variants[f"T{t} cps{cps}{sn} unfused{hn}"] = \
                                    dataclasses.replace(p, fused=False, **kw)
        for hn, kw in hints.items():
            if hn:
                variants[f"default{hn}"] = dataclasses.replace(base, **kw)
        # what ptxdsl.ops runs (ops.rmsnorm.plan.backward_kernel: occupancy, short rows)
        from ptxdsl.ops.rmsnorm.plan import backward_kernel
        ops_p, _ = backward_kernel(n, dt, dt, base.vec, "sm_90a", sms, device)
        variants["ops"] = ops_p
        if a.bwd_only:
            import re
            keep = re.compile(a.bwd_only)
            variants = {k: v for k, v in variants.items() if k == "default" or keep.search(k)}
        res = {}
        # The copy-equivalent: read x and dy, write dx.
        half = [(torch.empty(m * n * tdt.itemsize * 3 // 2, dtype=torch.uint8, device="cuda"),
                 torch.empty(m * n * tdt.itemsize * 3 // 2, dtype=torch.uint8, device="cuda"))
                for _ in range(copies)]
        live = {"copy": (lambda a_, b_, *_: b_.copy_(a_), half)}
        for name, p in variants.items():
            try:
                kb = build_backward(p, dt, dt)
                if kb.resources().spill_stores or (
                        p.fused and prepare(kb).resident_ctas(0) < p.grid):
                    continue
                ws = torch.zeros(4 + p.grid * n, device="cuda", dtype=torch.int32)
                part = ws[4:].view(torch.float32).view(p.grid, n)
                dw = torch.empty(n, device="cuda", dtype=tdt)
                if p.fused:
                    def run(dy, x, w, rstd, dx, kb=kb, ws=ws, part=part, dw=dw):
                        kb(dy, x, w, rstd, ws[:2], dx, dw, part)
                else:  # small rows: dW summed by a second launch, as ptxdsl.ops does
                    kr = build_dw_reduce(n, p.grid, dt)

                    def run(dy, x, w, rstd, dx, kb=kb, kr=kr, part=part, dw=dw):
                        kb(dy, x, w, rstd, dx, part)
                        kr(part, dw)
                live[name] = (run, sets)
            except Exception as e:
                res[name] = f"{type(e).__name__}: {str(e)[:80]}"
        names = list(live)
        for order in [names if r % 2 == 0 else names[::-1] for r in range(a.rounds)]:
            for name in order:
                fn, ss = live[name]
                us = time_fn(fn, ss, iters=30)
                res[name] = min(res.get(name, us), us)
        ok = {k: v for k, v in res.items() if isinstance(v, float) and k != "copy"}
        top = sorted(ok.items(), key=lambda kv: kv[1])[:5]
        print(f"bwd {dn} {m}x{n}: copy {res.get('copy', float('nan')):.1f} µs; default "
              f"{ok.get('default')}; top " + ", ".join(f"{k} {v:.1f}" for k, v in top),
              flush=True)
        out["backward"].append({"shape": [m, n], "dtype": dn, "results": res})
    with open(a.json, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
