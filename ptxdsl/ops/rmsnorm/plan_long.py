"""The cluster plans of the rows one CTA cannot hold (sm_90a): what a configuration of
the plan table (:mod:`.config`) makes of rows of ``n``, and :func:`long_rows`.

The measurements behind the table's rows are in docs/rmsnorm.md ("Long rows") and the
results files each row names.
"""
from __future__ import annotations

import dataclasses

from ...core.types import PtxType
from .bwd import plan_backward
from .bwd_cluster import plan_backward_cluster
from .config import ClusterConfig, RingConfig, TwoPassSlicesConfig, WideSlicesConfig, choose
from .devices import Device
from .fwd_cluster import plan_cluster


def cluster_forward(cfg, n: int, dt: PtxType, vec: int, dev: Device):
    """The cluster forward plan of configuration ``cfg`` for rows of ``n``; None where
    ``cfg`` is a one-CTA configuration or its split does not fit (:func:`plan_cluster`)."""
    if isinstance(cfg, TwoPassSlicesConfig):
        c = -(-n * dt.bytes // cfg.slice_bytes)
        return dataclasses.replace(
            plan_cluster(n, dt, vec, two_pass=True, cluster=c, per_thread=cfg.per_thread),
            reload_batch=cfg.reload_batch)
    if isinstance(cfg, WideSlicesConfig):
        return wide_slices(n, dt, vec, cfg)
    if isinstance(cfg, RingConfig):
        return plan_cluster(n, dt, vec, stages=cfg.stages, threads=cfg.threads,
                            per_thread=cfg.per_thread, sms=dev.sms)
    if isinstance(cfg, ClusterConfig):
        return plan_cluster(n, dt, vec)
    return None


def wide_slices(n: int, dt: PtxType, vec: int, cfg: WideSlicesConfig):
    """The wide-slice two-pass plan (:class:`~.config.WideSlicesConfig`) for rows of
    ``n``, None where the cluster does not fit."""
    c = max(2, -(-n * dt.bytes // cfg.slice_bytes))
    p = plan_cluster(n, dt, vec, two_pass=True, cluster=c, threads=1024)
    if p is None:
        return None
    hold = cfg.hold if cfg.hold is not None else max(0, p.per_thread - cfg.reread)
    return dataclasses.replace(p, min_ctas=1, hold=hold, reload_batch=cfg.reload_batch)


@dataclasses.dataclass(frozen=True)
class _LongRows:
    forward: object
    backward: object


def long_rows(n: int, dt: PtxType, vec: int, arch: str, device=None) -> _LongRows:
    """The cluster plans (``.forward``, ``.backward``; None each where the one-CTA
    kernels run) for rows of ``n`` on ``device`` (None: the CPU interpreter).

    The forward's comes from the table. The backward takes clusters wherever the
    one-CTA backward would stream its rows twice from memory or stage them through a
    single ring buffer (what fits its registers and shared memory decides)."""
    dev = Device.of(device)
    cls = dev.plan_class(arch)
    if not cls.startswith("clusters/"):
        return _LongRows(None, None)
    fwd = cluster_forward(choose("forward", cls, dt, vec, n), n, dt, vec, dev)
    one = plan_backward(n, dt, dev.sms, vec=vec)
    bwd = (plan_backward_cluster(n, dt, sms=dev.sms, vec=vec)
           if one.streaming or one.stages == 1 else None)
    return _LongRows(fwd, bwd)
