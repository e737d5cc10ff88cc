"""Small inline SVG charts for the docs (no plotting library): a line chart over
categorical x labels and a horizontal bar chart. Text and axes use ``currentColor`` so
the charts read in the light and the dark theme alike."""
from __future__ import annotations

import math
from html import escape

# One colour per contender wherever it appears; others take the fallback palette in turn.
COLORS = {
    "ptxdsl": "#2e7d32", "copy": "#9e9e9e", "cuBLAS": "#37474f", "torch.compile": "#ef6c00",
    "triton": "#1565c0", "F.rms_norm": "#6a1b9a", "liger": "#8d6e63", "pyptx": "#00897b",
    "eager": "#d81b60", "ptxdsl:1cta": "#9ccc65", "ptxdsl fp8": "#2e7d32",
    "cuBLAS fp8": "#37474f", "cuBLAS bf16": "#90a4ae",
}
_FALLBACK = ["#c62828", "#0277bd", "#f9a825", "#4e342e", "#5e35b1", "#00838f"]


def color(name: str, i: int = 0) -> str:
    return COLORS.get(name) or _FALLBACK[i % len(_FALLBACK)]


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """Round tick values covering [lo, hi]."""
    span = (hi - lo) or abs(hi) or 1.0
    raw = span / n
    step = 10 ** math.floor(math.log10(raw))
    step *= next(m for m in (1, 2, 2.5, 5, 10) if m * step >= raw)
    first = math.floor(lo / step) * step
    return [first + i * step for i in range(int(math.ceil((hi - first) / step)) + 1)]


def _num(v: float) -> str:
    return f"{v:g}" if abs(v) < 1e4 else f"{v:.0f}"


def _legend(names: list[str], x: float, y: float, dashed: set[str]) -> list[str]:
    out, cx = [], x
    for i, n in enumerate(names):
        dash = ' stroke-dasharray="4 3"' if n in dashed else ""
        out.append(f'<line x1="{cx}" y1="{y - 4}" x2="{cx + 16}" y2="{y - 4}" '
                   f'stroke="{color(n, i)}" stroke-width="2.5"{dash}/>')
        out.append(f'<text x="{cx + 20}" y="{y}">{escape(n)}</text>')
        cx += 30 + 6.5 * len(n)
    return out


def line_chart(labels: list[str], series: dict[str, list[float | None]], *, ylabel: str,
               title: str = "", ref: float | None = None, dashed: tuple[str, ...] = (),
               breaks: tuple[int, ...] = (), width: int = 760, height: int = 230) -> str:
    """Lines (one per series) over categorical x ``labels``; ``None`` leaves a gap, and so
    does each index in ``breaks`` (where a new group of labels starts, marked by a rule).
    ``ref`` draws a horizontal reference line (100% of the copy, say). ``height`` is the
    plot's; the labels and the legend add to it."""
    values = [v for vs in series.values() for v in vs if v is not None]
    values += [ref] if ref is not None else []
    lo, hi = min(values), max(values)
    pad = 0.04 * ((hi - lo) or hi or 1)
    ticks = _ticks(max(lo - pad, 0) if lo >= 0 else lo - pad, hi + pad)
    y0, y1 = ticks[0], ticks[-1]
    label_h = 6.6 * max(len(lab) for lab in labels) + 12
    left, right, top = 56, 12, 40 if title else 24
    pw, ph = width - left - right, height
    total = top + ph + label_h

    def px(i):
        return left + pw * (i + 0.5) / len(labels)

    def py(v):
        return top + ph * (1 - (v - y0) / ((y1 - y0) or 1))

    out = [_open(width, total)]
    if title:
        out.append(f'<text x="{left}" y="14" font-weight="bold">{escape(title)}</text>')
    out += _legend(list(series), left, 30 if title else 14, set(dashed))
    for t in ticks:
        out.append(f'<line x1="{left}" y1="{py(t):.0f}" x2="{left + pw}" y2="{py(t):.0f}" '
                   'stroke="currentColor" stroke-opacity="0.12"/>')
        out.append(f'<text x="{left - 6}" y="{py(t) + 4:.0f}" text-anchor="end">{_num(t)}</text>')
    out.append(f'<text transform="translate(13 {top + ph / 2:.0f}) rotate(-90)" '
               f'text-anchor="middle">{escape(ylabel)}</text>')
    if ref is not None:
        out.append(f'<line x1="{left}" y1="{py(ref):.0f}" x2="{left + pw}" y2="{py(ref):.0f}" '
                   'stroke="currentColor" stroke-opacity="0.5" stroke-dasharray="2 3"/>')
    for b in breaks:
        x = (px(b - 1) + px(b)) / 2
        out.append(f'<line x1="{x:.0f}" y1="{top}" x2="{x:.0f}" y2="{top + ph}" '
                   'stroke="currentColor" stroke-opacity="0.35"/>')
    for i, lab in enumerate(labels):
        out.append(f'<text transform="translate({px(i) + 4:.0f} {top + ph + 6}) rotate(-90)" '
                   f'text-anchor="end">{escape(lab)}</text>')
    for k, (name, vs) in enumerate(series.items()):
        c = color(name, k)
        dash = ' stroke-dasharray="4 3"' if name in dashed else ""
        width_ = 3 if name == "ptxdsl" or name.startswith("ptxdsl ") else 1.6
        out.append(f'<g fill="{c}">')
        run: list[str] = []
        for i, v in enumerate(list(vs) + [None]):
            if v is None or i in breaks:
                if len(run) > 1:
                    out.append(f'<polyline fill="none" stroke="{c}" stroke-width="{width_}"'
                               f'{dash} points="{" ".join(run)}"/>')
                run = []
            if v is None:
                continue
            run.append(f"{px(i):.0f},{py(v):.0f}")
            out.append(f'<circle cx="{px(i):.0f}" cy="{py(v):.0f}" r="2.6">'
                       f'<title>{escape(name)} {escape(labels[i])}: {v:.3g}</title></circle>')
        out.append("</g>")
    out.append("</svg>")
    return "".join(out)


def _open(width: int, height: float) -> str:
    # Text inherits fill and font from the root; shapes set their own fill.
    return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height:.0f}" '
            f'role="img" fill="currentColor" font-family="sans-serif" font-size="11" '
            f'style="width:100%;max-width:{width}px;height:auto">')


def bar_chart(labels: list[str], series: dict[str, list[float | None]], *, xlabel: str,
              title: str = "", ref: float | None = None, width: int = 760,
              highlight: str | None = None) -> str:
    """Horizontal bars: a group per label, a bar per series (``None``: no bar). With one
    series, the bars whose label contains ``highlight`` take ptxdsl's colour."""
    n = len(series)
    bar, gap = 9, 8
    left, right = min(400, 6.3 * max(len(lab) for lab in labels) + 16), 48
    top = (24 if title else 6) + (18 if n > 1 else 0)
    group = n * bar + gap
    height = top + group * len(labels) + 34
    pw = width - left - right
    values = [v for vs in series.values() for v in vs if v is not None]
    ticks = _ticks(0, max(values + [ref or 0]))
    x1 = ticks[-1]

    def px(v):
        return left + pw * v / (x1 or 1)

    def fill(name, k, lab):
        if n == 1 and highlight is not None:
            return color("ptxdsl" if highlight in lab else "copy")
        return color(name, k)

    out = [_open(width, height)]
    if title:
        out.append(f'<text x="8" y="14" font-weight="bold">{escape(title)}</text>')
    bottom = top + group * len(labels)
    for t in ticks:
        out.append(f'<line x1="{px(t):.0f}" y1="{top}" x2="{px(t):.0f}" y2="{bottom}" '
                   'stroke="currentColor" stroke-opacity="0.12"/>')
        out.append(f'<text x="{px(t):.0f}" y="{bottom + 13}" text-anchor="middle">'
                   f'{_num(t)}</text>')
    out.append(f'<text x="{left + pw / 2:.0f}" y="{bottom + 27}" text-anchor="middle">'
               f'{escape(xlabel)}</text>')
    if ref is not None:
        out.append(f'<line x1="{px(ref):.0f}" y1="{top}" x2="{px(ref):.0f}" y2="{bottom}" '
                   'stroke="currentColor" stroke-opacity="0.5" stroke-dasharray="2 3"/>')
    for g, lab in enumerate(labels):
        y = top + g * group
        out.append(f'<text x="{left - 6}" y="{y + n * bar / 2 + 4:.0f}" text-anchor="end">'
                   f'{escape(lab)}</text>')
        for k, (name, vs) in enumerate(series.items()):
            v = vs[g]
            if v is None:
                continue
            out.append(f'<rect x="{left}" y="{y + k * bar}" width="{max(px(v) - left, 0.5):.0f}" '
                       f'height="{bar - 1}" fill="{fill(name, k, lab)}"><title>{escape(name)} '
                       f'{escape(lab)}: {v:.3g}</title></rect>')
            if n == 1:
                out.append(f'<text x="{px(v) + 4:.0f}" y="{y + bar - 1}">{v:.3g}</text>')
    if n > 1:
        out += _legend(list(series), 8, top - 8, set())
    out.append("</svg>")
    return "".join(out)
