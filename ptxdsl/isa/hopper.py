"""Hopper's asynchronous machinery (sm_90 / sm_90a): wgmma, TMA, mbarrier
transactions, clusters and distributed shared memory.

Entries here join the core table in :mod:`ptxdsl.isa`; they use the same
:class:`~ptxdsl.isa.spec.OpSpec` shape and building blocks as :mod:`.table`.
"""
from __future__ import annotations

from .spec import OpSpec

TABLE: tuple[OpSpec, ...] = ()
