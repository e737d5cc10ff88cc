"""``ptxdsl.parse_ptx`` and ``ptxdsl.from_ptx``: the public entry points."""
from __future__ import annotations

import os

from ..core.errors import LaunchError
from .decls import Module
from .emit import emit_module
from .kernel import PtxKernel
from .parser import parse


class PtxModule:
    """A parsed PTX module: ``.kernels`` (name -> :class:`PtxKernel`), ``.emit()``."""

    def __init__(self, ast: Module):
        self.ast = ast
        self.kernels: dict[str, PtxKernel] = {
            f.name: PtxKernel(self, f) for f in ast.functions
            if f.kind == "entry" and f.program is not None}

    @property
    def filename(self) -> str:
        return self.ast.filename

    @property
    def arch(self) -> str:
        return self.ast.arch

    @property
    def functions(self):
        """Every ``.entry`` and ``.func`` (prototypes included), in order."""
        return self.ast.functions

    @property
    def unchecked(self) -> list:
        """Every line kept as raw PTX (``keep_unknown=True``), with where and why."""
        return [u for f in self.ast.functions for u in f.unchecked]

    def emit(self) -> str:
        """Canonical PTX: parsing it and emitting again gives the same text."""
        return emit_module(self.ast)

    def __repr__(self) -> str:
        return f"<ptxdsl PTX module {self.filename}: {', '.join(self.kernels) or 'no kernels'}>"


def parse_ptx(text: str, *, filename: str = "<ptx>", keep_unknown: bool = False) -> PtxModule:
    """Parse PTX text. Every instruction is checked against the instruction table as traced
    code is; one it cannot check is an error naming ``filename:line``, unless
    ``keep_unknown=True`` keeps it as unchecked raw PTX (printed as written, listed in
    ``.unchecked``, refused by the interpreter)."""
    return PtxModule(parse(text, filename, keep_unknown=keep_unknown))


def from_ptx(text_or_path, entry: str | None = None, *, keep_unknown: bool = False) -> PtxKernel:
    """One kernel of a PTX module given as text or as a path to a ``.ptx`` file;
    ``entry`` names it when the module has several."""
    if isinstance(text_or_path, os.PathLike) or (
            isinstance(text_or_path, str) and "\n" not in text_or_path
            and text_or_path.endswith(".ptx")):
        path = os.fspath(text_or_path)
        with open(path, encoding="utf-8") as f:
            mod = parse_ptx(f.read(), filename=path, keep_unknown=keep_unknown)
    else:
        mod = parse_ptx(text_or_path, keep_unknown=keep_unknown)
    if entry is None:
        if len(mod.kernels) != 1:
            raise LaunchError(f"{mod.filename} has {len(mod.kernels)} kernels "
                              f"({', '.join(mod.kernels) or 'none'}); name one with entry=")
        return next(iter(mod.kernels.values()))
    try:
        return mod.kernels[entry]
    except KeyError:
        raise LaunchError(f"{mod.filename} has no kernel {entry!r} (it has "
                          f"{', '.join(mod.kernels) or 'none'})") from None
