"""A/B of the attention backward's plan choices on the current GPU (what
``ptxdsl/ops/attention/bwd_plans.json`` cites). ``--set tma``: dQ by ``red.global.add.f32``
against TMA reduce-add (``BwdConfig.dq_tma``), default and deterministic, on FA3-grid
shapes; ``--set overlap``: the consumer step's orderings (``overlap``, ``dq_swizzle``,
``dq_split``) against the TMA plan without them, default mode, S=4k;
``--set wide``: head dims 192 and 256 (``col_split`` with and without ``pds_smem``;
stages, overlap), default and deterministic, S=4k; ``--set h128``: head dim 128's
``dq_split`` plan against the buildable alternatives the SASS study suggests (the plan's
two consumer warpgroups run in lockstep through dq_split's 256-thread barriers, so each
step's exponentials (32 MUFU.EX2 a thread) and dQ staging idle the tensor pipe for both:
overlap 2 with dq_split; ``ds_double``, whose dSᵀ pair per ring slot drops the 256-thread
barrier before dSᵀ's stores), default mode, the FA3 grid's S 1k to 16k (ptxas spills 8-16
bytes for "ov2 sw split dsx2" causal and window deterministic; the others none);
``--set h96``: head dim 96's untimed row against its neighbours; ``--set h64``:
head dim 64's row against ``block_m`` 128 (FA3's hdim-64 tile: 128 query rows a step, dQ
split by rows between the warpgroups; stages 2, 3; overlap 0, 1; ``ds_double``), default
and deterministic, S 1k, 4k, 16k (ptxas -v: no spills, but 8-16 bytes for "m128", "m128
s3" and "m128 dsx2" causal and window deterministic; every block_m 128 variant spills with
softcap, which this set does not time); ``--set h192``: head dim 192's plan row
(``col_split`` + ``pds_smem``, three n32 pieces of dK, dV, dQ a warpgroup) against
``panel_split`` (an n64 and an n32 piece) with and without ``pds_smem``, 1 or 2 stages,
overlap 1, default and deterministic, on the rows the issue cites (1k full, 4k full and
causal, 16k causal); ``--set det``: the plan's rows, deterministic against
default (the issue's "within 15%"), head dims 64, 128, 192, 256 at S=4k full and causal
and 128 at 16k causal, with ``dq_warp`` beside the rows of 64 and 128 (the writer warp
takes the turns) and ``wg3`` + ``overlap`` 2 + ``dq_warp`` beside 192's, one call of about 2 minutes (the ratio det / default last); ``--set
h128b``: head dim 128's plan against FlashAttention-4's sm90 step structure
(``dq_warp``: a producer warp issues dQ's reduce-adds, the consumers hand the stage over
by ``bar.arrive``; ``dk_last``: dV before the dSᵀ exchange, dK behind dQ, dQ staged under
dK; with and without ``ds_double``, which with ``dq_warp`` leaves one barrier a step),
default mode, S 1k, 4k, 16k full and causal, with each variant's geometric mean over the
plan's last (ptxas -v: no spills for any of them, every mask, deterministic and varlen);
``--set h192b``: head dim 192's plan row (``col_split`` + ``panel_split``: 64 keys a CTA)
against ``wg3`` (FlashAttention-3's hdim-192 tile, :mod:`ptxdsl.ops.attention.bwd_wg3`: 96
keys a CTA, three consumer warpgroups, every GEMM once; with and without ``dq_warp`` and
``overlap`` 2 (FA3's order: dV issued between P's and dS's stores), 2 stages of Q, and 1
stage), default mode, S=1k full, 4k full and causal, 16k causal, each
variant's geometric mean over the plan's last (ptxas -v: no spills). ``--set h64b``: head
dim 64's plan row (``block_m`` 128 + ``overlap`` 1 + ``ds_double``: already FA3's and FA4's
hdim-64 tile, 128 queries x 128 keys, Sᵀ/dPᵀ keys on M, dV and dK from registers, dQ by
query rows, two stages of Q, dO and dS) against their dQ writer warp (``dq_warp``) and
FA4's sm90 order (``dk_last``), alone and together, and ``dq_warp`` without ``ds_double``,
default mode, S=1k full, 4k full and causal, 16k causal, each variant's geometric mean
over the plan's (ptxas -v: no spills for any mask, default or deterministic).
``--set detpipe``: the deterministic mode's pipelined writer turns (``det_pipe``) beside
the plan's deterministic and default rows, timed interleaved (lab/attention_bwd_det_lab.py).
``--set ahead``: ``BwdConfig.s_ahead`` (the next step's Sᵀ issued before the step ends)
against the plan rows of head dims 64 and 128, S 1k, 4k, 16k full and causal, timed
interleaved (:mod:`lab.attention_bwd_ahead`). ``--set m80``: ``BwdConfig.dq_swap``
(FlashAttention-3's 80-query hdim-128 tile) beside head dim 128's plan row, S 1k, 4k, 16k
full and causal, timed interleaved (:mod:`lab.attention_bwd_m80`). ``--set short``:
``BwdConfig.prep_wide`` and ``dkv_tma`` (the fixed costs of a call and of a CTA) beside the
plan rows of head dims 64 and 128, S 1k and 4k full and causal, with each kernel timed alone
(:mod:`lab.attention_bwd_short`). ``--set det2``: the
deterministic mode's variants at head dims 256, 192, 64, 128 (``dq_warp``, ``det_pipe``,
``det_units``, ``det_desc``) beside each head dim's deterministic and default rows,
timed interleaved (:mod:`lab.attention_bwd_det2`). ``--set h192f``: head dim 192's
fixed-cost options (``prep_wide``, ``dkv_tma``, ``dq_exit_read``, ``lpt_units`` in wg3) beside
its plan row, S 1k, 4k, 16k full and causal, timed interleaved (:mod:`lab.attention_bwd_h192f`).
``--set h128c``: head dim 128 causal's kernel: the causal row against the 80-query tile
(``dq_swap``) with the fixed-cost options, with and without ``lpt_units``, S 1k, 4k, 16k
causal and 4k full, timed interleaved (:mod:`lab.attention_bwd_h128c`).
``--set h192m``: head dim 192's step schedule (``wg3_ahead``, ``wg3_pfree``,
``wg3_fence1``) beside its plan rows, S 1k, 4k, 16k full and causal, timed interleaved
(:mod:`lab.attention_bwd_h192m`).
``--set bwdu``: ``uniform_cons`` (the consumers' warpgroup index from lane 0: no R2UR
before each wgmma) beside each head dim's plan row, S 1k, 4k, 16k full and causal, timed
interleaved (:mod:`lab.attention_bwd_bwdu`).
``--set pair``: ``kv_pair`` (two key blocks a CTA, ``p`` and ``nblk - 1 - p``; with
``dkv_stage``, with ``pair_max`` 32) beside head dim 64's plan row, S 1k, 4k, 16k causal and
full, then the deterministic row with ``dk_last`` (and ``s_ahead`` 2) beside the
deterministic and default rows, timed interleaved (:mod:`lab.attention_bwd_pair`).
``--set det192``: head dim 192's deterministic mode with the default rows' step and
fixed-cost options, ``det_poll`` in wg3 and ``det_units`` 8 / 24, beside the deterministic
and default rows, S 1k, 4k, 16k full and causal, timed interleaved
(:mod:`lab.attention_bwd_det192`).
``--set levers``: the levers FA4's SASS and ncu's profile named (``lse_early``,
``dq_frag``), each row timed without the ones it took and with the others, head dims 64,
128, 192, S 1k, 4k, 16k full and causal, interleaved (:mod:`lab.attention_bwd_levers`).
A variant whose max relative error exceeds 3e-2 is reported, not timed.
Each variant's dq, dk, dv are checked against cuDNN's (SDPA flash's where cuDNN refuses
the head dim) before timing, the deterministic ones for bitwise repeats. JSON to
``$OUT/attention_bwd_<set>.json``; a table last.

    PYTHONPATH=. python lab/attention_bwd_plans.py [--set overlap|wide|h128|h96|h192|h64|det|h128b|
        h192b|h64b|detpipe|ahead|m80|short|det2|h192f|h128c|
        h192m|bwdu|pair|det192|levers]
        [--heads 64,192] [--default-only]
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))


def main() -> None:
    import torch
    import ptxdsl.ops as ops
    from ptxdsl.ops.attention import bwd_api
    from ptxdsl.ops.attention.bwd_config import BwdConfig
    from lab.attention_bwd_case import case

    ap = argparse.ArgumentParser()
    ap.add_argument("--set", choices=("tma", "overlap", "wide", "h128", "h96", "h192", "h64",
                                          "det", "h128b", "h192b", "h64b",
                                          "detpipe", "ahead", "m80", "short", "det2", "h192f",
                                          "h128c", "h192m", "bwdu", "pair",
                                          "det192", "levers"),
                    default="tma")
    ap.add_argument("--heads", default="", help="comma-separated head dims: only those rows")
    ap.add_argument("--default-only", action="store_true",
                    help="time the default mode only (skip the deterministic runs)")
    args = ap.parse_args()
    which = args.set
    if which == "detpipe":     # (lab/attention_bwd_det_lab.py: interleaved, its own table)
        from attention_bwd_det_lab import run
        return run(args.heads)
    if which == "ahead":          # (its own module: interleaved timing, two head dims)
        from lab.attention_bwd_ahead import run
        return run()
    if which == "m80":            # (its own module: FA3's 80-query tile at head dim 128)
        from lab.attention_bwd_m80 import run
        return run()
    if which == "short":          # (its own module: fixed costs at S 1k, 4k)
        from lab.attention_bwd_short import run
        return run()
    if which == "det2":           # (its own module: deterministic variants vs default)
        from lab.attention_bwd_det2 import run
        return run()
    if which == "h192f":          # (its own module: head dim 192's fixed costs)
        from lab.attention_bwd_h192f import run
        return run()
    if which == "h128c":          # (its own module: head dim 128 causal's kernel)
        from lab.attention_bwd_h128c import run
        return run()
    if which == "h192m":          # (its own module: head dim 192's main loop)
        from lab.attention_bwd_h192m import run
        return run()
    if which == "pair":           # (its own module: two key blocks a CTA at head dim 64)
        from lab.attention_bwd_pair import run
        return run()
    if which == "bwdu":           # (its own module: uniform_cons at every head dim)
        from lab.attention_bwd_bwdu import HEAD_DIMS, run
        return run(head_dims=[int(x) for x in args.heads.split(",")] if args.heads else HEAD_DIMS)
    if which == "levers":         # (its own module: FA4's levers at 64, 128, 192)
        from lab.attention_bwd_levers import HEAD_DIMS, run
        return run(head_dims=[int(x) for x in args.heads.split(",")] if args.heads else HEAD_DIMS)
    if which == "det192":         # (its own module: head dim 192's deterministic mode)
        from lab.attention_bwd_det192 import run
        return run()
    tma = dict(stages=2, dq_tma=True)
    if which == "tma":
        variants = {"red s2": BwdConfig(stages=2), "tma s2": BwdConfig(**tma),
                    "tma s3": BwdConfig(stages=3, dq_tma=True)}
        grid = ((4096, 64, False), (4096, 64, True), (4096, 128, False), (4096, 128, True),
                (16384, 128, True), (1024, 128, False))
        modes = (False, True)
    elif which == "wide":
        cols = dict(dq_tma=True, dq_swizzle=True, col_split=True)
        variants = {"s2 pds": BwdConfig(stages=2, pds_smem=True, **cols),
                    "s1 pds": BwdConfig(stages=1, pds_smem=True, **cols),
                    "s2 ov0": BwdConfig(stages=2, **cols),
                    "s2 ov1": BwdConfig(stages=2, overlap=1, **cols),
                    "s1 ov0": BwdConfig(stages=1, **cols),
                    "s1 ov1": BwdConfig(stages=1, overlap=1, **cols)}
        grid = ((4096, 192, False), (4096, 192, True), (4096, 256, False), (4096, 256, True))
        modes = (False, True)
    elif which == "h128":
        sp = dict(tma, dq_swizzle=True, dq_split=True)
        variants = {"ov1 sw split": BwdConfig(**sp, overlap=1),
                    "ov2 sw split": BwdConfig(**sp, overlap=2),
                    "ov1 sw split dsx2": BwdConfig(**sp, overlap=1, ds_double=True),
                    "ov2 sw split dsx2": BwdConfig(**sp, overlap=2, ds_double=True)}
        grid = tuple((s, 128, c) for s in (1024, 2048, 4096, 8192, 16384) for c in (False, True))
        modes = (False,)
    elif which == "h128b":
        sp = dict(tma, dq_swizzle=True, dq_split=True, overlap=1)
        variants = {"plan": BwdConfig(**sp),
                    "dqw": BwdConfig(**sp, dq_warp=True),
                    "dkl": BwdConfig(**sp, dk_last=True),
                    "dqw dkl": BwdConfig(**sp, dq_warp=True, dk_last=True),
                    "dsx2": BwdConfig(**sp, ds_double=True),
                    "dqw dsx2": BwdConfig(**sp, dq_warp=True, ds_double=True),
                    "dqw dkl dsx2": BwdConfig(**sp, dq_warp=True, dk_last=True,
                                              ds_double=True)}
        grid = tuple((s, 128, c) for s in (1024, 4096, 16384) for c in (False, True))
        modes = (False,)
    elif which == "h192b":
        pnl = dict(dq_tma=True, dq_swizzle=True, col_split=True, panel_split=True)
        wg3 = dict(dq_tma=True, dq_swizzle=True, wg3=True, consumer_regs=160)
        variants = {"plan": BwdConfig(stages=2, **pnl),
                    "wg3": BwdConfig(stages=2, **wg3),
                    "wg3 dqw": BwdConfig(stages=2, dq_warp=True, **wg3),
                    "wg3 ov2": BwdConfig(stages=2, overlap=2, **wg3),
                    "wg3 ov2 dqw": BwdConfig(stages=2, overlap=2, dq_warp=True, **wg3),
                    "wg3 s1": BwdConfig(stages=1, **wg3)}
        grid = ((1024, 192, False), (4096, 192, False), (4096, 192, True), (16384, 192, True))
        modes = (False,)
    elif which == "h64b":
        m = dict(stages=2, dq_tma=True, dq_swizzle=True, block_m=128, overlap=1)
        variants = {"plan": BwdConfig(**m, ds_double=True),
                    "dqw": BwdConfig(**m, ds_double=True, dq_warp=True),
                    "dkl": BwdConfig(**m, ds_double=True, dk_last=True),
                    "dqw dkl": BwdConfig(**m, ds_double=True, dq_warp=True, dk_last=True),
                    "dqw nodsx2": BwdConfig(**m, dq_warp=True)}
        grid = ((1024, 64, False), (4096, 64, False), (4096, 64, True), (16384, 64, True))
        modes = (False,)
    elif which == "h64":
        m = dict(dq_tma=True, dq_swizzle=True, block_m=128)
        variants = {"plan": BwdConfig(**tma, dq_swizzle=True),
                    "m128": BwdConfig(stages=2, **m),
                    "m128 ov1": BwdConfig(stages=2, overlap=1, **m),
                    "m128 s3": BwdConfig(stages=3, **m),
                    "m128 s3 ov1": BwdConfig(stages=3, overlap=1, **m),
                    "m128 dsx2": BwdConfig(stages=2, ds_double=True, **m),
                    "m128 ov1 dsx2": BwdConfig(stages=2, overlap=1, ds_double=True, **m)}
        grid = tuple((s, 64, c) for s in (1024, 4096, 16384) for c in (False, True))
        modes = (False, True)
    elif which == "det":        # the plan table's own rows (None: choose_bwd as shipped)
        # and dq_warp (the writer warp takes the turns) on head dims 64 and 128's det rows,
        # wg3 with it at 192 (its deterministic mode needs the writer warp)
        variants = {"plan": None,
                    "dqw": {64: BwdConfig(**tma, dq_swizzle=True, dq_warp=True),
                            192: BwdConfig(stages=2, dq_tma=True, dq_swizzle=True, wg3=True,
                                           consumer_regs=160, overlap=2, dq_warp=True),
                            128: BwdConfig(**tma, overlap=1, dq_swizzle=True, dq_split=True,
                                           ds_double=True, dq_warp=True, dk_last=True)}}
        grid = tuple((4096, d, c) for d in (64, 128, 192, 256) for c in (False, True)) + \
            ((16384, 128, True),)
        modes = (False, True)
    elif which == "h96":
        sw = dict(tma, dq_swizzle=True)
        variants = {"sw": BwdConfig(**sw), "ov1 sw": BwdConfig(**sw, overlap=1),
                    "ov2 sw": BwdConfig(**sw, overlap=2)}
        grid = ((1024, 96, False), (4096, 96, False), (4096, 96, True), (16384, 96, True))
        modes = (False, True)
    elif which == "h192":
        cols = dict(dq_tma=True, dq_swizzle=True, col_split=True)
        pnl = dict(cols, panel_split=True)
        variants = {"s2 pds": BwdConfig(stages=2, pds_smem=True, **cols),
                    "s2 pds pnl": BwdConfig(stages=2, pds_smem=True, **pnl),
                    "s1 pds pnl": BwdConfig(stages=1, pds_smem=True, **pnl),
                    "s2 pnl": BwdConfig(stages=2, **pnl),
                    "s2 ov1 pnl": BwdConfig(stages=2, overlap=1, **pnl),
                    "s1 ov1 pnl": BwdConfig(stages=1, overlap=1, **pnl)}
        grid = ((1024, 192, False), (4096, 192, False), (4096, 192, True), (16384, 192, True))
        modes = (False, True)
    else:                      # head dim -> the variants worth building for it
        variants = {"tma": BwdConfig(**tma), "sw": BwdConfig(**tma, dq_swizzle=True),
                    "ov1 sw": BwdConfig(**tma, overlap=1, dq_swizzle=True),
                    "ov2 sw": BwdConfig(**tma, overlap=2, dq_swizzle=True),
                    "ov1 sw split": BwdConfig(**tma, overlap=1, dq_swizzle=True, dq_split=True),
                    "ov2 sw split": BwdConfig(**tma, overlap=2, dq_swizzle=True, dq_split=True)}
        only = {128: ("tma", "ov1 sw", "ov2 sw", "ov1 sw split", "ov2 sw split"),
                64: ("tma", "sw", "ov1 sw", "ov2 sw")}
        grid = ((4096, 128, False), (4096, 64, False), (4096, 128, True))
        modes = (False,)
    if args.default_only:
        modes = (False,)
    shipped = bwd_api.choose_bwd
    rows = []
    if args.heads:
        grid = tuple(g for g in grid if str(g[1]) in args.heads.split(","))
    for s, d, causal in grid:
        sc = case(torch, s, d, causal)
        b, h, q, k, v, do, out, lse, ref, flops = (sc.b, sc.h, sc.q, sc.k, sc.v, sc.do,
                                                   sc.out, sc.lse, sc.ref, sc.flops)
        row = {"S": s, "D": d, "causal": causal, "B": b, "H": h, "results": {}}
        for name, cfg in variants.items():
            if isinstance(cfg, dict):       # a config per head dim: only where it has one
                if d not in cfg:
                    continue
                cfg = cfg[d]
            if cfg is not None and cfg.smem_bytes(d) > 232448 or \
                    (which == "overlap" and name not in only[d]):
                continue
            bwd_api.choose_bwd = shipped if cfg is None else \
                (lambda *_a, _c=cfg: _c)                    # the variant under test
            for det in modes:
                key = name + (" det" if det else "")
                try:
                    call = lambda: ops.attention_backward(do, q, k, v, out, lse, causal=causal,
                                                          deterministic=det)
                    got = call()
                    err = max(float((x.float() - r).abs().max() / r.abs().max())
                              for x, r in zip(got, ref))
                    rep = all(torch.equal(x, y) for x, y in zip(got, call())) if det else None
                    if not err <= 3e-2:      # the bound: wrong, so not timed
                        row["results"][key] = {"error": f"max relative error {err:.3g}"}
                        continue
                    ts = []
                    for _ in range(3):
                        e0, e1 = (torch.cuda.Event(enable_timing=True) for _ in range(2))
                        e0.record()
                        for _ in range(5):
                            call()
                        e1.record()
                        torch.cuda.synchronize()
                        ts.append(e0.elapsed_time(e1) / 5)
                    ms = statistics.median(ts)
                    row["results"][key] = {"err": err, "bitwise_repeat": rep, "ms": ms,
                                           "tflops": flops / ms / 1e9}
                except Exception as e:  # noqa: BLE001 - report and go on
                    row["results"][key] = {"error": f"{type(e).__name__}: {e}"[:300]}
        rows.append(row)
        print(json.dumps(row), flush=True)
    doc = {"lab": f"attention_bwd_{which}", "device": torch.cuda.get_device_name(),
           "date": datetime.date.today().isoformat(), "rows": rows}
    out = "plans" if which == "tma" else which
    with open(os.path.join(os.environ.get("OUT", "."), f"attention_bwd_{out}.json"), "w") as f:
        json.dump(doc, f, indent=1)
    names = [n + x for n in variants for x in ("", " det")[:len(modes)]]
    ratio = which == "det"
    print(f"{'S':>6} {'D':>4} {'mask':>6} " + " ".join(f"{n:>11}" for n in names) +
          (f" {'det/def':>8}" if ratio else ""))
    for r in rows:
        tf = [r['results'].get(n, {}).get('tflops', float('nan')) for n in names]
        print(f"{r['S']:>6} {r['D']:>4} {'causal' if r['causal'] else 'full':>6} " + " ".join(
            f"{t:11.1f}" for t in tf) + (f" {tf[1] / tf[0]:8.2f}" if ratio else ""))
    if which in ("h128b", "h192b", "h64b"):  # each over the first (the plan), geomean
        first = names[0]
        for n in names[1:]:
            ratios = [r["results"][n]["tflops"] / r["results"][first]["tflops"] for r in rows
                      if "tflops" in r["results"].get(n, {})
                      and "tflops" in r["results"].get(first, {})]
            if ratios:
                print(f"{n} / {first}: geomean {statistics.geometric_mean(ratios):.3f} "
                      f"over {len(ratios)} rows")


if __name__ == "__main__":
    main()
