"""pyptx's ``specs`` module under ptxdsl: ``from ptxdsl.specs import Layout, Tile``.

``Tile`` is :class:`ptxdsl.Tile`, which also takes pyptx's layout tag and TMA keywords
(``Tile("M", "K", bf16, Layout.TMA_128B, tma_box=(128, 64), tma_rank=3)``) and has
``Tile.wgmma_a`` / ``Tile.wgmma_b``; ptxdsl's own spelling of the same is
``Tile("M", "K", bf16, tma=TMA(box=(128, 64), swizzle=128, split=64))`` (see
:mod:`ptxdsl.core.tensormap`).
"""
from __future__ import annotations

from .core.tensormap import TMA
from .core.specs import Layout, Tile

__all__ = ["Layout", "Tile", "TMA"]
