"""``lab/attention_bwd_plans.py --set h192f``: head dim 192's fixed costs (issue #51: the
hd192 row, ``wg3``, is 0.86-0.92 of FlashAttention-4 at every S, worst at 16k causal,
while head dims 64 and 128 gained 4-10% from :mod:`lab.attention_bwd_short`'s options).

Variants, each head dim 192's shipped plan row (``wg3`` + ``overlap`` 2, no writer warp)
with:

* ``pw``: ``BwdConfig.prep_wide`` (``bwd_prepw.py`` at D = 192: 8 threads a row, three
  16-byte chunks a thread, in place of a warp a row);
* ``kvt``: ``BwdConfig.dkv_tma`` (``bwd_wg3._store_kv_tma``: each warpgroup's dKᵀ, dVᵀ
  transposed by ``stmatrix`` into its column panel of K's and V's tiles, two TMA stores,
  in place of the dQ stage and 16-byte ``st.global`` a thread);
* ``xr``: ``BwdConfig.dq_exit_read`` (the consumers' last wait for their dQ adds' reads,
  not their landing);
* ``pw kvt xr``: the three; ``dqw pw kvt xr``: with the dQ writer warp (``dq_warp``);
* causal shapes: ``lpt8``, ``lpt16`` (``BwdConfig.lpt_units``: CTAs in key block-major
  sections of that many (batch, K/V head) units, so a section's longest key blocks start
  first; wg3's plain order is key block fastest, so the last unit's longest blocks start
  among the kernel's last CTAs) and ``pw kvt xr lpt8``, ``pw kvt xr lpt16``.

S 1k, 4k, 16k, full and causal (B·S = 16k tokens, H = 2048 // 192 = 10: the bench's
shapes). Every
variant's dq, dk, dv are checked against cuDNN's (max relative error <= 3e-2) before any
is timed; then interleaved rounds (``bench/timing.py``); per shape also the plan's and
``pw``'s small kernels timed alone (``pre``, ``pre_w``, ``main``, ``post``, ``post_w``).
JSON to ``$OUT/attention_bwd_h192f.json``; a table and each variant's geometric mean over
the plan's last."""
from __future__ import annotations

import datetime
import json
import os
import statistics
from dataclasses import replace

FIXED = dict(prep_wide=True, dkv_tma=True, dq_exit_read=True)
VARIANTS = {"pw": dict(prep_wide=True), "kvt": dict(dkv_tma=True), "xr": dict(dq_exit_read=True),
            "pw kvt xr": FIXED, "dqw pw kvt xr": dict(FIXED, dq_warp=True),
            "lpt8": dict(lpt_units=8), "lpt16": dict(lpt_units=16),
            "pw kvt xr lpt8": dict(FIXED, lpt_units=8),
            "pw kvt xr lpt16": dict(FIXED, lpt_units=16)}
CAUSAL_ONLY = ("lpt8", "lpt16", "pw kvt xr lpt8", "pw kvt xr lpt16")
D = 192


def run(rounds: int = 9, block_ms: float = 10.0, tokens: int = 16384, width: int = 2048,
        fa4: bool = False) -> None:
    """``rounds`` rounds a shape, each timed block about ``block_ms``; ``fa4``:
    FlashAttention-4's backward in the same rounds (off: its first calls compile for tens
    of seconds, and today's table has it)."""
    import torch
    from lab.attention_bwd_case import case
    import ptxdsl.ops as ops
    from ptxdsl.ops.attention import bwd_api
    from bench.timing import time_interleaved
    from lab.attention_bwd_short import _fa4, _kernel_fns, _mask

    shipped, rows = bwd_api.choose_bwd, []
    for s, causal in [(s, c) for s in (1024, 4096, 16384) for c in (False, True)]:
        sc = case(torch, s, D, causal, tokens, width)
        b, h, q, k, v, do, out, lse, ref, flops = (sc.b, sc.h, sc.q, sc.k, sc.v, sc.do,
                                                   sc.out, sc.lse, sc.ref, sc.flops)
        row = {"S": s, "D": D, "causal": causal, "B": b, "H": h, "results": {}}
        fns = {}
        for label, extra in [("plan", None)] + list(VARIANTS.items()):
            if label in CAUSAL_ONLY and not causal:
                continue
            choose = shipped if extra is None else \
                (lambda *a, _x=extra, **kw: replace(shipped(*a, **kw), **_x))

            def call(_choose=choose):
                bwd_api.choose_bwd = _choose          # the variant under test
                try:
                    return ops.attention_backward(do, q, k, v, out, lse, causal=causal)
                finally:
                    bwd_api.choose_bwd = shipped
            try:
                got = call()
                err = max(float((x.float() - r).abs().max() / r.abs().max())
                          for x, r in zip(got, ref))
            except Exception as e:  # noqa: BLE001 - report and go on
                row["results"][label] = {"error": f"{type(e).__name__}: {e}"[:300]}
                continue
            cfg = choose(D, "bf16", _mask(causal))
            row["results"][label] = {"err": err, "config": cfg.tag +
                                     (" prep_wide" if cfg.prep_wide else "")}
            if err <= 3e-2:          # the bound: a wrong variant is not timed
                fns[label] = call
        peer = _fa4(torch, q, k, v, do, causal, ref) if fa4 else None
        if peer is not None:
            row["results"]["fa4"] = {"err": peer[1]}
            if peer[1] <= 3e-2:
                fns["fa4"] = peer[0]
        iters = max(4, min(50, round(block_ms * 5e11 / flops)))
        row["iters"] = iters
        for label, ms in time_interleaved(torch, fns, rounds, iters).items():
            row["results"][label].update(ms=ms, tflops=flops / ms / 1e9)
        try:
            parts = _kernel_fns(torch, bwd_api, D, causal, (do, q, k, v, out, lse))
            row["kernels_ms"] = time_interleaved(torch, parts, rounds, 20)
        except Exception as e:  # noqa: BLE001 - report and go on
            row["kernels_ms"] = {"error": f"{type(e).__name__}: {e}"[:300]}
        rows.append(row)
        print(json.dumps(row), flush=True)
    doc = {"lab": "attention_bwd_h192f", "device": torch.cuda.get_device_name(),
           "date": datetime.date.today().isoformat(), "rounds": rounds, "rows": rows}
    with open(os.path.join(os.environ.get("OUT", "."), "attention_bwd_h192f.json"), "w") as f:
        json.dump(doc, f, indent=1)
    names = ["plan"] + list(VARIANTS) + (["fa4"] if fa4 else [])
    print(f"{'S':>6} {'mask':>6} " + " ".join(f"{n:>14}" for n in names)
          + "   pre  pre_w   main   post post_w (us)")
    for r in rows:
        tf = [r["results"].get(n, {}).get("tflops", float("nan")) for n in names]
        km = r.get("kernels_ms", {})
        ks = " ".join(f"{km.get(n, float('nan')) * 1e3:6.0f}"
                      for n in ("pre", "pre_w", "main", "post", "post_w")) \
            if "error" not in km else "(kernels: error)"
        print(f"{r['S']:>6} {'causal' if r['causal'] else 'full':>6} " +
              " ".join(f"{t:14.1f}" for t in tf) + f"  {ks}")
    for n in names[1:]:
        ratios = [r["results"][n]["tflops"] / r["results"]["plan"]["tflops"]
                  for r in rows if "tflops" in r["results"].get(n, {})
                  and "tflops" in r["results"].get("plan", {})]
        if ratios:
            print(f"{n} / plan: geomean {statistics.geometric_mean(ratios):.3f} over "
                  f"{len(ratios)} rows")


__all__ = ["run", "VARIANTS"]
