"""mkdocs hooks: generated pages and build-time markers.

* ``reference/ptx-namespace.md`` is generated from the instruction table by
  :func:`ptxdsl.docgen.render_ptx_namespace` on every build (it is never a file
  in ``docs/``, so it cannot go stale).
* ``<!-- ptxdsl:ptx FILE[:KERNEL] [name=value ...] [from=REGEX] [to=REGEX] -->``
  in a page becomes a fenced block of the PTX that kernel emits *now*. With
  ``name=value`` pairs, KERNEL names a ``build_*`` function called with them.
  ``from``/``to`` cut an excerpt: from the first line matching ``from`` to the
  first later line matching ``to`` (inclusive).
* ``<!-- ptxdsl:bench-tables -->`` becomes tables built from the benchmark JSON
  files under ``bench/results/`` (or a sentence saying there are none yet).

Any failure raises, which fails ``mkdocs build --strict``: a docs page that
quotes PTX the code no longer emits should break the build, not mislead.
"""
from __future__ import annotations

import ast
import glob
import json
import os
import re
import shlex

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_MARKER = re.compile(r"<!--\s*ptxdsl:(\w[\w-]*)(.*?)-->", re.S)
_modules: dict[str, object] = {}


def on_files(files, config):
    from ptxdsl.docgen import render_ptx_namespace
    files.append(File.generated(config, "reference/ptx-namespace.md",
                                content=render_ptx_namespace()))
    return files


def on_page_markdown(markdown, page, config, files):
    def expand(m: re.Match) -> str:
        kind, args = m.group(1), m.group(2).strip()
        try:
            if kind == "ptx":
                return _ptx_block(args)
            if kind == "bench-tables":
                return bench_tables(os.path.join(ROOT, "bench", "results"))
        except PluginError:
            raise
        except Exception as e:  # report which page and marker broke
            raise PluginError(f"{page.file.src_uri}: <!-- ptxdsl:{kind} {args} --> failed: "
                              f"{type(e).__name__}: {e}") from e
        raise PluginError(f"{page.file.src_uri}: unknown marker ptxdsl:{kind}")
    return _MARKER.sub(expand, markdown)


# ------------------------------------------------------------------ PTX excerpts
def _ptx_block(args: str) -> str:
    from ptxdsl import cli
    words = shlex.split(args)
    if not words:
        raise PluginError("ptxdsl:ptx needs FILE[:KERNEL]")
    target, opts = words[0], {}
    for w in words[1:]:
        key, sep, value = w.partition("=")
        if not sep:
            raise PluginError(f"ptxdsl:ptx option {w!r} is not name=value")
        opts[key] = value
    cut_from, cut_to = opts.pop("from", None), opts.pop("to", None)
    lines = opts.pop("lines", None)
    path, name = cli._split_target(target)
    path = os.path.join(ROOT, path)
    if opts:  # call a builder with arguments
        module = _module(path)
        fn = getattr(module, name or "", None)
        if not callable(fn):
            raise PluginError(f"{target}: {name!r} is not a function of {path}")
        kernel = fn(**{k: ast.literal_eval(v) for k, v in opts.items()})
    else:
        entries = cli.load_kernels(path, module=_module(path))
        match = [e for e in entries if name in (None, e.name) or name in e.aliases]
        if not match:
            raise PluginError(f"{target}: no such kernel; found {[e.name for e in entries]}")
        kernel = match[0].kernel
    text = kernel.ptx(lines=lines or None)
    if cut_from or cut_to:
        text = _excerpt(text, cut_from, cut_to)
    return "```ptx\n" + text.rstrip() + "\n```"


def _module(path: str):
    if path not in _modules:
        from ptxdsl import cli
        _modules[path] = cli._import_file(path)
    return _modules[path]


def _excerpt(text: str, start: str | None, stop: str | None) -> str:
    lines = text.split("\n")
    i = 0
    if start:
        i = next((n for n, ln in enumerate(lines) if re.search(start, ln)), None)
        if i is None:
            raise PluginError(f"no PTX line matches from={start!r}")
    j = len(lines) - 1
    if stop:
        j = next((n for n in range(i + 1, len(lines)) if re.search(stop, lines[n])), None)
        if j is None:
            raise PluginError(f"no PTX line after {start!r} matches to={stop!r}")
    body = lines[i:j + 1]
    # Drop the common indentation so excerpts read as a block.
    pad = min((len(ln) - len(ln.lstrip("\t")) for ln in body if ln.strip()), default=0)
    return "\n".join(ln[pad:] for ln in body)


# ------------------------------------------------------------------ benchmark tables
def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
    if isinstance(v, (list, tuple)):
        return "×".join(map(str, v))
    return "" if v is None else str(v).replace("|", "\\|")


def _rows_of(data) -> list[dict]:
    if isinstance(data, list):
        return [r for r in data if isinstance(r, dict)]
    for key in ("results", "rows", "runs", "data"):
        if isinstance(data.get(key), list):
            return [r for r in data[key] if isinstance(r, dict)]
    return []


def bench_tables(folder: str) -> str:
    """Markdown tables, one per JSON file in ``folder``, with each file's device and date."""
    paths = sorted(glob.glob(os.path.join(folder, "*.json")))
    if not paths:
        return ("*No benchmark results are committed yet:* `bench/results/` holds no JSON "
                "files. The numbers on this page come only from those files; run the "
                "benchmarks on a GPU machine (see above) to produce them.")
    out = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        meta = data if isinstance(data, dict) else {}
        title = meta.get("title") or meta.get("benchmark") or os.path.basename(path)[:-5]
        out.append(f"### {title}")
        out.append("")
        facts = []
        for key in ("device", "gpu", "date", "timestamp", "shape", "dtype", "driver", "cuda",
                    "torch", "ptxas"):
            if meta.get(key) not in (None, ""):
                facts.append(f"**{key}**: {_fmt(meta[key])}")
        facts.append(f"**source**: `bench/results/{os.path.basename(path)}`")
        out.append(" · ".join(facts))
        out.append("")
        rows = _rows_of(data)
        if not rows:
            out.append("*(this file has no rows)*")
            out.append("")
            continue
        cols = list(dict.fromkeys(k for r in rows for k in r
                                  if not isinstance(r[k], (dict, list)) or k == "shape"))
        out.append("| " + " | ".join(cols) + " |")
        out.append("|" + " --- |" * len(cols))
        for r in rows:
            out.append("| " + " | ".join(_fmt(r.get(c)) for c in cols) + " |")
        out.append("")
    return "\n".join(out)
