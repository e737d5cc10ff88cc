"""``ptxdsl.ops.rms_norm`` / ``rms_norm_backward``: the user-facing API.

Arrays may be numpy (run on the GPU when one is present, else on the CPU
interpreter), torch CUDA tensors or any ``__cuda_array_interface__`` /
``__dlpack__`` device array (run on the GPU, zero-copy). Torch tensors that
need gradients go through a ``torch.autograd.Function`` (:mod:`.autograd`) whose
backward is :func:`rms_norm_backward`. The kernel a call runs is chosen in
:mod:`.plan`; repeated torch calls launch through the runtime's memo
(:mod:`ptxdsl.runtime.memo`: :data:`FORWARD`, :data:`BACKWARD`), which the general
path's :class:`~ptxdsl.runtime.memo.Recording` fills.
"""
from __future__ import annotations

import logging

from ...core.errors import LaunchError, user_location
from ...core.types import f32
from ...runtime import torch_private
from ...runtime.adapter import Frame, address as data_ptr, dtype_of, element_strides as strides
from ...runtime.memo import Launch, Memo, Recording, output, scratch, tensor
from .._common.torch_registry import TORCH_OPS
from .checks import check_array, check_arrays, check_like, eps_value, offset_value
from .._common.workspace import HEADER, WORKSPACE
from .plan import KERNELS, backward_kernel, dw_reduce_kernel, forward_kernel, vec_for

__all__ = ["BACKWARD", "FORWARD", "KERNELS", "clear", "forward", "rms_norm", "rms_norm_backward"]

log = logging.getLogger("ptxdsl.ops")

# Repeat torch calls: (x, weight, residual, out; eps, offset, want_rstd) and
# (dy, x, weight, rstd; offset).
FORWARD = Memo("rms_norm", 4, 3)
BACKWARD = Memo("rms_norm_backward", 4, 1)


def clear() -> None:
    """Forget every recorded call (the next call of each signature takes the general path)."""
    FORWARD.clear()
    BACKWARD.clear()


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
    is traced as the custom op ``torch.ops.ptxdsl.rms_norm`` (see :mod:`.torch_op`).
    """
    # A repeat torch call: the last signature's guard, else the signature key.
    got = FORWARD.hot(x, weight, residual, out, eps, offset, return_rstd)
    if got is None:
        got = FORWARD.lookup(x, weight, residual, out, eps, offset, return_rstd)
    if got is not None:
        return got
    frame = Frame(x, "rms_norm", "x")
    needs_grad = frame.kind == "torch" and frame.torch.is_grad_enabled() and (
        x.requires_grad or getattr(weight, "requires_grad", False))
    if needs_grad and (residual is not None or out is not None):
        raise LaunchError("rms_norm(residual=..., out=...) writes into caller tensors and is "
                          "not differentiable; call it under torch.no_grad() (inference), or "
                          "add the residual first and call rms_norm(x, weight) for training",
                          user_location())
    if needs_grad:
        from .autograd import rms_norm_autograd  # imports torch
        y, rstd = rms_norm_autograd(x, weight, eps, offset, forward, rms_norm_backward)
        return (y, rstd) if return_rstd else y
    return _forward(frame, x, weight, eps, offset, residual, out, return_rstd)


def forward(x, weight, eps: float, offset: float = 0.0):
    """``(y, rstd)`` without autograd (what the autograd Function and the custom op run):
    a recorded launch if the signature was seen, else the general path."""
    got = FORWARD.hot(x, weight, None, None, eps, offset, True)
    if got is None:
        got = FORWARD.lookup(x, weight, None, None, eps, offset, True)
    if got is not None:
        return got
    return _forward(Frame(x, "rms_norm", "x"), x, weight, eps, offset, None, None, True)


def _forward(frame, x, weight, eps, offset, residual, out, want_rstd):
    """The general path; its launch recorded in :data:`FORWARD` for torch CUDA tensors."""
    if frame.kind == "torch":
        TORCH_OPS.ensure()
    y, rstd, rec = _forward_general(frame, x, weight, eps, residual, want_rstd, out,
                                    offset_value(offset))
    if rec is not None:
        FORWARD.record((x, weight, residual, out, eps, offset, want_rstd), rec)
    return (y, rstd) if want_rstd else y


def _forward_general(frame, x, weight, eps, residual, want_rstd, out, offset=0.0):
    n = int(x.shape[-1]) if x.ndim else 0
    dt, wdt = check_arrays(x, weight, n, frame)
    eps = eps_value(eps)
    lead = tuple(x.shape[:-1])
    x2 = frame.rows(x, n)
    m = int(x2.shape[0])
    r2 = None
    if residual is not None:
        check_like(frame, residual, "residual", x, dt)
        r2 = frame.rows(residual, n)
        if data_ptr(r2) != data_ptr(residual) and frame.kind != "numpy":
            raise LaunchError("rms_norm: residual is updated in place, so it needs unit "
                              "inner stride", user_location())
    if out is not None:
        check_like(frame, out, "out", x, dt)
    y = out if out is not None else frame.empty(tuple(x.shape), x)
    y2 = frame.rows(y, n)
    # An out= the (M, N) row view cannot alias (a strided or permuted view): the kernel
    # writes a new array, copied into out after the launch.
    through = out is not None and m > 0 and (strides(y2) != (n, 1)
                                             or data_ptr(y2) != data_ptr(out))
    if through:
        y2 = frame.empty((m, n), x)
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
    if through:
        frame.copy_into(out, y2)
    if out is None:
        y = y2.reshape(lead + (n,))
    rec = None
    # A repeat call launches on the caller's own pointers: recorded only where the
    # (M, N) views the kernel saw are views of them, not copies.
    if frame.cuda_torch and not through and (x2 is x or x.is_contiguous()) and (
            residual is None or r2 is residual):
        outputs = []

        def new(t):
            outputs.append(t)
            return output(len(outputs) - 1)
        x_, w_, r_ = tensor(0), tensor(1), tensor(2)
        y_ = tensor(3) if out is not None else new(y)
        rs_ = new(rstd) if want_rstd else None
        res = [r_] if r2 is not None else []
        order = [x_, *res, w_, y_, *res] + ([rs_] if want_rstd else [])
        rec = Recording((Launch(k, tuple(args), tuple(order)),), tuple(outputs),
                        (y_, rs_) if want_rstd else y_)
    return y, rstd, rec


# ---------------------------------------------------------------- backward
def rms_norm_backward(dy, x, weight, rstd, *, offset: float = 0.0):
    """``(dx, dweight)`` for ``y = rms_norm(x, weight, offset=offset)`` given the saved
    ``rstd`` (dx uses ``offset + weight``; dweight is ``sum(dy * x * rstd)`` whatever the
    offset).

    dweight is reduced deterministically (fixed-order partial sums, no atomics).
    """
    # A repeat torch call: the last signature's guard, else the signature key.
    got = BACKWARD.hot(dy, x, weight, rstd, offset)
    if got is None:
        got = BACKWARD.lookup(dy, x, weight, rstd, offset)
    if got is not None:
        return got
    frame = Frame(x, "rms_norm_backward", "x")
    if frame.kind == "torch":
        TORCH_OPS.ensure()
    dx, dw, rec = _backward_general(frame, dy, x, weight, rstd, offset_value(offset))
    if rec is not None:
        BACKWARD.record((dy, x, weight, rstd, offset), rec)
    return dx, dw


def _backward_general(frame, dy, x, weight, rstd, offset=0.0):
    n = int(x.shape[-1]) if x.ndim else 0
    dt, wdt = check_arrays(x, weight, n, frame)
    check_like(frame, dy, "dy", x, dt)
    check_array(frame, rstd, "rstd")
    x2, dy2 = frame.rows(x, n), frame.rows(dy, n)
    m = int(x2.shape[0])
    if tuple(rstd.shape) not in ((m,), tuple(x.shape[:-1])) or dtype_of(rstd) != f32:
        raise LaunchError(f"rms_norm_backward: rstd must be float32 with one value per row "
                          f"({m}), got {tuple(rstd.shape)} {rstd.dtype}", user_location())
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
        return _backward_unfused(frame, p, kb, dy, x, weight, rstd, dy2, x2, dx, dx2, dw, n,
                                 wdt)
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
    rec = None
    if _own_pointers(frame, x, x2, dy, dy2):
        dy_, x_, w_, rs_ = tensor(0), tensor(1), tensor(2), tensor(3)
        args = (dy2, x2, weight, rstd, ws, dx2, dw, partial)
        if p.cluster_dw:
            # a grid summing dW in one cluster reads neither the barrier words nor the
            # partial rows: its repeat calls pass null pointers, no stream workspace
            order = (dy_, x_, w_, rs_, 0, output(0), output(1), 0)
            rec = Recording((Launch(kb, args, order),), (dx, dw), (output(0), output(1)))
        else:
            hooks, dev = torch_private.hooks(frame.torch), info.ordinal
            raw_stream, buffer = hooks.raw_stream, WORKSPACE.torch_buffer

            def stream_scratch():
                return buffer(hooks, dev, raw_stream(dev), elems)
            order = (dy_, x_, w_, rs_, scratch(), output(0), output(1), scratch(4 * HEADER))
            rec = Recording((Launch(kb, args, order),), (dx, dw), (output(0), output(1)),
                            scratch=stream_scratch)
    return dx2.reshape(tuple(x.shape)), dw, rec


def _backward_unfused(frame, p, kb, dy, x, weight, rstd, dy2, x2, dx, dx2, dw, n, wdt):
    """Small rows: partials from the row kernel, summed by a second launch."""
    kr = dw_reduce_kernel(n, wdt, p.grid, kb.arch)
    partial = frame.empty((p.grid, n), x, f32)
    frame.run(kb, dy2, x2, weight, rstd, dx2, partial)
    frame.run(kr, partial, dw)
    rec = None
    if _own_pointers(frame, x, x2, dy, dy2):
        dx_, dw_, part_ = output(0), output(1), output(2)
        rec = Recording((Launch(kb, (dy2, x2, weight, rstd, dx2, partial),
                                (tensor(0), tensor(1), tensor(2), tensor(3), dx_, part_)),
                         Launch(kr, (partial, dw), (part_, dw_))),
                        (dx, dw, partial), (dx_, dw_))
    return dx2.reshape(tuple(x.shape)), dw, rec


def _own_pointers(frame, x, x2, dy, dy2) -> bool:
    """A repeat call launches on the caller's pointers: recorded only where the (M, N)
    views the kernel saw are views of them, not copies."""
    return frame.cuda_torch and (x2 is x or x.is_contiguous()) and (
        dy2 is dy or dy.is_contiguous())
