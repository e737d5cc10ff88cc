"""``@kernel``: specs, tracing, caches, and the ways to use a kernel.

A :class:`Kernel` traces its Python body lazily (once per target arch, cached
on the object), verifies the IR and prints PTX. ``.check()`` / ``.resources()``
/ ``.sass()`` run the offline toolchain, ``.interpret()`` runs the IR on the
CPU and calling the kernel launches it on the GPU (or on the interpreter when
``PTXDSL_INTERPRET=1`` at the time of the call).
"""
from __future__ import annotations

import dataclasses
import inspect
import logging
import os
import re
import threading
import time
from dataclasses import dataclass
from typing import Callable, Sequence

from . import toolchain
from .core import ir
from .core.arch import parse_arch
from .core.definition import check_body, check_specs, code_loc, dim3
from .core.limits import check_dims
from .core.emit import Emitted, emit
from .core.entry import entry_options
from .core.errors import (
    NoSpecsError, PtxdslError, SourceLoc, ToolchainError, TraceError, location_from_traceback,
    raised_inside_ptxdsl, user_location)
from .core.specs import Tile
from .core.trace import Builder
from .core.types import ALL_TYPES, u8, u32, u64
from .core.verify import verify
from .dsl.args import TensorArg, TensorSpec
from .dsl.template import auto_arch, bind_template, pyptx_version, template_params

log = logging.getLogger("ptxdsl.compile")


@dataclass(frozen=True)
class Compiled:
    """One traced, verified and printed specialisation of a kernel."""

    program: ir.Program
    emitted: Emitted

    @property
    def ptx(self) -> str:
        return self.emitted.text


class Kernel:
    """A traced PTX kernel; see :func:`kernel`."""

    def __new__(cls, *args, **kwargs):
        # Each kernel is made as the one instance of a subclass of its own: once it has a
        # launcher, the launcher's generated call becomes that subclass's __call__
        # (ptxdsl.runtime.prepare), so kernel(...) runs it with no frame in between.
        # An object's class never changes after it is made.
        base = cls.__base__ if cls.__dict__.get("_ptxdsl_own_class") else cls
        own = type(base.__name__, (base,), {
            "__module__": base.__module__, "__qualname__": base.__qualname__,
            "__doc__": base.__doc__, "_ptxdsl_own_class": True})
        return super().__new__(own)

    def __init__(self, fn: Callable, in_specs: Sequence[Tile], out_specs: Sequence[Tile],
                 grid, block, arch: str, version: tuple[int, int] | None, name: str | None,
                 lines: str | None, arg_names: Sequence[str] | None = None,
                 maxntid: bool = False, cooperative: bool = False,
                 min_ctas_per_sm: int | None = None, *, cluster=None, raw_params=None,
                 extern_smem=False, raw_directives=None, smem: int | None = None,
                 pdl: bool = False, resident: int | None = None, style: str = "ptxdsl"):
        self.fn = fn
        if style not in ("ptxdsl", "pyptx"):
            raise TraceError(f"style is 'ptxdsl' or 'pyptx', got {style!r}", user_location())
        self.style = style  # "pyptx": its .version floor and smem_N / mbar_N names
        check_specs(fn, in_specs, out_specs, version)
        # a lambda's "<lambda>" is spelled as a PTX identifier ("_lambda_"); a name given
        # with name= must be one (check_body)
        self.name = name or re.sub(r"[^A-Za-z0-9_$]", "_", fn.__name__)
        self.in_specs = tuple(in_specs)
        self.out_specs = tuple(out_specs)
        self.grid = grid
        self.defined_at = SourceLoc(inspect.getsourcefile(fn) or fn.__code__.co_filename,
                                    fn.__code__.co_firstlineno)
        check_body(fn, self.name, self.defined_at)
        try:
            parse_arch(arch)
        except PtxdslError as e:
            raise e.at(self.defined_at) from None
        self.block = dim3(block, "block", self.defined_at)
        self.arch = arch
        self.version = version
        self.lines = lines
        self.arg_names = tuple(arg_names) if arg_names is not None else None
        # .maxntid is opt-in: given it, ptxas 13 trades registers for occupancy
        # and can spill where it would not without (measured on RMSNorm kernels).
        self.maxntid = maxntid
        # .minnctapersm (with .maxntid, as __launch_bounds__(threads, min_blocks) writes
        # them): ptxas caps registers so that this many CTAs fit on an SM.
        self.min_ctas_per_sm = min_ctas_per_sm
        # All CTAs resident at once (cuLaunchCooperativeKernel): what a grid-wide barrier
        # needs. The launcher refuses a grid larger than the device can hold.
        self.cooperative = bool(cooperative)
        # CTAs that wait only for CTAs which may start after them (late arrivals of a
        # reduction): a plain launch makes progress as long as the device holds this many
        # of them at once, which the launcher checks; the interpreter, which runs large
        # grids in batches one after another, runs such a grid in one batch.
        if resident is not None and (isinstance(resident, bool) or not isinstance(
                resident, int) or resident < 1):
            raise TraceError(f"resident must be a positive int (CTAs that must be resident "
                             f"at once), got {resident!r}", self.defined_at)
        self.resident = resident
        # Programmatic dependent launch: every launch carries the driver's
        # programmatic-stream-serialization attribute, so the kernel may start while the
        # previous kernel on its stream is still running (its prologue overlaps that
        # kernel's tail); griddepcontrol.wait is where it waits for it.
        if not isinstance(pdl, bool):
            raise TraceError(f"pdl is True or False, got {pdl!r}", self.defined_at)
        self.pdl = pdl
        if parse_arch(arch).sm < 90 and pdl:
            raise TraceError(f"pdl=True needs sm_90 or newer (programmatic dependent launch "
                             f"and griddepcontrol arrived with Hopper); arch is {arch!r}",
                             self.defined_at)
        self.entry = entry_options(
            cluster=cluster, raw_directives=raw_directives, extern_smem=extern_smem, smem=smem,
            raw_params=raw_params, block=self.block, arch=arch,
            dim_names=tuple(dict.fromkeys(n for spec in tuple(in_specs) + tuple(out_specs)
                                          if isinstance(spec, Tile) for n in spec.names)),
            maxntid=maxntid, min_ctas_per_sm=min_ctas_per_sm, loc=self.defined_at)
        # Cluster dims every launch uses (cuLaunchKernelEx), or None.
        self.cluster = self.entry.cluster
        if min_ctas_per_sm is not None and (isinstance(min_ctas_per_sm, bool) or not
                                            isinstance(min_ctas_per_sm, int) or
                                            min_ctas_per_sm < 1):
            raise TraceError(f"min_ctas_per_sm must be a positive int (CTAs per SM), got "
                             f"{min_ctas_per_sm!r}", self.defined_at)
        for spec in self.in_specs + self.out_specs:
            if not isinstance(spec, Tile):
                raise TraceError(f"in_specs/out_specs hold Tile(...) objects, got {spec!r}",
                                 self.defined_at)
        if not callable(grid):
            self.grid = dim3(grid, "grid", self.defined_at)
        try:
            check_dims(None if callable(grid) else self.grid, self.block, f"kernel {self.name}",
                       self.defined_at)
        except PtxdslError as e:
            raise TraceError(e.message, self.defined_at) from None
        nthreads = self.block[0] * self.block[1] * self.block[2]
        if nthreads > 1024:
            raise TraceError(f"block {self.block} has {nthreads} threads; a CTA holds at most "
                             f"1024", self.defined_at)
        self.dim_names: tuple[str, ...] = tuple(dict.fromkeys(
            n for spec in self.in_specs + self.out_specs for n in spec.names))
        # Named row strides, in first-appearance order (a name may be shared).
        self.stride_names: tuple[str, ...] = tuple(dict.fromkeys(
            spec.stride for spec in self.in_specs + self.out_specs if spec.stride))
        self._grid_params: tuple[str, ...] | None = None  # None: pass every dim
        if callable(grid):
            self._check_grid_callable(grid)
        self._template = template_params(fn, self.defined_at)
        self._compiled: dict[tuple, Compiled] = {}
        self._lock = threading.Lock()
        self._tracer: int | None = None   # the thread tracing this kernel, while it does
        self.runtime_cache: dict = {}  # owned by ptxdsl.runtime (modules, prepared launches)

    def __repr__(self) -> str:
        return f"<ptxdsl.Kernel {self.name} ({self.defined_at})>"

    # ------------------------------------------------------------------ tracing
    @property
    def template_params(self) -> dict:
        """The keyword-only parameters of the body and their defaults (a copy): values
        baked in at trace time, ``k.ptx(BM=64)``, one compiled form per set of values."""
        return dict(self._template)

    def compile(self, arch: str | None = None, lines: str | None = None,
                **template) -> Compiled:
        """Trace, verify and print for ``arch`` (default: the kernel's) and the template
        values (defaults for those not given), cached per key."""
        arch = arch or self.arch
        lines = lines if lines is not None else self.lines
        if arch != self.arch or lines not in (None, "comment", "loc"):
            try:
                parse_arch(arch)
            except PtxdslError as e:
                raise e.at(user_location()) from None
            if lines not in (None, "comment", "loc"):
                raise TraceError(f"lines must be None, True, 'comment' or 'loc', got "
                                 f"{lines!r}", user_location())
        if self._tracer == threading.get_ident():
            # the body asked for its own trace (a call of itself): the lock would deadlock
            raise TraceError(f"kernel {self.name} uses itself while it is being traced (a "
                             f"recursive call, or its own .ptx()/.compile()); a kernel body "
                             f"cannot call a kernel: call a plain Python helper instead",
                             user_location())
        values = bind_template(self, template)
        key = (arch, lines) + tuple(sorted(values.items()))
        with self._lock:
            hit = self._compiled.get(key)
            if hit is None:
                t0 = time.perf_counter()
                self._tracer = threading.get_ident()
                try:
                    hit = self._compiled[key] = self._trace(arch, key[1], values)
                finally:
                    self._tracer = None
                log.debug("traced %s for %s (%d PTX lines) in %.1f ms", self.name, arch,
                          hit.ptx.count("\n"), 1e3 * (time.perf_counter() - t0))
                from .runtime.dump import dump, dump_dir
                if dump_dir() is not None:   # every traced kernel, interpreted ones too
                    dump(self.name, self._cubin_key(hit, hit.program.arch, ()), ptx=hit.ptx)
        return hit

    def _trace(self, arch: str, lines: str | None, template: dict | None = None) -> Compiled:
        b = Builder(self.name, arch)
        b.cache["style"] = self.style   # read by smem.alloc / smem.mbarrier (their names)
        b.cache["block"] = tuple(self.block)   # bounds %tid (and a constant grid %ctaid)
        b.cache["grid"] = None if callable(self.grid) else tuple(self.grid)  # for dsl.ranges
        args = self._arguments(b)
        opts = self.entry
        if opts.extern_smem is not None:
            b.shared.append(ir.SharedDecl(opts.extern_smem, u8, (opts.smem,), 128,
                                          self.defined_at, dynamic=True))
        with b.active():
            try:
                self.fn(*args, **(template or {}))
            except PtxdslError as e:
                # Operators and helpers that raise without a location get the user's
                # line from the traceback (the innermost frame outside ptxdsl).
                e.at(location_from_traceback(e.__traceback__) or self.defined_at)
                raise
            except (TypeError, AttributeError, IndexError, KeyError, ValueError) as e:
                if not raised_inside_ptxdsl(e.__traceback__):
                    raise  # the user's own bug: their traceback says where
                loc = location_from_traceback(e.__traceback__) or self.defined_at
                raise TraceError(f"{type(e).__name__} inside ptxdsl while tracing {self.name}: "
                                 f"{e}; check the arguments of the call on this line", loc) from e
            last = b.body[-1] if b.body else None
            if not (isinstance(last, ir.Instr) and "exit" in last.match.spec.effects):
                b.inst(["ret"], (), loc=self.defined_at)
        nthreads = self.block[0] * self.block[1] * self.block[2]
        prog = b.finish(max_threads=nthreads)
        prog.ptx_version = max(prog.ptx_version, opts.needs_ptx)
        prog.cluster = opts.cluster_shape
        bounded = self.maxntid or self.min_ctas_per_sm is not None
        prog.directives = ((("maxntid", self.block),) if bounded else ()) + (
            (("minnctapersm", (self.min_ctas_per_sm,)),) if self.min_ctas_per_sm is not None
            else ()) + tuple(opts.directives)
        if opts.smem is not None and prog.dynamic_smem > opts.smem:
            dyn = next(s for s in prog.shared if s.dynamic)
            raise TraceError(f"smem={opts.smem} bytes but the dynamic shared array {dyn.name} "
                             f"needs {prog.dynamic_smem}", dyn.loc or self.defined_at)
        if self.version is not None:
            need = prog.ptx_version
            if tuple(self.version) < need:
                raise TraceError(f"version={self.version} is older than the PTX ISA "
                                 f"{need[0]}.{need[1]} this kernel needs", self.defined_at)
            prog.ptx_version = tuple(self.version)
        elif self.style == "pyptx":
            prog.ptx_version = max(prog.ptx_version, pyptx_version(prog.arch))
        verify(prog)
        if self.pdl:
            self._check_grid_wait(prog)
        src = f"{os.path.basename(self.defined_at.file)}:{self.defined_at.line}"
        return Compiled(prog, emit(prog, lines, source=src,
                                   maxntid=self.block if bounded else None,
                                   minnctapersm=self.min_ctas_per_sm,
                                   directives=opts.directive_lines()))

    def _check_grid_wait(self, prog) -> None:
        """A ``pdl=True`` kernel must wait for the previous grid somewhere (the
        interpreter checks that each thread does so before its global accesses)."""
        if any("grid_wait" in i.match.spec.effects for i in prog.walk()) or \
                ir.unchecked(prog.body):   # raw lines: not looked into
            return
        raise TraceError(f"kernel {self.name} is declared pdl=True (programmatic dependent "
                         f"launch: it may start before the previous kernel on its stream has "
                         f"finished) but never executes griddepcontrol.wait; call "
                         f"ptx.inst.griddepcontrol.wait() before its first global memory "
                         f"access, or drop pdl=True", self.defined_at)

    def _arguments(self, b: Builder) -> list[TensorArg]:
        params = inspect.signature(self.fn).parameters
        names = list(params)
        n = len(self.in_specs) + len(self.out_specs)
        variadic = [p.kind for p in params.values()] == [inspect.Parameter.VAR_POSITIONAL]
        positional = [k for k, p in params.items() if k not in self._template and p.kind in (
            p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        if n == 0 and positional and len(positional) == len(params) - len(self._template):
            return [TensorSpec(k) for k in positional]  # pyptx's spec-less placeholders
        if variadic and self.arg_names is not None and len(self.arg_names) == n:
            names = list(self.arg_names)
        elif len(names) - len(self._template) != n or any(
                p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                for k, p in params.items() if k not in self._template):
            raise TraceError(
                f"kernel {self.name} takes {len(names)} arguments ({', '.join(names)}) but "
                f"in_specs + out_specs give {n} tensors; write one positional parameter per "
                f"Tile, inputs first", self.defined_at)
        names = [k for k in names if k not in self._template]
        out = []
        for i, (pname, spec) in enumerate(zip(names, self.in_specs + self.out_specs)):
            p = ir.Param(f"{pname}_ptr", u64, "ptr", pname)
            b.params.append(p)
            out.append(TensorArg(pname, spec, p, i >= len(self.in_specs)))
        for d in self.dim_names:
            b.params.append(ir.Param(f"{d}_dim", u32, "dim", d))
        for st in self.stride_names:
            b.params.append(ir.Param(f"{st}_stride", u32, "stride", st))
        taken = {p.name for p in b.params} | {f"{a.name}_tmap" for a in out}  # + tma_desc()'s
        for pname, t, count, align in self.entry.extra_params:  # raw params naming no dim
            if pname in taken:
                raise TraceError(f"raw param {pname!r} is also the name of a parameter the "
                                 f"specs give; rename it", self.defined_at)
            b.params.append(ir.Param(pname, ALL_TYPES[t], "raw", pname, count, align))
        return out

    # ------------------------------------------------------------------ views
    def ptx(self, arch: str | None = None, *, lines: str | bool | None = None,
            **template) -> str:
        """The PTX text. ``lines=True``/``"comment"`` adds Python lines as comments,
        ``"loc"`` as ``.loc`` debug directives; other keywords are template values
        (:attr:`template_params`) or named dims (checked, see ``bind_template``)."""
        return self.compile(arch, "comment" if lines is True else lines or None,
                            **template).ptx

    def module(self, arch: str | None = None, **template) -> ir.Program:
        """pyptx's ``k.module(**template)``: the verified IR of that specialisation (the
        same object for the same key)."""
        return self.compile(arch, **template).program

    @property
    def smem(self) -> int | None:
        """``smem=`` as given to ``@kernel`` (pyptx's attribute), else ``None``."""
        return self.entry.smem

    @property
    def dynamic_shared(self) -> int:
        """Bytes of dynamic shared memory every launch provides: ``smem=`` if given,
        else the kernel's ``smem.alloc(..., dynamic=True)`` array (0 when it has none)."""
        if self.entry.smem is not None:
            return self.entry.smem
        return self.compile().program.dynamic_smem

    def program(self, arch: str | None = None) -> ir.Program:
        """The verified IR (what the interpreter runs)."""
        return self.compile(arch).program

    # ------------------------------------------------------------------ toolchain
    def check(self, arch: str | None = None, *, options: Sequence[str] = ()):
        """Assemble with ptxas; errors name the Python line that recorded the bad PTX line.

        The result's ``unchecked`` lists the ``ptx.raw`` lines (``file:line: text``):
        ptxas assembled them, but ptxdsl validated nothing about them."""
        c = self.compile(arch)
        target = c.program.arch
        unchecked = tuple(f"{raw.loc}: {raw.text}" for raw in ir.unchecked(c.program.body))
        try:
            t0 = time.perf_counter()
            result = toolchain.assemble(c.ptx, target, options=options)
            key = self._cubin_key(c, target, options)
            log.debug("assembled %s for %s with ptxas in %.1f ms (key %s)", self.name, target,
                      1e3 * (time.perf_counter() - t0), key[:16])
            from .runtime.dump import dump
            dump(self.name, key, ptx=c.ptx, cubin=result.cubin)
            if unchecked:
                result = dataclasses.replace(result, unchecked=unchecked)
            return result
        except toolchain.PtxasError as e:
            loc = None
            for d in e.diagnostics:
                if d.severity == "error" and d.line is not None:
                    loc = c.emitted.source_of(d.line)
                    if loc:
                        break
            if loc is None and "shared data" in e.message and c.program.shared:
                # Whole-kernel limits have no PTX line: name the largest smem.alloc.
                loc = max(c.program.shared, key=lambda s: s.nbytes).loc
            raise ToolchainError(f"ptxas rejected kernel {self.name}: {e.message}", loc) from e

    def resources(self, arch: str | None = None):
        """Registers, spills, shared/local/constant bytes from ``ptxas -v``."""
        res = self.check(arch).resources
        try:
            return res[self.name]
        except KeyError:
            raise ToolchainError(f"ptxas -v reported no resources for {self.name}") from None

    def sass(self, arch: str | None = None) -> str:
        """SASS disassembly of the assembled cubin (needs cuobjdump or nvdisasm)."""
        from .runtime.dump import dump
        c = self.compile(arch)
        text = toolchain.disassemble(self.check(arch).cubin)
        dump(self.name, self._cubin_key(c, c.program.arch, ()), sass=text)
        return text

    def _cubin_key(self, c: Compiled, target: str, options: Sequence[str]) -> str:
        """The cubin cache key of this PTX assembled by the ptxas found (dump file names)."""
        from .runtime.cache import cache_key, ptxas_identity
        ptxas = toolchain.find_ptxas()
        tool = ptxas_identity(ptxas) if ptxas else "ptxas-unknown"
        return cache_key(c.ptx, target, tool, tuple(options))

    # ------------------------------------------------------------------ running
    def interpret(self, *args, **kwargs):
        """Run the IR on the CPU (numpy) and return the outputs it allocated: torch
        tensors (on the first torch argument's device) when any argument is a torch
        tensor, numpy arrays otherwise; outputs passed in are written in place."""
        from .interp import interpret
        return interpret(self, *args, **kwargs)

    def __call__(self, *args, **kwargs):
        """Launch on the GPU, or run on the CPU interpreter when ``PTXDSL_INTERPRET`` is
        set (to anything but ``0``) at the time of the call.

        Once a kernel has launched on the GPU its calls go to the prepared launcher
        (:func:`ptxdsl.runtime.prepare`), which does not read the environment. A kernel
        without specs has nothing to launch with: calling it raises :class:`NoSpecsError`.
        """
        if not self.in_specs and not self.out_specs:
            raise NoSpecsError(f"kernel {self.name} has no in_specs or out_specs, so it has no "
                               f"arguments to launch with; declare its tensors "
                               f"(@kernel(in_specs=(Tile(...),), out_specs=(...))) to call it "
                               f"(.ptx(), .check() and .interpret() work without)",
                               user_location())
        if interpret_requested():
            return self.interpret(*args, **kwargs)
        launcher = self.runtime_cache.get("launcher")
        if launcher is not None:
            return launcher(*args, **kwargs)
        from .runtime import launch
        return launch(self, *args, **kwargs)

    def grid_for(self, dims: dict[str, int]) -> tuple[int, int, int]:
        """The grid for concrete values of the named dims."""
        if not callable(self.grid):
            return self.grid
        loc = code_loc(self.grid) or self.defined_at
        if self._grid_params is not None:
            dims = {k: v for k, v in dims.items() if k in self._grid_params}
        try:
            value = self.grid(**dims) if dims else self.grid()
        except PtxdslError:
            raise
        except Exception as e:
            raise TraceError(f"the grid function of kernel {self.name} raised "
                             f"{type(e).__name__}: {e} (called with "
                             f"{', '.join(f'{k}={v}' for k, v in dims.items()) or 'no dims'})",
                             loc) from e
        return dim3(value, f"the grid of kernel {self.name}", loc)

    def _check_grid_callable(self, grid) -> None:
        """A grid function's parameters must be named dims of the kernel's Tiles."""
        loc = code_loc(grid) or self.defined_at
        try:
            params = inspect.signature(grid).parameters
        except (TypeError, ValueError):
            return
        if any(p.kind == p.VAR_KEYWORD for p in params.values()):
            return
        dims = set(self.dim_names)
        for name, p in params.items():
            if p.kind in (p.VAR_POSITIONAL, p.POSITIONAL_ONLY) or (
                    name not in dims and p.default is p.empty):
                have = ", ".join(self.dim_names) or "none (all Tile dims are ints)"
                raise TraceError(f"grid function parameter {name!r} is not a named dim of "
                                 f"this kernel's Tiles; its named dims are: {have}. Name the "
                                 f"parameters after them, e.g. grid=lambda "
                                 f"{', '.join(self.dim_names) or ''}: (...)", loc)
        # A grid function may leave out dims it does not need.
        self._grid_params = tuple(params)


def interpret_requested() -> bool:
    """Whether ``PTXDSL_INTERPRET`` asks kernel calls to run on the CPU interpreter
    (read on every call, so a script or ``monkeypatch.setenv`` may set it late)."""
    return os.environ.get("PTXDSL_INTERPRET", "").strip().lower() not in (
        "", "0", "false", "no", "off")


def kernel(in_specs: Sequence[Tile] = (), out_specs: Sequence[Tile] = (), grid=(1, 1, 1),
           block=(1, 1, 1), arch: str = "sm_90a", version: tuple[int, int] | None = None,
           name: str | None = None, lines: str | None = None,
           arg_names: Sequence[str] | None = None,
           maxntid: bool = False, cooperative: bool = False,
           min_ctas_per_sm: int | None = None, *, cluster=None, raw_params=None,
           extern_smem: bool | str = False, raw_directives=None,
           smem: int | None = None, pdl: bool = False,
           resident: int | None = None, style: str = "ptxdsl") -> Callable[[Callable], Kernel]:
    """Turn a Python function into a PTX kernel (``@kernel`` bare, or ``@kernel(...)``).

    The function takes one argument per Tile (inputs then outputs) and
    records its instructions when traced. ``grid`` may be a function of the
    named dims (``grid=lambda B: (B, 1, 1)``). A body written as ``def k(*args)``
    takes its parameter names from ``arg_names``. ``maxntid=True`` emits
    ``.maxntid`` (the block size as an upper bound, like ``__launch_bounds__``).
    ``min_ctas_per_sm=n`` emits ``.maxntid`` and ``.minnctapersm n`` (CUDA's
    ``__launch_bounds__(threads, n)``): ptxas keeps registers low enough for ``n``
    CTAs per SM, spilling if it must (``kernel.resources()`` shows spills).
    ``cooperative=True`` launches with ``cuLaunchCooperativeKernel``: every CTA of
    the grid is resident at once, so CTAs may wait for each other (a grid-wide
    barrier); a grid too large to be resident is refused before launch.
    ``resident=n`` is for kernels whose CTAs wait only for CTAs that may start after
    them (the last ``n`` to arrive at a reduction wait for the rest, the others exit): a
    plain launch, which makes progress as long as the device holds ``n`` CTAs of the
    kernel at once (checked before launch; cheaper than a cooperative launch); the
    interpreter runs such a grid in one batch.
    ``pdl=True`` (programmatic dependent launch, sm_90) launches with the driver's
    programmatic-stream-serialization attribute: the kernel may start while the previous
    kernel on its stream still runs (once that kernel's CTAs have all executed
    ``griddepcontrol.launch_dependents`` or exited), and ``griddepcontrol.wait`` blocks
    until it has finished and its memory is visible. Every thread must execute the wait
    before touching global memory (the interpreter checks it); ``PTXDSL_PDL=0`` launches
    without the attribute.

    Hopper entry options (see :mod:`ptxdsl.core.entry`): ``cluster=(x, y, z)`` launches
    clusters of CTAs; ``raw_directives=[("maxntid", (384, 1, 1)), ("explicitcluster",
    ()), ("reqnctapercluster", (2, 1, 1))]`` prints those directives;
    ``extern_smem="smem"`` declares ``.extern .shared .align 128 .b8 smem[]`` and
    ``smem=BYTES`` is the dynamic shared memory each launch provides;
    ``raw_params=[("u32", "K"), ...]`` (pyptx's spelling) names dims that the body reads
    with ``ptx.param(u32, "K")``, or declares other parameters (see :mod:`ptxdsl.core.entry`).

    Keyword-only parameters of the body with defaults (``def k(A, B, *, BM=128)``) are
    template parameters: ``k.ptx(BM=64)`` traces with ``BM=64`` (one compiled form per set
    of values). ``arch="auto"`` is the arch of GPU 0 (``sm_90a`` on a Hopper).
    ``style="pyptx"`` prints PTX as pyptx does where the two differ in spelling only
    (what ``ptxdsl.pyptx.kernel`` sets): ``.version`` at least pyptx's for the arch (8.5
    for sm_90a) and shared arrays named ``smem_N`` / ``mbar_N``.
    """
    if callable(in_specs) and not isinstance(in_specs, (Tile, Kernel)):
        return kernel(style=style)(in_specs)  # bare @kernel: the other options' defaults
    if arch == "auto":
        arch = auto_arch()

    def wrap(fn: Callable) -> Kernel:
        if isinstance(fn, Kernel):
            raise TraceError("@kernel applied twice")
        return Kernel(fn, in_specs, out_specs, grid, block, arch, version, name, lines,
                      arg_names, maxntid, cooperative, min_ctas_per_sm, cluster=cluster,
                      raw_params=raw_params, extern_smem=extern_smem,
                      raw_directives=raw_directives, smem=smem, pdl=pdl, resident=resident,
                      style=style)
    return wrap


__all__ = ["Kernel", "Compiled", "kernel", "PtxdslError", "TensorSpec"]
