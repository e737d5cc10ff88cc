"""``PTXDSL_DUMP_DIR``: keep the PTX, cubin and SASS of everything compiled.

With ``PTXDSL_DUMP_DIR=dir`` set (read at each compile), every kernel that is traced
leaves its PTX (so a kernel that only ever runs on the interpreter is dumped too), and
every kernel that is assembled (by a launch, ``kernel.check()``, ``kernel.resources()``, ``ptxdsl check``)
or disassembled (``kernel.sass()``, ``ptxdsl sass``) leaves
``dir/<kernel>-<key>.ptx``, ``dir/<kernel>-<key>.cubin`` and, when SASS was made,
``dir/<kernel>-<key>.sass``. ``<key>`` is the first 16 hex digits of the cubin cache
key (PTX text, arch, toolchain, options), so the files of one compilation share a
stem and ``cuobjdump -sass dir/<kernel>-<key>.cubin`` works on the dump. A launch that
hits the disk cache still dumps (the cached cubin). Like Triton's
``TRITON_KERNEL_DUMP``/``TRITON_DUMP_DIR`` and CuTe DSL's ``CUTE_DSL_DUMP_DIR``.
"""
from __future__ import annotations

import logging
import os
import re
import tempfile

__all__ = ["dump_dir", "dump"]

log = logging.getLogger("ptxdsl.dump")
_SAFE = re.compile(r"[^A-Za-z0-9_.$-]")


def dump_dir() -> str | None:
    """The folder ``PTXDSL_DUMP_DIR`` names, or None when dumping is off."""
    value = os.environ.get("PTXDSL_DUMP_DIR", "").strip()
    return os.path.abspath(os.path.expanduser(value)) if value else None


def stem(kernel_name: str, key: str) -> str:
    return f"{_SAFE.sub('_', kernel_name)}-{key[:16]}"


def dump(kernel_name: str, key: str, *, ptx: str | None = None, cubin: bytes | None = None,
         sass: str | None = None) -> list[str]:
    """Write what is given under ``PTXDSL_DUMP_DIR``; returns the paths written.

    Files are written atomically; a folder that cannot be written is logged as a
    warning, never raised (dumping is a debugging aid, not part of the launch).
    """
    folder = dump_dir()
    if folder is None:
        return []
    base = os.path.join(folder, stem(kernel_name, key))
    written = []
    for ext, data in ((".ptx", ptx), (".cubin", cubin), (".sass", sass)):
        if data is None:
            continue
        blob = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        path = base + ext
        try:
            os.makedirs(folder, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".dump.", suffix=".tmp", dir=folder)
            with os.fdopen(fd, "wb") as f:
                f.write(blob)
            os.replace(tmp, path)
            written.append(path)
        except OSError as exc:
            log.warning("PTXDSL_DUMP_DIR: cannot write %s: %s", path, exc)
    if written:
        log.debug("dumped %s", ", ".join(written))
    return written
