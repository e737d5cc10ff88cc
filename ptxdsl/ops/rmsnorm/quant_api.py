"""``ptxdsl.ops.rms_norm_quant``: RMSNorm with FP8 (e4m3) output and its scale.

What inference servers run before an FP8 GEMM (vLLM's
``rms_norm_dynamic_per_token_quant`` and ``fused_add_rms_norm_static_fp8_quant``), in
one kernel (:mod:`.quant`) that reads each row once. numpy arrays get an
``ml_dtypes.float8_e4m3fn`` array (on the GPU when one is present, else on the CPU
interpreter); torch tensors a ``torch.float8_e4m3fn`` tensor (CUDA tensors on the GPU,
CPU tensors on the interpreter). Repeated torch CUDA calls of one signature launch
through the runtime's memo (:data:`QUANT`), as ``rms_norm``'s do.
"""
from __future__ import annotations

import math
import threading

import numpy as np

from ...core.errors import LaunchError, user_location
from ...core.types import f32
from ...runtime.adapter import Frame, address as data_ptr, dtype_of
from ...runtime.memo import Launch, Memo, Recording, output, tensor, value
from .._common.torch_registry import TORCH_OPS
from .checks import check_arrays, check_like, eps_value, offset_value
from .plan import quant_kernel, vec_for
from .quant import FP8_MAX, MIN_SCALE

__all__ = ["QUANT", "clear", "rms_norm_quant", "FP8_MAX", "MIN_SCALE"]


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
    # A repeat torch call: a scale tensor takes a tensor slot, a number (or None) a value
    if scale is None or type(scale) is float or not _is_array(scale):
        got = QUANT.hot(x, weight, residual, None, eps, offset, scale)
        if got is None:
            got = QUANT.lookup(x, weight, residual, None, eps, offset, scale)
    else:
        got = QUANT.hot(x, weight, residual, scale, eps, offset, None)
        if got is None:
            got = QUANT.lookup(x, weight, residual, scale, eps, offset, None)
    if got is not None:
        return got
    frame = Frame(x, "rms_norm_quant", "x")
    if frame.kind == "torch":
        TORCH_OPS.ensure()
    y, sc, rec = _general(frame, x, weight, eps, residual, offset_value(offset), scale)
    if rec is not None:
        tensor_scale = _is_array(scale)
        QUANT.record((x, weight, residual, scale if tensor_scale else None, eps, offset,
                      None if tensor_scale else scale), rec)
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
    dt, wdt = check_arrays(x, weight, n, frame)
    eps = eps_value(eps, "rms_norm_quant")
    lead = tuple(x.shape[:-1])
    x2 = frame.rows(x, n)
    m = int(x2.shape[0])
    r2 = None
    if residual is not None:
        check_like(frame, residual, "residual", x, dt)
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
    rec = None
    # A repeat call launches on the caller's own pointers: recorded only where the
    # (M, N) views the kernel saw are views of them, not copies.
    if frame.cuda_torch and (x2 is x or x.is_contiguous()) and (
            residual is None or r2 is residual):
        res = [tensor(2)] if r2 is not None else []
        if scale is None:
            s_ = []
            out_s = output(1)
        elif _is_array(scale):       # read from the call's own tensor
            s_ = [tensor(3)]
            out_s = tensor(3)
        else:                        # the number's device scalar, bound for every call
            s_ = [s_arg.data_ptr()]
            out_s = value(2)
        order = [tensor(0), *res, tensor(1), *s_, output(0), *res] + (
            [output(1)] if scale is None else [])
        outputs = (y,) + ((out_scale,) if scale is None else ())
        rec = Recording((Launch(k, tuple(args), tuple(order)),), outputs, (output(0), out_s),
                        keep=(s_arg,))
    return y, out_scale, rec


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


# Repeat torch calls: (x, weight, residual, scale tensor; eps, offset, scale number or None)
QUANT = Memo("rms_norm_quant", 4, 3)


def clear() -> None:
    """Forget every recorded call and cached device scalar."""
    QUANT.clear()
    with _SCALARS_LOCK:
        _SCALARS.clear()
