"""The instruction lines of a small kernel's PTX, for tests that assert exactly what a
helper or operator records."""
from __future__ import annotations

from ptxdsl import kernel


def body_lines(fn, arch="sm_90a", tiles=()) -> list[str]:
    """The instruction lines of a kernel whose body is ``fn`` (param loads included)."""
    text = kernel(in_specs=tiles, arch=arch)(fn).ptx()
    body = text[text.index("{\n"):]
    out = []
    for line in body.splitlines()[1:]:
        line = line.strip()
        if line and not line.startswith((".reg", ".shared", "}")) and line != "ret;":
            out.append(line)
    return out


def after(lines: list[str], marker_prefix: str) -> list[str]:
    """The lines from the first one that starts with ``marker_prefix`` on."""
    for i, line in enumerate(lines):
        if line.startswith(marker_prefix):
            return lines[i:]
    raise AssertionError(f"{marker_prefix!r} not in {lines}")
