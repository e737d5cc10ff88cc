"""Tensor-core instructions of the warp (sm_80+): mma.sync, ldmatrix, stmatrix, movmatrix.

Entries here join the core table in :mod:`ptxdsl.isa`; they use the same
:class:`~ptxdsl.isa.spec.OpSpec` shape and building blocks as :mod:`.table`.
"""
from __future__ import annotations

from .spec import OpSpec

TABLE: tuple[OpSpec, ...] = ()
