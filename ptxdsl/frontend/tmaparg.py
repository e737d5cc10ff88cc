"""Tensor-map arguments of imported kernels.

A PTX signature declares a tensor map as 128 bytes (``.param .align 64 .b8 tmap[128]``);
the caller passes ``(array, ptxdsl.TMA(box=..., swizzle=...))`` or ``(array, box)``: the
array the map describes (its dtype, shape and strides) and how TMA moves it. The
interpreter places the array in global memory with the map's description
(:func:`tensor_map_of`); the GPU call encodes the map with ``cuTensorMapEncodeTiled``
at the array's device address.
"""
from __future__ import annotations

import numpy as np

from ..core.errors import LaunchError, user_location
from ..core.tensormap import TMA, TensorMapSpec
from ..core.types import from_numpy


def is_tensor_map_arg(a) -> bool:
    return (isinstance(a, tuple) and len(a) == 2 and hasattr(a[0], "shape")
            and isinstance(a[1], (TMA, tuple, list)))


def tensor_map_of(a, where: str) -> tuple[object, TensorMapSpec]:
    """(the array, its map's spec at address 0) of a ``(array, TMA or box)`` argument."""
    array, how = a
    tma = how if isinstance(how, TMA) else TMA(box=tuple(how))
    dtype = getattr(array, "dtype", None)
    try:
        t = from_numpy(np.dtype(str(dtype).replace("torch.", "")))
    except (TypeError, ValueError):
        raise LaunchError(f"{where}: a tensor map of {dtype} elements has no PTX type; pass "
                          f"a float32/float16/integer array (bf16 as its uint16 bits)",
                          user_location()) from None
    shape = tuple(int(d) for d in array.shape)
    strides = None
    if isinstance(array, np.ndarray):
        strides = tuple(s // array.itemsize for s in array.strides)
    elif hasattr(array, "stride"):
        strides = tuple(int(s) for s in array.stride())
    if len(tma.box) != len(shape):
        raise LaunchError(f"{where}: the box {tma.box} has {len(tma.box)} entries for a "
                          f"{len(shape)}-d array (one per dim, outermost first)",
                          user_location())
    spec = tma.spec_for(t, shape, strides)
    spec.validate()
    return array, spec
