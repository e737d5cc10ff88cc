"""Griffe extension for the API pages: render ptxdsl's reST-flavoured docstrings as Markdown.

ptxdsl's docstrings are written for humans reading the source (Sphinx roles
such as ``:class:`Kernel```, ``literal::`` paragraphs and reST "simple
tables"). mkdocstrings renders docstrings as Markdown, where those would show
up raw, so this rewrites them when griffe loads each object. Nothing here
changes what the docstrings say.
"""
from __future__ import annotations

import re

import griffe

_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|data|attr|mod|exc|obj|const):`(~?)([^`]+)`")
_BORDER = re.compile(r"^(\s*)(=+)( +=+)+\s*$")


def _role(m: re.Match) -> str:
    target = m.group(2)
    # `Title <target>` form: keep the title.
    title = re.match(r"(.+?)\s*<[^>]+>$", target)
    if title:
        return f"`{title.group(1)}`"
    if m.group(1) == "~":
        target = target.rsplit(".", 1)[-1]
    return f"`{target}`"


def _columns(border: str) -> list[tuple[int, int]]:
    return [(mm.start(), mm.end()) for mm in re.finditer(r"=+", border)]


def _cells(line: str, cols: list[tuple[int, int]]) -> list[str]:
    out = []
    for i, (start, _end) in enumerate(cols):
        stop = cols[i + 1][0] if i + 1 < len(cols) else len(line)
        out.append(line[start:stop].strip())
    return out


def _escape_pipes(cell: str) -> str:
    """Escape ``|`` outside code spans (inside them Markdown tables already keep it)."""
    parts = re.split(r"(`+[^`]*`+)", cell)
    return "".join(p if p.startswith("`") else p.replace("|", "\\|") for p in parts)


def _simple_tables(text: str) -> str:
    """reST simple tables -> Markdown tables (continuation lines join the row above)."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        m = _BORDER.match(lines[i])
        if not m:
            out.append(lines[i])
            i += 1
            continue
        cols = _columns(lines[i])
        j = i + 1
        rows: list[list[str]] = []
        header: list[str] | None = None
        while j < len(lines) and not _BORDER.match(lines[j]):
            if lines[j].strip():
                cells = _cells(lines[j], cols)
                if rows and not cells[0]:
                    rows[-1] = [(a + " " + b).strip() for a, b in zip(rows[-1], cells)]
                else:
                    rows.append(cells)
            j += 1
        if j >= len(lines):  # no closing border: not a table
            out.append(lines[i])
            i += 1
            continue
        # A border right after the first rows marks them as the header.
        k = j + 1
        nxt = [x for x in lines[k:k + 1]]
        if nxt and nxt[0].strip() and not _BORDER.match(nxt[0]) and len(rows) == 1:
            header = rows[0]
            rows = []
            j = k
            while j < len(lines) and not _BORDER.match(lines[j]):
                if lines[j].strip():
                    cells = _cells(lines[j], cols)
                    if rows and not cells[0]:
                        rows[-1] = [(a + " " + b).strip() for a, b in zip(rows[-1], cells)]
                    else:
                        rows.append(cells)
                j += 1
        indent = m.group(1)
        head = header or ["what you write", "what it records"][:len(cols)] + [""] * (len(cols) - 2)
        out.append("")
        out.append(indent + "| " + " | ".join(head) + " |")
        out.append(indent + "|" + " --- |" * len(cols))
        for r in rows:
            out.append(indent + "| " + " | ".join(_escape_pipes(c) for c in r) + " |")
        out.append("")
        i = j + 1
    return "\n".join(out)


def convert(text: str) -> str:
    """Rewrite one docstring's reST idioms as Markdown."""
    text = _ROLE.sub(_role, text)
    text = _simple_tables(text)
    # "as follows::" introduces a literal block in reST; Markdown needs one colon.
    text = re.sub(r"(\S)::\n", r"\1:\n", text)
    text = re.sub(r"^::\n", "\n", text, flags=re.M)
    return text


class ReSTToMarkdown(griffe.Extension):
    """Converts each docstring as griffe creates its object."""

    def on_instance(self, *, obj, **kwargs) -> None:  # noqa: D102 - griffe's hook
        if obj.docstring is not None:
            obj.docstring.value = convert(obj.docstring.value)
