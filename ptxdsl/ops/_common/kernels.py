"""Built kernels of an op, keyed by everything that changes their PTX."""
from __future__ import annotations

import threading
from typing import Callable

__all__ = ["KernelCache"]


class KernelCache:
    """Built kernels by key, each built once (other threads asking for a key being
    built wait for it). Bounded: past ``limit`` kernels the oldest built is dropped
    (it stays usable by whoever holds it). Each Kernel keeps its own trace and
    compiled-module caches.
    """

    def __init__(self, limit: int = 1024):
        self._kernels: dict[tuple, object] = {}
        self._lock = threading.Lock()
        self.limit = limit

    def get(self, key: tuple, build: Callable[[], object]):
        k = self._kernels.get(key)
        if k is None:
            with self._lock:
                k = self._kernels.get(key)
                if k is None:
                    k = build()
                    if len(self._kernels) >= self.limit:
                        self._kernels.pop(next(iter(self._kernels)))
                    self._kernels[key] = k
        return k

    def __len__(self) -> int:
        return len(self._kernels)

    def clear(self) -> None:
        """Forget every built kernel (the next call of each key builds it again)."""
        with self._lock:
            self._kernels.clear()
