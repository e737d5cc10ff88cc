"""Scratch memory for the fused RMSNorm backward: one buffer per (device, stream).

The backward kernel needs two arrival words that are zero before its first
launch (every launch leaves them ready again) and an f32 ``(G, N)``
buffer for the per-CTA dweight partials, which only lives during the launch.
Launches on one stream run one after another, so one buffer per stream serves
them all, as cuBLAS keeps a workspace per stream: no allocation and no memset
per call. Different streams get different buffers, so concurrent launches never
share arrival words.

Layout (int32 elements): ``[0:2]`` arrival words (the last arrival's count, the late
arrivals' word), ``[2]`` the dynamic attention forward's tile counter
(:mod:`ptxdsl.ops.attention.counter`, zero before first use, left so by every launch),
``[3]`` padding (the partials start 16-byte aligned), ``[4:4+G*N]`` the partials.

While a CUDA graph is being captured, each call takes a slice of its own of the
capture's arena (:mod:`.capture_arena`: zeroed once, outside the graph, so the graph
holds no memset), so replays never depend on eager state nor share words with other
calls or graphs.
``WORKSPACE.release()`` drops the cached buffers (they are freed stream-ordered by
torch's allocator).
"""
from __future__ import annotations

import threading

from .capture_arena import CAPTURES

# int32 words before the partials: the arrival words, padded to 128 bytes so that the
# partial rows start on an L2 line (a warp's 512-byte access to a row of a multiple of
# 32 floats then touches four lines, not five)
HEADER = 32
ATTENTION_TILES = 2     # the word of the attention forward's tile counter (Config.dynamic)


class Workspace:
    """The per-(device, stream) buffers (bounded: past ``limit`` streams the oldest
    buffer is dropped, to be freed stream-ordered by torch's allocator)."""

    def __init__(self, limit: int = 64, captures=CAPTURES):
        self.captures = captures          # where captured calls take their words
        self._buffers: dict[tuple[int, int], tuple[object, int, int]] = {}  # -> (t, cap, ptr)
        self._lock = threading.Lock()
        self.limit = limit

    def torch_buffer(self, hooks, device: int, stream: int, elems: int):
        """``(tensor, base pointer)`` of a buffer of ``HEADER + elems`` int32 for launches
        on ``stream`` of ``device``, arrival words ready (``hooks``: the
        :class:`~ptxdsl.runtime.torch_private.TorchHooks` of the torch in use). Hold the
        tensor until the launch is queued. While ``stream`` is being captured: the call's
        own slice of the capture's arena."""
        if hooks.capturing():
            return self.captures.torch_words(hooks, device, stream, HEADER + elems)
        entry = self._buffers.get((device, stream))
        if entry is not None and entry[1] >= elems:
            return entry[0], entry[2]
        with self._lock:
            entry = self._buffers.get((device, stream))
            if entry is None or entry[1] < elems:
                # Allocated, and zeroed, on this stream: ordered before the launch that
                # uses it; the old buffer (if any) is freed stream-ordered too.
                t = self._zeros(hooks, device, HEADER + elems)
                if entry is None and len(self._buffers) >= self.limit:
                    self._buffers.pop(next(iter(self._buffers)))
                entry = self._buffers[(device, stream)] = (t, elems, t.data_ptr())
        return entry[0], entry[2]

    @staticmethod
    def _zeros(hooks, device: int, n: int):
        """``n`` zeroed int32 on ``device``: through the hooks' allocator where it is
        torch's current device (what the fast path allocates with, and what a fake GPU
        replaces in the tests), else ``torch.zeros`` on it."""
        torch = hooks.torch
        if hooks.current_device() == device:
            return hooks.allocator((n,), (1,), torch.int32, device)().zero_()
        return torch.zeros(n, dtype=torch.int32, device=torch.device("cuda", device))

    def release(self) -> None:
        """Drop every cached buffer (their memory returns to torch's caching allocator)."""
        with self._lock:
            self._buffers.clear()

    def cached_bytes(self) -> int:
        """Bytes held by the per-stream buffers (for tests and the curious)."""
        return sum(4 * (HEADER + cap) for _, cap, _ in self._buffers.values())


# The ops' workspace: one explicit object (release() empties it).
WORKSPACE = Workspace()
