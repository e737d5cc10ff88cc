"""``lab/attention_bwd_plans.py --set det2``: the deterministic backward against the default
mode (the issue's "within 15%") at head dims 256, 192, 64 and 128, each shape's variants
beside the plan table's deterministic row and its default row. Head dim 256 (whose plan has
no deterministic row: the consumers take the turns): the dQ writer warp (``dq_warp``) with
its pipelined turns (``det_pipe``), alone, in sections of 16, 32, 128 units (``det_units``:
fewer co-resident key blocks of a unit, a shorter chain of turns), with the turns in
descending key-block order (``det_desc``: each CTA walks its row blocks up from its
diagonal, a section launches its last key block first, so under a causal mask the key
blocks reach a row block one step apart in their turns' order instead of all at once), and
with ``det_poll`` (the writer reads the next row block's turn while this one's adds land)
in sections of 32. Head dim 192: the plan's deterministic row (``det_units`` 16) with
``det_desc``, with ``det_units`` 32 and 64, and 32 with ``det_desc``; 128: the row with
``det_desc``, with it and ``det_units`` 16, with it and ``det_poll``, and the default
full-mask row's 80-query tile in the deterministic mode (``m80``: ``dq_swap`` with
``det_pipe``, bwd_m80.py) alone, with the fixed-cost options, with them and ``det_desc``,
and with ``det_desc`` and ``det_poll``. Head dim 64: the
plan's deterministic row with ``det_desc``, with ``dk_last`` (the default row's order), with ``det_units`` 32 and 128, ``dk_last`` + ``det_desc`` +
``det_units`` 32, and ``det_pipe`` + ``det_poll`` + ``det_units`` 32, and the default row's whole step
(``dk_last`` + ``s_ahead`` 2, with the fixed-cost options) with ``det_desc``, with it and
``det_pipe``, with those and ``det_poll``, and with ``det_pipe`` + ``det_poll`` +
``det_units`` 32 (ptxas's one C7519 there is the default row's own: a ``warpgroup.arrive``
where the first Sᵀ, issued before the loop, meets it), and with ``ahead_k`` (that Sᵀ
without the branch: no C7519) with ``det_desc``, with it and ``det_pipe``, and the default
row with ``ahead_k`` (default mode). Per shape every
variant is first checked (dq, dk, dv against cuDNN's, or SDPA flash's where cuDNN refuses
the head dim: max relative error <= 3e-2; the deterministic ones bitwise repeatable over
two more calls), then all are timed interleaved (``bench/timing.py``: a fresh order every
round). ptxas -v sm_90a: no spills for any variant; no serialized wgmma but ``wg3``'s
C7519, which its shipped rows (default and deterministic) carry too. JSON to
``$OUT/attention_bwd_det2.json`` (rewritten after each shape; the shapes go worst ratio
first, and none starts past 80 s: those are named in it); a table last, each variant over
the default row."""
from __future__ import annotations

import datetime
import json
import os
import time

# the worst ratios first: the shapes past the time budget are left out (named in the JSON)
GRID = ((4096, 128, False), (1024, 128, False), (4096, 256, True), (4096, 256, False), (1024, 256, False), (1024, 256, True),
        (16384, 256, True), (4096, 192, False), (4096, 192, True), (1024, 192, True),
        (1024, 64, True), (1024, 64, False), (4096, 64, False), (4096, 64, True),
        (4096, 128, True), (16384, 256, False), (16384, 128, False))


# the fixed costs of a call and a CTA (lab.attention_bwd_short), in the default rows since
FIXED = dict(prep_wide=True, dkv_tma=True, dq_exit_read=True)


def variants(d):
    """name -> (config, or None for the plan table's, deterministic)."""
    from dataclasses import replace
    from ptxdsl.ops.attention.bwd_config import BwdConfig
    sw = dict(stages=2, dq_tma=True, dq_swizzle=True)
    out = {"default": (None, False), "plan det": (None, True)}
    if d == 256:
        dqw = BwdConfig(stages=1, dq_tma=True, dq_swizzle=True, col_split=True,
                        pds_smem=True, dq_warp=True, det_pipe=True)
        out |= {"pipe": (dqw, True)}
        out |= {f"pipe u{g}": (replace(dqw, det_units=g), True) for g in (16, 32, 128)}
        out |= {"pipe dsc": (replace(dqw, det_desc=True), True),
                "pipe dsc u32": (replace(dqw, det_desc=True, det_units=32), True),
                "pipe dpl u32": (replace(dqw, det_poll=True, det_units=32), True),
                "pipe pw xr": (replace(dqw, prep_wide=True, dq_exit_read=True), True)}
    elif d == 192:
        row = BwdConfig(**sw, wg3=True, consumer_regs=160, overlap=2, dq_warp=True,
                        det_pipe=True, det_units=16)
        out |= {"dsc": (replace(row, det_desc=True), True),
                "u32": (replace(row, det_units=32), True),
                "u64": (replace(row, det_units=64), True),
                "dsc u32": (replace(row, det_desc=True, det_units=32), True)}
    elif d == 64:
        row = BwdConfig(**sw, block_m=128, overlap=1, ds_double=True, dq_warp=True)
        out |= {"dsc": (replace(row, det_desc=True), True),
                "dkl": (replace(row, dk_last=True), True),
                "u32": (replace(row, det_units=32), True),
                "u128": (replace(row, det_units=128), True),
                "dkl dsc u32": (replace(row, dk_last=True, det_desc=True, det_units=32),
                                True),
                "pipe dpl u32": (replace(row, det_pipe=True, det_poll=True, det_units=32),
                                 True),
                "pw kvt xr": (replace(row, **FIXED), True),
                "dsc pw kvt xr": (replace(row, det_desc=True, **FIXED), True)}
        # the default row's step (dk_last, s_ahead 2) with the writer's plain or pipelined
        # turns
        step = replace(row, dk_last=True, s_ahead=2, det_desc=True, **FIXED)
        out |= {"sa2 dsc pw kvt xr": (step, True),
                "sa2 pipe dsc pw kvt xr": (replace(step, det_pipe=True), True),
                "sa2 pipe dpl dsc pw kvt xr": (replace(step, det_pipe=True, det_poll=True),
                                               True),
                "sa2 pipe dpl u32 pw kvt xr": (replace(step, det_desc=False, det_pipe=True,
                                                       det_poll=True, det_units=32), True),
                "sa2 sak dsc pw kvt xr": (replace(step, ahead_k=True), True),
                "sa2 sak pipe dsc pw kvt xr": (replace(step, ahead_k=True, det_pipe=True),
                                               True),
                "default sak": (replace(step, det_desc=False, ahead_k=True), False)}
    else:
        row = BwdConfig(**sw, overlap=1, dq_split=True, ds_double=True, dq_warp=True,
                        dk_last=True, det_pipe=True)
        out |= {"dsc": (replace(row, det_desc=True), True),
                "dsc u16": (replace(row, det_desc=True, det_units=16), True),
                "dsc dpl": (replace(row, det_desc=True, det_poll=True), True),
                "pw kvt xr": (replace(row, **FIXED), True),
                "dsc pw kvt xr": (replace(row, det_desc=True, **FIXED), True)}
        m80 = BwdConfig(**sw, overlap=1, block_m=80, ds_double=True, dq_warp=True,
                        dk_last=True, dq_swap=True, det_pipe=True)
        out |= {"m80 det": (m80, True),
                "m80 det pw kvt xr": (replace(m80, **FIXED), True),
                "m80 dsc pw kvt xr": (replace(m80, det_desc=True, **FIXED), True),
                "m80 dsc dpl pw kvt xr": (replace(m80, det_desc=True, det_poll=True,
                                                  **FIXED), True)}
    return out


def run(rounds: int = 5, block_ms: float = 8.0, budget_s: float = 110.0,
        heads=None, grid=GRID, variants_of=None, name: str = "attention_bwd_det2") -> None:
    """``rounds`` interleaved rounds a shape, each timed block about ``block_ms``; no new
    shape once ``budget_s`` seconds have passed (the JSON is rewritten after each);
    ``heads``: only the shapes of those head dims; ``grid``, ``variants_of(d)`` (this
    module's :func:`variants` by default) and ``name`` (the JSON's) for other sets."""
    variants_of = variants_of or variants
    import torch
    from lab.attention_bwd_case import case, plan_as
    import ptxdsl.ops as ops
    from bench.timing import time_interleaved

    rows, t0, left = [], time.monotonic(), []
    for s, d, causal in grid:
        if heads and d not in heads:
            continue
        if time.monotonic() - t0 > budget_s:
            left.append({"S": s, "D": d, "causal": causal})
            continue
        sc = case(torch, s, d, causal)
        b, h, q, k, v, do, out, lse, ref, flops = (sc.b, sc.h, sc.q, sc.k, sc.v, sc.do,
                                                   sc.out, sc.lse, sc.ref, sc.flops)
        row = {"S": s, "D": d, "causal": causal, "B": b, "H": h, "results": {}}
        fns = {}
        for label, (cfg, det) in variants_of(d).items():
            def call(_c=cfg, _det=det):
                with plan_as(_c):
                    return ops.attention_backward(do, q, k, v, out, lse, causal=causal,
                                                  deterministic=_det)
            try:
                got = call()
                err = max(float((x.float() - r).abs().max() / r.abs().max())
                          for x, r in zip(got, ref))
                rep = all(all(torch.equal(x, y) for x, y in zip(got, call()))
                          for _ in range(2)) if det else None
            except Exception as e:  # noqa: BLE001 - report and go on
                row["results"][label] = {"error": f"{type(e).__name__}: {e}"[:300]}
                continue
            row["results"][label] = {"err": err, "bitwise_repeat": rep}
            if err <= 3e-2 and rep is not False:     # a wrong variant is not timed
                fns[label] = call
        iters = max(3, min(30, round(block_ms * 5e11 / flops)))
        row["iters"] = iters
        for label, ms in time_interleaved(torch, fns, rounds, iters).items():
            row["results"][label].update(ms=ms, tflops=flops / ms / 1e9)
        rows.append(row)
        print(json.dumps(row), flush=True)
        _write(torch, rounds, rows, left, name)
    _write(torch, rounds, rows, left, name)
    for d in dict.fromkeys(r["D"] for r in rows):
        names = list(variants_of(d))
        print(f"{'S':>6} {'D':>4} {'mask':>6} " + " ".join(f"{n:>13}" for n in names) +
              "   (TFLOP/s, / default)")
        for r in (r for r in rows if r["D"] == d):
            tf = {n: r["results"].get(n, {}).get("tflops", float("nan")) for n in names}
            print(f"{r['S']:>6} {d:>4} {'causal' if r['causal'] else 'full':>6} " +
                  " ".join(f"{tf[n]:7.1f} {tf[n] / tf['default']:5.2f}" for n in names))


def _write(torch, rounds, rows, left, name: str = "attention_bwd_det2") -> None:
    doc = {"lab": name, "device": torch.cuda.get_device_name(),
           "date": datetime.date.today().isoformat(), "rounds": rounds, "rows": rows,
           "left_out_past_budget": left}
    with open(os.path.join(os.environ.get("OUT", "."), f"{name}.json"), "w") as f:
        json.dump(doc, f, indent=1)
