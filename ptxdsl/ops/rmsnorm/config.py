"""The RMSNorm plan table (``plans.json``) and the configurations its rows choose.

A row names an op (forward, backward, quant), the device classes
(:meth:`~.devices.Device.plan_class`), the dtypes of x, the chunk width (16-byte
chunks, or narrower where a row's length or alignment allows no more), a range of row
bytes and, for the backward, of rows per SM; it gives a configuration, the results
file it was measured in and a one-line reason. Rows do not overlap: :func:`choose`
finds exactly one. What the plans derive from a configuration (threads, chunks, what
ptxas and the occupancy calculator allow) stays in code (:mod:`.plan`).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass

from ...core.types import PtxType

TABLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "plans.json")
OPS = ("forward", "backward", "quant")
DEVICE_CLASSES = ("one-cta/low", "one-cta/high", "clusters/low", "clusters/high")
DTYPES = ("f32", "f16", "bf16")
CHUNKS = ("16B", "narrow")


# ---------------------------------------------------------------- forward
@dataclass(frozen=True)
class RowConfig:
    """One CTA (or lane group) per row, :func:`~.fwd.plan`'s shape.

    ``loop_rows_per_cta``: the persistent forward (:mod:`.fwd_loop`, where ptxas fits
    one CTA per SM) while each of its CTAs walks at most this many of the call's rows;
    more rows of 16-byte chunks run the two-pass kernel of 1024 threads instead.
    ``two_pass_1024``: rows over 1024 threads are read twice (not held in registers).
    That kernel issues ``reload_values`` f32 values of its second read ahead of the
    stores, reads x with ``x_hints`` (None: the forward's default) and stores y with
    ``y_hints``."""

    loop_rows_per_cta: int
    two_pass_1024: bool
    reload_values: int
    x_hints: tuple[str, ...] | None
    y_hints: tuple[str, ...]


@dataclass(frozen=True)
class ClusterConfig:
    """A cluster of CTAs per row, the slice held in registers
    (:func:`~.fwd_cluster.plan_cluster`'s default split)."""


@dataclass(frozen=True)
class TwoPassSlicesConfig:
    """A cluster per row, slices of at most ``slice_bytes`` read twice (the second time
    from L1), ``per_thread`` 16-byte chunks a thread, ``reload_batch`` chunks of the
    second read ahead of the stores."""

    slice_bytes: int
    per_thread: int
    reload_batch: int


@dataclass(frozen=True)
class WideSlicesConfig:
    """A cluster of ``max(2, bytes / slice_bytes)`` CTAs of 1024 threads per row, one per
    SM; a thread's last ``reread`` chunks read twice, the others held in registers
    (``hold``: that many instead, where set), the second read ``reload_batch`` chunks
    ahead of the stores."""

    slice_bytes: int
    reread: int
    reload_batch: int
    hold: int | None


@dataclass(frozen=True)
class RingConfig:
    """The persistent cluster forward: slices of ``threads`` x ``per_thread`` 16-byte
    chunks through a shared-memory ring of ``stages`` buffers, one CTA per SM."""

    threads: int
    per_thread: int
    stages: int


FORWARD = {"row": RowConfig, "cluster": ClusterConfig, "two_pass_slices": TwoPassSlicesConfig,
           "wide_slices": WideSlicesConfig, "ring": RingConfig}


# ---------------------------------------------------------------- backward, quant
@dataclass(frozen=True)
class BackwardConfig:
    """The one-CTA backward (:func:`~.bwd.plan_backward`). Short rows (256 threads or
    fewer, N >= 1000, 16-byte chunks) run one CTA per SM of row groups: each thread takes
    ``short_chunks`` chunks of a row and an SM about ``short_rows_bytes`` of x and dy.
    ``l2_ahead``: rows left at one CTA per SM (and short rows) also prefetch the row
    after the next into L2."""

    short_rows_bytes: int
    short_chunks: int
    l2_ahead: bool


@dataclass(frozen=True)
class QuantConfig:
    """``rms_norm_quant``: the forward's shape (:func:`~.fwd.plan`), the row held in
    registers up to ``register_values`` f32 values a thread (read twice beyond)."""

    register_values: int


CONFIGS = {"forward": FORWARD, "backward": {"row": BackwardConfig},
           "quant": {"row": QuantConfig}}


# ---------------------------------------------------------------- the table
@dataclass(frozen=True)
class Row:
    op: str
    devices: tuple[str, ...]
    dtypes: tuple[str, ...]
    chunks: tuple[str, ...]
    bytes: tuple[int, int | None]          # row bytes, both ends included (None: no end)
    rows_per_sm: tuple[int, int | None]    # the call's rows // SMs, likewise
    config: object
    source: str
    reason: str

    def matches(self, op, device, dtype, chunks, nbytes, rows_per_sm) -> bool:
        every = device is None and len(self.devices) == len(DEVICE_CLASSES)
        return (op == self.op and (every or device in self.devices) and dtype in self.dtypes
                and chunks in self.chunks and _inside(nbytes, self.bytes)
                and _inside(rows_per_sm, self.rows_per_sm))


def _inside(v: int, span) -> bool:
    lo, hi = span
    return lo <= v and (hi is None or v <= hi)


def _every(value, names):
    return tuple(names) if value == "any" else tuple(value)


def _row(d: dict) -> Row:
    kinds = CONFIGS[d["op"]]
    cfg = dict(d["config"])
    cls = kinds[cfg.pop("kernel", "row")]
    for k, v in cfg.items():
        if isinstance(v, list):
            cfg[k] = tuple(v)
    return Row(d["op"], _every(d["devices"], DEVICE_CLASSES), _every(d["dtypes"], DTYPES),
               _every(d.get("chunks", "any"), CHUNKS), tuple(d["bytes"]),
               tuple(d.get("rows_per_sm", (0, None))), cls(**cfg), d["source"], d["reason"])


def load(path: str = TABLE) -> tuple[Row, ...]:
    with open(path, encoding="utf-8") as f:
        return tuple(_row(d) for d in json.load(f)["rows"])


ROWS = load()


def choose(op: str, device: str | None, dtype: PtxType, vec: int, n: int, rows: int | None = None,
           sms: int = 1):
    """The configuration of the one row of the table for a call: ``op``, the device
    class (None: a row for every device), rows of ``n`` elements of ``dtype`` in chunks of ``vec``, ``rows`` rows
    (None: unknown, taken as few) on ``sms`` SMs."""
    chunks = "16B" if vec * dtype.bytes == 16 else "narrow"
    per_sm = 0 if rows is None else rows // max(1, sms)
    hits = [r for r in ROWS
            if r.matches(op, device, dtype.name, chunks, n * dtype.bytes, per_sm)]
    if len(hits) != 1:
        raise LookupError(f"plans.json: {len(hits)} rows for {op} {device} {dtype.name} "
                          f"{chunks} {n * dtype.bytes} bytes, {per_sm} rows per SM")
    return hits[0].config
