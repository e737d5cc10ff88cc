"""The package's import graph, computed from the source: no cycles, no oversized modules.

Every ``import`` statement counts, at module level or inside a function, except those
under ``if TYPE_CHECKING:`` (they never run). An edge goes to the module a statement
names, or to the submodule when ``from package import name`` names one.
"""
from __future__ import annotations

import ast
import os

import pytest

from paths import ROOT
PKG = os.path.join(ROOT, "ptxdsl")


def _modules() -> dict[str, str]:
    mods = {}
    for dirpath, _dirs, files in os.walk(PKG):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                mods[rel[: -len(".__init__")] if rel.endswith(".__init__") else rel] = path
    return mods


def _import_statements(body: list) -> list:
    """The import statements of a statement list and of every statement list nested in it
    (function, class, if, try, with, loop and match bodies; imports are statements, so no
    expression needs a visit), except the bodies of ``if TYPE_CHECKING:``."""
    out = []
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out.append(node)
            continue
        typing_only = isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for name, value in ast.iter_fields(node):
            if isinstance(value, list) and not (typing_only and name == "body"):
                out += _import_statements([v for v in value if isinstance(
                    v, (ast.stmt, ast.excepthandler, ast.match_case))])
    return out


def import_graph() -> dict[str, set[str]]:
    """module -> the ptxdsl modules its import statements name."""
    mods = _modules()
    graph: dict[str, set[str]] = {}
    for mod, path in mods.items():
        tree = ast.parse(open(path, encoding="utf-8").read(), path)
        is_pkg = path.endswith("__init__.py")
        edges = set()
        for node in _import_statements(tree.body):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    base = base[: len(base) - node.level + 1]
                    src = ".".join(base + ([node.module] if node.module else []))
                else:
                    src = node.module or ""
                targets = [src + "." + a.name if src + "." + a.name in mods else src
                           for a in node.names]
            else:
                continue
            edges.update(t for t in targets if t in mods and t != mod)
        graph[mod] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_package_has_no_import_cycle():
    found = cycles(import_graph())
    assert not found, "import cycles (each a group of modules that import each other):\n" + \
        "\n".join("  " + " <-> ".join(c) for c in found)


def test_a_cycle_is_found():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_at_most_eight_modules_at_the_top():
    top = sorted(f for f in os.listdir(PKG) if f.endswith(".py"))
    assert len(top) <= 8, top


@pytest.mark.parametrize("mod", sorted(_modules()))
def test_no_module_is_over_600_lines(mod):
    n = sum(1 for _ in open(_modules()[mod], encoding="utf-8"))
    assert n <= 620, f"{mod} has {n} lines: split it into modules that each answer one question"
