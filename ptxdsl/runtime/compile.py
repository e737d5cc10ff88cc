"""From a kernel to a loaded CUfunction on one device: PTX -> cubin -> module.

The cubin comes from ``ptxas`` when one is found (:func:`ptxdsl.toolchain.find_ptxas`),
through the disk cache; without ptxas (or with ``PTXDSL_COMPILER=jit``) the
driver JIT-compiles the PTX itself (``cuModuleLoadDataEx`` with error and
info log buffers; the driver keeps its own JIT cache under ``~/.nv``).
Either way a rejection is raised as :class:`ToolchainError` naming the
kernel, quoting the offending PTX line and pointing at the user's Python line
that recorded it.

Which cubin: a kernel's ``arch`` with a suffix (``sm_90a``) runs only on that
exact compute capability; a plain ``sm_XY`` kernel is assembled for the
device's own arch when the device is at least XY (ptxas accepts ``.target
sm_80`` PTX for ``-arch=sm_90``), which is also what lets one sm_80 kernel run
on a newer GPU. The specialisation key of a loaded kernel is therefore
``(device ordinal, sha256(PTX, cubin arch, toolchain id, options))``; see
:func:`specialisation_key`.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Sequence

from .. import toolchain
from ..core.arch import parse_arch
from .dump import dump
from ..core.errors import LaunchError, ToolchainError
from . import cache as _cache
from .driver import CudaError

__all__ = ["KernelFunction", "Image", "build_image", "load_function", "resolve_toolchain",
           "specialisation_key", "target_arch", "toolchain_id"]

log = logging.getLogger("ptxdsl.compile")


def target_arch(kernel_arch: str, cc: tuple[int, int], device_name: str = "the device") -> str:
    """The ``-arch`` to assemble ``kernel_arch`` PTX for a device of compute capability ``cc``.

    Raises :class:`LaunchError` when the device cannot run the kernel.
    """
    num, suffix = parse_arch(kernel_arch)
    dev = cc[0] * 10 + cc[1]
    dev_arch = f"sm_{dev}"
    if suffix == "a":
        if dev != num:
            raise LaunchError(
                f"the kernel targets {kernel_arch}, whose code runs only on compute capability "
                f"{num // 10}.{num % 10}, but {device_name} is {dev_arch} "
                f"({cc[0]}.{cc[1]}); build it with arch='{dev_arch}' (dropping features that "
                f"need the 'a' suffix, such as wgmma or setmaxnreg)")
        return kernel_arch
    if suffix == "f":
        if dev // 10 != num // 10 or dev < num:
            raise LaunchError(f"the kernel targets {kernel_arch} (family {num // 10}.x, at least "
                              f"{num // 10}.{num % 10}) but {device_name} is {dev_arch}")
        return kernel_arch
    if dev < num:
        raise LaunchError(f"the kernel targets {kernel_arch} but {device_name} is only {dev_arch} "
                          f"({cc[0]}.{cc[1]}); build it with arch='{dev_arch}' if it uses nothing "
                          f"newer")
    return dev_arch


def _compiler_choice() -> str:
    choice = os.environ.get("PTXDSL_COMPILER", "auto").strip().lower() or "auto"
    if choice not in ("auto", "ptxas", "jit"):
        raise LaunchError(f"PTXDSL_COMPILER={choice!r}: use 'auto', 'ptxas' or 'jit'")
    return choice


def toolchain_id(ptxas: str | None, driver_version: int | None) -> str:
    """``"ptxas-13.0"`` or ``"driver-jit-13000"``: part of every cache key."""
    if ptxas is not None:
        return _cache.ptxas_identity(ptxas)
    return f"driver-jit-{driver_version or 0}"


def specialisation_key(ptx: str, cubin_arch: str, tool: str, options: Sequence[str] = ()) -> str:
    """The cache key of one compiled kernel (the device ordinal is added in memory)."""
    return _cache.cache_key(ptx, cubin_arch, tool, tuple(options))


@dataclass
class Image:
    """What the driver loads: a cubin (``kind="cubin"``) or NUL-terminated PTX (``"ptx"``)."""

    kind: str
    data: bytes
    key: str
    origin: str          # "disk", "ptxas" or "jit"
    tool: str
    arch: str
    timings: dict = field(default_factory=dict)


def _map_error(kernel, compiled, diagnostics, what: str, fallback: str) -> ToolchainError:
    """A ToolchainError quoting the first error's PTX line and the Python line behind it."""
    errors = [d for d in diagnostics if d.severity == "error"
              and "aborted due to errors" not in d.message]
    loc = None
    text = fallback
    if errors:
        first = errors[0]
        text = first.message
        if first.line is not None:
            loc = compiled.emitted.source_of(first.line)
            lines = compiled.ptx.split("\n")
            text = f"line {first.line}: {first.message}"
            if 1 <= first.line <= len(lines):
                text += f"\n  {first.line:>5} | {lines[first.line - 1].strip()}"
        if len(errors) > 1:
            text += f"\n  (and {len(errors) - 1} more error(s))"
    return ToolchainError(f"{what} rejected kernel {kernel.name}: {text}", loc)


def resolve_toolchain(driver_version: int | None) -> tuple[str | None, str]:
    """``(ptxas path or None, toolchain id)`` per ``PTXDSL_COMPILER`` and what is installed."""
    choice = _compiler_choice()
    ptxas = None
    if choice != "jit":
        ptxas = toolchain.find_ptxas()
        if ptxas is None and choice == "ptxas":
            raise ToolchainError("PTXDSL_COMPILER=ptxas but no ptxas was found; install "
                                 "nvidia-cuda-nvcc~=13.0.0 or set PTXDSL_PTXAS")
    return ptxas, toolchain_id(ptxas, driver_version)


def build_image(kernel, compiled, arch: str, *, driver_version: int | None = None,
                options: Sequence[str] = (), disk: _cache.DiskCache | None = None,
                tools: tuple[str | None, str] | None = None) -> Image:
    """The cubin for ``compiled`` (a :class:`ptxdsl.kernel.Compiled`) on ``arch``: from
    the disk cache, else from ptxas (then stored); PTX for the driver JIT when
    there is no ptxas or ``PTXDSL_COMPILER=jit``. ``tools`` is
    :func:`resolve_toolchain`'s answer when the caller has it already."""
    disk = disk if disk is not None else _cache.DISK
    timings: dict = {}
    t0 = time.perf_counter()
    ptxas, tool = tools if tools is not None else resolve_toolchain(driver_version)
    key = specialisation_key(compiled.ptx, arch, tool, options)
    timings["key_s"] = time.perf_counter() - t0
    if ptxas is None:
        log.info("compiling %s for %s with the driver's PTX JIT (no ptxas found)",
                 kernel.name, arch)
        dump(kernel.name, key, ptx=compiled.ptx)
        return Image("ptx", compiled.ptx.encode() + b"\0", key, "jit", tool, arch, timings)
    t0 = time.perf_counter()
    cubin = disk.get(key)
    timings["disk_read_s"] = time.perf_counter() - t0
    if cubin is not None:
        log.debug("%s for %s: cubin from the disk cache (key %s)", kernel.name, arch, key[:16])
        dump(kernel.name, key, ptx=compiled.ptx, cubin=cubin)
        return Image("cubin", cubin, key, "disk", tool, arch, timings)
    t0 = time.perf_counter()
    try:
        result = toolchain.assemble(compiled.ptx, arch, options=options, ptxas=ptxas,
                                    verbose=False)
    except toolchain.PtxasError as exc:
        raise _map_error(kernel, compiled, exc.diagnostics, f"ptxas -arch={arch}",
                         exc.message) from exc
    timings["ptxas_s"] = time.perf_counter() - t0
    log.info("compiled %s for %s with %s in %.1f ms (key %s)", kernel.name, arch, tool,
             1e3 * timings["ptxas_s"], key[:16])
    dump(kernel.name, key, ptx=compiled.ptx, cubin=result.cubin)
    t0 = time.perf_counter()
    disk.put(key, result.cubin, {"kernel": kernel.name, "arch": arch, "toolchain": tool,
                                 "options": list(options)})
    timings["disk_write_s"] = time.perf_counter() - t0
    return Image("cubin", result.cubin, key, "ptxas", tool, arch, timings)


@dataclass
class KernelFunction:
    """One kernel loaded on one device, with what the launcher checks against."""

    device: int
    func: object            # CUfunction (driver-specific object)
    module: object
    key: str
    arch: str
    origin: str
    num_regs: int
    static_smem: int
    max_threads: int        # per block, given this kernel's register use
    local_bytes: int
    timings: dict
    dyn_smem_limit: int = 48 * 1024  # current MAX_DYNAMIC_SHARED_SIZE_BYTES setting
    lock: threading.Lock = field(default_factory=threading.Lock)
    # CTAs per SM by (threads, dynamic smem), from the occupancy calculator
    resident: dict = field(default_factory=dict)


def _load(drv, kernel, compiled, image: Image, device: int, disk) -> tuple[object, Image]:
    """Load ``image`` in ``device``'s primary context; a cubin the driver refuses is
    dropped from the disk cache and replaced by the driver JIT of the PTX."""
    pushed = drv.enter(device)
    try:
        t0 = time.perf_counter()
        if image.kind == "cubin":
            try:
                module, _ = drv.load_module(image.data, jit=False)
                image.timings["load_s"] = time.perf_counter() - t0
                return module, image
            except CudaError as exc:
                if exc.sticky:
                    raise
                # A cubin this driver cannot load (e.g. from a ptxas newer than the
                # driver): forget it and let the driver compile the PTX instead.
                disk.remove(image.key)
                image = Image("ptx", compiled.ptx.encode() + b"\0", image.key, "jit",
                              image.tool, image.arch,
                              dict(image.timings, cubin_refused=exc.name))
        t0 = time.perf_counter()
        try:
            module, _info = drv.load_module(image.data, jit=True)
        except CudaError as exc:
            if exc.sticky:
                raise
            raise _map_error(kernel, compiled, toolchain.parse_diagnostics(exc.detail),
                             "the driver's PTX JIT", f"{exc.name}: {exc.detail}") from exc
        image.timings["jit_load_s"] = time.perf_counter() - t0
        return module, image
    finally:
        if pushed:
            drv.leave()


def load_function(drv, kernel, device: int, *, options: Sequence[str] = (),
                  modules: _cache.ModuleCache | None = None,
                  disk: _cache.DiskCache | None = None) -> KernelFunction:
    """Trace (cached on the kernel), assemble (cached on disk) and load (cached per
    device) ``kernel`` for ``device``; threads asking at once share one build."""
    modules = modules if modules is not None else _cache.MODULES
    disk = disk if disk is not None else _cache.DISK
    timings: dict = {}
    t0 = time.perf_counter()
    compiled = kernel.compile()
    timings["trace_s"] = time.perf_counter() - t0
    info = drv.device(device)
    arch = target_arch(kernel.arch, info.cc, f"device {device} ({info.name})")
    built: list[Image] = []
    t0 = time.perf_counter()
    tools = resolve_toolchain(drv.version())
    # The PTX text decides the key; computing it first lets a second kernel object
    # with the same PTX (and a second call) share the loaded module.
    key = specialisation_key(compiled.ptx, arch, tools[1], options)
    timings["toolchain_and_key_s"] = time.perf_counter() - t0

    def load():
        image = build_image(kernel, compiled, arch, options=options, disk=disk, tools=tools)
        module, image = _load(drv, kernel, compiled, image, device, disk)
        built.append(image)
        return module

    t0 = time.perf_counter()
    module = modules.get_or_load(device, key, load)
    origin = built[0].origin if built else "memory"
    if built:
        timings.update(built[0].timings)
    pushed = drv.enter(device)
    try:
        func = drv.get_function(module, compiled.program.name)
        attrs = {n: drv.func_attribute(func, f"CU_FUNC_ATTRIBUTE_{n}") for n in
                 ("NUM_REGS", "SHARED_SIZE_BYTES", "MAX_THREADS_PER_BLOCK", "LOCAL_SIZE_BYTES",
                  "MAX_DYNAMIC_SHARED_SIZE_BYTES")}
    finally:
        if pushed:
            drv.leave()
    timings["total_load_s"] = time.perf_counter() - t0
    return KernelFunction(device=device, func=drv.wrap_function(func), module=module, key=key,
                          arch=arch, origin=origin, num_regs=attrs["NUM_REGS"],
                          static_smem=attrs["SHARED_SIZE_BYTES"],
                          max_threads=attrs["MAX_THREADS_PER_BLOCK"],
                          local_bytes=attrs["LOCAL_SIZE_BYTES"], timings=timings,
                          dyn_smem_limit=attrs["MAX_DYNAMIC_SHARED_SIZE_BYTES"])
