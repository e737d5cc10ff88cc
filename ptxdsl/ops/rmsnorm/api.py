"""``ptxdsl.ops.rms_norm`` / ``rms_norm_backward`` / ``RMSNorm``: the user-facing API.

Arrays may be numpy (run on the GPU when one is present, else on the CPU
interpreter), torch CUDA tensors or any ``__cuda_array_interface__`` /
``__dlpack__`` device array (run on the GPU, zero-copy). Torch tensors that
need gradients go through a ``torch.autograd.Function`` (:mod:`.autograd`) whose
backward is :func:`rms_norm_backward`. The kernel a call runs is chosen in
:mod:`.plan`; repeated torch calls launch through :mod:`.fast`.
"""
from __future__ import annotations

import logging

from ...core.errors import LaunchError, user_location
from ...runtime import torch_private
from ...core.types import f32
from .._common.frame import Frame, data_ptr, grad_enabled, strides
from .._common.workspace import HEADER, WORKSPACE
from . import fast as _tf
from .plan import KERNELS, backward_kernel, dw_reduce_kernel, forward_kernel, vec_for

__all__ = ["KERNELS", "RMSNorm", "rms_norm", "rms_norm_backward"]

log = logging.getLogger("ptxdsl.ops")


def _grid(k, m: int):
    try:
        return k.grid_for({d: m for d in k.dim_names[:1]}) if callable(k.grid) else k.grid
    except Exception:  # noqa: BLE001 - only for the log line
        return "?"


# ---------------------------------------------------------------- forward
def rms_norm(x, weight, eps: float = 1e-6, *, offset: float = 0.0, residual=None,
             return_rstd: bool = False, out=None):
    """``x / sqrt(mean(x^2, -1) + eps) * (offset + weight)`` over the last dim.

    ``offset``: Gemma's ``1.0`` (weights stored as ``w - 1``); added to each weight in
    f32 inside the kernel (0, the default, runs the plain kernel). With ``residual``:
    ``h = x + residual`` is written into ``residual`` and normalised. Returns ``y``
    (and ``rstd``, f32 per row, with ``return_rstd``).
    Torch tensors requiring grad are differentiable. Under ``torch.compile`` the call
    is traced as the custom op ``torch.ops.ptxdsl.rms_norm`` (see ``_common/torch_ops``).
    """
    if residual is None and out is None and not return_rstd:
        # Lookup 1: the plain form called again like last time, found by one C++ guard
        # of both tensors (fast.Hot); it returns None where alignment or grad mode differ.
        hot = _tf.FORWARD.hot
        if hot.guard(x, weight) and eps == hot.eps and offset == hot.offset:
            y = hot.launch(x, weight)
            if y is not None:
                return y
    try:  # torch tensors: their signature key (numpy, cupy, ...: no .stride()/.data_ptr())
        key = _tf.fwd_key(x, weight, eps, residual, return_rstd, out, offset)
    except (AttributeError, TypeError):
        key = None
    if key is not None and not (x.requires_grad or weight.requires_grad):
        # Lookup 2: a signature seen before, straight to its launch. (Tensors that
        # require grad are looked up once below, by autograd's forward or under no_grad.)
        fast = _tf.FORWARD.entries.get(key)
        if fast is not None:
            if fast.hot is not None:
                _tf.FORWARD.hot = fast.hot  # this signature is the one to guard for now
            y, rstd = fast(x, weight, residual, out)
            return (y, rstd) if return_rstd else y
        looked_up = True
    else:
        looked_up = False
    frame = Frame(x, "rms_norm")
    needs_grad = frame.kind == "torch" and grad_enabled() and (
        x.requires_grad or weight.requires_grad)
    if needs_grad and (residual is not None or out is not None):
        raise LaunchError("rms_norm(residual=..., out=...) writes into caller tensors and is "
                          "not differentiable; call it under torch.no_grad() (inference), or "
                          "add the residual first and call rms_norm(x, weight) for training")
    if needs_grad:
        from .autograd import rms_norm_autograd
        y, rstd = rms_norm_autograd(x, weight, eps, offset)
        return (y, rstd) if return_rstd else y
    y, rstd = _forward(frame, x, weight, eps, residual, return_rstd, out,
                       key=key, looked_up=looked_up, offset=offset)
    return (y, rstd) if return_rstd else y


def _check(x, weight, n, frame):
    if x.ndim < 1 or n < 1:
        raise LaunchError(f"rms_norm needs x with a last dim of at least 1, got shape "
                          f"{tuple(x.shape)}")
    if tuple(weight.shape) != (n,):
        raise LaunchError(f"weight must have shape ({n},) to match x's last dim, got "
                          f"{tuple(weight.shape)}")
    dt, wdt = frame.dtype(x), frame.dtype(weight)
    if wdt not in (dt, f32):
        raise LaunchError(f"weight dtype must be x's ({dt.name}) or float32, got {wdt.name}")
    return dt, wdt


def _forward(frame, x, weight, eps, residual, want_rstd, out, *, key=None,
             looked_up=False, offset=0.0):
    """The forward of a call the fast path did not serve: its recorded launch if the
    signature was seen (unless the caller already looked ``key`` up), else the general
    path, which records the launch for next time."""
    if frame.cuda_torch:
        if key is None:
            key = _tf.fwd_key(x, weight, eps, residual, want_rstd, out, offset)
        fast = None if looked_up else _tf.FORWARD.entries.get(key)
        if fast is not None:
            return fast(x, weight, residual, out)
    y, rstd, fast = _forward_general(frame, x, weight, eps, residual, want_rstd, out,
                                     _offset(offset))
    if fast is not None:
        _tf.FORWARD.add(key, fast)
        if fast.hot is not None:
            _tf.FORWARD.hot = fast.hot
    return y, rstd


def _forward_general(frame, x, weight, eps, residual, want_rstd, out, offset=0.0):
    n = int(x.shape[-1])
    dt, wdt = _check(x, weight, n, frame)
    lead = tuple(x.shape[:-1])
    x2 = frame.rows(x, n)
    m = int(x2.shape[0])
    r2 = None
    if residual is not None:
        if tuple(residual.shape) != tuple(x.shape) or frame.dtype(residual) != dt:
            raise LaunchError("residual must have x's shape and dtype")
        r2 = frame.rows(residual, n)
        if data_ptr(r2) != data_ptr(residual) and frame.kind != "numpy":
            raise LaunchError("residual is updated in place, so it needs unit inner stride")
    y = out if out is not None else frame.empty(tuple(x.shape), x)
    y2 = frame.rows(y, n)
    if not (y2.ndim == 2 and strides(y2) == (n, 1)):
        raise LaunchError("out must be a contiguous array of x's shape and dtype")
    rstd = frame.empty((m,), x, f32) if want_rstd else None
    if m == 0:
        return y, rstd, None
    vec = vec_for(n, dt, weight, wdt, x2, y2, r2)
    arch = frame.arch(x)
    k = forward_kernel(n, dt, wdt, vec, r2 is not None, want_rstd, float(eps), arch,
                       frame.sms(x), frame.device(x), offset, m=m)
    log.debug("rms_norm %dx%d %s (vec %d, residual %s): %s, grid %s, block %s", m, n,
              dt.name, vec, r2 is not None, k.name, _grid(k, m), k.block[0])
    args = [x2] + ([r2] if r2 is not None else []) + [weight, y2] + \
        ([r2] if r2 is not None else []) + ([rstd] if want_rstd else [])
    frame.run(k, *args)
    if r2 is not None and frame.kind == "numpy" and r2 is not residual:
        residual[...] = r2.reshape(residual.shape)
    if out is None:
        y = y2.reshape(lead + (n,))
    fast = None
    # The closure launches on the caller's own pointers: only where the (M, N) views
    # the kernel saw are views of them, not copies.
    if frame.cuda_torch and (x2 is x or x.is_contiguous()) and (
            residual is None or r2 is residual):
        fast = _tf.fwd_fast(frame.torch, k, args, x, weight, eps, m, want_rstd, offset)
    return y, rstd, fast


# ---------------------------------------------------------------- backward
def rms_norm_backward(dy, x, weight, rstd, *, offset: float = 0.0):
    """``(dx, dweight)`` for ``y = rms_norm(x, weight, offset=offset)`` given the saved
    ``rstd`` (dx uses ``offset + weight``; dweight is ``sum(dy * x * rstd)`` whatever the
    offset).

    dweight is reduced deterministically (fixed-order partial sums, no atomics).
    """
    # Lookup 1: the last fused backward's tensors again, by one C++ guard (fast.Hot).
    hot = _tf.BACKWARD.hot
    if hot.guard(dy, x, weight, rstd) and offset == hot.offset:
        got = hot.launch(dy, x, weight, rstd)
        if got is not None:
            return got
    try:
        key = _tf.bwd_key(dy, x, weight, rstd, offset)
        fast = _tf.BACKWARD.entries.get(key)
    except (AttributeError, TypeError):
        key = fast = None
    if fast is not None:
        if getattr(fast, "hot", None) is not None:
            _tf.BACKWARD.hot = fast.hot     # this signature is the one to guard for now
        return fast(dy, x, weight, rstd)
    frame = Frame(x, "rms_norm")
    dx, dw, fast = _backward_general(frame, dy, x, weight, rstd, _offset(offset))
    if fast is not None and key is not None:
        _tf.BACKWARD.add(key, fast)
        if getattr(fast, "hot", None) is not None:
            _tf.BACKWARD.hot = fast.hot
    return dx, dw


def _backward_general(frame, dy, x, weight, rstd, offset=0.0):
    n = int(x.shape[-1])
    dt, wdt = _check(x, weight, n, frame)
    if tuple(dy.shape) != tuple(x.shape) or frame.dtype(dy) != dt:
        raise LaunchError(f"dy must match x: shape {tuple(x.shape)} and dtype {dt.name}")
    x2, dy2 = frame.rows(x, n), frame.rows(dy, n)
    m = int(x2.shape[0])
    if tuple(rstd.shape) not in ((m,), tuple(x.shape[:-1])) or frame.dtype(rstd) != f32:
        raise LaunchError(f"rstd must be float32 with one value per row ({m}), got "
                          f"{tuple(rstd.shape)} {rstd.dtype}")
    rstd = rstd.reshape(m) if tuple(rstd.shape) != (m,) else rstd
    dx = frame.empty(tuple(x.shape), x)
    dw = frame.empty((n,), weight)
    if m == 0:
        dw[...] = 0
        return dx, dw, None
    dx2 = frame.rows(dx, n)
    vec = vec_for(n, dt, weight, wdt, x2, dy2, dx2)
    info = frame.device(x)
    # m: fewer rows than the device's grid run fewer CTAs (each CTA's dW partial row is
    # written and summed whether or not it had a row)
    p, kb = backward_kernel(n, dt, wdt, vec, frame.arch(x), frame.sms(x), info, offset, m=m)
    log.debug("rms_norm_backward %dx%d %s: %s, grid %d, %s", m, n, dt.name, kb.name, p.grid,
              "fused" if p.fused else "unfused (+ dw reduction)")
    if not p.fused:
        return _backward_unfused(frame, p, kb, dy, x, weight, rstd, dy2, x2, dx2, dw, n, wdt)
    elems = p.grid * n
    if frame.cuda_torch:
        hooks = torch_private.hooks(frame.torch)
        buf, _ = WORKSPACE.torch_buffer(hooks, info.ordinal, hooks.raw_stream(info.ordinal),
                                        elems)
        ws = buf[:2]
        partial = buf[HEADER:HEADER + elems].view(
            frame.torch.float32).view(p.grid, n)
    else:  # numpy (GPU or interpreter) and other device arrays: scratch per call
        ws = frame.zeros_u32(2, x)
        partial = frame.empty((p.grid, n), x, f32)
    frame.run(kb, dy2, x2, weight, rstd, ws, dx2, dw, partial)
    fast = None
    if _tf.fast_ok(frame, x, x2, dy, dy2):
        # a grid summing dW in one cluster reads neither the barrier words nor the
        # partial rows: its repeated calls skip the stream's workspace
        fast = _tf.bwd_fast(frame.torch, kb, (dy2, x2, weight, rstd, ws, dx2, dw, partial),
                            x, 0 if p.cluster_dw else elems, dy, weight, rstd, offset,
                            info.ordinal)
    return dx2.reshape(tuple(x.shape)), dw, fast


def _backward_unfused(frame, p, kb, dy, x, weight, rstd, dy2, x2, dx2, dw, n, wdt):
    """Small rows: partials from the row kernel, summed by a second launch."""
    kr = dw_reduce_kernel(n, wdt, p.grid, kb.arch)
    partial = frame.empty((p.grid, n), x, f32)
    frame.run(kb, dy2, x2, weight, rstd, dx2, partial)
    frame.run(kr, partial, dw)
    fast = None
    if _tf.fast_ok(frame, x, x2, dy, dy2):
        fast = _tf.bwd_fast_unfused(frame.torch, kb, kr,
                                    (dy2, x2, weight, rstd, dx2, partial), (partial, dw), x,
                                    n, p.grid)
    return dx2.reshape(tuple(x.shape)), dw, fast


def _offset(offset) -> float:
    """``offset`` as the f32 immediate the kernels add (a clear error for anything else)."""
    try:
        v = float(offset)
    except (TypeError, ValueError):
        raise LaunchError(f"offset must be a real number (Gemma: 1.0), got {offset!r}",
                          user_location()) from None
    if v != v or v in (float("inf"), float("-inf")):
        raise LaunchError(f"offset must be finite, got {v}", user_location())
    return v


def RMSNorm(*args, **kwargs):
    """``torch.nn.Module`` running ptxdsl's RMSNorm kernels (forward and backward)."""
    from .autograd import RMSNorm as _RMSNorm
    return _RMSNorm(*args, **kwargs)
