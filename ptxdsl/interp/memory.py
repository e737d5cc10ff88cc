"""State spaces of the interpreter: byte-addressed buffers with named allocations.

Global memory is one flat ``uint8`` buffer that holds every kernel argument
at a 256-byte-aligned fake device address, starting at ``GLOBAL_BASE`` (so
null or small garbage pointers fault) and separated by unmapped guard gaps
(so an off-by-one read past one tensor faults instead of landing in the
next). Shared memory has one row per CTA of the batch being run, its
variables laid out from ``SHARED_BASE`` in the shared window; a generic
address of shared memory (``cvta.shared``) is ``SHARED_WINDOW + offset``.
Kernel parameters live in their own small space.

Accesses are aligned before they are served (the machine checks alignment
first), so a read of ``n`` elements of ``k`` bytes is a gather from a typed
view of the buffer: little-endian and byte-exact.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

GLOBAL_BASE = 0x7F00_0000_0000
GUARD = 1 << 16
# Shared variables start at 1 KiB into the window: a zero or small integer used
# as a shared address faults instead of silently reading the first variable.
SHARED_BASE = 0x400
# A shared::cta address on sm_90 is also the CTA's shared::cluster address: its rank in the
# cluster sits at bit 24 and up (an H100 gives 0x400, 0x1000400, 0x2000400, ... for one
# symbol in ranks 0, 1, 2; 0x400 in every CTA of a launch without clusters). Code that
# packs a shared address into a narrower field (a wgmma descriptor's 14-bit start) must
# mask these bits off.
RANK_SHIFT = 24
SHARED_WINDOW = 0x7E00_0000_0000
PARAM_BASE = 0x100


@dataclass(frozen=True)
class Region:
    name: str
    start: int  # absolute address
    size: int


def align_up(x: int, a: int) -> int:
    return (x + a - 1) // a * a


class Space:
    """A state space: allocations at absolute addresses, ``rows`` copies (one per CTA for shared)."""

    def __init__(self, name: str, base: int, regions: list[Region], rows: int = 1):
        self.name = name
        self.base = base
        self.regions = sorted(regions, key=lambda r: r.start)
        end = max((r.start + r.size for r in self.regions), default=base)
        self.row_bytes = align_up(max(end - base, 16), 16)
        self.rows = rows
        self.buf = np.zeros(rows * self.row_bytes, np.uint8)
        self._starts = np.array([r.start for r in self.regions], np.uint64)
        self._ends = np.array([r.start + r.size for r in self.regions], np.uint64)
        # per-byte access records (races, uninitialised bytes): set by the launcher
        self.tracker = None
        self.version = 0          # writes so far (a spinning loop's state, progress.py)

    def region(self, name: str) -> Region:
        for r in self.regions:
            if r.name == name:
                return r
        raise KeyError(name)

    def in_bounds(self, addr: np.ndarray, nbytes: int) -> np.ndarray:
        """Whether ``[addr, addr + nbytes)`` lies inside one allocation."""
        addr = np.asarray(addr, np.uint64)
        if not len(self.regions):
            return np.zeros(addr.shape, bool)
        i = np.searchsorted(self._starts, addr, side="right").astype(np.int64) - 1
        ok = i >= 0
        ic = np.clip(i, 0, None)
        end = addr + np.uint64(nbytes)
        return ok & (addr >= self._starts[ic]) & (end <= self._ends[ic]) & (end >= addr)

    def nearest(self, addr: int) -> str:
        """A phrase placing ``addr`` relative to the allocations, for error messages: the
        allocation it lies in, else the one it runs past the end of (an overrun is the
        usual mistake), else the first one it lies before."""
        if not self.regions:
            return f"the {self.name} space has no allocations"
        before = [r for r in self.regions if r.start <= addr]
        r = before[-1] if before else self.regions[0]
        if addr < r.start:
            rel = f"{r.start - addr} bytes before"
        elif addr >= r.start + r.size:
            rel = f"{addr - (r.start + r.size)} bytes past the end of"
        else:
            rel = f"at byte {addr - r.start} of"
        return f"{rel} {r.name} [{r.start:#x}, {r.start + r.size:#x}) ({r.size} bytes)"

    def offsets(self, addr: np.ndarray, rows: np.ndarray | None) -> np.ndarray:
        off = (np.asarray(addr, np.uint64) - np.uint64(self.base)).astype(np.int64)
        if rows is not None:
            off = off + rows.astype(np.int64) * self.row_bytes
        return off

    def read(self, off: np.ndarray, dtype, count: int) -> np.ndarray:
        """Typed gather of ``count`` consecutive elements at each (aligned) byte offset."""
        dt = np.dtype(dtype)
        v = self.buf.view(dt)
        idx = (off // dt.itemsize)[:, None] + np.arange(count)
        return v[idx]

    def write(self, off: np.ndarray, values: np.ndarray) -> None:
        """Scatter ``values`` (K, count) at each offset; later threads win on overlap."""
        dt = values.dtype
        v = self.buf.view(dt)
        idx = (off // dt.itemsize)[:, None] + np.arange(values.shape[1])
        v[idx] = values
        self.version += 1

    def fill_region(self, name: str, data: bytes | np.ndarray, row: int = 0) -> None:
        r = self.region(name)
        raw = np.frombuffer(bytes(data), np.uint8) if not isinstance(data, np.ndarray) else \
            np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        start = row * self.row_bytes + r.start - self.base
        self.buf[start:start + raw.size] = raw

    def region_bytes(self, name: str, row: int = 0) -> np.ndarray:
        r = self.region(name)
        start = row * self.row_bytes + r.start - self.base
        return self.buf[start:start + r.size]
