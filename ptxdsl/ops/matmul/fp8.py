"""What an 8-bit float product needs beyond a 16-bit one: its dtypes, its scales, its layout.

``matmul(a, b, scale_a=..., scale_b=...)`` with ``float8_e4m3fn`` / ``float8_e5m2``
operands (any mix, as wgmma takes them) computes ``act(scale_a * scale_b * (a @ b) +
bias)`` with f32 accumulation, as ``torch._scaled_mm`` does with per-tensor scales:

* the scales are per tensor: None (1), a Python number, or a one-element float32 array
  of the call's framework and device (what quantisation code keeps on the GPU; a number
  becomes such an array per call, so repeated calls should pass arrays);
* the output is bf16 unless ``out_dtype`` says f16 or f32 (8-bit outputs are not made);
* the Hopper kernel reads both operands K-major (wgmma has no transposed form for 8-bit
  types): ``a`` row-major (M, K) and ``b`` column-major (K, N), i.e. ``w.T`` of a row-major
  (N, K) weight. Other layouts are copied once into that form (:func:`k_major`); the SIMT
  kernel (the interpreter, and rows TMA cannot describe: K not a multiple of 16) reads
  any layout in place.
"""
from __future__ import annotations

from ...core.types import PtxType, e4m3, e5m2, f32

FP8 = {"float8_e4m3fn": e4m3, "float8_e5m2": e5m2}


def dtype_of(a) -> PtxType | None:
    """e4m3 / e5m2 for a torch or ml_dtypes float8 array, else None."""
    return FP8.get(str(a.dtype).replace("torch.", ""))


def scale_key(scale_a, scale_b) -> tuple:
    """The fast path's key part for the scales (TypeError for a Python number: such a
    call makes its scale array anew and is never recorded)."""
    def one(s):
        if s is None:
            return None
        return (s.shape, s.dtype, s.device, s.data_ptr() & 3)
    return one(scale_a), one(scale_b)


def scale_args(frame, scale_a, scale_b, like, error) -> list:
    """The two one-element float32 arrays the kernels read (see the module docstring)."""
    return [_one(frame, s, like, name, error)
            for s, name in ((scale_a, "scale_a"), (scale_b, "scale_b"))]


def _one(frame, s, like, name, error):
    from ...runtime.adapter import kind_of
    if s is None or isinstance(s, (int, float)):
        v = 1.0 if s is None else float(s)
        if v != v or v in (float("inf"), float("-inf")):
            raise error(f"{name} must be finite, got {v}")
        arr = frame.empty((1,), like, f32)
        arr[...] = v
        return arr
    if not hasattr(s, "dtype") or kind_of(s, "matmul") != frame.kind:
        raise error(f"{name} must be a number or a one-element float32 array of the same "
                    f"kind as a ({frame.kind}), got {type(s).__name__}")
    dt = str(getattr(s, "dtype", "")).replace("torch.", "")
    size = 1
    for d in getattr(s, "shape", ()):
        size *= int(d)
    if dt != "float32" or size != 1:
        raise error(f"{name} must be a number or a one-element float32 array (a per-tensor "
                    f"scale), got {dt} of shape {tuple(getattr(s, 'shape', ()))}")
    if frame.kind == "torch" and s.device != like.device:
        raise error(f"{name} is on {s.device}, the operands on {like.device}")
    return s.reshape(1)


def k_major(frame, a, b, a_k, a_t: bool, b_k, b_t: bool):
    """The arrays 8-bit wgmma reads for the logical operands ``a`` (M, K) and ``b`` (K, N),
    given what :func:`.api._layout` chose (``a_k``, ``b_k`` and whether each is the
    operand's transpose): A as (M, K) and B as (N, K), both row-major; an operand in the
    other major is copied once. Returns ``(a_k, a_t, b_k, b_t, copied)``."""
    copied = False
    if a_t:
        a_k, a_t, copied = frame.contiguous(a), False, True
    if not b_t:
        b_k, b_t, copied = frame.contiguous(b.T), True, True
    return a_k, a_t, b_k, b_t, copied


__all__ = ["FP8", "dtype_of", "scale_key", "scale_args", "k_major"]
