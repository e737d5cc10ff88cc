"""Where a launch's data sits: the global space (every tensor at its own address, guard
gaps between them), the param space (pointers, dims, strides, tensor-map handles) and
the shared variables' regions of each CTA."""
from __future__ import annotations

import numpy as np

from ..core.errors import LaunchError, user_location
from .hb import Tracker
from .memory import GLOBAL_BASE, GUARD, PARAM_BASE, SHARED_BASE, Region, Space, align_up
from .tensormaps import tensormap_handle


# Guard gaps between global tensors: at least GUARD, up to the tensor's size.
MAX_GUARD = 1 << 20


def global_space(prog, tensors, initialized=None) -> tuple[Space, dict]:
    """Every tensor at its own address, a guard gap at least as large as the tensor
    between neighbours (an overrun by up to a whole tensor faults, never lands in the
    next one); bytes of tensors not in ``initialized`` (None: all) start poisoned."""
    regions, addrs, cursor = [], {}, GLOBAL_BASE
    for p in prog.params:
        if p.kind != "ptr":
            continue
        a = np.ascontiguousarray(tensors[p.tensor])
        regions.append(Region(p.tensor, cursor, a.nbytes))
        addrs[p.name] = cursor
        cursor = align_up(cursor + a.nbytes + max(GUARD, min(a.nbytes, MAX_GUARD)), 256)
    sp = Space("global", GLOBAL_BASE, regions)
    sp.tracker = Tracker(sp.buf.size, False, reads=False)
    for p in prog.params:
        if p.kind == "ptr":
            sp.fill_region(p.tensor, np.ascontiguousarray(tensors[p.tensor]))
            if initialized is None or p.tensor in initialized:
                r = sp.region(p.tensor)
                sp.tracker.init[r.start - sp.base:r.start - sp.base + r.size] = True
    sp.tracker.all_init = initialized is None or all(
        p.tensor in initialized for p in prog.params if p.kind == "ptr")
    return sp, addrs


def param_space(prog, addrs, dims, tmaps=None) -> Space:
    regions, cursor, values, specs = [], PARAM_BASE, {}, []
    ptr_of = {p.tensor: p.name for p in prog.params if p.kind == "ptr"}
    for p in prog.params:
        size = p.dtype.bytes * max(getattr(p, "count", 1) or 1, 1)
        cursor = align_up(cursor, max(p.dtype.bytes, getattr(p, "align", 0) or 0))
        regions.append(Region(p.name, cursor, size))
        cursor += size
        if p.kind == "tmap":
            spec = (tmaps or {}).get(p.tensor)
            if spec is None or p.tensor not in ptr_of:
                raise LaunchError(f"tensor-map parameter {p.name}: no tensor map for argument "
                                  f"{p.tensor} (run the kernel with kernel.interpret)",
                                  user_location())
            specs.append(spec.with_address(addrs[ptr_of[p.tensor]]))
            values[p.name] = tensormap_handle(len(specs) - 1)
        elif p.kind == "ptr":
            values[p.name] = np.array(addrs[p.name], np.uint64)
        elif p.kind == "raw":   # its bytes, from core.entry.raw_values
            values[p.name] = dims[p.name]
        elif p.kind in ("dim", "stride"):
            values[p.name] = np.array(dims[p.tensor or p.name.rsplit("_", 1)[0]],
                                      p.dtype.np_dtype)
        else:
            raise LaunchError(f"parameter {p.name} of kind {p.kind!r} has no value", user_location())
    sp = Space("param", PARAM_BASE, regions)
    sp.tensormaps = specs
    for name, v in values.items():
        sp.fill_region(name, v)
    return sp


def shared_regions(prog) -> list[Region]:
    regions, cursor = [], SHARED_BASE
    for d in prog.shared:
        cursor = align_up(cursor, max(d.align, 16))
        regions.append(Region(d.name, cursor, d.nbytes))
        # A guard gap as large as the variable (at least 4 KiB) makes an overrun of
        # one fault instead of landing in the next.
        cursor += d.nbytes + max(4096, d.nbytes)
    return regions
