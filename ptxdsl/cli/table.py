"""Plain-text tables the ``ptxdsl`` command prints."""
from __future__ import annotations

from typing import Sequence

__all__ = ["format_table"]


def format_table(headers: Sequence[str], rows: Sequence[Sequence], right: Sequence[bool] | None = None) -> str:
    """Plain-text table with aligned columns (numbers right-aligned by default)."""
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    if right is None:
        right = [bool(rows) and all(isinstance(r[i], (int, float)) for r in rows if r[i] is not None)
                 for i in range(len(headers))]
    def line(r):
        return "  ".join(c.rjust(w) if rt else c.ljust(w)
                         for c, w, rt in zip(r, widths, right)).rstrip()
    out = [line(cells[0]), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in cells[1:]]
    return "\n".join(out)
