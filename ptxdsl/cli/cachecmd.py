"""``ptxdsl cache info|clear``: where the disk cache of compiled kernels is, and emptying it."""
from __future__ import annotations

import os
import sys

from .table import format_table

__all__ = ["run"]


def _dir_stats(path: str) -> tuple[int, int]:
    files = size = 0
    for root, _dirs, names in os.walk(path):
        for n in names:
            try:
                size += os.path.getsize(os.path.join(root, n))
                files += 1
            except OSError:
                pass
    return files, size


def _human(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover


def run(args) -> bool:
    """``ptxdsl cache info|clear``; False when a file could not be removed."""
    from ..runtime.cache import cache_dir, clear, disk_cache_enabled
    path = cache_dir()
    if args.action == "info":
        exists = os.path.isdir(path)
        files, size = _dir_stats(path) if exists else (0, 0)
        source = ("PTXDSL_CACHE_DIR" if os.environ.get("PTXDSL_CACHE_DIR") else "default")
        print(format_table(["", ""], [["cache dir", path], ["set by", source],
                                      ["enabled", "yes" if disk_cache_enabled()
                                       else "no (PTXDSL_CACHE=0)"],
                                      ["exists", "yes" if exists else "no"],
                                      ["files", files], ["size", _human(size)]],
                           right=[False, False]).split("\n", 2)[2])
        return True
    # clear: the runtime's clear deletes only the files it wrote
    failed: list = []
    files: list = []
    kernels = clear(failed=failed, files=files)
    print(f"removed {kernels} cached kernel(s) ({len(files)} file(s)) from {path}")
    if failed:
        for p, why in failed[:10]:
            print(f"ptxdsl: error: could not remove {p}: {why}", file=sys.stderr)
        more = f" ({len(failed) - 10} more not listed)" if len(failed) > 10 else ""
        print(f"ptxdsl: error: {len(failed)} file(s) could not be removed{more}; check the "
              f"folder's permissions", file=sys.stderr)
        return False
    return True
