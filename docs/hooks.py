"""mkdocs hooks: generated pages and build-time markers.

* ``reference/ptx-namespace.md`` is generated from the instruction table by
  :func:`docgen.render_ptx_namespace` (``docs/docgen.py``) on every build (it is never a file
  in ``docs/``, so it cannot go stale).
* ``<!-- ptxdsl:ptx FILE[:KERNEL] [name=value ...] [from=REGEX] [to=REGEX] -->``
  in a page becomes a fenced block of the PTX that kernel emits *now*. With
  ``name=value`` pairs, KERNEL names a ``build_*`` function called with them.
  ``from``/``to`` cut an excerpt: from the first line matching ``from`` to the
  first later line matching ``to`` (inclusive), or ``count`` lines.
  ``lines=comment`` shows each instruction's Python line.
* ``<!-- ptxdsl:error FILE -->`` becomes the error message ptxdsl gives for
  FILE: when its ``main()`` runs (e.g. on the interpreter), or, without a main,
  when its kernels are traced. The build fails if nothing is raised.
* ``<!-- ptxdsl:check FILE -->`` becomes the ``ptxdsl check FILE`` table
  (ptxas resources per kernel); without a ptxas it says so instead.
* ``<!-- ptxdsl:operators -->`` becomes the table of what each register
  operator records, found by tracing each one (``docs/docgen.py``).
* ``<!-- ptxdsl:source FILE:NAME -->`` becomes the source of function/class
  NAME (``Class.method`` for nested) of FILE, found by name, not line numbers.
* ``<!-- ptxdsl:fragment OPERAND SHAPE TYPE [ORDER] -->`` becomes a table of the tile
  of that mma operand in which each cell names the lane and element holding it
  (``T5:2``), drawn from the same :class:`ptxdsl.dsl.tensorcore.Layout` the interpreter uses.
* ``<!-- ptxdsl:bench-chart NAME -->`` becomes the charts and short tables of benchmark
  NAME, drawn from ``bench/results/NAME_<device>.json`` (``docs/benchpage.py``; a
  sentence saying there are none yet when none is committed).

Any failure raises, which fails ``mkdocs build --strict``: a docs page that
quotes PTX the code no longer emits should break the build, not mislead.
"""
from __future__ import annotations

import ast
import os
import re

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File

# docs/docgen.py (the reference pages) and docs/benchpage.py (the Performance page's
# charts): mkdocs puts this folder on sys.path while it loads the hooks (and only then),
# so they are imported here.
import benchpage  # noqa: E402
import docgen  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_MARKER = re.compile(r"<!--\s*ptxdsl:(\w[\w-]*)(.*?)-->", re.S)
_modules: dict[str, object] = {}


def on_pre_build(config):
    # `mkdocs serve` rebuilds in one process: re-import the example files each build.
    _modules.clear()


def on_files(files, config):
    files.append(File.generated(config, "reference/ptx-namespace.md",
                                content=docgen.render_ptx_namespace()))
    return files


def on_page_markdown(markdown, page, config, files):
    def expand(m: re.Match) -> str:
        kind, args = m.group(1), m.group(2).strip()
        try:
            if kind == "ptx":
                return _ptx_block(args)
            if kind == "bench-chart":
                return benchpage.render(os.path.join(ROOT, "bench", "results"), args)
            if kind == "source":
                return _source_block(args)
            if kind == "error":
                return _error_block(args)
            if kind == "check":
                return _check_block(args)
            if kind == "operators":
                return docgen.render_operator_table()
            if kind == "fragment":
                return _fragment_figure(args)
        except PluginError:
            raise
        except Exception as e:  # report which page and marker broke
            raise PluginError(f"{page.file.src_uri}: <!-- ptxdsl:{kind} {args} --> failed: "
                              f"{type(e).__name__}: {e}") from e
        raise PluginError(f"{page.file.src_uri}: unknown marker ptxdsl:{kind}")
    return _MARKER.sub(expand, markdown)


# ------------------------------------------------------------------ PTX excerpts
def _ptx_block(args: str) -> str:
    from ptxdsl.cli import command as cli
    # Plain whitespace split: regexes keep their backslashes (write \s for a space).
    words = args.split()
    if not words:
        raise PluginError("ptxdsl:ptx needs FILE[:KERNEL]")
    target, opts = words[0], {}
    for w in words[1:]:
        key, sep, value = w.partition("=")
        if not sep:
            raise PluginError(f"ptxdsl:ptx option {w!r} is not name=value")
        opts[key] = value
    cut_from, cut_to = opts.pop("from", None), opts.pop("to", None)
    count = int(opts.pop("count", 0)) or None
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
    if cut_from or cut_to or count:
        text = _excerpt(text, cut_from, cut_to, count)
    return "```ptx\n" + text.rstrip() + "\n```"


def _error_block(args: str) -> str:
    """The error ptxdsl raises for FILE: from its ``main()`` when it has one (an
    interpreter run), else from tracing its kernels."""
    from ptxdsl.cli import command as cli
    from ptxdsl.core.errors import PtxdslError
    path = os.path.join(ROOT, args.strip())
    module = _module(path)

    def shown(err):
        # An admonition with inline code: long messages wrap instead of scrolling.
        text = str(err).replace(os.path.dirname(path) + os.sep, "")
        lines = [ln for ln in text.split("\n") if ln.strip()]
        body = "\n\n".join(f"    `` {ln.strip()} ``" for ln in lines)
        return f'!!! failure "{type(err).__name__}"\n\n{body}\n'

    try:
        if callable(getattr(module, "main", None)):
            module.main()
        else:
            for e in cli.load_kernels(path, module=module):
                e.kernel.ptx()
    except PtxdslError as err:
        return shown(err)
    raise PluginError(f"ptxdsl:error {args}: no error was raised, but the page shows one")


def _check_block(args: str) -> str:
    import contextlib
    import io

    from ptxdsl.cli import command as cli
    from ptxdsl import toolchain
    from ptxdsl.core.errors import ToolchainError
    try:
        have = toolchain.find_ptxas() is not None
    except ToolchainError:
        have = False
    if not have:
        return ("*(No ptxas was found when these docs were built, so this table is missing; "
                f"run `ptxdsl check {args.strip()}` to see it.)*")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli.main(["check", os.path.join(ROOT, args.strip())])
    if code != 0:
        raise PluginError(f"ptxdsl check {args} failed (exit {code}):\n{out.getvalue()}")
    return "```text\n$ ptxdsl check " + args.strip() + "\n" + out.getvalue().rstrip() + "\n```"


def _source_block(args: str) -> str:
    """The source of a function or class (``FILE:name`` or ``FILE:Class.method``)."""
    import ast
    import textwrap
    target, _, qual = args.strip().rpartition(":")
    path = os.path.join(ROOT, target)
    with open(path, encoding="utf-8") as f:
        src = f.read()
    node = ast.parse(src)
    for part in qual.split("."):
        node = next((n for n in ast.iter_child_nodes(node)
                     if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                     and n.name == part), None)
        if node is None:
            raise PluginError(f"ptxdsl:source {args}: no {part!r} in {target}")
    lines = src.split("\n")
    first = min([node.lineno] + [d.lineno for d in node.decorator_list])
    body = textwrap.dedent("\n".join(lines[first - 1:node.end_lineno]))
    return f"```python\n# {target}\n{body}\n```"


def _module(path: str):
    if path not in _modules:
        from ptxdsl.cli import command as cli
        _modules[path] = cli._import_file(path)
    return _modules[path]


def _excerpt(text: str, start: str | None, stop: str | None, count: int | None = None) -> str:
    lines = text.split("\n")
    i = 0
    if start:
        i = next((n for n, ln in enumerate(lines) if re.search(start, ln)), None)
        if i is None:
            raise PluginError(f"no PTX line matches from={start!r}")
    j = len(lines) - 1
    if count:
        j = min(j, i + count - 1)
    elif stop:
        j = next((n for n in range(i + 1, len(lines)) if re.search(stop, lines[n])), None)
        if j is None:
            raise PluginError(f"no PTX line after {start!r} matches to={stop!r}")
    body = lines[i:j + 1]
    # Drop the common indentation so excerpts read as a block.
    pad = min((len(ln) - len(ln.lstrip("\t")) for ln in body if ln.strip()), default=0)
    return "\n".join(ln[pad:] for ln in body)


# ------------------------------------------------------------------ fragments
def _fragment_figure(args: str) -> str:
    """A markdown table of one mma operand's tile: ``T<lane>:<element>`` per cell."""
    from ptxdsl.dsl.tensorcore import layout
    lay = layout(*args.split())
    cells = [["" for _ in range(lay.cols)] for _ in range(lay.rows)]
    for lane in range(32):
        for i in range(lay.elems):
            tile, r, c = lay.coord(lane, i)
            if tile == 0:
                cells[r][c] = f"T{lane}:{i}"
    head = "| | " + " | ".join(str(c) for c in range(lay.cols)) + " |"
    rule = "|---|" + "---|" * lay.cols
    rows = [f"| **{r}** | " + " | ".join(cells[r]) + " |" for r in range(lay.rows)]
    note = (f"\n\n*{lay} — {lay.nregs} `.{lay.reg_type}` register(s) per lane, "
            f"{lay.per_reg} element(s) each; quad pair 0 shown (lanes 0-3, 16-19)*"
            if lay.tiles > 1 else
            f"\n\n*{lay} — {lay.nregs} `.{lay.reg_type}` register(s) per lane, "
            f"{lay.per_reg} element(s) each*")
    return "\n".join([head, rule, *rows]) + note + "\n"
