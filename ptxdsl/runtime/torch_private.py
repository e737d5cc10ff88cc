"""Every private torch call ptxdsl makes, in one place, behind a version gate and a switch.

ptxdsl's fast launches (the launcher's generated call, the ops' memo) call into torch
for what its public API offers only slowly:

* ``torch._C._cuda_getCurrentRawStream(device)``: the current stream as an integer
  (public fallback: ``torch.cuda.current_stream(device).cuda_stream``);
* ``torch._C._cuda_getDevice()``: torch's current device (``torch.cuda.current_device``);
* ``torch._C._cuda_isCurrentStreamCapturing()``: whether a CUDA graph is being captured
  (``torch.cuda.is_current_stream_capturing``);
* ``torch._C._dynamo.guards.TensorGuards``: a C++ check that tensors have one
  signature (type, dispatch keys, dtype, device, sizes, strides, ``requires_grad``),
  what ``torch.compile`` guards tensors with; checked on CPU tensors before use, and
  only on torch 2.1 to 2.x, whose constructor is known (else: no guard, the signature
  key decides);
* ``torch._C._dynamo.guards._empty_strided_cuda``: allocation without the argument
  parser and the dispatcher (else ``torch.empty``; unlike ``torch.empty`` it does not
  fill memory with NaN under ``torch.use_deterministic_algorithms``);
* ``torch._dynamo.substitute_in_graph`` (torch 2.5+): has ``torch.compile`` trace the
  ops as their ``torch.library`` custom ops (``ops/<op>/torch_op.py``; without it
  dynamo traces the eager code, with graph breaks).

``PTXDSL_TORCH_PRIVATE=0`` turns off the guard, the allocator and the dynamo
substitution, for a torch whose helpers misbehave; the getters above fall back to
their public forms only where torch lacks them.

:func:`hooks` gives the :class:`TorchHooks` of a torch module, made once per module
(:data:`HOOKS` is the one explicit cache; it makes them again when the switch changes,
and ``HOOKS.clear()`` forgets them).
"""
from __future__ import annotations

import os
import threading
from functools import partial

__all__ = ["HOOKS", "TorchHooks", "hooks", "never", "substitute_in_graph"]


def never(*tensors) -> bool:
    """The guard of a signature torch cannot guard: always ask the signature key."""
    return False


def private_enabled() -> bool:
    """``PTXDSL_TORCH_PRIVATE`` is not 0/false/no/off (read when hooks are made)."""
    return os.environ.get("PTXDSL_TORCH_PRIVATE", "").strip().lower() not in (
        "0", "false", "no", "off")


class TorchHooks:
    """What the fast path calls in torch, chosen once per torch module: its raw current
    stream, its current device, whether a graph is being captured, a tensor guard and a
    fast output allocator."""

    def __init__(self, torch):
        self.torch = torch
        C = getattr(torch, "_C", None)
        raw = getattr(C, "_cuda_getCurrentRawStream", None)
        if raw is None:  # older torch: the public (slower) way
            def raw(device, _torch=torch):
                return _torch.cuda.current_stream(device).cuda_stream
        self.raw_stream = raw
        # torch's current device: a torch.cuda.device(i) block or set_device() changes
        # the thread's context behind our back; a launch then takes the careful path.
        cur = getattr(C, "_cuda_getDevice", None)
        self.current_device = cur if cur is not None else torch.cuda.current_device
        capturing = getattr(C, "_cuda_isCurrentStreamCapturing", None)
        if capturing is None:
            def capturing(_torch=torch):
                return _torch.cuda.is_current_stream_capturing()
        self.capturing = capturing
        guards = getattr(getattr(C, "_dynamo", None), "guards", None) \
            if private_enabled() else None
        self._tensor_guards = _checked_tensor_guards(torch, guards)
        self._empty_strided = getattr(guards, "_empty_strided_cuda", None)

    def guard(self, tensors):
        """``check(*tensors)`` that is True only for tensors like these (see the module
        docstring); :func:`never` when torch has no usable guard."""
        if self._tensor_guards is None:
            return never
        try:
            return self._tensor_guards(*tensors, dynamic_dims_sizes=None,
                                       dynamic_dims_strides=None).check
        except Exception:  # noqa: BLE001 - not tensors after all: the key decides
            return never

    def allocator(self, shape, stride, dtype, device: int):
        """A no-argument call that allocates an output like the general path's: on
        ``device``, which the fast path has checked is torch's current device."""
        shape, stride = tuple(int(d) for d in shape), tuple(int(s) for s in stride)
        if self._empty_strided is not None:
            # Allocates on the current device (the caching allocator's), no dispatcher.
            return partial(self._empty_strided, shape, stride, dtype)
        torch = self.torch
        return partial(torch.empty, shape, dtype=dtype, device=torch.device("cuda", device))


def torch_version(torch) -> tuple[int, int]:
    try:
        major, minor = str(torch.__version__).split(".")[:2]
        return int(major), int(minor)
    except (AttributeError, ValueError):
        return (0, 0)


def _checked_tensor_guards(torch, guards):
    """torch's ``TensorGuards`` when it behaves as the fast path needs (checked on a few
    CPU tensors), else None. A private class: used only on the torch 2 releases whose
    constructor is known (dynamo's own call: two keyword arguments, which it requires)."""
    tg = getattr(guards, "TensorGuards", None)
    if tg is None or not (2, 1) <= torch_version(torch) < (3, 0):
        return None
    try:
        a = torch.empty((4, 2))
        check = tg(a, dynamic_dims_sizes=None, dynamic_dims_strides=None).check
        ok = (check(a) is True and check(torch.empty((4, 2))) is True
              and check(torch.empty((2, 4)).t()) is False              # strides
              and check(torch.empty((4, 2), dtype=torch.float64)) is False
              and check(torch.empty((8, 1))) is False                  # shape
              and check(object()) is False)
    except Exception:  # noqa: BLE001 - any surprise: do without
        return None
    return tg if ok else None


def substitute_in_graph(torch):
    """``torch._dynamo.substitute_in_graph`` where torch has it (2.5 and later) and
    ``PTXDSL_TORCH_PRIVATE`` allows it, else None."""
    if not private_enabled() or torch_version(torch) < (2, 5):
        return None
    try:
        from torch._dynamo import substitute_in_graph as sub
    except ImportError:
        return None
    return sub


class HookCache:
    """The :class:`TorchHooks` of the torch module in use, made again when the module or
    ``PTXDSL_TORCH_PRIVATE`` changes (asked on general-path calls only)."""

    def __init__(self):
        self._last: tuple = (None, None, None)  # (torch module, switch, hooks)
        self._lock = threading.Lock()

    def get(self, torch) -> TorchHooks:
        mod, switch, h = self._last
        private = private_enabled()
        if mod is not torch or switch != private:
            with self._lock:
                h = TorchHooks(torch)
                self._last = (torch, private, h)
        return h

    def clear(self) -> None:
        self._last = (None, None, None)


HOOKS = HookCache()


def hooks(torch) -> TorchHooks:
    """The hooks of ``torch`` (made on first use, then cached in :data:`HOOKS`)."""
    return HOOKS.get(torch)
