"""Tensor specs: ``Tile`` (shape, element type, TMA settings of a kernel argument) and
pyptx's ``Layout`` tags. The handle a kernel body receives for each Tile is
:class:`ptxdsl.dsl.args.TensorArg`."""
from __future__ import annotations

import enum

from .errors import TraceError, user_location
from .tensormap import TMA
from .types import PtxType


class Layout(enum.Enum):
    """pyptx's layout tags for a Tile (``Tile("M", "K", bf16, Layout.TMA_128B)``).

    ptxdsl Tiles are row-major; a ``TMA_*`` tag means "read through TMA with this
    shared-memory swizzle" (ptxdsl spells it ``tma=TMA(box=..., swizzle=128)``).
    ``COL`` and ``INTERLEAVED`` are accepted for spelling compatibility only where no
    kernel depends on them: a Tile tagged with them is refused.
    """

    ROW = "row"
    COL = "col"
    TMA_128B = "tma_128b"
    TMA_64B = "tma_64b"
    TMA_32B = "tma_32b"
    INTERLEAVED = "interleaved"

    @property
    def swizzle(self) -> int:
        return {"tma_128b": 128, "tma_64b": 64, "tma_32b": 32}.get(self.value, 0)


class Tile:
    """The shape and element type of one kernel argument: ``Tile(B, N, f32)``.

    A dimension is a Python int (baked into the PTX) or a name such as
    ``"B"``: a named dim becomes a ``.u32`` kernel parameter, read in the body
    with ``X.shape[0]`` / ``ptx.dim("B")``, and one compiled module serves
    every value of it.

    ``tma=TMA(box=..., swizzle=...)`` says the kernel moves this tensor through the
    tensor memory accelerator: ``X.tma_desc()`` in the body names its tensor map, which
    the runtime encodes for every call (see :mod:`ptxdsl.core.tensormap`). pyptx's spelling
    is accepted too: a :class:`Layout` after the dtype and ``tma_box=``, ``tma_rank=``,
    ``tma_padding=`` keywords (``Tile("M", "K", bf16, Layout.TMA_128B, tma_box=(128,
    64), tma_rank=3)`` is ``tma=TMA(box=(128, 64), swizzle=128, split=64)``).
    """

    def __init__(self, *dims_and_dtype, stride: str | None = None, tma: TMA | None = None,
                 dtype: PtxType | None = None, layout: Layout | None = None,
                 tma_box: tuple | None = None, tma_rank: int = 2, tma_padding: bool = False):
        args = list(dims_and_dtype)
        if args and isinstance(args[-1], Layout):
            if layout is not None:
                raise TraceError("Tile got two layouts", user_location())
            layout = args.pop()
        if dtype is not None and not (args and isinstance(args[-1], PtxType)):
            args.append(dtype)
        if not args or not isinstance(args[-1], PtxType):
            raise TraceError("Tile takes its dims then a dtype, e.g. Tile(B, N, f32)",
                             user_location())
        *dims, dtype = args
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
        if layout is not None or tma_box is not None or tma_rank != 2 or tma_padding:
            if tma is not None:
                raise TraceError("Tile takes tma=TMA(...) or pyptx's layout/tma_box/tma_rank/"
                                 "tma_padding spelling, not both", user_location())
            tma = _pyptx_tma(dims, dtype, layout or Layout.ROW, tma_box, tma_rank, tma_padding)
        if tma is not None and not isinstance(tma, TMA):
            raise TraceError(f"Tile(..., tma=) takes a ptxdsl.TMA(...), got {tma!r}",
                             user_location())
        # How the kernel moves this tensor through TMA (None: it does not): the runtime
        # encodes a tensor map from it for every call, see ptxdsl.core.tensormap.
        self.tma: TMA | None = tma
        self.layout: Layout = layout or Layout.ROW
        # pyptx's tma_box=, tma_rank=, tma_padding= as given (what self.tma encodes)
        self.tma_box: tuple | None = tuple(tma_box) if tma_box is not None else None
        self.tma_rank: int = tma_rank
        self.tma_padding: bool = bool(tma_padding)

    @property
    def rank(self) -> int:
        """The number of dims."""
        return len(self.dims)

    @property
    def symbolic_dims(self) -> tuple[str, ...]:
        """The named dims, in order (pyptx's name for :attr:`names`)."""
        return self.names

    @classmethod
    def wgmma_a(cls, m, k, dtype: PtxType, *, tile_m=None, tile_k=None) -> "Tile":
        """pyptx's Tile for a wgmma A operand (row-major M x K, K-major) loaded by TMA
        in ``(tile_m, tile_k)`` boxes, swizzled by the width of one box row (16 bytes:
        none; 32/64/128 and wider: that span). Given neither, the box is 128 rows
        (clamped to the tensor) by one swizzle span (``min(k, 128 bytes)``), not the
        whole tensor: ``Tile.wgmma_a(64, 16, bf16)`` gets ``box=(128, 16)``, clamped to
        ``(64, 16)`` when the tensor map is encoded."""
        box = (tile_m if tile_m is not None else m, tile_k if tile_k is not None else k) \
            if tile_m is not None or tile_k is not None else None
        inner = tile_k if tile_k is not None else k
        layout = _wgmma_layout(inner, dtype, "a")
        return cls(m, k, dtype, layout=layout, tma_box=box or _unswizzled_box(layout, inner))

    @classmethod
    def wgmma_b(cls, k, n, dtype: PtxType, *, tile_k=None, tile_n=None) -> "Tile":
        """pyptx's Tile for a wgmma B operand (row-major K x N, N-major): boxes of
        ``(tile_k, tile_n)``, swizzled by the width of one box row; the default box as
        :meth:`wgmma_a`'s (16-byte rows: ``(128, n)``, unswizzled, still through TMA)."""
        box = (tile_k if tile_k is not None else k, tile_n if tile_n is not None else n) \
            if tile_k is not None or tile_n is not None else None
        inner = tile_n if tile_n is not None else n
        layout = _wgmma_layout(inner, dtype, "b")
        return cls(k, n, dtype, layout=layout, tma_box=box or _unswizzled_box(layout, inner))

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
        if self.tma is not None:
            extra += f", tma={self.tma!r}"
        return f"Tile({', '.join(map(repr, self.dims))}, {self.dtype.name}{extra})"

    def __eq__(self, other) -> bool:
        return isinstance(other, Tile) and (self.dims, self.dtype, self.stride, self.tma) == (
            other.dims, other.dtype, other.stride, other.tma)

    def __hash__(self) -> int:
        return hash((self.dims, self.dtype, self.stride, self.tma))


def _pyptx_tma(dims, dtype: PtxType, layout: Layout, box, rank: int,
               padding: bool) -> TMA | None:
    """pyptx's TMA spelling as a :class:`TMA`: rank 2 maps the tensor as it is (a
    missing box: 128 rows by one swizzle span, clamped to the tensor); rank 3 splits the
    inner dim in 64-element blocks, 128-byte swizzle for ``Layout.TMA_128B`` only, and
    ``tma_padding`` widens the inner box by 8 elements (the padded store epilogue)."""
    loc = user_location()
    if not isinstance(layout, Layout):
        raise TraceError(f"Tile layout must be a ptxdsl.specs.Layout, got {layout!r}", loc)
    if layout in (Layout.COL, Layout.INTERLEAVED):
        raise TraceError(f"Tile layout {layout.name} is not supported: ptxdsl Tiles are "
                         f"row-major (pass the transposed tensor as Layout.ROW)", loc)
    if rank not in (2, 3):
        raise TraceError(f"tma_rank={rank!r}: pyptx's spelling has rank 2 (the tensor as it "
                         f"is) or 3 (the inner dim split in 64-element blocks)", loc)
    if padding and rank != 3:
        raise TraceError("tma_padding=True needs tma_rank=3", loc)
    if rank == 3:
        if box is None or len(box) != 2:
            raise TraceError("tma_rank=3 needs tma_box=(rows, cols)", loc)
        return TMA(box=tuple(box), swizzle=128 if layout is Layout.TMA_128B else 0, split=64,
                   pad=8 if padding else 0)
    if box is None:
        if layout is Layout.ROW:
            return None
        span = layout.swizzle
        box = (128,) * (len(dims) - 1) + (max(span // dtype.bytes, 1),)
    elif len(box) != len(dims):
        raise TraceError(f"tma_box {tuple(box)} has {len(box)} entries for {len(dims)} dims",
                         loc)
    return TMA(box=tuple(box), swizzle=layout.swizzle, clamp=True)


def _unswizzled_box(layout: Layout, inner) -> tuple | None:
    """A wgmma operand with 16-byte rows has no swizzle (``Layout.ROW``), yet it is still
    loaded by TMA: its default box, 128 rows (clamped) by the whole row."""
    if layout is Layout.ROW and not isinstance(inner, str):
        return (128, int(inner))
    return None


def _wgmma_layout(inner, dtype: PtxType, operand: str) -> Layout:
    if isinstance(inner, str):
        return Layout.ROW
    row = int(inner) * dtype.bytes
    if row >= 128:
        return Layout.TMA_128B
    try:
        return {16: Layout.ROW, 32: Layout.TMA_32B, 64: Layout.TMA_64B}[row]
    except KeyError:
        raise TraceError(f"Tile.wgmma_{operand}: a box row of {inner} x {dtype.name} is "
                         f"{row} bytes; wgmma operands have rows of 16, 32, 64 or >= 128 "
                         f"bytes", user_location()) from None
