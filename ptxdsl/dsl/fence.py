"""``ptx.fence``: the fences Hopper pipelines need between the generic and async proxies.

=====================================  ===============================================
``proxy_async()``                      ``fence.proxy.async``
``proxy_async_shared_cta()``           ``fence.proxy.async.shared::cta``: make threads'
                                       shared-memory writes (``mbarrier.init``, an epilogue
                                       tile) visible to TMA and wgmma
``proxy_async_global()``               ``fence.proxy.async.global``
``mbarrier_init()``                    ``fence.mbarrier_init.release.cluster``: barriers
                                       just initialised, visible to the whole cluster
=====================================  ===============================================
"""
from __future__ import annotations

from ..core.trace import current

__all__ = ["proxy_async", "proxy_async_shared_cta", "proxy_async_global", "mbarrier_init"]


def proxy_async(*, pred=None) -> None:
    """``fence.proxy.async``."""
    current("ptx.fence.proxy_async").inst(["fence", "proxy", "async"], (), guard=pred)


def proxy_async_shared_cta(*, pred=None) -> None:
    """``fence.proxy.async.shared::cta``."""
    current("ptx.fence.proxy_async_shared_cta").inst(["fence", "proxy", "async", "shared::cta"],
                                                     (), guard=pred)


def proxy_async_global(*, pred=None) -> None:
    """``fence.proxy.async.global``."""
    current("ptx.fence.proxy_async_global").inst(["fence", "proxy", "async", "global"], (),
                                                 guard=pred)


def mbarrier_init(*, pred=None) -> None:
    """``fence.mbarrier_init.release.cluster``."""
    current("ptx.fence.mbarrier_init").inst(["fence", "mbarrier_init", "release", "cluster"],
                                            (), guard=pred)
