"""CPU semantics of Hopper's asynchronous instructions (wgmma, TMA, clusters)."""
from __future__ import annotations
