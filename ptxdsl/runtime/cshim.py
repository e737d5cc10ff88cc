"""The launch shim: ``_launch.c``, a small CPython extension compiled at first use.

What it is: one C function per launch kind (plain, cooperative, ``cuLaunchKernelEx``)
that writes a fast call's pointers into the entry's parameter buffer and calls the
driver's launch with the GIL released: the fast path's launch in one C call (the
``c`` launch mode of :mod:`.launcher`). It links nothing of CUDA: :func:`for_driver`
hands it the addresses of the launch entry points of the libcuda that cuda.bindings
loaded.

It is optional. Building needs a C compiler (``$CC``, else the one Python was built
with, else ``cc``) and Python's headers; the built module is kept in the cache folder
(:func:`.cache.cache_dir`, ``launch/``) under a name made from the source and the
Python build, so each machine compiles it once. Where anything is missing (or on
Windows), :func:`load` says why (:func:`reason`) and launches go through cuda-python
(the ``params`` mode): same results, about a microsecond more per launch.
"""
from __future__ import annotations

import ctypes
import hashlib
import importlib.machinery
import importlib.util
import logging
import os
import shlex
import subprocess
import sys
import sysconfig
import tempfile
import threading


# launch_ex's flags (the shim's EX_COOPERATIVE / EX_PDL)
EX_COOPERATIVE, EX_PDL = 1, 2

log = logging.getLogger("ptxdsl.launch")

NAME = "_ptxdsl_launch"
_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_launch.c")
_lock = threading.Lock()
_loaded: dict = {}   # "module" / "reason", once per process


def libcuda():
    """The CUDA driver library (the one already loaded in this process, by cuda.bindings)."""
    name = "nvcuda.dll" if os.name == "nt" else "libcuda.so.1"
    return (ctypes.WinDLL if os.name == "nt" else ctypes.CDLL)(name)


def compiler() -> list[str]:
    """The C compiler command: ``$CC``, else the one Python was built with, else ``cc``."""
    cc = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    return shlex.split(cc)


def _target(source: bytes) -> str:
    """Where the built module lives: the cache folder (or a temporary one where that is
    not writable), named by the source and the Python build."""
    from .cache import cache_dir
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    tag = hashlib.sha256(source + sys.version.encode() + suffix.encode()).hexdigest()[:16]
    for root in (cache_dir(), tempfile.gettempdir()):
        folder = os.path.join(root, "launch")
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError:
            continue
        if os.access(folder, os.W_OK):
            return os.path.join(folder, f"{NAME}-{tag}{suffix}")
    raise OSError("no writable folder for the launch shim")


def build(source_path: str = _SOURCE, target: str | None = None) -> str:
    """Compile the shim (unless ``target`` exists) and return its path; raises
    ``OSError`` / ``subprocess.CalledProcessError`` with the compiler's complaint."""
    with open(source_path, "rb") as f:
        source = f.read()
    target = target or _target(source)
    if os.path.exists(target):
        return target
    include = sysconfig.get_paths()["include"]
    if not os.path.exists(os.path.join(include, "Python.h")):
        raise OSError(f"Python's headers are not installed (no Python.h in {include})")
    # Built beside the target under a unique name, then renamed: two processes building
    # at once never load a half-written file.
    fd, tmp = tempfile.mkstemp(suffix=os.path.splitext(target)[1],
                               dir=os.path.dirname(target))
    os.close(fd)
    try:
        cmd = compiler() + ["-O2", "-shared", "-fPIC", f"-I{include}", source_path, "-o", tmp]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if done.returncode:
            raise subprocess.CalledProcessError(done.returncode, cmd, done.stdout, done.stderr)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def _import(path: str):
    loader = importlib.machinery.ExtensionFileLoader(NAME, path)
    spec = importlib.util.spec_from_file_location(NAME, path, loader=loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def load():
    """The shim module (not yet given the driver's entry points), or None where it cannot
    be built or loaded here; :func:`reason` then says why. Built and imported once per
    process."""
    with _lock:
        if "module" not in _loaded:
            mod, why = None, None
            if os.name == "nt":
                why = "the launch shim is built for POSIX systems only"
            else:
                try:
                    mod = _import(build())
                except (OSError, ImportError, subprocess.SubprocessError) as exc:
                    detail = getattr(exc, "stderr", None) or str(exc)
                    why = f"the launch shim could not be built: {detail.strip()[:300]}"
            if why:
                log.debug("%s; launches use the params mode", why)
            _loaded.update(module=mod, reason=why)
        return _loaded["module"]


def reason() -> str | None:
    """Why :func:`load` returned None (None if it did not, or was not called)."""
    return _loaded.get("reason")


def for_driver(cu):
    """The shim given the entry points of the libcuda that ``cu`` (cuda.bindings' driver
    module) loaded, or None: not cuda.bindings (a test's fake), or not built here."""
    if getattr(cu, "__name__", "") != "cuda.bindings.driver" or os.name == "nt":
        return None
    mod = load()
    if mod is None:
        return None
    try:
        lib = libcuda()
        addr = [ctypes.cast(getattr(lib, n), ctypes.c_void_p).value
                for n in ("cuLaunchKernel", "cuLaunchCooperativeKernel", "cuLaunchKernelEx")]
        ids = cu.CUlaunchAttributeID
        mod.init(*addr, int(ids.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION),
                 int(ids.CU_LAUNCH_ATTRIBUTE_COOPERATIVE),
                 int(ids.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION))
    except (OSError, AttributeError, TypeError) as exc:
        log.debug("the launch shim has no driver entry points (%s)", exc)
        return None
    return mod
