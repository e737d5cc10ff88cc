"""Compiled-kernel caches: cubins on disk, loaded modules in memory.

Disk: ``$PTXDSL_CACHE_DIR``, else ``$XDG_CACHE_HOME/ptxdsl``, else
``~/.cache/ptxdsl``; cubins live in ``cubin/<key>.cubin``. The key is the
sha256 of everything that decides the cubin's bytes: the PTX text, the target
arch, the assembler and its version, and its options (:func:`cache_key`).

An entry is two files: ``<key>.cubin``, the plain cubin exactly as ptxas wrote it
(``cuobjdump -sass <key>.cubin`` reads it), and ``<key>.json`` beside it, its
metadata: the key, the size, a sha256 over the key and the cubin's bytes, and what
was compiled (kernel, arch, toolchain). Each file is written to a temporary file and
renamed into place (``os.replace`` is atomic); a lock file (``cubin/.lock``,
``flock`` where the OS has it) makes the pair change together. A cubin whose
metadata is missing, names another key or whose checksum does not match is deleted
and rebuilt, never loaded. An unwritable cache folder costs speed, not
correctness: ptxdsl warns once and goes on without it. ``PTXDSL_CACHE=0`` turns it
off.

Memory: :class:`ModuleCache` maps ``(device ordinal, key)`` to the loaded
module, with one lock per key so that threads racing to the first call of a
kernel compile and load it once.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import tempfile
import threading
import time
import warnings
from typing import Callable, Sequence

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: renames alone
    fcntl = None

log = logging.getLogger("ptxdsl.cache")

__all__ = ["CACHE_FORMAT", "DiskCache", "ModuleCache", "cache_dir", "cache_key", "clear",
           "disk_cache_enabled", "ptxas_identity"]

CACHE_FORMAT = 2  # 1: cubins behind a header; 2: plain cubins with a .json sidecar
_SUBDIR = "cubin"
_LOCK = ".lock"
_MEMO = "ptxas-versions.json"


def cache_dir() -> str:
    """The cache folder (not created here), read on every call: ``$PTXDSL_CACHE_DIR``,
    else the user cache folder ``platformdirs`` gives for each OS (Linux:
    ``$XDG_CACHE_HOME/ptxdsl`` or ``~/.cache/ptxdsl``; macOS: ``~/Library/Caches/ptxdsl``;
    Windows: ``%LOCALAPPDATA%\\ptxdsl\\Cache``)."""
    env = os.environ.get("PTXDSL_CACHE_DIR")
    if env:
        return os.path.abspath(os.path.expanduser(env))
    try:
        import platformdirs
    except ImportError:  # a dependency; the Linux rule where it is missing
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"),
                                                                ".cache")
        return os.path.join(base, "ptxdsl")
    return platformdirs.user_cache_dir("ptxdsl", appauthor=False)


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


def clear(root: str | None = None, *, failed: list | None = None,
          files: list | None = None) -> int:
    """Delete the cache's entries (only files it wrote); returns how many cubins were removed.

    ``failed``, when given, receives ``(path, reason)`` for every file that could not be
    removed (a read-only folder, a file held by another process...); ``files`` the path
    of every file removed (metadata, the ptxas memo, leftover temporary files too)."""
    root = root or cache_dir()
    removed = 0
    sub = os.path.join(root, _SUBDIR)
    for folder in (sub, root):
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            if name.endswith((".cubin", ".tmp")) or name == _MEMO or (
                    folder == sub and (name.endswith(".json") or name == _LOCK)):
                path = os.path.join(folder, name)
                try:
                    os.remove(path)
                    removed += name.endswith(".cubin")
                    if files is not None:
                        files.append(path)
                except FileNotFoundError:
                    pass  # another process removed it first
                except OSError as e:
                    if failed is not None:
                        failed.append((path, e.strerror or str(e)))
    try:
        os.rmdir(sub)
    except OSError:
        pass
    return removed


# A temporary file older than this is a leftover of a writer that died (killed, or the
# disk filled up between the write and the rename): a live write takes milliseconds.
ORPHAN_AGE_S = 60.0


def sweep_orphans(folder: str, now: float | None = None) -> int:
    """Remove the ``.tmp`` files a dead writer left in ``folder``; returns how many."""
    now = time.time() if now is None else now
    n = 0
    try:
        names = os.listdir(folder)
    except OSError:
        return 0
    for name in names:
        if name.startswith(".") and name.endswith(".tmp"):
            path = os.path.join(folder, name)
            try:
                if now - os.stat(path).st_mtime > ORPHAN_AGE_S:
                    os.remove(path)
                    n += 1
            except OSError:
                pass   # gone already, or not ours to remove
    if n:
        log.debug("removed %d orphaned temporary file(s) from %s", n, folder)
    return n


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
        """The entry's cubin (plain, as ptxas wrote it)."""
        return os.path.join(self.root, _SUBDIR, f"{key}.cubin")

    def meta_path(self, key: str) -> str:
        """The entry's metadata: key, size, checksum, what was compiled."""
        return os.path.join(self.root, _SUBDIR, f"{key}.json")

    @staticmethod
    def checksum(key: str, data: bytes) -> str:
        """sha256 over the key and the cubin: a cubin under another key's name fails it."""
        h = hashlib.sha256(key.encode("ascii", "replace"))
        h.update(data)
        return h.hexdigest()

    @contextlib.contextmanager
    def _locked(self, exclusive: bool, create: bool):
        """The cache folder's lock (shared to read an entry, exclusive to write one)."""
        if fcntl is None:
            yield
            return
        path = os.path.join(self.root, _SUBDIR, _LOCK)
        try:
            fd = os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), 0o644)
        except OSError:
            yield  # no folder yet (nothing to read) or read-only: renames alone
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            yield
        finally:
            os.close(fd)  # releases the lock

    def get(self, key: str) -> bytes | None:
        """The cubin stored under ``key``, or None (absent, unreadable or corrupt)."""
        if not disk_cache_enabled():
            return None
        path = self.path(key)
        try:
            with self._locked(exclusive=False, create=False):
                with open(path, "rb") as f:
                    data = f.read()
                with open(self.meta_path(key), encoding="utf-8") as f:
                    meta_text = f.read()
        except FileNotFoundError:
            log.debug("cubin cache miss %s", key[:16])
            return None
        except OSError as exc:
            self._warn(f"cannot read {path}: {exc}")
            return None
        try:
            meta = json.loads(meta_text)
            ok = (isinstance(meta, dict) and meta.get("key") == key
                  and meta.get("bytes") == len(data)
                  and meta.get("sha256") == self.checksum(key, data))
        except ValueError:
            ok = False
        if not ok:
            log.warning("cubin cache entry %s is corrupt (checksum or metadata); removed, "
                        "rebuilding", path)
            self.remove(key)
            self.corrupt_entries += 1
            return None
        log.debug("cubin cache hit %s (%s)", key[:16], path)
        return data

    def put(self, key: str, data: bytes, meta: dict | None = None) -> bool:
        """Store atomically; False (and one warning) when the folder is unwritable.
        ``meta`` (kernel name, arch, toolchain...) goes into the sidecar."""
        if not disk_cache_enabled():
            return False
        path = self.path(key)
        folder = os.path.dirname(path)
        record = dict(meta or {})
        record.update(format=CACHE_FORMAT, key=key, bytes=len(data),
                      sha256=self.checksum(key, data))
        tmps: list[str] = []
        try:
            os.makedirs(folder, exist_ok=True)
            with self._locked(exclusive=True, create=True):
                sweep_orphans(folder)
                for target, blob in ((path, data),
                                     (self.meta_path(key),
                                      json.dumps(record, indent=1, sort_keys=True).encode())):
                    fd, tmp = tempfile.mkstemp(prefix=f".{key[:16]}.", suffix=".tmp",
                                               dir=folder)
                    tmps.append(tmp)
                    with os.fdopen(fd, "wb") as f:
                        f.write(blob)
                os.replace(tmps[0], path)
                os.replace(tmps[1], self.meta_path(key))
            log.debug("cubin cache store %s (%d bytes)", key[:16], len(data))
            return True
        except OSError as exc:
            for tmp in tmps:
                try:
                    os.remove(tmp)
                except OSError:
                    pass
            self._warn(f"cannot write the cubin cache at {folder}: {exc}")
            return False

    def remove(self, key: str) -> None:
        for p in (self.path(key), self.meta_path(key)):
            try:
                os.remove(p)
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
                    sweep_orphans(os.path.dirname(memo_path))
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
            log.debug("module cache hit %s on device %d", key[:16], device)
            return hit
        with self._guard:
            lock = self._locks.setdefault(k, threading.Lock())
        with lock:
            hit = self._modules.get(k)
            if hit is None:
                log.debug("module cache miss %s on device %d: loading", key[:16], device)
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
