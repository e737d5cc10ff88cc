"""Zeroed words for launches captured into CUDA graphs, with no memset in the graph.

Some kernels take words that must be zero before the launch and that the launch leaves
zero (arrival counters, tile tickets): eagerly a per-stream buffer serves every launch
(:mod:`.workspace`). A captured graph cannot share that buffer (its replays would race
with eager launches and with other graphs), and a buffer zeroed during capture puts a
memset node in the graph for every call. Here each capture sequence (a captured graph,
told apart by its id, ``cuStreamGetCaptureInfo``) gets an arena of its own: chunks
allocated on the capturing stream (so from the graph's private memory pool, which
nothing else uses while the graph lives) and zeroed *outside* the capture, on a side
stream that is synchronized before the call returns (in the relaxed capture mode). Each
call takes a disjoint, 128-byte-aligned slice, so two calls of one graph never share a
word, nor do two graphs replayed concurrently; the kernels leave the words zero, so
replays need no reset.

An arena is kept as long as its graph may replay, which ptxdsl cannot see: the arenas
of the last ``limit`` captures are kept, and :meth:`CaptureArena.release` drops them
all (call it only when no graph captured with ptxdsl ops will replay again).
"""
from __future__ import annotations

import threading

ALIGN = 32          # int32 words per slice alignment: 128 bytes, an L2 line
CHUNK = 1 << 14     # int32 words per chunk at least (64 KiB)


def _torch_capture_id(hooks, stream: int):
    from ...runtime.capture import capture_id
    return capture_id(stream)


def _torch_zero(hooks, t, device: int) -> None:
    """Zero ``t`` on a side stream, not the capturing one, and wait for it (relaxed mode:
    a global-mode capture forbids the synchronize)."""
    from ...runtime.capture import relaxed
    torch = hooks.torch
    with relaxed():
        side = torch.cuda.Stream(device)
        with torch.cuda.stream(side):
            t.zero_()
        side.synchronize()


class CaptureArena:
    """Per-(device, capture) chunks of zeroed int32 words, handed out in disjoint slices.
    ``capture_id(hooks, stream)`` and ``zero(hooks, tensor, device)`` default to the
    driver's capture id and a side-stream zeroing (tests pass stand-ins)."""

    def __init__(self, limit: int = 1024, chunk: int = CHUNK, *, capture_id=None,
                 zero=None):
        self.limit, self.chunk = limit, chunk
        self._capture_id = capture_id or _torch_capture_id
        self._zero = zero or _torch_zero
        self._arenas: dict[tuple[int, int], list[list]] = {}   # -> [[tensor, used], ...]
        self._lock = threading.Lock()

    def torch_words(self, hooks, device: int, stream: int, n: int):
        """``(tensor, base pointer)``: ``n`` zeroed int32 on ``device`` for a launch being
        captured on ``stream``, not handed out before."""
        cid = self._capture_id(hooks, stream)
        if cid is None:
            raise RuntimeError(f"stream {stream:#x} is not being captured")
        take = -(-n // ALIGN) * ALIGN
        with self._lock:
            chunks = self._arenas.get((device, cid))
            if chunks is None:
                if len(self._arenas) >= self.limit:
                    self._arenas.pop(next(iter(self._arenas)))
                chunks = self._arenas[(device, cid)] = []
            if not chunks or chunks[-1][1] + take > chunks[-1][0].numel():
                t = _empty(hooks, device, max(take, self.chunk))
                self._zero(hooks, t, device)
                chunks.append([t, 0])
            last = chunks[-1]
            view = last[0][last[1]:last[1] + n]
            last[1] += take
        return view, view.data_ptr()

    def release(self) -> None:
        """Drop every arena (their memory returns to their graphs' pools)."""
        with self._lock:
            self._arenas.clear()

    def captures(self) -> int:
        """How many captures hold an arena (for tests and the curious)."""
        return len(self._arenas)


def _empty(hooks, device: int, n: int):
    """``n`` int32 on ``device``, allocated on the current (capturing) stream: through the
    hooks' allocator where it is torch's current device, else ``torch.empty`` on it."""
    torch = hooks.torch
    if hooks.current_device() == device:
        return hooks.allocator((n,), (1,), torch.int32, device)()
    return torch.empty(n, dtype=torch.int32, device=torch.device("cuda", device))


# The ops' arena for captured launches (the workspaces' capture path).
CAPTURES = CaptureArena()

__all__ = ["CaptureArena", "CAPTURES"]
