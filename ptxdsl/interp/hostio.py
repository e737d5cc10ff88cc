"""What the interpreter takes and gives back: numpy arrays and torch tensors.

The interpreter computes on numpy. A torch tensor (on any device) is read through
numpy (``tensor.detach().cpu().numpy()``; bf16 as its 16-bit pattern); outputs the
call allocated come back as torch tensors on the device of the first torch
argument when any argument is a torch tensor, as numpy arrays otherwise; outputs
passed in are written in place, whatever their kind. Dtype advice names the fix in
the argument's own framework (``.to(torch.float32)`` for a tensor,
``.astype(np.float32)`` for an array).
"""
from __future__ import annotations

import sys

import numpy as np

from ..core.errors import LaunchError

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
                                  f".to(torch.{_torch_dtype_for(tile)})")
            a = t.cpu().numpy()
        return HostArg(x, a, "torch")
    a = np.asarray(x)
    if tile.dtype.name == "bf16" and a.dtype.name == "bfloat16":
        a = a.view(np.uint16)
    if a.dtype.name == _FP8.get(tile.dtype.name):   # ml_dtypes' float8: its bytes
        a = a.view(np.uint8)
    if a.dtype != want:
        hint = " (bf16 data is passed as uint16 bit patterns)" if tile.dtype.name == "bf16" else ""
        raise LaunchError(f"argument {name} must be {want} for {tile}, got {a.dtype}{hint}; "
                          f"convert it with .astype(np.{want})")
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
    target = given.view(np.uint16) if given.dtype.name == "bfloat16" else given
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
