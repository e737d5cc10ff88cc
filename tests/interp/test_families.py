"""The interpreter's instruction families (ptxdsl/interp/semantics/): registered by the
explicit list ``FAMILIES``, and importing one way: a family imports the interpreter's
core and the helper modules below it, never another family (except ``mbarrier``, on
which the asynchronous copies complete)."""
from __future__ import annotations

import ast
import importlib
import pathlib
from types import SimpleNamespace

import pytest

from ptxdsl.interp import semantics

SEM = pathlib.Path(semantics.__file__).parent
BELOW = {"alu", "floatmath", "atomic", "mbarrier"}   # what a family may import from here


def _modules() -> dict[str, pathlib.Path]:
    return {p.stem: p for p in sorted(SEM.glob("*.py")) if p.stem != "__init__"}


def _siblings(path: pathlib.Path) -> set[str]:
    """The modules of semantics/ that ``path`` imports (``from . import x``, ``from .x ...``)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            out |= {node.module} if node.module else {a.name for a in node.names}
    return out


def test_every_module_with_handlers_is_a_listed_family():
    with_handlers = {name for name in _modules() if hasattr(
        importlib.import_module(f"{semantics.__name__}.{name}"), "HANDLERS")}
    assert with_handlers == {f.__name__.rsplit(".", 1)[1] for f in semantics.FAMILIES}


@pytest.mark.parametrize("name", sorted(_modules()))
def test_a_module_imports_only_the_helpers_below_it(name):
    bad = _siblings(_modules()[name]) - (set() if name in BELOW else BELOW)
    assert not bad, f"semantics/{name}.py imports {sorted(bad)}: move what it shares below"


def test_an_opcode_claimed_by_two_families_is_refused():
    a = SimpleNamespace(__name__="a", HANDLERS={"add": lambda m, i, k: None})
    b = SimpleNamespace(__name__="b", HANDLERS={"add": lambda m, i, k: None})
    with pytest.raises(AssertionError, match="add has a handler in a and in b"):
        semantics._registry((a, b))
