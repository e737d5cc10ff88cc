"""A/B of the attention forward's configs (``block_n``, ``stages``, ping-pong, persistent
grid, three consumers, lazy rescale, head sections, the dynamic tile scheduler, the
packed GQA layout) on the current GPU, at the FA3-paper shapes (B·S =
16k, H·D = 2048) with S in ``--seqs`` (default 1024 and 4096), bf16, causal and not
(``--causal-only``: causal), or at a named set's shapes: what the rows of
``ptxdsl/ops/attention/plans.json`` are chosen from. Each config's output is checked
against torch SDPA (``--resources``: and its registers and spills read) before the right
ones of a shape are timed side by side: ``--rounds`` rounds (default 5) in a new order
each, ``--iters`` (10) untimed then ``--iters`` timed calls (:mod:`bench.timing`); a
dynamic config's counter word must be zero again after them, and the output still right.
JSON goes to ``$OUT/<name>.json``. ``--write-plans`` then rewrites
``ptxdsl/ops/attention/plans.json`` with the fastest config per head dim and mask kind
(full; causal, which window follows): the least sum over the S values of its time over the
best time at that shape, citing ``bench/results/<name>_<device>.json``; rows of head dims
not run are kept (the grid's rows only, not a named set's). ``--budget`` seconds:
candidates not reached by then are skipped.

    PYTHONPATH=. python lab/attention_plans.py [--heads 64,96,128] [--seqs 1024,4096]
        [--name attention_plans] [--budget 600] [--causal-only] [--write-plans]
        [--candidates '{"128": [{"block_n": 176, "lazy_rescale": true}]}']
        [--set dynamic | --set h96,gqa,h128c,h128f,causal,diag,gqa_full,h256c,s16k2,fwdc,fwdu,
               fwdq,fwd1k,fwdts,fwdts16,fwdts1k,fwdts16b,gqa32]
        [--rounds 5] [--iters 10]
        [--fa4]
        [--resources]

``--candidates`` replaces the configs tried for the head dims it names (JSON, the keys
as strings); ``--set`` named sets of :data:`SETS` (:mod:`lab.attention_plan_sets`), run one
after another in one process (``dynamic``: the causal plan rows of head dims 64, 128 and
256 as they are, with head sections, dynamic, and dynamic with head sections, at the grid's
shapes; ``h96``, ``gqa``, ``h128c``, ``h128f``, ``causal``, ``diag``, ``gqa_full``,
``h256c``, ``s16k2``, ``fwdc``, ``fwdu``, ``fwdq``, ``fwd1k``, ``fwdts``, ``fwdts16``,
``fwdts1k``, ``fwdts16b``, ``gqa32``: the shapes where ptxdsl trails FA4, each with its
own shapes and H / Hkv (``gqa32``: Sq 32 against Sk 4096), the current plans row first). ``--fa4``:
FlashAttention-4 (``flash_attn.cute``, where installed) is timed beside the candidates of
each shape, as a row of layout ``fa4``.
"""
from __future__ import annotations

import datetime
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from lab.attention_plan_sets import CANDIDATES, SETS  # noqa: E402  (after the path)


def jobs():
    """``(set, D, S, H, Hkv, causal, candidates)`` in run order: the named sets of --set,
    else :data:`CANDIDATES` (with --candidates) at --heads and --seqs."""
    seqs = [int(x) for x in _arg("--seqs", "1024,4096").split(",")]
    masks = (True,) if "--causal-only" in sys.argv else (False, True)
    given = {int(d): c for d, c in json.loads(_arg("--candidates", "{}")).items()}
    names = [n for n in _arg("--set", "").split(",") if n]
    for n in names:
        if n not in SETS:
            raise SystemExit(f"--set {n}: the sets are {', '.join(SETS)}")
    plain = not names or names == ["dynamic"]         # dynamic: CANDIDATES' shapes
    sets = [("", {"candidates": {**CANDIDATES, **given}})] if not names else \
        [(n, SETS[n]) for n in names]
    for name, st in sets:
        cands_of = {**(CANDIDATES if plain else {}), **st["candidates"], **given}
        default = ",".join(map(str, cands_of if not plain else CANDIDATES))
        heads = [int(x) for x in _arg("--heads", default).split(",")] if plain else \
            list(cands_of)
        for d in heads:
            h, hk = st.get("heads", (2048 // d if d != 96 else 16,) * 2)
            for s in st.get("seqs", seqs):
                for causal in st.get("masks", masks):
                    cands = [_planned(c, d, s, causal) for c in cands_of[d]
                             if c.get("causal", causal) == causal]
                    if cands:        # a set's head dim may have candidates of one mask
                        yield name, d, s, h, hk, causal, cands


def _planned(cand: dict, d: int, s: int, causal: bool) -> dict:
    """A candidate with ``plan``: the plans.json row that attention() picks at this head
    dim, mask and key length (bf16), as Config keywords, with the candidate's own keys on
    top; ``plan`` stays (True: the row as it is, ``causal`` aside) to mark it in the
    results."""
    if not cand.get("plan"):
        return cand
    import dataclasses
    from ptxdsl.ops.attention.config import Config, Mask
    from ptxdsl.ops.attention.plan import choose
    c = choose(d, "bf16", Mask(-1, 0) if causal else Mask(), seqlen=s,
               layout=cand.get("layout", "dense"))
    kw = {f.name: getattr(c, f.name) for f in dataclasses.fields(c)
          if getattr(c, f.name) != f.default and not f.name.endswith("_regs")}
    derived = Config(**kw)                # the register budgets when the row names them
    kw.update({n: getattr(c, n) for n in ("producer_regs", "consumer_regs")
               if getattr(c, n) != getattr(derived, n)})
    extra = {k: v for k, v in cand.items() if k != "plan"}
    return {**kw, **extra, "plan": not set(extra) - {"causal"}}


def run_shape(job, kernels, sms, t0, budget, rounds, iters) -> list:
    """One shape's rows: each candidate built (``kernels``: the cache), checked against
    SDPA (``--resources``: its registers and spills read, ptxas -v), then the right ones
    timed side by side (:func:`bench.timing.time_interleaved`: a new order each round,
    each timed block after an untimed one of the same kernel, since the H200's clock
    follows its power draw); candidates reached past ``budget`` seconds from ``t0`` are
    skipped."""
    import torch
    import torch.nn.functional as F
    from bench.timing import time_interleaved
    from ptxdsl.core.types import bf16
    from ptxdsl.ops.attention.config import Config, Mask
    from ptxdsl.ops.attention.fwd import build_forward
    name, d, s, h, hk, causal, cands = job
    st = SETS.get(name, {})
    sq, b, g = st.get("sq", s), st.get("batch", 16384 // s), h // hk   # (a set's Sq < Sk)
    if sq != s and causal:
        raise SystemExit(f"--set {name}: Sq {sq} != Sk {s} times full masks only (SDPA's "
                         f"causal mask is top-left aligned, the op's bottom-right)")
    torch.manual_seed(0)
    q = torch.randn(b, sq, h, d, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(b, s, hk, d, device="cuda", dtype=torch.bfloat16)
            for _ in range(2))
    ref = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                         v.transpose(1, 2), is_causal=causal,
                                         enable_gqa=g > 1).transpose(1, 2).float()
    flops = 4 * b * h * sq * s * d * (0.5 if causal else 1.0)
    live, rows = {}, []
    for i, cand in enumerate(cands):
        kw = {x: y for x, y in cand.items() if x not in ("layout", "causal", "plan")}
        layout = cand.get("layout", "dense")
        row = {"set": name, "D": d, "S": s, "Sq": sq, "B": b, "H": h, "Hkv": hk,
               "causal": causal, "layout": layout, "config": kw}
        if "plan" in cand:              # the plans row as it is (True) or with more on
            row["plan"] = cand["plan"]
        rows.append(row)
        if time.time() - t0 > budget:
            row["error"] = "skipped: past --budget"
            continue
        try:
            key = (d, causal, layout, g, tuple(sorted(kw.items())))
            if key not in kernels:
                kernels[key] = build_forward(
                    Config(**kw), bf16, d, Mask(-1, 0) if causal else Mask(),
                    scale=d ** -0.5, sms=sms, layout=layout, group=g)
            kern = kernels[key]
            o = torch.empty_like(q)
            if layout == "packed":       # (B, Sq, Hkv, G, D) views, LSE (B, Hkv, G, Sq)
                qa, oa = q.view(b, sq, hk, g, d), o.view(b, sq, hk, g, d)
                lse = torch.empty(b, hk, g, sq, device="cuda", dtype=torch.float32)
            else:
                qa, oa = q, o
                lse = torch.empty(b, h, sq, device="cuda", dtype=torch.float32)
            # Config.dynamic: the tile counter, zero, left zero by each launch
            args = (qa, k, v, oa, lse) + ((torch.zeros(1, dtype=torch.int32,
                                                       device="cuda"),)
                                          if kw.get("dynamic") else ())
            kern(*args)
            torch.cuda.synchronize()
            row["max_err"] = float((o.float() - ref).abs().max() / ref.abs().max())
            if "--resources" in sys.argv:    # ptxas -v once more (tests check the sets)
                res = kern.resources()
                row["registers"], row["spills"] = res.registers, res.spill_stores
            if row["max_err"] <= 2e-2:
                live[i] = (kern, args, o)
            else:
                row["error"] = "wrong result"
        except Exception as e:  # noqa: BLE001 - recorded
            row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
    fns = {i: (lambda kern, args: lambda: kern(*args))(kern, args)
           for i, (kern, args, _) in live.items()}
    if live and "--fa4" in sys.argv:      # FA4 (flash_attn.cute) as a yardstick, same run
        fa4 = _fa4_row(torch, q, k, v, causal, ref) if time.time() - t0 <= budget else \
            ({"error": "skipped: past --budget"}, None)
        rows.append({"set": name, "D": d, "S": s, "Sq": sq, "B": b, "H": h, "Hkv": hk,
                     "causal": causal, "layout": "fa4", "config": {}, **fa4[0]})
        if fa4[1] is not None:
            fns[len(rows) - 1] = fa4[1]
    if live:          # interleaved, a new order each round (bench/timing.py)
        ms = time_interleaved(torch, fns, rounds, iters)
        for i, t in ms.items():
            if i not in live:
                rows[i]["ms"], rows[i]["tflops"] = t, flops / t / 1e9
                continue
            row, (kern, args, o) = rows[i], live[i]
            row["ms"], row["tflops"] = t, flops / t / 1e9
            if cands[i].get("dynamic"):       # many launches on one counter word
                row["counter_after"] = int(args[-1].item())
                row["max_err"] = max(row["max_err"], float(
                    (o.float() - ref).abs().max() / ref.abs().max()))
    return rows


def _fa4_row(torch, q, k, v, causal, ref):
    """``({max_err} or {error}, call or None)``: FA4's ``flash_attn_func`` on the shape,
    checked like a candidate (it sits out where it is not installed or wrong)."""
    try:
        from flash_attn.cute import flash_attn_func

        def call():
            r = flash_attn_func(q, k, v, causal=causal)
            return r[0] if isinstance(r, tuple) else r
        err = float((call().float() - ref).abs().max() / ref.abs().max())
        return ({"max_err": err}, call) if err <= 2e-2 else ({"max_err": err,
                                                             "error": "wrong result"}, None)
    except Exception as e:  # noqa: BLE001 - recorded, FA4 sits out
        return {"error": f"{type(e).__name__}: {str(e)[:300]}"}, None


def main() -> None:
    import torch
    t0 = time.time()
    out = {"benchmark": "attention_plans", "device": torch.cuda.get_device_name(),
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "torch": torch.__version__, "argv": sys.argv[1:], "rows": []}
    path = os.path.join(os.environ.get("OUT", "."), f"{_arg('--name', 'attention_plans')}.json")
    budget = float(_arg("--budget", "600"))
    rounds, iters = int(_arg("--rounds", "5")), int(_arg("--iters", "10"))
    todo = list(jobs())
    out["heads"] = sorted({j[1] for j in todo})
    out["seqs"] = sorted({j[2] for j in todo})
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    kernels = {}
    for job in todo:
        for row in run_shape(job, kernels, sms, t0, budget, rounds, iters):
            out["rows"].append(row)
            print(json.dumps(row), flush=True)
        with open(path, "w") as f:
            json.dump(out, f, indent=1)
    out["seconds"] = round(time.time() - t0, 1)
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    _table(out)
    if "--write-plans" in sys.argv:
        if _arg("--set", "dynamic") != "dynamic":
            raise SystemExit("--write-plans takes the dense grid's rows; a named set's "
                             "winners go into plans.json by hand")
        write_plans(out)


def _name(kw: dict) -> str:
    """A config as ``128x2 pp persistent m192 lazy`` (only what differs from Config())."""
    if kw.get("layout") == "fa4":
        return "FA4"
    bits = [f"{kw.get('block_n', 128)}x{kw.get('stages', 2)}"]
    bits += [w for k, w in (("pingpong", "pp"), ("persistent", "persistent"),
                            ("tma_store", "tma-store"), ("lazy_rescale", "lazy"),
                            ("head_sections", f"l2x{kw.get('section_mb') or 24}"),
                            ("dynamic", "dyn"), ("store_wait_once", "w1"), ("o_in_q", "o-in-q"),
                            ("uniform_cons", "uc"), ("q_double", "q2"),
                            ("late_epilogue", "late"))
                   if kw.get(k)]
    if kw.get("consumers", 2) != 2:
        bits.append(f"m{64 * kw['consumers']}")
    if kw.get("layout", "dense") != "dense":
        bits.append(kw["layout"])
    return " ".join(bits)


def _table(out) -> None:
    print(f"{'D':>4} {'S':>6} {'H/Hkv':>6} {'mask':>7}  " + "TFLOP/s per config")
    shape = lambda r: (r["D"], r["S"], r.get("H", 0), r.get("Hkv", 0), r["causal"])  # noqa: E731
    for d, s, h, hk, causal in sorted({shape(r) for r in out["rows"]}):
        rs = [r for r in out["rows"] if shape(r) == (d, s, h, hk, causal)]
        name = lambda r: _name({**r["config"], "layout": r.get("layout", "dense")})  # noqa: E731
        print(f"{d:>4} {s:>6} {h:>3}/{hk:<2} {'causal' if causal else 'full':>7}  " + "; ".join(
            f"{name(r)} {r['tflops']:.0f}" if "tflops" in r else
            f"{name(r)} {r.get('error', '?')[:40]}" for r in rs))


def _arg(name: str, default: str) -> str:
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


def write_plans(out) -> None:
    """plans.json rows: per head dim and mask kind (full; causal with window) the config
    with the least sum over the S values of its time over the best there, in a new row
    ahead of the old ones where it differs from what the table chose; the old rows stay
    where they still answer some mask kind (one row when both kinds pick the same new
    config)."""
    from ptxdsl.ops.attention.config import Config
    dev = out["device"].split()[-1].lower()
    plans = os.path.join(os.path.dirname(__file__), "..", "ptxdsl", "ops", "attention",
                         "plans.json")
    table = json.load(open(plans))
    old = table["rows"]

    def current(d, kind):
        return next((r for r in old if d in r["head_dims"] and kind in r["masks"]), None)

    seqs = "/".join(f"{s // 1024}k" for s in out["seqs"])
    new, replaced = [], set()
    for d in out["heads"]:
        picks = []
        for causal, masks in ((False, ["full"]), (True, ["causal", "window"])):
            runs = [r for r in out["rows"] if r["D"] == d and r["causal"] == causal
                    and "ms" in r and r["max_err"] <= 2e-2 and not r.get("counter_after")
                    and r.get("layout", "dense") == "dense"]
            shapes = {r["S"] for r in runs}
            best_ms = {sh: min(r["ms"] for r in runs if r["S"] == sh) for sh in shapes}
            score, seen = {}, {}
            for r in runs:
                key = json.dumps(r["config"], sort_keys=True)
                score[key] = score.get(key, 0.0) + r["ms"] / best_ms[r["S"]]
                seen.setdefault(key, []).append(r)
            full = [k for k in score if len(seen[k]) == len(shapes)]
            if not full:
                continue
            best = min(full, key=score.get)
            was = [current(d, m) for m in masks]
            if all(w is not None and Config(**w["config"]) == Config(**json.loads(best))
                   for w in was):
                continue                          # the table's choice stands
            measured = "/".join(f"{s // 1024}k" for s in sorted(shapes))
            say = "; ".join(f"{_name(json.loads(k))} " + " ".join(
                f"{r['tflops']:.0f}" for r in sorted(seen[k], key=lambda r: r["S"]))
                for k in full)
            picks.append((masks, best, say, measured))
            replaced.update((d, m) for m in masks)
        if len(picks) == 2 and picks[0][1] == picks[1][1]:
            picks = [(picks[0][0] + picks[1][0], picks[0][1],
                      f"full: {picks[0][2]}. causal: {picks[1][2]}", picks[0][3])]
        for masks, best, say, measured in picks:
            new.append({"head_dims": [d], "dtypes": ["bf16", "f16"], "masks": masks,
                        "config": json.loads(best),
                        "source": f"bench/results/{_arg('--name', 'attention_plans')}_{dev}"
                                  f".json",
                        "reason": f"{out['device']} bf16 TFLOP/s at S={measured} "
                                  f"({'/'.join(masks)}): {say}"})
    kept = [r for r in old if any((d, m) not in replaced
                                  for d in r["head_dims"] for m in r["masks"])]
    table["rows"] = new + kept
    with open(plans, "w") as f:          # one row a line
        f.write('{\n "about": ' + json.dumps(table["about"]) + ',\n "rows": [\n'
                + ",\n".join("  " + json.dumps(r) for r in table["rows"]) + "\n ]\n}\n")
    print(json.dumps(table["rows"], indent=1))


if __name__ == "__main__":
    main()
