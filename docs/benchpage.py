"""The Performance page's sections, built from ``bench/results/<benchmark>_<device>.json``
when the docs are built: per benchmark and device a chart (:mod:`svgchart`) and a
short table under it. ``<!-- ptxdsl:bench-chart NAME -->`` in a page becomes
:func:`render` of NAME (see :data:`SECTIONS`)."""
from __future__ import annotations

import glob
import math
import os
import re

import svgchart

_DEVICE = re.compile(r"_([a-z]\d{3})\.json$")


def runs(folder: str, name: str) -> list[tuple[str, str, dict]]:
    """``(device tag, file name, data)`` of each ``NAME_<device>.json``, by device."""
    import json
    out = []
    for path in sorted(glob.glob(os.path.join(folder, f"{name}_*.json"))):
        base = os.path.basename(path)
        m = _DEVICE.search(base)
        if m and base == f"{name}_{m.group(1)}.json":
            with open(path, encoding="utf-8") as f:
                out.append((m.group(1).upper(), base, json.load(f)))
    return out


def _us(res: dict, name: str) -> float | None:
    v = res.get(name)
    return v.get("us") if isinstance(v, dict) and isinstance(v.get("us"), (int, float)) else None


def pct_of_copy(res: dict, name: str) -> float | None:
    """The copy's time over ``name``'s, in percent (100: as fast as the copy)."""
    cp, t = _us(res, "copy"), _us(res, name)
    return 100 * cp / t if cp and t else None


def geomean(xs) -> float | None:
    xs = [x for x in xs if x]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


def _contenders(rows: list[dict], skip=("copy",)) -> list[str]:
    names = dict.fromkeys(k for r in rows for k in r["results"])
    return [n for n in names if n not in skip]


def _shape(s) -> str:
    return "×".join(map(str, s))


def _cell(v, fmt="{:.0f}%") -> str:
    return "" if v is None else fmt.format(v)


def _table(head: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def _figure(svg: str, caption: str) -> str:
    # One line: Python-Markdown passes a block of raw HTML through untouched.
    return f'<figure class="bench-chart">{svg}<figcaption>{caption}</figcaption></figure>'


def _source(dev: str, base: str, data: dict) -> str:
    facts = [data.get("device") or dev]
    for key in ("date", "when", "torch"):
        if data.get(key):
            facts.append(f"{key} {str(data[key]).replace('T', ' ')}")
    return f"**{dev}** · " + " · ".join(facts) + f" · `bench/results/{base}`"


# ------------------------------------------------------------------ RMSNorm
def _device_bound(rows):
    # One-row and few-row shapes time the host's launch work, not the kernel.
    return [r for r in rows if math.prod(r["shape"]) // r["shape"][-1] >= 1024]


def rmsnorm(folder: str) -> list[str]:
    out = []
    for dev, base, d in runs(folder, "rmsnorm"):
        out += [_source(dev, base, d), ""]
        for part in ("forward", "backward"):
            rows = sorted((r for r in _device_bound(d.get(part, [])) if r["dtype"] == "bf16"),
                          key=lambda r: (r["shape"][-1], r["shape"][0]))
            if not rows:
                continue
            names = _contenders(rows)
            series = {n: [pct_of_copy(r["results"], n) for r in rows] for n in names}
            svg = svgchart.line_chart([_shape(r["shape"]) for r in rows], series,
                                      ylabel="% of the copy's speed", ref=100,
                                      title=f"RMSNorm {part}, bf16, {dev}")
            out += [_figure(svg, f"{dev}, {part}, bf16: each contender's speed as % of a "
                                 "device copy of the same bytes (dotted: 100%), shapes M×N "
                                 "by N."), ""]
        head, rows = ["contender"], []
        parts = [(p, t) for p in ("forward", "backward") for t in ("f32", "bf16", "f16")
                 if any(r["dtype"] == t for r in d.get(p, []))]
        head += [f"{p[0]}wd {t}" for p, t in parts]
        names = _contenders(d.get("forward", []) + d.get("backward", []))
        for n in names:
            cells = []
            for p, t in parts:
                sel = [r for r in _device_bound(d.get(p, [])) if r["dtype"] == t]
                cells.append(_cell(geomean(pct_of_copy(r["results"], n) for r in sel)))
            rows.append([n] + cells)
        out += [_table(head, rows), "",
                "*Geometric mean of % of the copy over the shapes with at least 1024 rows.*", ""]
    return out


def rmsnorm_long(folder: str) -> list[str]:
    out = []
    for dev, base, d in runs(folder, "rmsnorm_long"):
        out += [_source(dev, base, d), ""]
        table = {}
        for part in ("forward", "backward"):
            rows = sorted(d.get(part, []), key=lambda r: r["shape"][-1])
            if not rows:
                continue
            names = _contenders(rows)
            series = {n: [pct_of_copy(r["results"], n) for r in rows] for n in names}
            dtype = rows[0]["dtype"]
            svg = svgchart.line_chart([str(r["shape"][-1]) for r in rows], series,
                                      ylabel="% of the copy's speed", ref=100,
                                      dashed=("ptxdsl:1cta",),
                                      title=f"RMSNorm long rows, {part}, {dtype}, {dev}")
            out += [_figure(svg, f"{dev}, {part}: % of the copy against the row length N "
                                 f"(M = {rows[0]['shape'][0]} rows, fewer where memory is "
                                 "short); ptxdsl:1cta is the op without its cluster plans."),
                    ""]
            for r in rows:
                peers = {n: pct_of_copy(r["results"], n) for n in names
                         if not n.startswith("ptxdsl")}
                best = max((kv for kv in peers.items() if kv[1]), key=lambda kv: kv[1],
                           default=None)
                table.setdefault(str(r["shape"][-1]), {})[part] = (
                    pct_of_copy(r["results"], "ptxdsl"), best)
        rows = [[shape] + [c for part in ("forward", "backward") for c in (
                    _cell(v.get(part, (None, None))[0]),
                    f"{v[part][1][0]} {v[part][1][1]:.0f}%" if v.get(part, (0, 0))[1] else "")]
                for shape, v in table.items()]
        out += [_table(["N", "fwd ptxdsl", "fwd best peer", "bwd ptxdsl", "bwd best peer"],
                       rows), ""]
    return out


def _ratio(res: dict, num: str, den: str) -> float | None:
    a, b = _us(res, num), _us(res, den)
    return a / b if a and b else None


def _share(res: dict, name: str, key: str) -> float | None:
    v = res.get(name)
    return v.get(key) if isinstance(v, dict) and isinstance(v.get(key), (int, float)) else None


def rmsnorm_quack(folder: str) -> list[str]:
    """ptxdsl against Quack at every shape and dtype of ``bench/rmsnorm.py`` (run with
    ``--only ptxdsl,quack``): Quack's time over ptxdsl's, and both as % of the copy, the
    backward's by both byte counts (the copy's, and Quack's with the dW partials)."""
    out = []
    for dev, base, d in runs(folder, "rmsnorm_quack"):
        out += [_source(dev, base, d), ""]
        labels, series = [], {}
        for part in ("forward", "backward"):
            rows = d.get(part, [])
            if not rows:
                continue
            labels = labels or [f"{r['dtype']} {_shape(r['shape'])}" for r in rows]
            series[part] = [_ratio(r["results"], "quack", "ptxdsl") for r in rows]
        if not series:
            continue
        svg = svgchart.line_chart(labels, series, ylabel="Quack's time / ptxdsl's", ref=1,
                                  title=f"RMSNorm against Quack, {dev}", width=920)
        out += [_figure(svg, f"{dev}: Quack's time over ptxdsl's per dtype and shape M×N "
                             "(above the dotted 1: ptxdsl is faster)."), ""]
        for part in ("forward", "backward"):
            rows = d.get(part, [])
            if not rows:
                continue
            bwd = part == "backward"
            head = ["dtype", "M×N", "ptxdsl µs", "Quack µs", "Quack / ptxdsl",
                    "ptxdsl % copy", "Quack % copy"]
            if bwd:
                head += ["ptxdsl % copy (Quack's bytes)", "Quack % copy (Quack's bytes)"]
            table = []
            for r in rows:
                res = r["results"]
                cells = [r["dtype"], _shape(r["shape"]), _cell(_us(res, "ptxdsl"), "{:.1f}"),
                         _cell(_us(res, "quack"), "{:.1f}") or
                         str((res.get("quack") or {}).get("error", ""))[:40],
                         _cell(_ratio(res, "quack", "ptxdsl"), "{:.2f}×"),
                         _cell(pct_of_copy(res, "ptxdsl")), _cell(pct_of_copy(res, "quack"))]
                if bwd:
                    cells += [_cell(_share(res, n, "pct_copy_quack")) for n in ("ptxdsl", "quack")]
                table.append(cells)
            out += [f"**{part.capitalize()}**", "", _table(head, table), ""]
        out += ["*% copy: the device copy's time over the contender's (the copy moves x and y "
                "forward; x, dY and dX backward). Quack's bytes: the backward's bandwidth by "
                "Quack's count (+ the weight, rstd and the dW partials, 2·SMs·N float32) over "
                "the copy's. Shapes of a few rows time the host's launch work.*", ""]
    return out


def _by_section(d: dict, keys: list[str], metric) -> tuple[list[str], dict[str, list]]:
    """Bars per (section, dtype) of ``metric(results, contender)``, geomean over shapes."""
    labels, groups = [], []
    for key in keys:
        rows = d.get(key) or []
        for dtype in dict.fromkeys(r.get("dtype") for r in rows):
            labels.append(f"{key} {dtype}" if dtype else key)
            groups.append([r for r in rows if r.get("dtype") == dtype])
    names = _contenders([r for g in groups for r in g])
    series = {n: [geomean(metric(r["results"], n) for r in g) for g in groups] for n in names}
    return labels, series


def _pct_bars(folder: str, name: str, keys: list[str], what: str) -> list[str]:
    out = []
    for dev, base, d in runs(folder, name):
        ks = [k for k in keys if isinstance(d.get(k), list)]
        labels, series = _by_section(d, ks, pct_of_copy)
        svg = svgchart.bar_chart(labels, series, xlabel="% of the copy's speed", ref=100,
                                 title=f"{what}, {dev}")
        shapes = sorted({_shape(r["shape"]) for k in ks for r in d[k]})
        out += [_source(dev, base, d), "",
                _figure(svg, f"{dev}: % of a device copy of the same bytes (dotted: 100%), "
                             f"geometric mean over {', '.join(shapes)}."), "",
                _table(["kernel"] + list(series),
                       [[lab] + [_cell(series[n][i]) for n in series]
                        for i, lab in enumerate(labels)]), ""]
    return out


def rmsnorm_quant(folder: str) -> list[str]:
    return _pct_bars(folder, "rmsnorm_quant",
                     ["quant", "quant_res", "quant_static", "offset_fwd", "offset_bwd"],
                     "RMSNorm with FP8 output and with Gemma's offset")


def examples(folder: str) -> list[str]:
    return _pct_bars(folder, "examples",
                     ["softmax", "layer_norm", "swiglu", "vector_add", "rms_norm"],
                     "Gallery kernels")


# ------------------------------------------------------------------ GEMM
def _tflops(res: dict, name: str) -> float | None:
    v = res.get(name)
    return v.get("tflops") if isinstance(v, dict) and "error" not in v else None


LAYOUTS = {"linear": "x @ W.T", "nn": "a @ b"}


def _gemm(folder: str, name: str, ref: str, what: str) -> list[str]:
    """Per device (and per layout, where the rows name theirs) a chart and a table of
    ratios against ``ref`` in the same layout."""
    out = []
    for dev, base, d in runs(folder, name):
        layouts = list(dict.fromkeys(r.get("layout", d.get("layout")) for r in d.get("rows", [])))
        if len(layouts) <= 1:
            out += _gemm_part(dev, base, d, d.get("rows", []), ref, what)
            continue
        for layout in layouts:
            rows = [r for r in d["rows"] if r.get("layout", d.get("layout")) == layout]
            out += _gemm_part(dev, base, d, rows, ref,
                              f"{what} ({LAYOUTS.get(layout, layout)})")
    return out


def _gemm_part(dev, base, d, rows, ref, what) -> list[str]:
    out = []
    names = _contenders(rows, skip=())
    series = {n: [_tflops(r["results"], n) for r in rows] for n in names}
    groups = [r.get("group", "") for r in rows]
    breaks = tuple(i for i in range(1, len(rows)) if groups[i] != groups[i - 1])
    svg = svgchart.line_chart([_shape(r["shape"]) for r in rows], series,
                              ylabel="TFLOP/s", dashed=(ref,), breaks=breaks, width=920,
                              title=f"{what}, {dev}")
    out += [_source(dev, base, d), "",
            _figure(svg, f"{dev}: TFLOP/s per shape M×N×K (dashed: {ref}), "
                         "in the benchmark's groups (rules between them): squares, LLM shapes by M, small M."),
            ""]
    others = [n for n in names if n != ref]
    table = []
    for group in dict.fromkeys(r.get("group", "") for r in rows):
        sel = [r for r in rows if r.get("group", "") == group]
        cells = [group, str(len(sel)),
                 _cell(geomean(_tflops(r["results"], ref) for r in sel), "{:.0f}")]
        for n in others:
            ratio = geomean(_tflops(r["results"], n) / _tflops(r["results"], ref)
                            for r in sel if _tflops(r["results"], n)
                            and _tflops(r["results"], ref))
            cells.append(_cell(ratio, "{:.2f}×"))
        table.append(cells)
    out += [_table(["shapes", "count", f"{ref} TFLOP/s"] + [f"{n} / {ref}" for n in others],
                   table), "",
            f"*Geometric means per group of shapes; a ratio above 1× is faster than "
            f"{ref}.*", ""]
    return out


def matmul(folder: str) -> list[str]:
    return _gemm(folder, "matmul", "cuBLAS", "GEMM bf16")


def matmul_fp8(folder: str) -> list[str]:
    return _gemm(folder, "matmul_fp8", "cuBLAS fp8", "GEMM e4m3, scaled")


def matmul_fp8_row(folder: str) -> list[str]:
    return _gemm(folder, "matmul_fp8_row", "cuBLAS fp8", "GEMM e4m3, row-wise scales")


def matmul_fp8_block(folder: str) -> list[str]:
    return _gemm(folder, "matmul_fp8_block", "cuBLAS fp8", "GEMM e4m3, block-wise scales")


def matmul_grouped(folder: str) -> list[str]:
    """Grouped GEMM: TFLOP/s (real rows) per MoE shape and kind (bf16, float8 per-tensor
    or row-wise scales), ptxdsl's against each peer of the same kind."""
    out = []
    for dev, base, d in runs(folder, "matmul_grouped"):
        rows = d.get("rows", [])
        kinds = list(dict.fromkeys(_grouped_kind(r) for r in rows))
        out += [_source(dev, base, d), ""]
        for kind in kinds:
            sel = [r for r in rows if _grouped_kind(r) == kind]
            names = _contenders(sel, skip=())
            labels = [f"G{r['shape'][0]} N{r['shape'][1]} K{r['shape'][2]}" for r in sel]
            series = {n: [_tflops(r["results"], n) for r in sel] for n in names}
            ours = "ptxdsl fp8" if kind.startswith("fp8") else "ptxdsl"
            svg = svgchart.bar_chart(labels, series, xlabel="TFLOP/s", highlight=ours,
                                     title=f"Grouped GEMM {kind}, {dev}")
            head = ["G, N, K", "tokens"] + names + [f"{ours} / {n}" for n in names if n != ours]
            table = []
            for lab, r in zip(labels, sel):
                res = r["results"]
                cells = [lab, str(sum(r.get("sizes", [])))]
                cells += [_cell(_tflops(res, n), "{:.0f}") for n in names]
                for n in names:
                    if n != ours:
                        a, b = _tflops(res, ours), _tflops(res, n)
                        cells.append(_cell(a / b if a and b else None, "{:.2f}×"))
                table.append(cells)
            out += [f"**{kind}**", "",
                    _figure(svg, f"{dev}: grouped GEMM, {kind}, TFLOP/s of the real rows per "
                                 "MoE shape (G experts, ragged tokens per expert)."), "",
                    _table(head, table), ""]
    return out


def _grouped_kind(r: dict) -> str:
    return f"fp8 {r.get('scales') or 'tensor'}" if r.get("fp8") else "bf16"


def pyptx_compat(folder: str) -> list[str]:
    out = []
    for dev, base, d in runs(folder, "pyptx_compat"):
        cases = d.get("cases", [])
        names = _contenders(cases, skip=())
        series = {n: [_tflops(c["results"], n) for c in cases] for n in names}
        svg = svgchart.bar_chart([c["case"] for c in cases], series, xlabel="TFLOP/s",
                                 title=f"pyptx's Hopper GEMM examples, {dev}")
        out += [_source(dev, base, d), "",
                _figure(svg, f"{dev}: pyptx's examples run on ptxdsl (imports renamed) and "
                             "on pyptx, beside cuBLAS."), "",
                _table(["case"] + names, [[c["case"]] + [_cell(series[n][i], "{:.0f}")
                                                         for n in names]
                                          for i, c in enumerate(cases)]), ""]
    return out


def matmul_host(folder: str) -> list[str]:
    out = []
    for dev, base, d in runs(folder, "matmul_host"):
        rows = [r for r in d.get("rows", []) if "host µs per call" in r]
        labels = [r["piece"] for r in rows]
        vals = [r["host µs per call"] for r in rows]
        svg = svgchart.bar_chart(labels, {"host µs": vals}, xlabel="host µs per call",
                                 highlight="ptxdsl",
                                 title=f"GEMM host cost per call, {dev}")
        out += [_source(dev, base, d), "",
                _figure(svg, f"{dev}: host µs per call of torch.matmul and "
                             "ptxdsl.ops.matmul, and of their pieces."), "",
                _table(["call or piece", "host µs"], [[lab, f"{v:.2f}"]
                                                      for lab, v in zip(labels, vals)]), ""]
    return out


# ------------------------------------------------------------------ launch
def launch_overhead(folder: str) -> list[str]:
    out = []
    for dev, base, d in runs(folder, "launch_overhead"):
        res = {k: v["median_us"] for k, v in d.get("results", {}).items()}
        # Calls that do more than launch (the general path, numpy round trips) would
        # flatten the bars of the rest: they are named under the chart instead.
        floor = min(res.values())
        shown = {k: v for k, v in res.items() if v < 5 * floor}
        left_out = ", ".join(f"{k} {v:.1f} µs" for k, v in res.items() if k not in shown)
        svg = svgchart.bar_chart(list(shown), {"µs": list(shown.values())},
                                 xlabel="host µs per launch (median)", highlight="ptxdsl",
                                 title=f"Launch overhead, {dev}", width=900)
        out += [_source(dev, base, d), "",
                _figure(svg, f"{dev}: host µs per call of a {d.get('n', '')}-element vector "
                             "add, each contender timed on its own"
                             + (f" (not drawn: {left_out})." if left_out else ".")), ""]
        h2h = d.get("head_to_head", {})
        rows = [[k, f"{v['median_us']:.2f}"] for k, v in h2h.items()]
        comp = d.get("compile", {})
        if comp.get("cold"):
            rows.append(["cold compile (trace, ptxas, load), ms",
                         f"{comp['cold']['total_ms']:.1f}"])
        warm = comp.get("warm_disk") or []
        if warm:
            rows.append(["disk-cache hit, ms", f"{min(w['total_ms'] for w in warm):.1f}"
                         if all("total_ms" in w for w in warm) else ""])
        out += [_table(["head to head (taking turns)", "median µs"], rows), ""]
    return out


# ------------------------------------------------------------------ attention
def _attn_label(r: dict) -> str:
    sq, sk = r.get("Sq", r.get("S")), r.get("Sk", r.get("S"))
    s = f"{sq}" if sq == sk else f"{sq}/{sk}"
    return f"d{r['D']} {s}{' c' if r.get('causal') else ''}"


def _attention(folder: str, name: str, what: str, refs=("fa4", "cudnn")) -> list[str]:
    out = []
    for dev, base, d in runs(folder, name):
        rows = [r for r in d.get("rows", []) if "D" in r]
        names = _contenders(rows, skip=())
        series = {n: [_tflops(r["results"], n) for r in rows] for n in names}
        svg = svgchart.line_chart([_attn_label(r) for r in rows], series, ylabel="TFLOP/s",
                                  dashed=tuple(n for n in refs if n in names), width=920,
                                  title=f"{what}, {dev}")
        out += [_source(dev, base, d), "",
                _figure(svg, f"{dev}: TFLOP/s per shape (head dim, sequence length, c = "
                             "causal; dashed: the references)."), ""]
        head = ["D", "S", "H/Hkv", "mask"] + names + [f"ptxdsl / {n}" for n in refs if n in names]
        table, ratios = [], {n: [] for n in refs}
        for r in rows:
            res = r["results"]
            cells = [str(r["D"]), _attn_label(r).split()[1], f"{r.get('H')}/{r.get('Hkv')}",
                     "causal" if r.get("causal") else "full"]
            cells += [_cell(_tflops(res, n), "{:.0f}") for n in names]
            for n in refs:
                if n in names:
                    x, y = _tflops(res, "ptxdsl"), _tflops(res, n)
                    ratio = x / y if x and y else None
                    if ratio:
                        ratios[n].append(ratio)
                    cells.append(_cell(ratio, "{:.2f}×"))
            table.append(cells)
        means = [f"ptxdsl / {n}: {geomean(v):.2f}× geometric mean" for n, v in ratios.items() if v]
        out += [_table(head, table), "", f"*{'; '.join(means)}.*" if means else "", ""]
    return out


def attention(folder: str) -> list[str]:
    return _attention(folder, "attention", "Attention forward bf16")


def attention_bwd(folder: str) -> list[str]:
    return _attention(folder, "attention_bwd", "Attention backward bf16")


SECTIONS = {
    "rmsnorm": rmsnorm, "rmsnorm_long": rmsnorm_long, "rmsnorm_quant": rmsnorm_quant,
    "rmsnorm_quack": rmsnorm_quack,
    "examples": examples, "matmul": matmul, "matmul_fp8": matmul_fp8,
    "matmul_fp8_row": matmul_fp8_row, "matmul_fp8_block": matmul_fp8_block,
    "matmul_grouped": matmul_grouped,
    "matmul_host": matmul_host, "pyptx_compat": pyptx_compat,
    "launch_overhead": launch_overhead, "attention": attention, "attention_bwd": attention_bwd,
}


def render(folder: str, name: str) -> str:
    """The charts and tables of benchmark ``name`` (a key of :data:`SECTIONS`), or a
    sentence saying that no result of it is committed."""
    if name not in SECTIONS:
        raise ValueError(f"no chart for benchmark {name!r}; known: {', '.join(SECTIONS)}")
    lines = SECTIONS[name](folder)
    if not lines:
        return (f"*No `{name}` results are committed yet* (`bench/results/{name}_<device>"
                ".json`); this space fills in from them when they are.")
    return "\n".join(lines)
