"""Compiled-kernel caches: cubins on disk, loaded modules in memory.

Disk: ``$PTXDSL_CACHE_DIR``, else ``$XDG_CACHE_HOME/ptxdsl``, else
``~/.cache/ptxdsl``; cubins live in ``cubin/<key>.cubin``. The key is the
sha256 of everything that decides the cubin's bytes: the PTX text, the target
arch, the assembler and its version, and its options (:func:`cache_key`).
Entries are written to a temporary file and renamed into place (``os.replace``
is atomic), so a reader sees a whole entry or none; each entry carries a
checksum of its payload, so a truncated or corrupt file is detected, deleted and
rebuilt, never loaded. An unwritable cache folder costs speed, not correctness:
ptxdsl warns once and goes on without it. ``PTXDSL_CACHE=0`` turns it off.

Memory: :class:`ModuleCache` maps ``(device ordinal, key)`` to the loaded
module, with one lock per key so that threads racing to the first call of a
kernel compile and load it once.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
import warnings
from typing import Callable, Sequence

__all__ = ["CACHE_FORMAT", "DiskCache", "ModuleCache", "cache_dir", "cache_key", "clear",
           "disk_cache_enabled", "ptxas_identity"]

CACHE_FORMAT = 1
_MAGIC = b"PTXDSL-CUBIN\x00\x01"  # + 32-byte sha256 of the payload + payload
_HEADER = len(_MAGIC) + 32
_SUBDIR = "cubin"
_MEMO = "ptxas-versions.json"


def cache_dir() -> str:
    """The cache folder (not created here): ``$PTXDSL_CACHE_DIR``,
    ``$XDG_CACHE_HOME/ptxdsl`` or ``~/.cache/ptxdsl``, read on every call."""
    env = os.environ.get("PTXDSL_CACHE_DIR")
    if env:
        return os.path.abspath(os.path.expanduser(env))
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "ptxdsl")


def disk_cache_enabled() -> bool:
    return os.environ.get("PTXDSL_CACHE", "1").strip().lower() not in ("0", "off", "false", "no")


def cache_key(ptx: str, arch: str, toolchain: str, options: Sequence[str] = ()) -> str:
    """sha256 (hex) of what decides a cubin: PTX text, arch, toolchain id, options.

    Fields are length-prefixed so that no two different inputs hash the same text
    (``("ab", "c")`` vs ``("a", "bc")``); the format number lets a later layout
    invalidate every old entry at once.
    """
    h = hashlib.sha256()
    for part in (f"ptxdsl-cubin-v{CACHE_FORMAT}", ptx, arch, toolchain, "\x1f".join(options)):
        data = part.encode("utf-8")
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def clear(root: str | None = None) -> int:
    """Delete the cache's entries (only files it wrote); returns how many were removed."""
    root = root or cache_dir()
    removed = 0
    sub = os.path.join(root, _SUBDIR)
    for folder in (sub, root):
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            if name.endswith((".cubin", ".tmp")) or name == _MEMO:
                try:
                    os.remove(os.path.join(folder, name))
                    removed += 1
                except OSError:
                    pass
    try:
        os.rmdir(sub)
    except OSError:
        pass
    return removed


class DiskCache:
    """Cubins by key on disk. ``root=None`` follows :func:`cache_dir` at each call."""

    def __init__(self, root: str | None = None):
        self._root = root
        self._warned = False
        self.corrupt_entries = 0  # how many bad entries were found and removed

    @property
    def root(self) -> str:
        return self._root or cache_dir()

    def path(self, key: str) -> str:
        return os.path.join(self.root, _SUBDIR, f"{key}.cubin")

    def get(self, key: str) -> bytes | None:
        """The cubin stored under ``key``, or None (absent, unreadable or corrupt)."""
        if not disk_cache_enabled():
            return None
        path = self.path(key)
        try:
            with open(path, "rb") as f:
                blob = f.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            self._warn(f"cannot read {path}: {exc}")
            return None
        payload = blob[_HEADER:]
        if (len(blob) <= _HEADER or not blob.startswith(_MAGIC)
                or hashlib.sha256(payload).digest() != blob[len(_MAGIC):_HEADER]):
            self.remove(key)
            self.corrupt_entries += 1
            return None
        return payload

    def put(self, key: str, data: bytes) -> bool:
        """Store atomically; False (and one warning) when the folder is unwritable."""
        if not disk_cache_enabled():
            return False
        path = self.path(key)
        folder = os.path.dirname(path)
        tmp = None
        try:
            os.makedirs(folder, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{key[:16]}.", suffix=".tmp", dir=folder)
            with os.fdopen(fd, "wb") as f:
                f.write(_MAGIC + hashlib.sha256(data).digest() + data)
            os.replace(tmp, path)
            return True
        except OSError as exc:
            if tmp is not None:
                try:
                    os.remove(tmp)
                except OSError:
                    pass
            self._warn(f"cannot write the cubin cache at {folder}: {exc}")
            return False

    def remove(self, key: str) -> None:
        try:
            os.remove(self.path(key))
        except OSError:
            pass

    def _warn(self, message: str) -> None:
        if not self._warned:
            self._warned = True
            warnings.warn(f"ptxdsl: {message}; compiling without the disk cache "
                          f"(set PTXDSL_CACHE_DIR to a writable folder)", RuntimeWarning,
                          stacklevel=3)


# ---------------------------------------------------------------------- ptxas identity
_identity_memo: dict[tuple, str] = {}
_identity_lock = threading.Lock()


def ptxas_identity(path: str, version_of: Callable[[str], tuple[int, int]] | None = None,
                   root: str | None = None) -> str:
    """``"ptxas-13.0"`` for the ptxas at ``path``, without running it when possible.

    Running ``ptxas --version`` costs tens of milliseconds, more than a whole
    warm cache hit should, so the answer is remembered per (real path, size,
    mtime) in memory and in ``ptxas-versions.json`` in the cache folder.
    """
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
        stamp = (real, st.st_size, st.st_mtime_ns)
    except OSError:
        stamp = (real, -1, -1)
    hit = _identity_memo.get(stamp)
    if hit is not None:
        return hit
    with _identity_lock:
        memo_path = os.path.join(root or cache_dir(), _MEMO)
        memo_key = f"{stamp[0]}|{stamp[1]}|{stamp[2]}"
        memo: dict = {}
        try:
            with open(memo_path, encoding="utf-8") as f:
                memo = json.load(f)
            if not isinstance(memo, dict):
                memo = {}
        except (OSError, ValueError):
            memo = {}
        ident = memo.get(memo_key)
        if not isinstance(ident, str) or not ident.startswith("ptxas-"):
            if version_of is None:
                from ..toolchain import ptxas_version as version_of
            major, minor = version_of(path)
            ident = f"ptxas-{major}.{minor}"
            memo = {k: v for k, v in memo.items() if not k.startswith(real + "|")}
            memo[memo_key] = ident
            if disk_cache_enabled():
                try:
                    os.makedirs(os.path.dirname(memo_path), exist_ok=True)
                    fd, tmp = tempfile.mkstemp(prefix=".memo.", suffix=".tmp",
                                               dir=os.path.dirname(memo_path))
                    with os.fdopen(fd, "w", encoding="utf-8") as f:
                        json.dump(memo, f, indent=0, sort_keys=True)
                    os.replace(tmp, memo_path)
                except OSError:
                    pass  # only a speed-up
        _identity_memo[stamp] = ident
        return ident


# ---------------------------------------------------------------------- loaded modules
class ModuleCache:
    """Loaded modules by ``(device ordinal, cubin key)``; each built once.

    ``get_or_load(device, key, load)`` calls ``load()`` at most once per key
    while other threads asking for the same key wait for it; different keys
    load in parallel. A failing ``load`` stores nothing, so the next call
    retries (and raises again, with the same message).
    """

    def __init__(self):
        self._modules: dict[tuple[int, str], object] = {}
        self._locks: dict[tuple[int, str], threading.Lock] = {}
        self._guard = threading.Lock()
        self.loads = 0  # how many times load() ran (tests check "once")

    def get(self, device: int, key: str):
        return self._modules.get((device, key))

    def get_or_load(self, device: int, key: str, load: Callable[[], object]):
        k = (device, key)
        hit = self._modules.get(k)
        if hit is not None:
            return hit
        with self._guard:
            lock = self._locks.setdefault(k, threading.Lock())
        with lock:
            hit = self._modules.get(k)
            if hit is None:
                self.loads += 1
                hit = load()
                self._modules[k] = hit
        return hit

    def __len__(self) -> int:
        return len(self._modules)

    def clear(self) -> None:
        """Forget every module (they stay loaded in their contexts until the process ends)."""
        with self._guard:
            self._modules.clear()
            self._locks.clear()


# The process's caches: explicit objects, one each, replaceable in tests.
MODULES = ModuleCache()
DISK = DiskCache()
