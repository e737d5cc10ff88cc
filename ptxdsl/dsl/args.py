"""The handle a kernel body receives for each of its Tiles: ``X.shape``,
``X.row_stride`` and ``X.tma_desc()`` record the parameter loads they need."""
from __future__ import annotations

from dataclasses import dataclass

from ..core import ir
from ..core.errors import TraceError, user_location
from ..core.specs import Tile
from ..core.trace import current
from ..core.types import PtxType, b8, u64
from .operands import dim

__all__ = ["TensorArg"]


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
        return tuple(d if isinstance(d, int) else dim(d) for d in self.tile.dims)

    @property
    def row_stride(self):
        """Elements between consecutive rows: ``ld.param.u32`` of the stride param if
        the Tile names one, else the (int or register) size of the last dim times
        the inner dims."""
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

    def tma_desc(self):
        """The generic address of this tensor's tensor map, for TMA instructions
        (``[desc, {c0, c1}]``): a ``.u64`` register.

        The first call adds the kernel parameter ``.param .align 64 .b8 <name>_tmap[128]``
        (a grid constant the runtime fills with the map encoded from the Tile's ``tma=``
        and the argument's shape, strides and address) and records, at kernel entry,
        ``mov.b64 %rd, <name>_tmap`` and ``cvta.param.u64 %rd', %rd``; later calls return
        the same register.
        """
        b = current(f"{self.name}.tma_desc()")
        key = ("tma_desc", self.name)
        hit = b.cache.get(key)
        if hit is not None:
            return hit
        if self.tile.tma is None:
            raise TraceError(f"{self.name}.tma_desc(): its {self.tile!r} has no TMA settings; "
                             f"declare them on the Tile, e.g. Tile(..., tma=TMA(box=(64, 64), "
                             f"swizzle=128))", user_location())
        p = ir.Param(f"{self.name}_tmap", b8, "tmap", self.name, count=128, align=64,
                     tma=self.tile.tma)
        b.params.append(p)
        raw, gen = b.new_reg(u64), b.new_reg(u64)
        loc = user_location()
        b.prologue.append(b.build(["mov", "b64"], (raw, ir.Symbol(p.name, "param")), loc=loc,
                                  comment=f"tensor map of {self.name}"))
        b.prologue.append(b.build(["cvta", "param", "u64"], (gen, raw), loc=loc))
        b.cache[key] = gen
        return gen

    def __repr__(self) -> str:
        return f"<{'output' if self.is_output else 'input'} {self.name}: {self.tile}>"


class TensorSpec:
    """pyptx's placeholder for a positional parameter of a kernel declared without
    ``in_specs``/``out_specs``: it carries the parameter's name (``shape``, ``dtype`` and
    ``layout`` are pyptx's fields, ``None`` unless given) and no kernel parameter or
    pointer. ``k.ptx()`` traces such a body; launching it needs Tiles
    (``@kernel(in_specs=(Tile(...),), ...)``)."""

    __slots__ = ("name", "shape", "dtype", "layout")

    def __init__(self, name: str, shape=None, dtype=None, layout=None):
        self.name = name
        self.shape = shape
        self.dtype = dtype
        self.layout = layout

    def __repr__(self) -> str:
        return f"TensorSpec({self.name!r})"
