"""What the interpreter takes and gives back: numpy arrays and torch tensors.

The interpreter computes on numpy. A torch tensor (on any device) is read through
numpy (``tensor.detach().cpu().numpy()``; bf16 as its 16-bit pattern); outputs the
call allocated come back as torch tensors on the device of the first torch
argument when any argument is a torch tensor, as numpy arrays otherwise; outputs
passed in are written in place, whatever their kind. Dtype advice names the fix in
the argument's own framework (``.to(torch.float32)`` for a tensor,
``.astype(np.float32)`` for an array; ``.astype(ml_dtypes.bfloat16)`` for a bf16 or fp8
tile, whose numpy form is its bits: ml_dtypes arrays or uint16 / uint8 bit patterns).
"""
from __future__ import annotations

import sys

import numpy as np

from ..core.errors import LaunchError, caller_location

__all__ = ["HostArg", "to_numpy", "write_back", "wrap_output"]


def _torch():
    """torch when the caller's process has imported it (never imported here)."""
    return sys.modules.get("torch")


def is_torch(x) -> bool:
    torch = _torch()
    return torch is not None and isinstance(x, torch.Tensor)


class HostArg:
    """One argument as numpy, and what it was."""

    __slots__ = ("original", "array", "framework")

    def __init__(self, original, array: np.ndarray, framework: str):
        self.original = original
        self.array = array
        self.framework = framework


# 8-bit float tiles (held as their bytes) and the dtype name torch / ml_dtypes give them.
_FP8 = {"e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2"}
# Tiles whose numpy form is a bit pattern: the ml_dtypes type that holds their values.
_BITS = {"bf16": "bfloat16", **_FP8}

_TORCH_FOR_NUMPY = {"float32": "float32", "float64": "float64", "float16": "float16",
                    "int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64",
                    "uint8": "uint8", "uint16": "uint16", "uint32": "uint32",
                    "uint64": "uint64", "bool": "bool"}


def _torch_dtype_for(tile) -> str:
    if tile.dtype.name == "bf16":
        return "bfloat16"
    return _TORCH_FOR_NUMPY.get(tile.dtype.np_dtype.name, tile.dtype.np_dtype.name)


def to_numpy(x, name: str, tile) -> HostArg:
    """``x`` as a numpy array of ``tile``'s dtype; a LaunchError with advice when it is not."""
    want = tile.dtype.np_dtype
    if is_torch(x):
        torch = _torch()
        t = x.detach()
        if t.dtype == torch.bfloat16 and tile.dtype.name == "bf16":
            a = t.cpu().view(torch.int16).numpy().view(np.uint16)
        elif tile.dtype.name in _FP8 and str(t.dtype) == f"torch.{_FP8[tile.dtype.name]}":
            a = t.cpu().view(torch.uint8).numpy()
        else:
            if t.dtype == torch.bfloat16 or str(t.dtype).replace("torch.", "") != \
                    _torch_dtype_for(tile):
                raise LaunchError(f"argument {name} must be torch.{_torch_dtype_for(tile)} for "
                                  f"{tile}, got {t.dtype}; convert it with "
                                  f".to(torch.{_torch_dtype_for(tile)})", caller_location())
            a = t.cpu().numpy()
        return HostArg(x, a, "torch")
    if not hasattr(x, "dtype") or not hasattr(x, "shape"):
        raise LaunchError(f"argument {name} must be a numpy array or a torch tensor for "
                          f"{tile}, got {type(x).__name__}", caller_location())
    a = np.asarray(x)
    bits = _BITS.get(tile.dtype.name)
    if bits is not None and a.dtype.name == bits:   # ml_dtypes' bfloat16 / float8: its bits
        a = a.view(want)
    if a.dtype != want:
        if bits is not None:
            # uint8 / uint16 are taken as the bit patterns; .astype(np.uint16) would convert
            # the values, so the advice names the ml_dtypes type (or a view of its bits).
            fix = (f"pass an ml_dtypes.{bits} array (x.astype(ml_dtypes.{bits})) or its bit "
                   f"pattern (.view(np.{want.name}) of such an array)")
        else:
            fix = f"convert it with .astype(np.{want})"
        raise LaunchError(f"argument {name} must be {want.name if bits is None else bits} "
                          f"for {tile}, got {a.dtype}; {fix}", caller_location())
    return HostArg(x, a, "numpy")


def write_back(given, result: np.ndarray) -> None:
    """Copy an output's final contents into the array or tensor the caller passed."""
    if is_torch(given):
        torch = _torch()
        src = torch.from_numpy(np.ascontiguousarray(result))
        if given.dtype == torch.bfloat16:
            src = src.view(torch.int16).view(torch.bfloat16) if src.dtype != torch.bfloat16 \
                else src
        with torch.no_grad():
            given.copy_(src.reshape(given.shape))
        return
    # an ml_dtypes array takes the bits, never the bit pattern's integer values
    target = given.view(result.dtype) if given.dtype.name in _BITS.values() else given
    target[...] = result


def wrap_output(result: np.ndarray, tile, like) -> object:
    """An output the call allocated: numpy, or a torch tensor on ``like``'s device."""
    if like is None:
        return result
    torch = _torch()
    t = torch.from_numpy(np.ascontiguousarray(result))
    if tile.dtype.name == "bf16":
        t = t.view(torch.int16).view(torch.bfloat16)
    return t.to(like.device) if like.device.type != "cpu" else t
