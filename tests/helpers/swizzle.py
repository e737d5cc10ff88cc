"""The shared-memory image of a TMA box under each swizzle mode, computed independently of
the interpreter (used by the TMA and cluster interpreter tests)."""
from __future__ import annotations

import numpy as np


def swizzled_image(box_vals: np.ndarray, swizzle: int) -> np.ndarray:
    """The shared bytes of a dense box after the swizzle, written independently: rows
    narrower than the span padded to it with zeros, then each line of 128 bytes r has
    its 16-byte chunk c moved to c ^ (r % 8) (limited to the span's chunks)."""
    width = box_vals.shape[-1] * box_vals.itemsize
    if swizzle and width < swizzle:
        padded = np.zeros(box_vals.shape[:-1] + (swizzle // box_vals.itemsize,),
                          box_vals.dtype)
        padded[..., :box_vals.shape[-1]] = box_vals
        box_vals = padded
    raw = box_vals.reshape(-1).view(np.uint8)
    out = np.empty_like(raw)
    for pos in range(raw.size):
        r, c, b = pos // 128, (pos % 128) // 16, pos % 16
        c2 = c ^ ((r % 8) & (swizzle // 16 - 1)) if swizzle else c
        out[r * 128 + c2 * 16 + b] = raw[pos]
    return out
