"""pyptx's example kernels loaded on ptxdsl, with only their imports renamed.

The examples are read, never copied into this repository, from the first of:

1. ``$PTXDSL_PYPTX_EXAMPLES`` (a folder holding ``hopper/<name>.py``),
2. the pyptx git mirror (``$PTXDSL_PYPTX_MIRROR``, default
   ``/work/.mirror/patrick-toulme+pyptx/repo``, read with ``git show HEAD:...``),
3. an installed pyptx wheel (it ships them as ``pyptx/examples``; see
   ``bench/install_wheels.py``).

``load(name)`` rewrites ``from pyptx import`` to ``from ptxdsl.pyptx import`` (pyptx's
PTX spellings, ``kernel(style="pyptx")``), other ``from pyptx...``/``import pyptx`` to
ptxdsl (``pyptx.smem`` and the other modules of ``MODULES`` to their ptxdsl paths),
writes the result to a temporary file (so tracebacks and ``ptxdsl`` error locations
show its lines) and imports it. ``load(name, original=True)`` imports pyptx's own module instead (for side
by side timing; with ``patch=``, pyptx's own file patched the same way). Modules that
import jax at the top (``grouped_gemm.py``) get an inert stand-in when jax is missing:
only their jax runners use it.
"""
from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import tempfile
import types

MIRROR = os.environ.get("PTXDSL_PYPTX_MIRROR", "/work/.mirror/patrick-toulme+pyptx/repo")
HOPPER = ("gemm_highperf_hopper", "grouped_gemm")

# pyptx's public modules whose ptxdsl home has another path (docs/coming-from-pyptx.md
# lists the same map); every other ``pyptx.X`` is ``ptxdsl.X``.
MODULES = {"reg": "dsl.reg", "smem": "dsl.smem", "ptx": "dsl.ptx",
           "wgmma_layout": "dsl.wgmma_layout"}

_RENAME = [(re.compile(rf"\bpyptx\.{theirs}\b"), f"ptxdsl.{ours}")
           for theirs, ours in MODULES.items()] + [
    (re.compile(r"^(\s*)from pyptx import ", re.M), r"\1from ptxdsl.pyptx import "),
    (re.compile(r"^(\s*)from pyptx(\.[\w.]+) import ", re.M), r"\1from ptxdsl\2 import "),
    (re.compile(r"^(\s*)import pyptx\b", re.M), r"\1import ptxdsl")]


class Unavailable(Exception):
    """No source for the example (the message says where it looked)."""


def source(name: str, arch_dir: str = "hopper") -> tuple[str, str]:
    """``(text, where)`` of pyptx's ``examples/<arch_dir>/<name>.py``."""
    rel = f"examples/{arch_dir}/{name}.py"
    looked = []
    env = os.environ.get("PTXDSL_PYPTX_EXAMPLES")
    if env:
        p = os.path.join(env, arch_dir, f"{name}.py")
        if os.path.isfile(p):
            return open(p, encoding="utf-8").read(), p
        looked.append(p)
    if os.path.isdir(MIRROR):
        try:
            text = subprocess.run(["git", "-C", MIRROR, "show", f"HEAD:{rel}"], check=True,
                                  capture_output=True, text=True).stdout
            return text, f"{MIRROR}:{rel}"
        except (OSError, subprocess.CalledProcessError):
            pass
    looked.append(f"{MIRROR} (git)")
    spec = importlib.util.find_spec("pyptx")
    if spec is not None and spec.submodule_search_locations:
        for root in spec.submodule_search_locations:
            p = os.path.join(root, "examples", arch_dir, f"{name}.py")
            if os.path.isfile(p):
                return open(p, encoding="utf-8").read(), p
            looked.append(p)
    else:
        looked.append("an installed pyptx")
    raise Unavailable(f"pyptx's {rel} not found (looked in: {'; '.join(looked)})")


def renamed(text: str) -> str:
    """The example with its pyptx imports pointing at ptxdsl, nothing else changed."""
    out = text
    for pat, rep in _RENAME:
        out = pat.sub(rep, out)
    return out


def _jax_stand_in():
    if "jax" in sys.modules or importlib.util.find_spec("jax") is not None:
        return
    jax = types.ModuleType("jax")
    jax.__ptxdsl_stand_in__ = True
    jnp = types.ModuleType("jax.numpy")
    jax.numpy = jnp
    jax.jit = lambda f=None, **kw: f
    sys.modules["jax"], sys.modules["jax.numpy"] = jax, jnp


_LOADED: dict = {}


def load(name: str, arch_dir: str = "hopper", *, original: bool = False, patch=None):
    """The example as a module: on ptxdsl (imports renamed), or pyptx's own. ``patch``
    (text -> text, applied after the rename) loads a changed copy under its own name,
    e.g. a fix under test."""
    key = (name, arch_dir, original, patch)
    if key in _LOADED:
        return _LOADED[key]
    _jax_stand_in()
    dotted = arch_dir.replace("/", ".")
    if original and patch is None:
        try:
            mod = importlib.import_module(f"pyptx.examples.{dotted}.{name}")
        except ImportError:
            mod = importlib.import_module(f"examples.{dotted}.{name}")
        _LOADED[key] = mod
        return mod
    if original:  # pyptx's own file, patched, still importing pyptx
        spec = importlib.util.find_spec(f"pyptx.examples.{dotted}.{name}")
        if spec is None or not spec.origin:
            raise Unavailable(f"pyptx.examples.{dotted}.{name} is not installed")
        text, where = open(spec.origin, encoding="utf-8").read(), spec.origin
    else:
        text, where = source(name, arch_dir)
    folder = os.path.join(tempfile.gettempdir(), "ptxdsl_pyptx_examples", arch_dir)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{name}.py")
    body = text if original else renamed(text)
    if patch is not None:
        body = patch(body)
        tag = f"{patch.__name__}_pyptx" if original else patch.__name__
        path = os.path.join(folder, f"{name}_{tag}.py")
    if not os.path.isfile(path) or open(path, encoding="utf-8").read() != body:
        with open(path, "w", encoding="utf-8") as f:
            f.write(body)
    mod_name = f"ptxdsl_pyptx_{arch_dir}_{name}".replace("/", "_")
    if patch is not None:
        mod_name += f"_{patch.__name__}" + ("_pyptx" if original else "")
    spec = importlib.util.spec_from_file_location(mod_name, path)
    mod = importlib.util.module_from_spec(spec)
    mod.__pyptx_source__ = where
    sys.modules[mod_name] = mod  # dataclasses and pickling look a class's module up there
    spec.loader.exec_module(mod)
    _LOADED[key] = mod
    return mod
