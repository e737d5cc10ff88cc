"""Where ``ptxas``/``cuobjdump``/``nvdisasm`` are, and what they say.

Tools are found by ``cuda.pathfinder`` (installed with cuda-python:
``find_nvidia_binary_utility`` searches the NVIDIA wheels, a conda prefix,
``$CUDA_PATH``/``$CUDA_HOME`` and the toolkit its ``cudart`` canary points at);
ptxdsl's own rules run only where it finds nothing: a wheel binary that lost its
executable bit, ``PATH``, ``/usr/local/cuda/bin``. ``$PTXDSL_PTXAS`` (and
``$PTXDSL_CUOBJDUMP``, ``$PTXDSL_NVDISASM``) come first and are read on every call;
pathfinder remembers its own answers for the process. The other cache is the
``ptxas --version`` answer, keyed by the file's path, mtime and size, because
spawning ptxas costs tens of milliseconds and a path's content rarely changes.
"""
from __future__ import annotations

import bisect
import functools
import importlib.util
import os
import re
import shutil
import stat
import subprocess
import tempfile
from dataclasses import dataclass
from typing import Sequence

from .core.errors import ToolchainError

__all__ = ["AssembleResult", "PtxasDiagnostic", "PtxasError", "Resources", "assemble",
           "disassemble", "find_ptxas", "find_tool", "max_ptx_isa", "parse_diagnostics",
           "parse_ptxas_version", "parse_resources", "ptxas_version", "toolchain_report"]

# Module names, not distribution names: CUDA 13 wheels install under nvidia/cu13,
# CUDA 12 ones under nvidia/cuda_nvcc. Tests point this at a fake package.
_PIP_MODULES: tuple[str, ...] = ("nvidia.cu13", "nvidia.cuda_nvcc")
# Last resort after CUDA_HOME/CUDA_PATH; a module constant so tests can empty it.
_DEFAULT_CUDA_DIRS: tuple[str, ...] = ("/usr/local/cuda/bin",)

_INSTALL_ADVICE = ("install it with `pip install nvidia-cuda-nvcc~=13.0.0` (ships ptxas 13.0, "
                   "PTX ISA 9.0) or set PTXDSL_PTXAS to the path of a ptxas executable")
# cuobjdump -sass runs nvdisasm: install both (no 13.0 release of either exists on PyPI).
SASS_INSTALL = "pip install 'nvidia-cuda-cuobjdump>=13.2' 'nvidia-cuda-nvdisasm>=13.2'"
_WHERE = ("cuda.pathfinder (NVIDIA wheels, conda, $CUDA_PATH/$CUDA_HOME, the toolkit of "
          "libcudart), beside ptxas, PATH, /usr/local/cuda/bin")


def _pathfinder_find(name: str) -> str | None:
    """``cuda.pathfinder.find_nvidia_binary_utility(name)``, or None (not installed,
    unsupported name, nothing found). A remembered path that has since gone is asked
    again."""
    try:
        from cuda.pathfinder import find_nvidia_binary_utility
    except ImportError:
        return None
    try:
        found = find_nvidia_binary_utility(name)
        if found is not None and not _is_executable(found):
            found = getattr(find_nvidia_binary_utility, "__wrapped__",
                            find_nvidia_binary_utility)(name)
    except Exception:  # noqa: BLE001 - UnsupportedBinaryError, Windows registry errors
        return None
    return found if found and _is_executable(found) else None


# Tests replace this (None: no pathfinder), so that fake tools in tmp folders are found.
_PATHFINDER = _pathfinder_find

# First CUDA release -> newest PTX ISA its ptxas accepts, from NVIDIA's PTX ISA
# release history. CUDA 12.6 added no ISA (stays at 8.5). Sorted by release.
_PTX_ISA_BY_CUDA: tuple[tuple[tuple[int, int], tuple[int, int]], ...] = (
    ((9, 0), (6, 0)), ((9, 1), (6, 1)), ((9, 2), (6, 2)), ((10, 0), (6, 3)), ((10, 1), (6, 4)),
    ((10, 2), (6, 5)), ((11, 0), (7, 0)), ((11, 1), (7, 1)), ((11, 2), (7, 2)), ((11, 3), (7, 3)),
    ((11, 4), (7, 4)), ((11, 5), (7, 5)), ((11, 6), (7, 6)), ((11, 7), (7, 7)), ((11, 8), (7, 8)),
    ((12, 0), (8, 0)), ((12, 1), (8, 1)), ((12, 2), (8, 2)), ((12, 3), (8, 3)), ((12, 4), (8, 4)),
    ((12, 5), (8, 5)), ((12, 6), (8, 5)), ((12, 7), (8, 6)), ((12, 8), (8, 7)), ((12, 9), (8, 8)),
    ((13, 0), (9, 0)), ((13, 1), (9, 1)),
)

_ARCH_RE = re.compile(r"sm_\d+[a-z]?")


# ---------------------------------------------------------------- discovery

def _is_executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def _from_env(var: str) -> str | None:
    value = os.environ.get(var)
    if not value:
        return None
    path = os.path.abspath(os.path.expanduser(value))
    if not _is_executable(path):
        what = "is not executable" if os.path.isfile(path) else "does not exist"
        raise ToolchainError(
            f"{var}={value!r} names no executable file ({path} {what}); "
            f"point {var} at the tool itself, or unset it to search PATH and CUDA_HOME")
    return path


def _pip_bin_dirs() -> list[str]:
    """``bin/`` folders of the NVIDIA CUDA wheels, found without importing them."""
    dirs = []
    for module in _PIP_MODULES:
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            continue  # parent package absent, or a half-installed module
        if spec is not None:
            dirs += [os.path.join(loc, "bin") for loc in spec.submodule_search_locations or ()]
    return dirs


def _ensure_executable(path: str) -> bool:
    """Pip does not always keep the executable bit of wheel data files; restore it."""
    if os.access(path, os.X_OK):
        return True
    try:
        mode = os.stat(path).st_mode
        # Grant execute to exactly those who may read it.
        os.chmod(path, mode | ((mode & (stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)) >> 2))
    except OSError:
        return False
    return os.access(path, os.X_OK)


def _search(name: str, first: list[str]) -> str | None:
    """*name* in the *first* folders, then PATH, $CUDA_HOME/bin, $CUDA_PATH/bin, the defaults."""
    cuda = [os.path.join(os.environ[v], "bin") for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    for folder in first:
        if _is_executable(path := os.path.join(folder, name)):
            return path
    found = shutil.which(name)
    if found is not None:
        return found
    for folder in cuda + list(_DEFAULT_CUDA_DIRS):
        if _is_executable(path := os.path.join(folder, name)):
            return path
    return None


def find_ptxas() -> str | None:
    """Path of the ``ptxas`` to use, or None when there is none.

    Order: ``$PTXDSL_PTXAS`` (an error if it names no executable), ``cuda.pathfinder``
    (the ``nvidia-cuda-nvcc`` wheel, conda, ``$CUDA_PATH``/``$CUDA_HOME``, the toolkit
    of libcudart), then where it finds nothing: the wheel's ptxas made executable,
    PATH, ``$CUDA_HOME/bin``, ``$CUDA_PATH/bin``, ``/usr/local/cuda/bin``.
    """
    env = _from_env("PTXDSL_PTXAS")
    if env is not None:
        return env
    if _PATHFINDER is not None and (found := _PATHFINDER("ptxas")) is not None:
        return found
    wheel = [p for d in _pip_bin_dirs() if os.path.isfile(p := os.path.join(d, "ptxas"))]
    stuck = [p for p in wheel if not _ensure_executable(p)]
    found = _search("ptxas", [os.path.dirname(p) for p in wheel])
    if found is None and stuck:
        # Saying "no ptxas" here would send the user to reinstall what they have.
        raise ToolchainError(
            f"found ptxas at {stuck[0]} (from the nvidia-cuda-nvcc wheel) but it is not "
            f"executable and could not be made so; run `chmod +x {stuck[0]}` "
            f"or set PTXDSL_PTXAS to another ptxas")
    return found


def _require_ptxas(ptxas: str | None = None) -> str:
    path = ptxas if ptxas is not None else find_ptxas()
    if path is None:
        raise ToolchainError(
            "no ptxas found (searched PTXDSL_PTXAS, the nvidia-cuda-nvcc wheel, PATH, "
            "$CUDA_HOME/bin, $CUDA_PATH/bin, /usr/local/cuda/bin); " + _INSTALL_ADVICE)
    return path


def find_tool(name: str) -> str | None:
    """Path of a CUDA binary tool such as ``cuobjdump`` or ``nvdisasm``, or None.

    Order: ``$PTXDSL_<NAME>``, ``cuda.pathfinder``, then beside the ptxas found, the
    NVIDIA wheels' ``bin/``, PATH, ``$CUDA_HOME/bin``, ``$CUDA_PATH/bin``,
    ``/usr/local/cuda/bin``.
    """
    env = _from_env(f"PTXDSL_{name.upper()}")
    if env is not None:
        return env
    if _PATHFINDER is not None and (found := _PATHFINDER(name)) is not None:
        return found
    try:
        ptxas = find_ptxas()
    except ToolchainError:
        ptxas = None  # a broken ptxas setting is reported by assemble, not here
    # realpath too: /usr/bin/ptxas is often a link into the toolkit's bin/.
    beside = [os.path.dirname(ptxas), os.path.dirname(os.path.realpath(ptxas))] if ptxas else []
    return _search(name, beside + _pip_bin_dirs())


# ---------------------------------------------------------------- versions

def parse_ptxas_version(text: str) -> tuple[int, int]:
    """``(major, minor)`` from ``ptxas --version`` output ("release 13.0, V13.0.88")."""
    match = re.search(r"release (\d+)\.(\d+)", text) or re.search(r"\bV(\d+)\.(\d+)", text)
    if match is None:
        raise ToolchainError(f"cannot find a release number in ptxas --version output: {text.strip()!r}")
    return int(match.group(1)), int(match.group(2))


@functools.lru_cache(maxsize=16)
def _version_of(path: str, mtime_ns: int, size: int) -> tuple[int, int]:
    del mtime_ns, size  # only part of the cache key
    try:
        proc = subprocess.run([path, "--version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, errors="replace", timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolchainError(f"could not run {path} --version: {exc}") from exc
    if proc.returncode != 0:
        raise ToolchainError(f"{path} --version exited with {proc.returncode}: {proc.stdout.strip()}")
    return parse_ptxas_version(proc.stdout)


def ptxas_version(path: str | None = None) -> tuple[int, int]:
    """The CUDA release of ``ptxas`` at *path* (default: :func:`find_ptxas`), e.g. ``(13, 0)``."""
    path = _require_ptxas(path)
    try:
        st = os.stat(path)
    except OSError as exc:
        raise ToolchainError(f"cannot stat ptxas at {path}: {exc}") from exc
    return _version_of(os.path.abspath(path), st.st_mtime_ns, st.st_size)


def max_ptx_isa(version: tuple[int, int]) -> tuple[int, int]:
    """Newest PTX ISA (``.version``) accepted by ptxas of CUDA release *version*.

    Releases newer than the table get the newest ISA known here, which such a
    ptxas still accepts.
    """
    releases = [cuda for cuda, _ in _PTX_ISA_BY_CUDA]
    index = bisect.bisect_right(releases, tuple(version)) - 1
    if index < 0:
        raise ToolchainError(
            f"ptxas {version[0]}.{version[1]} is older than CUDA {releases[0][0]}.{releases[0][1]}; "
            + _INSTALL_ADVICE)
    return _PTX_ISA_BY_CUDA[index][1]


# ---------------------------------------------------------------- ptxas -v

@dataclass(frozen=True)
class Resources:
    """What ``ptxas -v`` reports for one function; sizes in bytes (0 where not reported,
    e.g. ``registers`` of a device function ptxas inlined)."""

    registers: int
    spill_stores: int
    spill_loads: int
    shared: int
    local: int
    constant: int
    barriers: int = 0


_COMPILING_RE = re.compile(r"Compiling (?:entry )?function '([^']+)'")
_PROPS_RE = re.compile(r"Function properties for '?([^'\s]+)'?")
_FRAME_RE = re.compile(
    r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED_RE = re.compile(r"Used (\d+) registers")
_USED_FIELDS = {
    "barriers": re.compile(r"used (\d+) barriers"),
    "shared": re.compile(r"(\d+) bytes smem"),
    "constant": re.compile(r"(\d+) bytes cmem\[0\]"),
    "lmem": re.compile(r"(\d+) bytes lmem"),  # older ptxas said lmem, not stack frame
}


def parse_resources(log: str) -> dict[str, Resources]:
    """Per-function resources from a ``ptxas -v`` log, keyed by (mangled) name."""
    found: dict[str, dict[str, int]] = {}
    # Each report line belongs to the function most recently named, whether by
    # "Compiling ... function" or by "Function properties for".
    current = None
    for line in log.splitlines():
        if m := _COMPILING_RE.search(line) or _PROPS_RE.search(line):
            current = m.group(1)
            found.setdefault(current, {})
        elif current is None:
            continue
        elif m := _FRAME_RE.search(line):
            found[current].update(local=int(m.group(1)), spill_stores=int(m.group(2)),
                                  spill_loads=int(m.group(3)))
        elif m := _USED_RE.search(line):
            entry = found[current]
            entry["registers"] = int(m.group(1))
            for key, regex in _USED_FIELDS.items():
                if fm := regex.search(line):
                    entry[key] = int(fm.group(1))
    for values in found.values():
        values.setdefault("local", values.get("lmem", 0))
    names = Resources.__dataclass_fields__
    return {fn: Resources(**{k: v.get(k, 0) for k in names}) for fn, v in found.items()}


@dataclass
class PtxasDiagnostic:
    """One ``ptxas`` message. ``severity`` is "error", "warning" or "info" (fatal counts as error)."""

    line: int | None
    severity: str
    message: str


_DIAG_RE = re.compile(
    r"^ptxas\s*(?:(?P<file>.+?), line (?P<line>\d+); )?"
    r"(?P<sev>error|warning|info|fatal)\s*:\s?(?P<msg>.*)$")


def parse_diagnostics(log: str) -> list[PtxasDiagnostic]:
    """Every ``ptxas <file>, line N; error : ...`` / ``ptxas fatal : ...`` line, in order."""
    out = []
    for raw in log.splitlines():
        m = _DIAG_RE.match(raw.strip())
        if m is None:
            continue
        sev = "error" if m.group("sev") == "fatal" else m.group("sev")
        line = int(m.group("line")) if m.group("line") else None
        out.append(PtxasDiagnostic(line, sev, m.group("msg").strip()))
    return out


# Printed after the real errors; quoting it instead of them would tell the user nothing.
_ABORTED = "Ptx assembly aborted due to errors"


class PtxasError(ToolchainError):
    """ptxas rejected the PTX. The message quotes the first error and its PTX line."""

    def __init__(self, log: str, ptx: str, diagnostics: list[PtxasDiagnostic] | None = None, *,
                 arch: str | None = None, returncode: int | None = None):
        self.log = log
        self.ptx = ptx
        self.diagnostics = parse_diagnostics(log) if diagnostics is None else list(diagnostics)
        self.arch = arch
        self.returncode = returncode
        super().__init__(self._describe())

    def _describe(self) -> str:
        who = f"ptxas -arch={self.arch}" if self.arch else "ptxas"
        errors = [d for d in self.diagnostics if d.severity == "error" and d.message != _ABORTED]
        if not errors:
            errors = [d for d in self.diagnostics if d.severity == "error"]
        if not errors:
            status = f" (exit status {self.returncode})" if self.returncode is not None else ""
            return f"{who} failed{status}; its output:\n{self.log.strip() or '(none)'}"
        first = errors[0]
        if first.line is None:
            text = f"{who} failed: {first.message}"
        else:
            text = f"{who} rejected the PTX: line {first.line}: {first.message}"
            if 1 <= first.line <= len(lines := self.ptx.split("\n")):
                text += f"\n  {first.line:>5} | {lines[first.line - 1].strip()}"
        if len(errors) > 1:
            text += f"\n  (and {len(errors) - 1} more error(s); see .diagnostics)"
        return text


# ---------------------------------------------------------------- running tools

@dataclass(frozen=True)
class AssembleResult:
    """A cubin and what ptxas said while producing it."""

    cubin: bytes
    log: str
    resources: dict[str, Resources]
    warnings: list[PtxasDiagnostic]
    # ptx.raw lines ptxdsl did not check ("file:line: text"), filled in by Kernel.check
    unchecked: tuple[str, ...] = ()

    def __repr__(self) -> str:
        # short: the cubin's bytes (tens of KB) are not worth printing
        res = ", ".join(f"{k}: {v.registers} regs, {v.shared} B shared, {v.spill_stores} B "
                        f"spilled" for k, v in self.resources.items())
        return (f"AssembleResult(cubin=<{len(self.cubin)} bytes>, {res or 'no resources'}, "
                f"{len(self.warnings)} warning(s), {len(self.unchecked)} unchecked line(s))")


def _run(cmd: list[str], cwd: str, timeout: float,
         env: dict | None = None) -> subprocess.CompletedProcess:
    try:
        # One stream keeps ptxas's messages in the order it printed them.
        return subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, encoding="utf-8", errors="replace", timeout=timeout,
                              env=env)
    except subprocess.TimeoutExpired as exc:
        raise ToolchainError(f"{cmd[0]} did not finish within {timeout} s") from exc
    except OSError as exc:
        raise ToolchainError(f"could not run {cmd[0]}: {exc}") from exc


def assemble(ptx: str, arch: str, *, options: Sequence[str] = (), verbose: bool = True,
             ptxas: str | None = None, timeout: float = 120) -> AssembleResult:
    """Assemble PTX text to a cubin for *arch* (``"sm_90a"``, ``"sm_80"``) with ptxas.

    Runs ``ptxas -arch=<arch> [-v] <options> kernel.ptx -o kernel.cubin`` in a
    temporary folder. Raises :class:`PtxasError` when ptxas rejects the PTX.
    """
    if not _ARCH_RE.fullmatch(arch):
        raise ToolchainError(f"arch must look like 'sm_90a' or 'sm_80', got {arch!r}")
    if isinstance(options, str):
        # Iterating a string would pass ptxas one character per argument.
        raise ToolchainError(f"options must be a list of arguments, got the string {options!r}")
    exe = _require_ptxas(ptxas)
    with tempfile.TemporaryDirectory(prefix="ptxdsl-") as tmp:
        with open(os.path.join(tmp, "kernel.ptx"), "w", encoding="utf-8") as f:
            f.write(ptx)
        # Relative names keep temp paths out of the log, so it is the same every run.
        cmd = [exe, f"-arch={arch}", *(["-v"] if verbose else []), *options,
               "kernel.ptx", "-o", "kernel.cubin"]
        proc = _run(cmd, tmp, timeout)
        if proc.returncode != 0:
            raise PtxasError(proc.stdout, ptx, arch=arch, returncode=proc.returncode)
        try:
            with open(os.path.join(tmp, "kernel.cubin"), "rb") as f:
                cubin = f.read()
        except OSError as exc:
            raise ToolchainError(f"ptxas exited 0 but wrote no cubin: {exc}\n{proc.stdout}") from exc
    log = proc.stdout
    warnings = [d for d in parse_diagnostics(log) if d.severity == "warning"]
    return AssembleResult(cubin, log, parse_resources(log), warnings)


def disassemble(cubin: bytes, *, tool: str | None = None, timeout: float = 120) -> str:
    """SASS text of *cubin*, from ``cuobjdump -sass`` or, failing that, ``nvdisasm``.

    *tool* may name either program or give a path to one.
    """
    if tool is None:
        path = find_tool("cuobjdump") or find_tool("nvdisasm")
        if path is None:
            raise ToolchainError(
                "no SASS disassembler found: searched for cuobjdump and nvdisasm in "
                f"PTXDSL_CUOBJDUMP / PTXDSL_NVDISASM, {_WHERE}; install them with "
                f"`{SASS_INSTALL}`")
    elif os.sep in tool:
        path = tool
    else:
        path = find_tool(tool)
        if path is None:
            raise ToolchainError(f"{tool} not found (searched PTXDSL_{tool.upper()}, {_WHERE})")
    is_nvdisasm = os.path.basename(path).lower().startswith("nvdisasm")
    env = None
    if not is_nvdisasm:
        # cuobjdump -sass runs nvdisasm, looked up on PATH or NVDISASM_PATH: hand it ours.
        try:
            nvdisasm = find_tool("nvdisasm")
        except ToolchainError:
            nvdisasm = None
        if nvdisasm is not None:
            folder = os.path.dirname(nvdisasm)
            env = dict(os.environ, NVDISASM_PATH=folder,
                       PATH=folder + os.pathsep + os.environ.get("PATH", ""))
    with tempfile.TemporaryDirectory(prefix="ptxdsl-") as tmp:
        with open(os.path.join(tmp, "kernel.cubin"), "wb") as f:
            f.write(cubin)
        cmd = [path, "kernel.cubin"] if is_nvdisasm else [path, "-sass", "kernel.cubin"]
        proc = _run(cmd, tmp, timeout, env=env)
    if proc.returncode != 0:
        hint = ""
        if "nvdisasm" in proc.stdout and not is_nvdisasm:
            hint = f"\ncuobjdump needs nvdisasm for -sass; install both with `{SASS_INSTALL}`"
        raise ToolchainError(f"{os.path.basename(path)} failed (exit status {proc.returncode}):\n"
                             f"{proc.stdout.strip()}{hint}")
    return proc.stdout


def toolchain_report() -> dict:
    """What the toolchain looks like, for ``ptxdsl doctor``; never raises.

    Keys: ``ptxas``, ``cuobjdump``, ``nvdisasm`` (paths or None), ``ptxas_version``
    and ``max_ptx_isa`` (``"13.0"``-style strings or None), ``problems`` (messages).
    """
    report: dict = dict.fromkeys(("ptxas", "ptxas_version", "max_ptx_isa", "cuobjdump", "nvdisasm"))
    problems = report["problems"] = []
    try:
        report["ptxas"] = _require_ptxas()
        version = ptxas_version(report["ptxas"])
        report["ptxas_version"] = "%d.%d" % version
        report["max_ptx_isa"] = "%d.%d" % max_ptx_isa(version)
    except ToolchainError as exc:
        problems.append(str(exc))
    for name in ("cuobjdump", "nvdisasm"):
        try:
            report[name] = find_tool(name)
        except ToolchainError as exc:
            problems.append(str(exc))
    return report
