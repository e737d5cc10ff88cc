"""The tile counter a ``Config.dynamic`` forward takes (its last argument): one 32-bit
word, zero before the launch, which the launch leaves zero (its last atomic add resets
it). Launches on one stream run one after another, so torch CUDA calls share the
stream's word of the ops' workspace (:data:`~.._common.workspace.WORKSPACE`, word
:data:`~.._common.workspace.ATTENTION_TILES`): no allocation and no memset per call;
during CUDA-graph capture the workspace gives each call words of its own from the
capture's arena, zeroed outside the graph (:mod:`~.._common.capture_arena`). Other
arrays get a zeroed word per call.

The fused decode (:mod:`.decode`) takes a word per tile (its tickets), left zero by
every launch too: a workspace of its own per stream (:data:`TICKETS`), as large as the
most tiles a call has needed."""
from __future__ import annotations

from ...runtime import torch_private
from ...runtime.memo import scratch
from .._common.workspace import ATTENTION_TILES, WORKSPACE, Workspace

TICKETS = Workspace()   # the fused decode's per-tile tickets, one buffer per stream


def takes_counter(kern) -> bool:
    """Whether the forward kernel ``kern`` schedules its tiles dynamically."""
    return "counter" in (kern.arg_names or ())


def tile_counter(frame, like):
    """``(counter, replay)``: the word to launch with, and for a recorded torch CUDA
    launch ``(slot, scratch_fn)``, the memo's source of the word on later calls (else
    None)."""
    if not frame.cuda_torch:
        return frame.zeros_u32(1, like), None
    hooks, dev = torch_private.hooks(frame.torch), frame.device(like).ordinal

    def stream_word():
        return WORKSPACE.torch_buffer(hooks, dev, hooks.raw_stream(dev), 0)

    buf, _ = stream_word()
    return buf[ATTENTION_TILES:ATTENTION_TILES + 1], (scratch(4 * ATTENTION_TILES), stream_word)


def tile_tickets(frame, like, n: int):
    """``(tickets, replay)`` for ``n`` tiles, as :func:`tile_counter`: the stream's words
    of :data:`TICKETS` (zero between launches) on torch CUDA, else ``n`` zeroed words."""
    if not frame.cuda_torch:
        return frame.zeros_u32(n, like), None
    hooks, dev = torch_private.hooks(frame.torch), frame.device(like).ordinal

    def stream_words():
        return TICKETS.torch_buffer(hooks, dev, hooks.raw_stream(dev), n)

    buf, _ = stream_words()
    return buf[:n], (scratch(0), stream_words)


__all__ = ["takes_counter", "tile_counter", "tile_tickets", "TICKETS"]
