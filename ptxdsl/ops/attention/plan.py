"""Which :class:`~.config.Config` a call runs: the first row of ``plans.json`` that holds
(head dim, dtype, mask kind and, for a row with ``max_seqlen`` or ``min_seqlen``, the key
length), each row citing the measurement it came from."""
from __future__ import annotations

import dataclasses
import json
from functools import lru_cache
from pathlib import Path

from .config import HEAD_DIMS, Config, Mask

SMEM_PER_CTA = 232448          # sm_90's largest dynamic shared memory per block


@lru_cache(maxsize=1)
def rows() -> tuple[dict, ...]:
    """The table (read once: a file of the package, not state)."""
    data = json.loads((Path(__file__).with_name("plans.json")).read_text())
    return tuple(data["rows"])


def mask_kind(mask: Mask) -> str:
    return "full" if not mask.any else "causal" if mask.tag == "causal" else "window"


def _holds(row: dict, head_dim: int, dtype_name: str, kind: str, seqlen: int | None,
           layout: str) -> bool:
    """A row with ``max_seqlen`` / ``min_seqlen`` holds only for calls that say their key
    length and keep within it (varlen and ``forward_kernel`` without ``seqlen`` skip it);
    a row with ``layouts`` only for those layouts."""
    bounded = "max_seqlen" in row or "min_seqlen" in row
    fits = seqlen is not None and row.get("min_seqlen", 0) <= seqlen <= row.get(
        "max_seqlen", seqlen)
    return (head_dim in row["head_dims"] and dtype_name in row["dtypes"]
            and kind in row["masks"] and (fits or not bounded)
            and layout in row.get("layouts", (layout,)))


def choose(head_dim: int, dtype_name: str, mask: Mask, group: int = 1,
           seqlen: int | None = None, layout: str = "dense") -> Config:
    """The table's config for this call; a ValueError for a head dim no row covers.
    ``group``: the GQA heads packed into one tile (``pack_gqa``); a row whose tile rows
    the group does not divide runs with two consumers (128 rows) instead. ``seqlen``: the
    key length, for rows measured at short or long sequences only; ``layout``
    (:func:`~.fwd_layout.schedule`'s), for rows measured on one layout only."""
    kind = mask_kind(mask)
    for row in rows():
        if _holds(row, head_dim, dtype_name, kind, seqlen, layout):
            c = Config(**row["config"])
            if c.block_m % group:
                c = dataclasses.replace(c, consumers=2, consumer_regs=0)
            assert c.smem_bytes(head_dim) <= SMEM_PER_CTA, (row, c.smem_bytes(head_dim))
            return c
    raise ValueError(f"no plan for head dim {head_dim} ({dtype_name}, {kind}); the kernel "
                     f"takes head dims {', '.join(map(str, HEAD_DIMS))}")


__all__ = ["choose", "rows", "mask_kind", "SMEM_PER_CTA"]
