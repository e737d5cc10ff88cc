"""The ``ptxdsl`` command (also ``python -m ptxdsl``).

Subcommands work on the kernels a Python file defines; see :func:`load_kernels`
for how they are found (the convention is also documented in ``docs/cli.md``)::

    ptxdsl ptx   FILE.py[:KERNEL] [--arch ARCH] [--lines[=loc]]
    ptxdsl check FILE.py[:KERNEL] [--arch ARCH] [--json]
    ptxdsl sass  FILE.py[:KERNEL] [--arch ARCH]
    ptxdsl list  FILE.py
    ptxdsl run   FILE.py [--interpret] [-- ARGS...]
    ptxdsl bench NAME [ARGS...]
    ptxdsl cache info|clear
    ptxdsl doctor

Failures exit non-zero with a one-line ``ptxdsl: error: ...`` on stderr; errors
of the ptxdsl family never print a traceback (their message already names the
user's file and line).
"""
from __future__ import annotations

import argparse
import importlib.util
import inspect
import json
import os
import runpy
import subprocess
import sys
import traceback
from dataclasses import dataclass
from typing import Callable, Sequence

from .. import toolchain
from ..core.errors import PtxdslError
from ..core.version import __version__
from ..kernel import Kernel
from . import doctor as doctor_mod
from . import ptxfile
from . import cachecmd
from .benchenv import cuda_torch_missing
from .table import format_table

__all__ = ["main", "load_kernels", "select_kernels", "format_table", "CliError",
           "KernelEntry"]

# Exit codes: 0 ok, 1 a failure with a reason printed, 2 bad usage (argparse's own).
EXIT_FAIL = 1
EXIT_USAGE = 2


class CliError(Exception):
    """A failure the command reports as one line, without a traceback."""


class _UserCodeError(Exception):
    """The user's file raised something that is not a PtxdslError: show its traceback."""

    def __init__(self, what: str, exc: BaseException):
        super().__init__(f"{what}: {type(exc).__name__}: {exc}")
        self.exc = exc


# ------------------------------------------------------------------ finding kernels
@dataclass(frozen=True)
class KernelEntry:
    """One kernel a file exposes: its key, where it came from, and the object."""

    name: str          # what FILE.py:NAME selects (the kernel's own name)
    source: str        # "KERNELS", "module attribute x" or "build_x()"
    kernel: object     # a ptxdsl.Kernel
    aliases: tuple[str, ...] = ()


def _split_target(target: str) -> tuple[str, str | None]:
    """``path/to/file.py:name`` -> (path, name); a Windows drive colon is not a separator."""
    head, sep, tail = target.rpartition(":")
    if sep and head and tail and not tail.startswith(("\\", "/")) and head.endswith(".py"):
        return head, tail
    return target, None


def _import_file(path: str):
    """Import a Python file as a fresh module (``__name__`` is not ``"__main__"``)."""
    if not os.path.exists(path):
        raise CliError(f"no such file: {path}")
    if os.path.isdir(path) or not path.endswith(".py"):
        raise CliError(f"{path} is not a Python file (expected FILE.py)")
    path = os.path.abspath(path)
    stem = os.path.splitext(os.path.basename(path))[0]
    # A private module name keeps the user's module from shadowing a real one.
    modname = f"_ptxdsl_cli_{stem}_{abs(hash(path)) & 0xFFFFFF:x}"
    spec = importlib.util.spec_from_file_location(modname, path)
    if spec is None or spec.loader is None:
        raise CliError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    # Like `python FILE.py`: the file's folder comes first on sys.path, so its
    # sibling imports work. Registered in sys.modules so dataclasses/pickle work.
    folder = os.path.dirname(path)
    added = folder not in sys.path
    if added:
        sys.path.insert(0, folder)
    sys.modules[modname] = module
    try:
        spec.loader.exec_module(module)
    except PtxdslError:
        raise
    except SystemExit as e:
        raise CliError(f"importing {path} called sys.exit({e.code!r}); guard the script part "
                       f"with `if __name__ == \"__main__\":`") from None
    except Exception as e:  # the user's own bug: they need its traceback
        raise _UserCodeError(f"importing {path} failed", e) from e
    return module


def _required_params(fn: Callable) -> list[str]:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return []
    return [n for n, p in sig.parameters.items()
            if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD,
                                                     p.KEYWORD_ONLY)]


def _kernels_in(value, source: str) -> list[tuple[str | None, object, str]]:
    """Kernels in what KERNELS or a builder gave: a Kernel, a dict, or a list/tuple."""
    if isinstance(value, Kernel):
        return [(None, value, source)]
    if isinstance(value, dict):
        out = []
        for key, k in value.items():
            if not isinstance(k, Kernel):
                raise CliError(f"{source}[{key!r}] is {type(k).__name__}, not a ptxdsl Kernel")
            out.append((str(key), k, source))
        return out
    if isinstance(value, (list, tuple)):
        out = []
        for k in value:
            out.extend(_kernels_in(k, source))
        return out
    raise CliError(f"{source} gave {type(value).__name__}; expected a Kernel, a dict of "
                   f"name -> Kernel, or a list of Kernels")


def _call(fn: Callable, what: str):
    try:
        return fn()
    except (PtxdslError, CliError):
        raise
    except Exception as e:
        raise _UserCodeError(f"{what} failed", e) from e


def load_kernels(path: str, module=None) -> list[KernelEntry]:
    """The kernels a Python file exposes, in the order the file defines them.

    The file is imported as a module (so code under ``if __name__ ==
    "__main__":`` does not run). Then, in order of precedence:

    1. ``KERNELS``, if the module defines it: a dict of name -> Kernel, a list
       of Kernels, or a function taking no required arguments that returns one
       of those. Nothing else is looked at.
    2. Otherwise every module-level :class:`~ptxdsl.Kernel` object, followed
       by the result of every module-level function named ``build_*`` whose
       parameters all have defaults, called with no arguments (a Kernel, a
       dict or a list of Kernels). Builders with required parameters are
       skipped.

    A kernel is selected (``FILE.py:NAME``) by its own name (``kernel.name``,
    the Python function's name unless ``@kernel(name=...)`` says otherwise) or
    by the attribute / builder it came from (``build_softmax`` or ``softmax``).
    """
    if module is None:
        module = _import_file(path)
    found: list[tuple[str | None, object, str, tuple[str, ...]]] = []
    if hasattr(module, "KERNELS"):
        value = module.KERNELS
        if callable(value) and not isinstance(value, Kernel):
            req = _required_params(value)
            if req:
                raise CliError(f"{path}: KERNELS() must be callable without arguments, but "
                               f"needs {', '.join(req)}")
            value = _call(value, f"{path}: KERNELS()")
        for key, k, src in _kernels_in(value, "KERNELS"):
            found.append((key, k, src, ()))
    else:
        seen: set[int] = set()
        for attr, value in list(vars(module).items()):
            if isinstance(value, Kernel) and id(value) not in seen:
                seen.add(id(value))
                found.append((None, value, f"module attribute {attr}", (attr,)))
        for attr, value in list(vars(module).items()):
            if not (attr.startswith("build_") and inspect.isfunction(value)):
                continue
            if getattr(value, "__module__", None) != module.__name__:
                continue  # imported from elsewhere: that file exposes it, not this one
            if _required_params(value):
                continue
            result = _call(value, f"{path}: {attr}()")
            for key, k, src in _kernels_in(result, f"{attr}()"):
                if id(k) in seen:
                    continue
                seen.add(id(k))
                found.append((key, k, src, (attr, attr[len("build_"):])))
    entries: list[KernelEntry] = []
    used: set[str] = set()
    for key, k, src, aliases in found:
        name = key or k.name
        if name in used:  # two builders produced kernels of the same name
            alt = next((a for a in aliases if a not in used), None)
            name = alt or f"{name}#{sum(1 for e in entries if e.kernel.name == k.name) + 1}"
        used.add(name)
        extra = tuple(a for a in (k.name, *aliases) if a != name)
        entries.append(KernelEntry(name, src, k, extra))
    return entries


def select_kernels(target: str) -> list[KernelEntry]:
    """``FILE.py`` -> all its kernels; ``FILE.py:NAME`` -> that one (errors say what exists)."""
    path, name = _split_target(target)
    entries = load_kernels(path)
    if not entries:
        raise CliError(
            f"{path} defines no kernels: expose module-level Kernel objects, build_*() "
            f"functions with default arguments, or a KERNELS dict (see `ptxdsl --help`)")
    if name is None:
        return entries
    for e in entries:
        if name == e.name:
            return [e]
    for e in entries:
        if name in e.aliases:
            return [e]
    raise CliError(f"{path} has no kernel {name!r}; it has: "
                   f"{', '.join(e.name for e in entries)}")


# ------------------------------------------------------------------ subcommands
def _cmd_list(args) -> int:
    entries = select_kernels(args.file)
    rows = []
    for e in entries:
        k = e.kernel
        rows.append([e.name, k.arch, "x".join(map(str, k.block)),
                     ", ".join(map(_tile_brief, k.in_specs)),
                     ", ".join(map(_tile_brief, k.out_specs)), e.source])
    print(format_table(["kernel", "arch", "block", "inputs", "outputs", "from"], rows,
                       right=[False] * 6))
    return 0


def _tile_brief(t) -> str:
    """A Tile in a table cell: ``MxK bf16 tma`` (its repr, with the TMA box, runs to
    hundreds of characters; ``ptxdsl ptx`` shows everything)."""
    dims = "x".join(map(str, t.dims)) or "scalar"
    extra = (" tma" if getattr(t, "tma", None) is not None else "") + \
        (f" stride={t.stride}" if getattr(t, "stride", None) else "")
    return f"{dims} {t.dtype.name}{extra}"


def _cmd_ptx(args) -> int:
    entries = select_kernels(args.target)
    texts = []
    for e in entries:
        texts.append(e.kernel.ptx(args.arch, lines=args.lines))
    _write("\n".join(texts))
    return 0


def _cmd_check(args) -> int:
    if ptxfile.is_ptx(args.target):
        return ptxfile.cmd_check(args)
    entries = select_kernels(args.target)
    rows, failures, records = [], [], []
    for e in entries:
        k = e.kernel
        arch = args.arch or k.arch
        try:
            result = k.check(args.arch)
        except PtxdslError as err:
            failures.append(f"{e.name}: {_one_line(err)}")
            rows.append([e.name, arch, "FAILED", "", "", "", "", ""])
            records.append({"kernel": e.name, "arch": arch, "ok": False, "error": str(err)})
            continue
        res = result.resources.get(k.name)
        if res is None:
            failures.append(f"{e.name}: ptxas -v reported no resources for {k.name}")
            continue
        rows.append([e.name, arch, res.registers, res.spill_stores, res.spill_loads,
                     res.shared, res.local, res.constant])
        records.append({"kernel": e.name, "arch": arch, "ok": True,
                        "registers": res.registers, "spill_stores": res.spill_stores,
                        "spill_loads": res.spill_loads, "shared": res.shared,
                        "local": res.local, "constant": res.constant,
                        "warnings": [w.message for w in result.warnings]})
        for w in result.warnings:
            print(f"ptxdsl: warning: {e.name}: ptxas: {w.message}", file=sys.stderr)
    if args.json:
        print(json.dumps(records, indent=2))
    else:
        print(format_table(["kernel", "arch", "registers", "spill stores", "spill loads",
                            "shared B", "local B", "const B"], rows,
                           right=[False, False] + [True] * 6))
        spilled = [r[0] for r in rows if isinstance(r[3], int) and (r[3] or r[4])]
        if spilled:
            print(f"note: {', '.join(spilled)} spill(s) registers to local memory")
    for f in failures:
        print(f"ptxdsl: error: {f}", file=sys.stderr)
    return EXIT_FAIL if failures else 0


def _cmd_sass(args) -> int:
    # Say up front, in one line, when there is nothing to disassemble with.
    if toolchain.find_tool("cuobjdump") is None and toolchain.find_tool("nvdisasm") is None:
        raise CliError(f"no SASS disassembler found (cuobjdump or nvdisasm); install them with "
                       f"`{toolchain.SASS_INSTALL}` or set PTXDSL_CUOBJDUMP / PTXDSL_NVDISASM")
    entries = select_kernels(args.target)
    out = []
    for e in entries:
        out.append(e.kernel.sass(args.arch))
    _write("\n".join(out))
    return 0


def _cmd_run(args) -> int:
    path = args.file
    rest = list(args.args)
    if rest and rest[0] == "--":
        rest = rest[1:]
    # argparse hands everything after FILE.py to the script (REMAINDER), so our own
    # option is picked out of what came before a `--` (main() keeps that part apart).
    interpret = args.interpret or "--interpret" in rest
    rest = [a for a in rest if a != "--interpret"] + list(getattr(args, "after_dashes", ()))
    old_env = os.environ.get("PTXDSL_INTERPRET")
    if interpret:
        # Kernel calls read this at each call; the examples check it before choosing the GPU.
        os.environ["PTXDSL_INTERPRET"] = "1"
    old_argv = sys.argv
    sys.argv = [path, *rest]
    try:
        module = _import_file(path)
        fn = getattr(module, "main", None)
        if callable(fn):
            code = _call(fn, f"{path}: main()")
        else:
            try:
                runpy.run_path(path, run_name="__main__")
            except PtxdslError:
                raise
            except SystemExit as e:
                code = e.code
            except Exception as e:
                raise _UserCodeError(f"running {path} failed", e) from e
            else:
                code = 0
    except SystemExit as e:
        code = e.code
    finally:
        sys.argv = old_argv
        if interpret:
            if old_env is None:
                os.environ.pop("PTXDSL_INTERPRET", None)
            else:
                os.environ["PTXDSL_INTERPRET"] = old_env
    if code is None or code is True:
        return 0
    if isinstance(code, int):
        return code
    if code is False:
        return EXIT_FAIL
    print(code, file=sys.stderr)
    return EXIT_FAIL


def _repo_root() -> str:
    """The folder above the ptxdsl package (the source checkout, for an editable install)."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _cmd_bench(args) -> int:
    name = args.name
    candidates = []
    for root in dict.fromkeys([os.getcwd(), _repo_root()]):
        candidates.append(os.path.join(root, "bench", f"{name}.py"))
    path = next((c for c in candidates if os.path.isfile(c)), None)
    if path is None:
        raise CliError(f"no benchmark {name!r}: looked for {' and '.join(candidates)}; "
                       f"benchmarks live in the bench/ folder of a source checkout")
    env = dict(os.environ)
    # The benchmark imports ptxdsl: make the checkout it belongs to importable.
    root = os.path.dirname(os.path.dirname(path))
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    rest = list(args.args)
    if rest and rest[0] == "--":
        rest = rest[1:]
    missing = None if {"-h", "--help"} & set(rest) else cuda_torch_missing(name, path)
    if missing:
        raise CliError(missing)
    try:
        return subprocess.call([sys.executable, path, *rest], env=env)
    except KeyboardInterrupt:
        return 130


def _cmd_doctor(args) -> int:
    """Exit 0 when kernels can at least be assembled here (a ptxas) or run (a GPU)."""
    report = doctor_mod.doctor()
    print(doctor_mod.format_report(report))
    usable = bool(report.get("ptxas")) or report.get("gpu") == "yes"
    return 0 if usable else EXIT_FAIL


# ------------------------------------------------------------------ plumbing
def _write(text: str) -> None:
    """Print ``text``; a closed pipe (`ptxdsl ptx f.py | head`) is left to main()."""
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    sys.stdout.flush()


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that Python's flush at exit finds no broken pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # stdout is not a file descriptor (captured in tests)
        pass


def _one_line(err: BaseException) -> str:
    return str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__


_EPILOG = """\
Finding kernels in FILE.py: the file is imported (its `if __name__ == "__main__":`
part does not run). If it defines KERNELS (a dict name -> Kernel, a list, or a
function returning one) that is used; otherwise every module-level Kernel object
and every build_*() function whose arguments all have defaults (called with
none). Select one kernel with FILE.py:NAME (kernel name, attribute or builder).

examples:
  ptxdsl ptx examples/hopper/vector_add.py --lines
  ptxdsl check examples/hopper/softmax.py
  ptxdsl run examples/hopper/layer_norm.py --interpret
  ptxdsl doctor
"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ptxdsl", description="Inspect, check and run ptxdsl kernels defined in Python files.",
        epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"ptxdsl {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    def arch(sp):
        sp.add_argument("--arch", metavar="ARCH", default=None,
                        help="target such as sm_90a or sm_80 (default: each kernel's own arch)")

    sp = sub.add_parser("ptx", help="print the PTX of a file's kernels",
                        description="Print the PTX each kernel of FILE.py emits.")
    sp.add_argument("target", metavar="FILE.py[:KERNEL]")
    arch(sp)
    sp.add_argument("--lines", nargs="?", const="comment", choices=("comment", "loc"),
                    default=None,
                    help="show the Python line of each instruction: as a trailing comment "
                         "(--lines) or as .loc directives (--lines=loc)")
    sp.set_defaults(func=_cmd_ptx)

    sp = sub.add_parser("check", help="assemble with ptxas; registers, spills, memory per kernel",
                        description="Assemble each kernel with ptxas -v and print a table of "
                                    "registers, spill stores/loads and shared/local/constant "
                                    "bytes. Exits 1 if any kernel fails to assemble.")
    sp.add_argument("target", metavar="FILE.py[:KERNEL]")
    arch(sp)
    sp.add_argument("--json", action="store_true", help="print the table as JSON")
    sp.set_defaults(func=_cmd_check)

    sp = sub.add_parser("sass", help="print the SASS ptxas produces (needs cuobjdump or nvdisasm)",
                        description="Assemble each kernel and disassemble the cubin to SASS.")
    sp.add_argument("target", metavar="FILE.py[:KERNEL]")
    arch(sp)
    sp.set_defaults(func=_cmd_sass)

    sp = sub.add_parser("list", help="list the kernels a file exposes",
                        description="List the kernels FILE.py exposes and where they come from.")
    sp.add_argument("file", metavar="FILE.py")
    sp.set_defaults(func=_cmd_list)

    sp = sub.add_parser("run", help="run a file's main(): on the GPU, else on the CPU interpreter",
                        description="Import FILE.py and call its main() (or run it as a script "
                                    "if it has none). Examples pick the GPU when one is "
                                    "present and the CPU interpreter otherwise.")
    sp.add_argument("file", metavar="FILE.py")
    sp.add_argument("--interpret", action="store_true",
                    help="force the CPU interpreter (sets PTXDSL_INTERPRET=1)")
    sp.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed on as sys.argv[1:]")
    sp.set_defaults(func=_cmd_run)

    sp = sub.add_parser("bench", help="run a benchmark from bench/ (e.g. rmsnorm)",
                        description="Run bench/NAME.py of the source checkout (the current "
                                    "folder's bench/ first); extra arguments are passed on.")
    sp.add_argument("name", metavar="NAME", help="benchmark name, e.g. rmsnorm")
    sp.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the benchmark")
    sp.set_defaults(func=_cmd_bench)

    sp = sub.add_parser("cache", help="show or clear the compiled-kernel cache",
                        description="info: where the cubin cache is and how big; clear: empty it.")
    sp.add_argument("action", choices=("info", "clear"))
    sp.set_defaults(func=lambda a: 0 if cachecmd.run(a) else EXIT_FAIL)

    ptxfile.register(sub)  # translate, interpret (FILE.ptx)

    sp = sub.add_parser("doctor", help="report driver, GPU, arch, ptxas and cache",
                        description="Report what ptxdsl can use on this machine.")
    sp.set_defaults(func=_cmd_doctor)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``ptxdsl`` console script; returns the exit code."""
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    after: list[str] = []
    if "run" in argv and "--" in argv[argv.index("run"):]:
        # `ptxdsl run FILE.py [--interpret] -- ARGS`: ARGS go to the script untouched.
        cut = argv.index("--", argv.index("run"))
        argv, after = argv[:cut], argv[cut + 1:]
    args = parser.parse_args(argv)
    args.after_dashes = after
    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # here, so that a closed pipe is noticed while we can handle it
        return code
    except BrokenPipeError:
        # `ptxdsl doctor | head`: the reader has gone, which is not an error of ours.
        _silence_stdout()
        return 0
    except (CliError, PtxdslError) as e:
        # PtxdslErrors raised while tracing carry the user's file:line in their text.
        print(f"ptxdsl: error: {str(e).strip()}", file=sys.stderr)
        return EXIT_FAIL
    except _UserCodeError as e:
        # The user's own code failed: its traceback is the useful part.
        traceback.print_exception(type(e.exc), e.exc, e.exc.__traceback__, file=sys.stderr)
        print(f"ptxdsl: error: {e}", file=sys.stderr)
        return EXIT_FAIL
    except KeyboardInterrupt:
        print("ptxdsl: interrupted", file=sys.stderr)
        return 130
