"""Tensor specs (``Tile``) and the handles a kernel body receives for its arguments."""
from __future__ import annotations

from dataclasses import dataclass

from .errors import TraceError, user_location
from .types import PtxType


class Tile:
    """The shape and element type of one kernel argument: ``Tile(B, N, f32)``.

    A dimension is a Python int (baked into the PTX) or a name such as
    ``"B"``: a named dim becomes a ``.u32`` kernel parameter, read in the body
    with ``X.shape[0]`` / ``ptx.dim("B")``, and one compiled module serves
    every value of it.
    """

    def __init__(self, *dims_and_dtype, stride: str | None = None):
        if not dims_and_dtype or not isinstance(dims_and_dtype[-1], PtxType):
            raise TraceError("Tile takes its dims then a dtype, e.g. Tile(B, N, f32)",
                             user_location())
        *dims, dtype = dims_and_dtype
        for d in dims:
            if isinstance(d, bool) or not (isinstance(d, str) and d.isidentifier()
                                           or isinstance(d, int) and d > 0):
                raise TraceError(f"Tile dims must be positive ints or names, got {d!r}",
                                 user_location())
        if stride is not None and (not isinstance(stride, str) or not stride.isidentifier()
                                   or len(dims) < 2):
            raise TraceError("Tile(..., stride='name') names the run-time row stride (in "
                             "elements) of a tensor with at least 2 dims", user_location())
        self.dims: tuple = tuple(dims)
        self.dtype: PtxType = dtype
        # A named leading-dim stride: rows may be a slice of a wider tensor. The
        # innermost dim stays contiguous; the stride becomes a .u32 parameter.
        self.stride: str | None = stride

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(d for d in self.dims if isinstance(d, str))

    @property
    def is_static(self) -> bool:
        return not self.names

    def shape_for(self, values: dict[str, int]) -> tuple[int, ...]:
        return tuple(values[d] if isinstance(d, str) else d for d in self.dims)

    def __repr__(self) -> str:
        extra = f", stride={self.stride!r}" if self.stride else ""
        return f"Tile({', '.join(map(repr, self.dims))}, {self.dtype.name}{extra})"

    def __eq__(self, other) -> bool:
        return isinstance(other, Tile) and (self.dims, self.dtype, self.stride) == (
            other.dims, other.dtype, other.stride)

    def __hash__(self) -> int:
        return hash((self.dims, self.dtype, self.stride))


@dataclass(frozen=True)
class TensorArg:
    """What a kernel body gets for each Tile: its pointer param and its spec."""

    name: str
    tile: Tile
    param: object  # ir.Param of kind "ptr"
    is_output: bool

    @property
    def dtype(self) -> PtxType:
        return self.tile.dtype

    @property
    def shape(self) -> tuple:
        """Ints for concrete dims, registers (``ld.param.u32``) for named ones."""
        from .ptx import dim
        return tuple(d if isinstance(d, int) else dim(d) for d in self.tile.dims)

    @property
    def row_stride(self):
        """Elements between consecutive rows: ``ld.param.u32`` of the stride param if
        the Tile names one, else the (int or register) size of the last dim times
        the inner dims."""
        from .ptx import dim
        if self.tile.stride is not None:
            return dim(self.tile.stride, kind="stride")
        inner = 1
        for d in self.tile.dims[1:]:
            if not isinstance(d, int):
                raise TraceError("row_stride of a Tile with named inner dims needs "
                                 "Tile(..., stride='name')", user_location())
            inner *= d
        return inner

    @property
    def ndim(self) -> int:
        return len(self.tile.dims)

    def __repr__(self) -> str:
        return f"<{'output' if self.is_output else 'input'} {self.name}: {self.tile}>"
