"""Zeroed words for captured launches (``ops/_common/capture_arena.py``) and the driver's
capture queries (``runtime/capture.py``), on CPU torch and the fake driver: each call
under capture takes a disjoint aligned slice of its capture's arena, zeroed once per
chunk outside the graph; captures never share words; the workspaces take their
captured calls' words there, and eager calls keep the per-stream buffer."""
from __future__ import annotations

import enum
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from ptxdsl.ops._common.capture_arena import ALIGN, CaptureArena  # noqa: E402
from ptxdsl.ops._common.workspace import HEADER, Workspace  # noqa: E402


class Hooks:
    """CPU torch posing as CUDA torch, the capture state set by the test."""

    def __init__(self):
        self.torch, self.capture = torch, None

    def capturing(self):
        return self.capture is not None

    def current_device(self):
        return 0

    def allocator(self, shape, stride, dtype, device):
        return lambda: torch.full(shape, 7, dtype=dtype)    # garbage until zeroed


def _arena(**kw):
    zeroed = []

    def zero(hooks, t, device):
        assert hooks.capturing()
        zeroed.append(t.numel())
        t.zero_()
    return CaptureArena(capture_id=lambda hooks, stream: hooks.capture, zero=zero, **kw), \
        zeroed


def test_calls_of_a_capture_take_disjoint_zeroed_slices():
    arena, zeroed = _arena(chunk=256)
    hooks = Hooks()
    hooks.capture = 11
    got = [arena.torch_words(hooks, 0, 5, n) for n in (3, 40, 1, 100)]
    assert zeroed == [256]                          # one chunk, zeroed once, for all four
    ptrs = [p for _, p in got]
    assert all((p - ptrs[0]) % (4 * ALIGN) == 0 for p in ptrs)  # 128-byte steps
    spans = sorted((p, p + 4 * t.numel()) for t, p in got)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))   # disjoint
    assert all(not t.any() for t, _ in got) and [t.numel() for t, _ in got] == [3, 40, 1, 100]
    t, _ = arena.torch_words(hooks, 0, 5, 200)      # no room left: a second chunk
    assert zeroed == [256, 256] and not t.any()
    big, _ = arena.torch_words(hooks, 0, 5, 1000)   # more than a chunk: a chunk its size
    assert zeroed[-1] == 1024 and big.numel() == 1000
    hooks.capture = 12                              # another graph: another arena
    other, p = arena.torch_words(hooks, 0, 5, 3)
    assert arena.captures() == 2 and p not in ptrs and len(zeroed) == 4
    hooks.capture = None
    with pytest.raises(RuntimeError, match="not being captured"):
        arena.torch_words(hooks, 0, 5, 3)
    arena.release()
    assert arena.captures() == 0


def test_arenas_of_the_oldest_captures_are_dropped_past_the_limit():
    arena, _ = _arena(limit=2, chunk=32)
    hooks = Hooks()
    for cid in (1, 2, 3):
        hooks.capture = cid
        arena.torch_words(hooks, 0, 0, 4)
    assert sorted(k[1] for k in arena._arenas) == [2, 3]


def test_workspace_under_capture_takes_the_arena_not_a_zeroed_buffer():
    arena, zeroed = _arena(chunk=1024)
    ws = Workspace(captures=arena)
    hooks = Hooks()
    hooks.capture = 3
    a, pa = ws.torch_buffer(hooks, 0, 9, 8)
    b, pb = ws.torch_buffer(hooks, 0, 9, 8)
    assert a.numel() == b.numel() == HEADER + 8 and abs(pa - pb) >= 4 * (HEADER + 8)
    assert zeroed == [1024] and not ws._buffers     # nothing cached per stream
    hooks.capture = None                            # eager: the stream's buffer, reused
    c, pc = ws.torch_buffer(hooks, 0, 9, 8)
    assert ws.torch_buffer(hooks, 0, 9, 8)[1] == pc and len(zeroed) == 1


class _Status(enum.IntEnum):
    CU_STREAM_CAPTURE_STATUS_NONE = 0
    CU_STREAM_CAPTURE_STATUS_ACTIVE = 1


class _Mode(enum.IntEnum):
    CU_STREAM_CAPTURE_MODE_GLOBAL = 0
    CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1
    CU_STREAM_CAPTURE_MODE_RELAXED = 2


def test_capture_queries_through_the_driver(monkeypatch):
    from runtime_fakes import fake_driver

    from ptxdsl.runtime import capture
    _, cu = fake_driver(monkeypatch)
    ok = cu.CUresult.CUDA_SUCCESS
    captures = {0x50: 77}                           # stream -> capture id
    mode = SimpleNamespace(now=_Mode.CU_STREAM_CAPTURE_MODE_GLOBAL, seen=[])

    def info(stream):
        cid = captures.get(int(stream))
        status = _Status.CU_STREAM_CAPTURE_STATUS_NONE if cid is None else \
            _Status.CU_STREAM_CAPTURE_STATUS_ACTIVE
        return ok, status, cid or 0, None, [], 0

    def exchange(new):
        old, mode.now = mode.now, new
        mode.seen.append(new)
        return ok, old
    for name, val in (("cuStreamGetCaptureInfo", info),
                      ("cuThreadExchangeStreamCaptureMode", exchange),
                      ("CUstreamCaptureStatus", _Status), ("CUstreamCaptureMode", _Mode)):
        monkeypatch.setattr(cu, name, val, raising=False)
    assert capture.capture_id(0x50) == 77 and capture.capture_id(0x60) is None
    with capture.relaxed():
        assert mode.now == _Mode.CU_STREAM_CAPTURE_MODE_RELAXED
    assert mode.now == _Mode.CU_STREAM_CAPTURE_MODE_GLOBAL and len(mode.seen) == 2
    with pytest.raises(KeyError), capture.relaxed():
        raise KeyError("the block failed")
    assert mode.now == _Mode.CU_STREAM_CAPTURE_MODE_GLOBAL     # restored all the same


def test_fused_decode_tickets_under_capture_are_a_new_slice_per_call(monkeypatch):
    """The fused decode's tickets (``counter.tile_tickets``): eagerly the stream's words
    on every call (general path and memo replays alike); under capture a slice of the
    arena per call, for the general path's call and for each memo replay."""
    from ptxdsl.ops.attention import counter
    from ptxdsl.runtime import torch_private
    arena, zeroed = _arena(chunk=4096)
    hooks = Hooks()
    hooks.raw_stream = lambda dev: 0x42
    monkeypatch.setattr(torch_private, "hooks", lambda t: hooks)
    monkeypatch.setattr(counter, "TICKETS", Workspace(captures=arena))
    frame = SimpleNamespace(cuda_torch=True, torch=torch,
                            device=lambda like: SimpleNamespace(ordinal=0))
    words, (slot, replay) = counter.tile_tickets(frame, None, 24)
    again, _ = counter.tile_tickets(frame, None, 24)
    assert slot == "w"                              # the memo launches at the base
    assert words.data_ptr() == again.data_ptr() == replay()[1] and not zeroed
    hooks.capture = 5
    got = [counter.tile_tickets(frame, None, 24)[0].data_ptr()] + \
        [replay()[1] for _ in range(3)]
    assert len(set(got)) == 4 and words.data_ptr() not in got and zeroed == [4096]
