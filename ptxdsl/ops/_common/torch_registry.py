"""The ops' ``torch.library`` custom ops (``torch.ops.ptxdsl.*``), defined once.

Each op package has a ``torch_op`` module whose ``register()`` defines its custom ops
(and has ``torch.compile`` trace the public function as them). ``ptxdsl.ops`` adds
them to :data:`TORCH_OPS`; :meth:`TorchOps.ensure` runs them once: when ``ptxdsl.ops``
is imported with torch loaded, at the first eager call with a torch tensor (the ops'
general paths ask), or by ``ptxdsl.ops.register_torch_ops()``. Ops cannot be defined
while dynamo traces, hence the eager moment.
"""
from __future__ import annotations

import threading
from typing import Callable

__all__ = ["TORCH_OPS", "TorchOps"]


class TorchOps:
    """The registrations to run, and whether they ran."""

    def __init__(self):
        self._register: list[Callable[[], None]] = []
        self._done = False
        self._lock = threading.RLock()

    def add(self, register: Callable[[], None]) -> None:
        """Run ``register`` with the others (now, if they already ran)."""
        with self._lock:
            self._register.append(register)
            if self._done:
                register()

    def ensure(self) -> None:
        """Run every registration once (they import torch)."""
        if self._done:
            return
        with self._lock:
            if self._done:
                return
            self._done = True
            for register in self._register:
                register()


TORCH_OPS = TorchOps()
