"""``ptxdsl.ops.rms_norm_quant``: RMSNorm with FP8 (e4m3) output and its scale.

What inference servers run before an FP8 GEMM (vLLM's
``rms_norm_dynamic_per_token_quant`` and ``fused_add_rms_norm_static_fp8_quant``), in
one kernel (:mod:`.quant`) that reads each row once. numpy arrays get an
``ml_dtypes.float8_e4m3fn`` array (on the GPU when one is present, else on the CPU
interpreter); torch tensors a ``torch.float8_e4m3fn`` tensor (CUDA tensors on the GPU,
CPU tensors on the interpreter). Repeated torch CUDA calls of one signature launch
through a recorded closure, as ``rms_norm``'s do (:mod:`.fast`).
"""
from __future__ import annotations

import math
import threading

import numpy as np

from ...core.errors import LaunchError, user_location
from ...runtime import prepare, torch_private
from ...runtime.fastpath import Signatures
from ...core.types import f32
from .._common.frame import Frame, data_ptr, dtype_of
from .api import _check, _offset
from .plan import quant_kernel, vec_for
from .quant import FP8_MAX, MIN_SCALE

__all__ = ["rms_norm_quant", "FP8_MAX", "MIN_SCALE"]


def rms_norm_quant(x, weight, eps: float = 1e-6, *, residual=None, offset: float = 0.0,
                   scale=None):
    """``(y, scale)``: ``x / sqrt(mean(x^2, -1) + eps) * (offset + weight)`` over the last
    dim, quantised to FP8 e4m3 (``float8_e4m3fn``).

    * ``scale=None`` (dynamic, per row): ``scale = max(max|y| / 448, MIN_SCALE)`` in f32
      for each row, returned with shape ``x.shape[:-1] + (1,)`` (so ``y.astype(f32) *
      scale`` dequantises); ``MIN_SCALE = 1 / (448 * 512)`` keeps an all-zero row's scale
      positive (its bytes are 0, not NaN).
    * ``scale`` given (static): a positive finite number, or a float32 array/tensor of
      one element (on x's device; read by the kernel, never synchronised on). The
      returned scale is that same object.

    Either way ``y`` is quantised as ``e4m3(y * (1 / scale))``: the reciprocal rounded
    once to f32, round to nearest even, saturated to +-448 (``cvt.rn.satfinite``).
    ``y`` itself is ``(h * (offset + weight)) * rstd`` in f32.

    ``residual``: ``h = x + residual`` (rounded to x's dtype) is what is normalised, and
    it is written back into ``residual`` in place (vLLM's fused-add form), so that the
    next layer's residual stream is ready. x: float32, float16 or bfloat16; weight: x's
    dtype or float32. Not differentiable (FP8 output is for inference).
    """
    if residual is None:
        # Lookup 1: the residual-free form called again like last time, found by one C++
        # guard of the tensors (Hot); it returns None where the pointers' alignment differs.
        hot = FAST.hot
        if eps == hot.eps and offset == hot.offset:
            if scale is None or type(scale) is float:
                ok = not hot.tensor_scale and scale == hot.scale and hot.guard(x, weight)
            else:
                ok = hot.tensor_scale and hot.guard(x, weight, scale)
            if ok:
                out = hot.launch(x, weight, scale)
                if out is not None:
                    return out
    try:  # torch tensors: their signature key (numpy has no .stride() / .data_ptr())
        key = _key(x, weight, eps, residual, offset, scale)
    except (AttributeError, TypeError):
        key = None
    if key is not None:
        # Lookup 2: a signature seen before, straight to its launch.
        fast = FAST.entries.get(key)
        if fast is not None:
            if fast.hot is not None:
                FAST.hot = fast.hot  # this signature is the one to guard for now
            return fast(x, weight, residual, scale)
    frame = Frame(x, "rms_norm_quant")
    y, sc, fast = _general(frame, x, weight, eps, residual, _offset(offset), scale)
    if fast is not None and key is not None:
        FAST.add(key, fast)
        if fast.hot is not None:
            FAST.hot = fast.hot
    return y, sc


def _general(frame, x, weight, eps, residual, offset, scale):
    if frame.kind == "device":
        raise LaunchError("rms_norm_quant takes numpy arrays or torch tensors (its output "
                          "is float8_e4m3fn, which other array libraries may not have)",
                          user_location())
    if frame.kind == "torch" and not hasattr(frame.torch, "float8_e4m3fn"):
        raise LaunchError("rms_norm_quant needs a torch with torch.float8_e4m3fn (2.1+)",
                          user_location())
    n = int(x.shape[-1]) if x.ndim else 0
    dt, wdt = _check(x, weight, n, frame)
    eps = float(eps)
    if not (eps >= 0 and math.isfinite(eps)):
        raise LaunchError(f"eps must be finite and >= 0, got {eps}", user_location())
    lead = tuple(x.shape[:-1])
    x2 = frame.rows(x, n)
    m = int(x2.shape[0])
    r2 = None
    if residual is not None:
        if tuple(residual.shape) != tuple(x.shape) or frame.dtype(residual) != dt:
            raise LaunchError("residual must have x's shape and dtype", user_location())
        r2 = frame.rows(residual, n)
        if data_ptr(r2) != data_ptr(residual) and frame.kind != "numpy":
            raise LaunchError("residual is updated in place, so it needs unit inner stride",
                              user_location())
    s_arg = None if scale is None else _static_scale(frame, scale, x)
    y, y2 = _fp8_empty(frame, tuple(x.shape), x)
    y2 = y2.reshape(m, n)
    sc = frame.empty((m,), x, f32) if scale is None else None
    out_scale = sc.reshape(lead + (1,)) if scale is None else scale
    if m == 0:
        return y, out_scale, None
    vec = vec_for(n, dt, weight, wdt, x2, r2)
    k = quant_kernel(n, dt, wdt, vec, r2 is not None, scale is None, eps, offset,
                     frame.arch(x))
    args = [x2] + ([r2] if r2 is not None else []) + [weight] + \
        ([s_arg] if s_arg is not None else []) + [y2] + \
        ([r2] if r2 is not None else []) + ([sc] if sc is not None else [])
    frame.run(k, *args)
    if r2 is not None and frame.kind == "numpy" and r2 is not residual:
        residual[...] = r2.reshape(residual.shape)
    fast = None
    if frame.cuda_torch and (x2 is x or x.is_contiguous()) and (
            residual is None or r2 is residual):
        fast = _fast(frame.torch, k, args, x, weight, eps, offset, scale, s_arg)
    return y, out_scale, fast


def _fp8_empty(frame, shape, like):
    """``(y, bytes)``: a new float8_e4m3fn array of this framework and a uint8 view of
    its bytes for the kernel."""
    if frame.kind == "torch":
        t = frame.torch
        y = t.empty(shape, dtype=t.float8_e4m3fn, device=like.device)
        return y, y.view(t.uint8)
    try:
        import ml_dtypes
    except ImportError:
        raise LaunchError("rms_norm_quant on numpy arrays needs ml_dtypes (numpy has no "
                          "float8_e4m3fn): pip install ml_dtypes", user_location()) from None
    b = np.empty(shape, np.uint8)
    return b.view(ml_dtypes.float8_e4m3fn), b


def _is_array(a) -> bool:
    return a is not None and not isinstance(a, (int, float, np.floating, np.integer))


def _static_scale(frame, scale, x):
    """The static scale as the one-element f32 array the kernel reads."""
    if not _is_array(scale):
        s = float(scale)
        if not (s > 0 and math.isfinite(s) and np.float32(s) > 0):
            raise LaunchError(f"a static scale must be a positive finite float32, got {scale!r}",
                              user_location())
        return _scalar_array(frame, s, x)
    if frame.kind == "torch":
        t = frame.torch
        ok = isinstance(scale, t.Tensor) and scale.device == x.device
    else:
        ok = isinstance(scale, np.ndarray)
    if not ok:
        raise LaunchError(f"scale must be a number or a one-element float32 array of x's "
                          f"framework and device, got {type(scale).__name__}"
                          + (f" on {scale.device}" if hasattr(scale, "device") else ""),
                          user_location())
    size = int(np.prod(tuple(scale.shape)))
    if size != 1 or dtype_of(scale) != f32:
        raise LaunchError(f"a scale array must hold one float32, got shape "
                          f"{tuple(scale.shape)} {scale.dtype}", user_location())
    return scale.reshape(1)


# Static scales given as numbers, as one-element device tensors: per (device, value),
# bounded (a model has a few per layer). Made once, read by every launch.
_SCALARS: dict = {}
_SCALARS_LOCK = threading.Lock()
SCALARS_LIMIT = 4096


def _scalar_array(frame, s: float, x):
    if frame.kind == "numpy":
        return np.array([s], np.float32)
    t = frame.torch
    if frame.cpu:
        return t.tensor([s], dtype=t.float32)
    key = (x.device, s)
    a = _SCALARS.get(key)
    if a is None:
        with _SCALARS_LOCK:
            if len(_SCALARS) >= SCALARS_LIMIT:
                _SCALARS.pop(next(iter(_SCALARS)))
            a = _SCALARS[key] = t.full((1,), s, dtype=t.float32, device=x.device)
    return a


# ---------------------------------------------------------------- repeated torch calls
class Hot:
    """The last residual-free torch call's launch, found by torch's C++ tensor guard of
    (x, weight) or, for a static scale tensor, (x, weight, scale) (see ``fast.Hot``:
    what the guard does not see, the pointers' alignment, ``launch`` checks: it returns
    None where it differs). ``scale``: the static number (None: dynamic)."""

    __slots__ = ("guard", "eps", "offset", "scale", "tensor_scale", "launch")

    def __init__(self, guard, eps, offset, scale, tensor_scale, launch):
        self.guard, self.eps, self.offset, self.scale = guard, eps, offset, scale
        self.tensor_scale, self.launch = tensor_scale, launch


NO_HOT = Hot(torch_private.never, None, None, None, False, None)
FAST = Signatures(hot=NO_HOT)


def _key(x, weight, eps, residual, offset, scale) -> tuple:
    """The signature key of a torch call (raises AttributeError/TypeError for numpy);
    a static scale number is part of it (its device tensor is bound in the closure), a
    scale tensor by its dtype, shape, strides and device (its pointer is read per call)."""
    ptrs = x.data_ptr() | weight.data_ptr()
    if residual is not None:
        ptrs |= residual.data_ptr()
    if _is_array(scale):
        scale = ("tensor", scale.dtype, scale.shape, scale.stride(), scale.get_device())
    return (x.shape, x.stride(), x.dtype, weight.dtype, weight.stride(), x.get_device(), eps,
            offset, None if residual is None else residual.stride(), scale, ptrs & 15)


def _fast(torch, k, args, x, weight, eps, offset, scale, s_arg):
    """The per-signature closure ``run(x, weight, residual, scale)``: allocate y (and the
    dynamic scales) and launch, nothing else; ``run.hot``: its :class:`Hot` (None with a
    residual). ``s_arg``: the static scale's device scalar (None: dynamic): bound for
    every call for a number, read from the call's own tensor for a tensor."""
    bound = prepare(k).bind(*args)
    if bound is None:
        return None
    shape, device = tuple(x.shape), x.device
    lead = shape[:-1] + (1,)
    fp8, f32t, empty = torch.float8_e4m3fn, torch.float32, torch.empty
    hooks, dev = torch_private.hooks(torch), x.get_device()
    cur_dev = hooks.current_device
    # Outputs from the launcher's allocator (no argument parsing or dispatch), which
    # allocates on torch's current device: used only when that is x's.
    alloc_y = hooks.allocator(shape, _contiguous(shape), fp8, dev)
    alloc_s = hooks.allocator(lead, _contiguous(lead), f32t, dev)
    dynamic, tensor_scale = scale is None, _is_array(scale)
    fixed = None if dynamic or tensor_scale else s_arg.data_ptr()

    def outputs():
        if cur_dev() == dev:
            return alloc_y(), (alloc_s() if dynamic else None)
        return (empty(shape, dtype=fp8, device=device),
                empty(lead, dtype=f32t, device=device) if dynamic else None)

    def run(x, weight, residual, scale_in):
        y, sc = outputs()
        ptrs = [x.data_ptr()]
        if residual is not None:
            rp = residual.data_ptr()
            ptrs.append(rp)
        ptrs.append(weight.data_ptr())
        if not dynamic:
            ptrs.append(scale_in.data_ptr() if tensor_scale else fixed)
        ptrs.append(y.data_ptr())  # float8 and its uint8 bytes: one pointer
        if residual is not None:
            ptrs.append(rp)
        if dynamic:
            ptrs.append(sc.data_ptr())
            bound(*ptrs)
            return y, sc
        bound(*ptrs)
        return y, scale_in

    run.keep = s_arg  # a bound device scalar lives as long as the closure
    run.hot = None
    if len(args) == 4:  # no residual: x, weight, (scale,) y, (scales)
        align = (x.data_ptr() | weight.data_ptr()) & 15
        if dynamic:
            def plain(x, weight, scale_in):
                xp, wp = x.data_ptr(), weight.data_ptr()
                if (xp | wp) & 15 != align:
                    return None
                y, sc = outputs()
                bound(xp, wp, y.data_ptr(), sc.data_ptr())
                return y, sc
        else:
            def plain(x, weight, scale_in):
                xp, wp = x.data_ptr(), weight.data_ptr()
                if (xp | wp) & 15 != align:
                    return None
                y, _ = outputs()
                bound(xp, wp, scale_in.data_ptr() if tensor_scale else fixed, y.data_ptr())
                return y, scale_in
        guard = hooks.guard((x, weight, scale) if tensor_scale else (x, weight))
        if guard is not torch_private.never:
            run.hot = Hot(guard, eps, offset, None if dynamic or tensor_scale else scale,
                          tensor_scale, plain)
    return run


def _contiguous(shape) -> tuple:
    out, step = [], 1
    for d in reversed(shape):
        out.append(step)
        step *= max(int(d), 1)
    return tuple(reversed(out))


def clear() -> None:
    """Forget every recorded call and cached device scalar."""
    FAST.clear(hot=NO_HOT)
    with _SCALARS_LOCK:
        _SCALARS.clear()
