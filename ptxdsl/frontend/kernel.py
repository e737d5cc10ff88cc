"""An imported PTX kernel with the surface of a DSL kernel: ``.params``, ``.ptx()``,
``.check()``, ``.resources()``, ``.sass()``, ``.interpret(...)``, the GPU call and
``.to_python()``."""
from __future__ import annotations

import dataclasses
from typing import Sequence

from .. import toolchain
from ..core import ir
from ..core.errors import ToolchainError
from .decls import Function, ParamDecl
from .emit import emit_module


class PtxKernel:
    """One ``.entry`` of a parsed module (``ptxdsl.from_ptx``)."""

    def __init__(self, module, fn: Function):
        self.module = module
        self.fn = fn
        self.name = fn.name
        self._inlined: ir.Program | None = None   # program(), built once

    def __repr__(self) -> str:
        return f"<ptxdsl PTX kernel {self.name} from {self.module.filename}>"

    @property
    def params(self) -> list[ParamDecl]:
        """The signature: each parameter's ``name`` and PTX ``type`` (plus ``count`` for
        byte arrays, ``ptr`` for ``.ptr`` attributes)."""
        return list(self.fn.params)

    @property
    def arch(self) -> str:
        return self.module.arch

    @property
    def unchecked(self) -> list:
        """Lines kept as raw PTX (``keep_unknown=True``) in this kernel, with the reason."""
        return list(self.fn.unchecked)

    def program(self) -> ir.Program:
        """The IR the interpreter runs (the same classes a traced kernel produces), with
        every ``call`` replaced by its callee's body (:mod:`.inline`)."""
        if self._inlined is None:
            from .inline import inline_calls
            self._inlined = inline_calls(self.fn, {f.name: f for f in self.module.ast.functions})
        return self._inlined

    def ptx(self) -> str:
        """Canonical PTX of this kernel: the module's variables and functions, and of its
        entries this one."""
        return emit_module(self.module.ast, only=self.name)

    def check(self, arch: str | None = None, *, options: Sequence[str] = ()):
        """Assemble with ptxas (``-v``); the result's ``unchecked`` lists raw lines."""
        target = arch or self.arch
        try:
            result = toolchain.assemble(self.ptx(), target, options=options)
        except toolchain.PtxasError as e:
            raise ToolchainError(f"ptxas rejected kernel {self.name} "
                                 f"({self.module.filename}): {e.message}") from e
        if self.fn.unchecked:
            result = dataclasses.replace(result, unchecked=tuple(str(u) for u in self.fn.unchecked))
        return result

    def resources(self, arch: str | None = None):
        """Registers, spills, shared/local/constant bytes from ``ptxas -v``."""
        res = self.check(arch).resources
        try:
            return res[self.name]
        except KeyError:
            raise ToolchainError(f"ptxas -v reported no resources for {self.name}") from None

    def sass(self, arch: str | None = None) -> str:
        """SASS disassembly of the assembled cubin (needs cuobjdump or nvdisasm)."""
        return toolchain.disassemble(self.check(arch).cubin)

    def interpret(self, *args, grid=1, block=1, shared: int = 0, cluster=None, **kw) -> None:
        """Run on the CPU interpreter with its detectors (races, out-of-bounds and
        uninitialised accesses, barriers, mbarriers, async proxies). Arrays are pointers
        whose contents are written back; ``None``/``0`` is a null pointer; scalars are
        values; a tensor-map parameter takes ``(array, ptxdsl.TMA(...))`` or
        ``(array, box)``. ``shared``: bytes of dynamic (``.extern .shared``) memory.
        Calls run inlined (:mod:`.inline`)."""
        from .hostrun import interpret
        interpret(self.program(), args, grid=grid, block=block, shared=shared,
                  cluster=cluster, module_vars=self.module.ast.globals,
                  builder=self.fn.builder, **kw)

    def __call__(self, *args, grid=1, block=1, shared: int = 0, stream=None, cluster=None):
        """Launch on the GPU: arrays (torch, DLPack, ``__cuda_array_interface__``, or numpy,
        copied in and back) are pointers, scalars values, ``None``/``0`` null pointers,
        ``(array, TMA or box)`` a tensor map encoded at the array's address."""
        from .launch import launch
        return launch(self, args, grid=grid, block=block, shared=shared, stream=stream,
                      cluster=cluster)

    def to_python(self) -> str:
        """DSL source that, run, defines a kernel whose PTX parses to this program."""
        from .to_python import to_python
        return to_python(self)
