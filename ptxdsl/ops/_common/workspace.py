"""Scratch memory for the cooperative RMSNorm backward: one buffer per (device, stream).

The backward kernel needs a grid-barrier word pair that is zero before its
first launch (every launch leaves it zero-count again) and an f32 ``(G, N)``
buffer for the per-CTA dweight partials, which only lives during the launch.
Launches on one stream run one after another, so one buffer per stream serves
them all, as cuBLAS keeps a workspace per stream: no allocation and no memset
per call. Different streams get different buffers, so concurrent launches never
share barrier words.

Layout (int32 elements): ``[0:2]`` barrier (count, generation), ``[2:4]``
padding (the partials start 16-byte aligned), ``[4:4+G*N]`` the partials.

While a CUDA graph is being captured, a fresh zeroed buffer is made per call
(captured as an allocation and a memset), so replays never depend on eager
state; torch keeps a captured allocation's memory for the graph's replays. :func:`release` drops the cached buffers (they are freed stream-ordered
by torch's allocator).
"""
from __future__ import annotations

import threading

HEADER = 4  # int32 words before the partials

_BUFFERS: dict[tuple[int, int], tuple[object, int, int]] = {}  # (dev, stream) -> (t, cap, ptr)
_LOCK = threading.Lock()


def torch_buffer(torch, device: int, stream: int, elems: int):
    """``(tensor, base pointer)`` of a buffer of ``HEADER + elems`` int32 for launches
    on ``stream`` of ``device``, barrier words ready. Hold the tensor until the
    launch is queued: a buffer made for one call is freed when it is dropped."""
    if torch._C._cuda_isCurrentStreamCapturing():
        t = torch.zeros(HEADER + elems, dtype=torch.int32, device=torch.device("cuda", device))
        return t, t.data_ptr()
    entry = _BUFFERS.get((device, stream))
    if entry is not None and entry[1] >= elems:
        return entry[0], entry[2]
    with _LOCK:
        entry = _BUFFERS.get((device, stream))
        if entry is None or entry[1] < elems:
            # Allocated, and zeroed, on this stream: ordered before the launch that uses
            # it; the old buffer (if any) is freed stream-ordered too.
            t = torch.zeros(HEADER + elems, dtype=torch.int32,
                            device=torch.device("cuda", device))
            entry = _BUFFERS[(device, stream)] = (t, elems, t.data_ptr())
    return entry[0], entry[2]


def release() -> None:
    """Drop every cached buffer (their memory returns to torch's caching allocator)."""
    with _LOCK:
        _BUFFERS.clear()


def cached_bytes() -> int:
    """Bytes held by the per-stream buffers (for tests and the curious)."""
    return sum(4 * (HEADER + cap) for _, cap, _ in _BUFFERS.values())
