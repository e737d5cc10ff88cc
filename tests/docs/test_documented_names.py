"""Every ``ptxdsl.<dotted.name>`` the docs write in code spans exists, reached the way a
reader would type it (attribute by attribute from ``import ptxdsl``), and the documented
calls whose arguments are written out run (issue #48: ``ptxdsl.ops.matmul.api.describe``
was documented but unreachable)."""
from __future__ import annotations

import ast
import glob
import importlib
import os
import re

import pytest

import ptxdsl

from paths import ROOT

DOCS = sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
# Logger names (runtime.md's logging section), not attributes.
LOGGERS = {"ptxdsl.compile", "ptxdsl.cache"}
# `ptxdsl.a.b.c` or `ptxdsl.a.b.c(args)` inside one code span
SPAN = re.compile(r"`(ptxdsl(?:\.[A-Za-z_]\w*)+)(\([^`]*\))?`")


def _documented():
    found = {}
    for path in DOCS:
        text = open(path, encoding="utf-8").read()
        for m in SPAN.finditer(text):
            if m.group(1) not in LOGGERS:
                found.setdefault((m.group(1), m.group(2) or ""), os.path.basename(path))
    return sorted(found.items())


def _reach(dotted: str):
    """The object ``dotted`` names, as ``from ptxdsl.a import b`` finds it: the longest
    prefix that is a module (imported as ``import ptxdsl.a`` would; a package's attribute
    may be a function of the same name, as ``ptxdsl.ops.attention`` is), then attributes."""
    parts = dotted.split(".")
    for n in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:n]))
        except ModuleNotFoundError:
            continue
        break
    for i in range(n, len(parts)):
        if not hasattr(obj, parts[i]):
            raise AttributeError(f"{'.'.join(parts[:i])} has no {parts[i]!r}")
        obj = getattr(obj, parts[i])
    return obj


def _literal_args(text: str):
    """The call's arguments when there are some and every one is a literal, else None
    (a call without arguments may import torch or probe the GPU: only reached)."""
    try:
        call = ast.parse(f"f{text}", mode="eval").body
        if not call.args and not call.keywords:
            return None
        return ([ast.literal_eval(a) for a in call.args],
                {k.arg: ast.literal_eval(k.value) for k in call.keywords})
    except (SyntaxError, ValueError):
        return None


@pytest.mark.parametrize("name, call, page", [(n, c, p) for (n, c), p in _documented()],
                         ids=lambda v: v if isinstance(v, str) else "")
def test_documented_name_exists(name, call, page):
    obj = _reach(name)
    args = _literal_args(call) if call else None
    if args is not None and callable(obj):
        obj(*args[0], **args[1])


def test_the_documented_describe_call():
    assert _reach("ptxdsl.ops.matmul.api.describe")(4096, 4096, 4096).startswith("hopper ")


IMPORT = re.compile(r"^\s*from (ptxdsl[\w.]*) import ([\w, ()]+?)\s*(?:#.*)?$", re.M)


def _documented_imports():
    found = {}
    for path in DOCS:
        for m in IMPORT.finditer(open(path, encoding="utf-8").read()):
            names = [n.strip() for n in m.group(2).strip("()").split(",") if n.strip()]
            for n in names:
                found.setdefault((m.group(1), n.split(" as ")[0]), os.path.basename(path))
    return sorted(found.items())


@pytest.mark.parametrize("module, name, page",
                         [(m, n, p) for (m, n), p in _documented_imports()])
def test_documented_import_works(module, name, page):
    mod = importlib.import_module(module)
    assert hasattr(mod, name) or importlib.import_module(f"{module}.{name}")
