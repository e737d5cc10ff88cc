"""How a call's arguments bind to a kernel: one array per Tile, the named dims their
shapes give, the row strides of strided Tiles (and the flat extent such an array
spans), and the tensor map of each ``X.tma_desc()`` argument."""
from __future__ import annotations

import numpy as np

from ..core.errors import LaunchError, user_location
from ..core.tensormap import TensorMapError
from .hostio import to_numpy
from .memory import GLOBAL_BASE


def as_array(x, name: str, tile) -> np.ndarray:
    """Argument ``x`` as a numpy array, with as many dimensions as ``tile``."""
    h = to_numpy(x, name, tile)
    a = h.array
    if a.ndim != len(tile.dims):
        raise LaunchError(f"argument {name} must have {len(tile.dims)} dimensions for {tile}, "
                          f"got shape {a.shape}", user_location())
    return a


def bind_dims(kernel, arrays: dict, given: dict) -> dict:
    """The named dims: from the arrays' shapes and the keywords ``given``, which must agree."""
    dims = dict(given)
    for name, (arr, tile) in arrays.items():
        for axis, (d, n) in enumerate(zip(tile.dims, arr.shape)):
            if isinstance(d, int):
                if d != n:
                    raise LaunchError(f"argument {name} has shape {arr.shape} but {tile} needs "
                                      f"{d} along axis {axis}", user_location())
            elif d in dims and dims[d] != n:
                raise LaunchError(f"dim {d} is {dims[d]} elsewhere but argument {name} has "
                                  f"{n} along axis {axis} (shape {arr.shape})", user_location())
            else:
                dims[d] = n
    missing = [d for d in kernel.dim_names if d not in dims]
    if missing:
        raise LaunchError(f"dims {', '.join(missing)} appear only in outputs; pass them by "
                          f"keyword, e.g. {missing[0]}=...", user_location())
    for d, v in dims.items():
        if isinstance(v, bool) or not (isinstance(v, (int, np.integer)) and 0 <= v < 2 ** 32):
            raise LaunchError(f"dim {d} must be a 32-bit int >= 0, got {v!r}", user_location())
    return dims


def row_elements(a: np.ndarray) -> int:
    """Elements of one row (everything after the first axis)."""
    n = 1
    for d in a.shape[1:]:
        n *= d
    return n


def bind_strides(arrays: dict) -> dict:
    """Row strides (elements) of the arrays whose Tile names one; shared names must agree."""
    out: dict = {}
    for name, (a, tile) in arrays.items():
        if tile.stride is None:
            continue
        inner = row_elements(a)
        if a.shape[0] > 1 and a.ndim >= 2 and (
                np.ascontiguousarray(a[0]).strides != a[0].strides
                or a.strides[0] % a.itemsize or a.strides[0] < inner * a.itemsize):
            raise LaunchError(f"argument {name}: rows may be strided but each row must be "
                              f"contiguous (strides {a.strides})", user_location())
        s = a.strides[0] // a.itemsize if a.shape[0] > 1 else inner
        if out.get(tile.stride, s) != s:
            raise LaunchError(f"arguments sharing stride {tile.stride!r} disagree: {name} has "
                              f"{s}, another has {out[tile.stride]}", user_location())
        out[tile.stride] = s
    return out


def strided_extent(a: np.ndarray, stride: int) -> np.ndarray:
    """The bytes a strided (M, ...) array spans, as the GPU would see them, flattened."""
    m, inner = a.shape[0], row_elements(a)
    flat = np.zeros((m - 1) * stride + inner if m else 0, a.dtype)
    for r in range(m):
        flat[r * stride:r * stride + inner] = a[r].reshape(-1)
    return flat


def tensor_maps(prog, names, specs, tensors, dims, strides) -> dict:
    """The tensor map of each ``X.tma_desc()`` argument, as the runtime would encode it
    from the argument's shape and (row) strides; the address is filled in later."""
    out = {}
    tiles = dict(zip(names, specs))
    for p in prog.params:
        if p.kind != "tmap" or p.tensor not in tiles:
            continue
        tile = tiles[p.tensor]
        shape = tuple(int(d) for d in tile.shape_for(dims))
        el = None
        if tile.stride is not None:
            el = [0] * len(shape)
            acc = 1
            for ax in range(len(shape) - 1, 0, -1):
                el[ax] = acc
                acc *= shape[ax]
            el[0] = strides[tile.stride]
        try:
            out[p.tensor] = p.tma.spec_for(tile.dtype, shape, el, dims=dims,
                                           address=GLOBAL_BASE)
        except TensorMapError as exc:
            raise LaunchError(f"the tensor map of {p.tensor} (shape {shape}): {exc.message}",
                              user_location()) from None
    return out
