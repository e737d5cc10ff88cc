"""Shared memory: ``smem.alloc(dtype, shape)`` and indexed loads/stores.

``a[i, j]`` records ``ld.shared.T`` into a new register and ``a[i, j] = r``
records ``st.shared.T`` (``.b16``/``.b32`` for half-precision arrays: PTX moves
those as bits). Constant indices fold into the address
(``[smem0+12]``); register indices record the offset arithmetic
(``shl.b32``/``mul.lo.u32`` per index, ``add.u32``) from the array's base
address, which is read once at kernel entry (``mov.u32 %r, smem0``) only if
some access needs it.
"""
from __future__ import annotations

import copy

from ..core import ir
from ..core.errors import TraceError, TraceIndexError, user_location
from .reg import as_reg
from ..core.trace import current
from ..core.types import PtxType, b64, move_type, u32
from .mbarrier import MbarrierArray, MbarrierRef  # noqa: F401  (pyptx's smem.MbarrierRef)
from .wgmma import operand_layout


class SharedArray:
    """A statically sized shared-memory array of one CTA."""

    swizzle = 0  # the swizzle span in bytes of the tile it holds (smem.alloc(swizzle=))

    def __init__(self, decl: ir.SharedDecl, builder):
        self.decl = decl
        self._builder = builder
        self._base: ir.Reg | None = None
        strides, acc = [], 1
        for d in reversed(decl.shape):
            strides.append(acc)
            acc *= d
        self.strides = tuple(reversed(strides))

    @property
    def dtype(self) -> PtxType:
        return self.decl.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return self.decl.shape

    def __repr__(self) -> str:
        return f"SharedArray({self.decl.name}, {self.dtype.name}, {self.shape})"

    @property
    def name(self) -> str:
        """The array's PTX name (``smem0``, ...), as ``reg.from_`` and ``ptx.raw`` take it."""
        return self.decl.name

    byte_offset = 0  # pyptx's offset inside its one dynamic region; each array here is its own

    @property
    def gmma_layout(self):
        """The :class:`~ptxdsl.dsl.wgmma_layout.GmmaLayout` of a ``smem.wgmma_tile``
        (``None`` for a plain array), as pyptx's ``SharedAlloc.gmma_layout``."""
        lay = getattr(self, "layout", None)
        if lay is None:
            return None
        from .wgmma_layout import layout_of
        return layout_of(lay.swizzle, lay.leading, lay.stride)

    @property
    def gmma_major(self) -> str | None:
        """``"K"`` or ``"MN"`` for a ``smem.wgmma_tile``, ``None`` for a plain array."""
        lay = getattr(self, "layout", None)
        return None if lay is None else lay.major

    @property
    def __ptx_symbol__(self) -> str:
        """The variable an instruction names where it takes one (``getctarank``, ``mov``)."""
        return self.decl.name

    def _base_reg(self) -> ir.Reg:
        if self._base is None:
            b = self._builder
            self._base = b.new_reg(u32)
            instr = b.build(["mov", "u32"], (self._base, ir.Symbol(self.decl.name, "shared")),
                            comment=f"base of {self.decl.name}")
            base = self._base
            b.prologue.append(ir.Deferred(lambda used: [instr] if base in used else []))
        return self._base

    @property
    def base(self) -> ir.Reg:
        """The array's shared-memory address in a ``.u32`` register (read once at kernel
        entry), for address arithmetic of one's own, e.g. ``cp.async`` destinations."""
        return self._base_reg()

    def addr(self, *index) -> ir.Addr:
        """The address of element ``index`` (ints fold in; registers record arithmetic)."""
        b = current("shared-array indexing")
        if b is not self._builder:
            raise TraceError(f"{self.decl.name} belongs to kernel '{self._builder.name}'",
                             user_location())
        if len(index) == 1 and isinstance(index[0], tuple):
            index = index[0]
        if len(index) != len(self.shape):
            raise TraceError(f"{self.decl.name} has {len(self.shape)} dimensions {self.shape}, "
                             f"indexed with {len(index)}", user_location())
        const = 0
        terms = []
        for axis, (i, size, stride) in enumerate(zip(index, self.shape, self.strides)):
            scale = stride * self.dtype.bytes
            if isinstance(i, bool):
                raise TraceError("shared-array index is a bool", user_location())
            if isinstance(i, int):
                if not 0 <= i < size:
                    raise TraceIndexError(f"index {i} out of bounds for axis {axis} of "
                                          f"{self.decl.name} with size {size}",
                                          user_location())
                const += i * scale
                continue
            i = as_reg(i)
            if not isinstance(i, ir.Reg) or not i.dtype.is_int or i.dtype.bits != 32:
                raise TraceError(f"shared-array indices are ints or 32-bit integer registers, "
                                 f"got {i!r}", user_location())
            if scale == 1:
                terms.append(i)
            elif scale & (scale - 1) == 0:
                t = b.new_reg(u32)
                b.inst(["shl", "b32"], (t, i, scale.bit_length() - 1))
                terms.append(t)
            else:
                t = b.new_reg(u32)
                b.inst(["mul", "lo", "u32"], (t, i, scale))
                terms.append(t)
        if not terms:
            return ir.Addr(ir.Symbol(self.decl.name, "shared"), const)
        acc = self._base_reg()
        for t in terms:
            s = b.new_reg(u32)
            b.inst(["add", "u32"], (s, acc, t))
            acc = s
        return ir.Addr(acc, const)

    def __ptx_addr__(self) -> ir.Addr:
        return ir.Addr(ir.Symbol(self.decl.name, "shared"), 0)

    def __getitem__(self, index) -> ir.Reg:
        """``ld.shared.T`` of one element into a new register; one index into an array of
        two or more dimensions is a :class:`SharedSlice` (stage ``index``; records
        nothing until used), as pyptx's ``sA[stage]``."""
        if not isinstance(index, tuple) and len(self.shape) > 1:
            return SharedSlice(self, index)
        a = self.addr(*(index if isinstance(index, tuple) else (index,)))
        b = current()
        r = b.new_reg(self.dtype)
        b.inst(["ld", "shared", move_type(self.dtype).name], (r, a))
        return r

    def __setitem__(self, index, value) -> None:
        """``st.shared.T`` of a register (or constant) into one element."""
        a = self.addr(*(index if isinstance(index, tuple) else (index,)))
        current().inst(["st", "shared", move_type(self.dtype).name], (a, as_reg(value)))


class SharedSlice:
    """Stage ``stage`` (an int or a 32-bit register) of a shared array of two or more
    dimensions: its address (``__ptx_addr__``, for TMA, ``cp.async``, ``stmatrix``),
    ``slice[i, j]`` loads and stores inside it, ``.name`` and ``.alloc`` the array."""

    def __init__(self, alloc: SharedArray, stage):
        if isinstance(stage, int) and not isinstance(stage, bool) and \
                not 0 <= stage < alloc.shape[0]:
            raise TraceIndexError(f"stage {stage} out of bounds for {alloc.decl.name} of "
                                  f"{alloc.shape[0]} stages", user_location())
        self.alloc = alloc
        self.stage = stage

    @property
    def name(self) -> str:
        return self.alloc.decl.name

    @property
    def dtype(self) -> PtxType:
        return self.alloc.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return self.alloc.shape[1:]

    def addr(self, *index) -> ir.Addr:
        if len(index) == 1 and isinstance(index[0], tuple):
            index = index[0]
        return self.alloc.addr(self.stage, *(index or (0,) * len(self.shape)))

    def __ptx_addr__(self) -> ir.Addr:
        return self.addr()

    def __getitem__(self, index) -> ir.Reg:
        return self.alloc[(self.stage,) + (index if isinstance(index, tuple) else (index,))]

    def __setitem__(self, index, value) -> None:
        self.alloc[(self.stage,) + (index if isinstance(index, tuple) else (index,))] = value

    def __repr__(self) -> str:
        return f"SharedSlice({self.name}[{self.stage!r}])"


SharedAlloc = SharedArray  # pyptx's class name

_SWIZZLE_NAMES = {"NONE": 0, "32B": 32, "64B": 64, "128B": 128}


def _swizzle_bytes(swizzle, what: str) -> int:
    if isinstance(swizzle, str) and swizzle.upper() in _SWIZZLE_NAMES:
        return _SWIZZLE_NAMES[swizzle.upper()]
    if swizzle is None:
        return 0
    if swizzle in (0, 32, 64, 128) and not isinstance(swizzle, bool):
        return swizzle
    raise TraceError(f"{what} swizzle must be 0, 32, 64 or 128 (bytes) or 'NONE', '32B', "
                     f"'64B', '128B', got {swizzle!r}", user_location())


def apply_swizzle(logical_offset, swizzle) -> ir.Reg:
    """The physical byte offset of ``logical_offset`` inside a TMA/wgmma swizzled tile:
    ``and.b32 t, off, MASK; shr.u32 t, t, 3; xor.b32 p, off, t`` (MASK 0x80 / 0x180 /
    0x380 for 32 / 64 / 128-byte swizzle: the row bits that permute the 16-byte
    chunks). ``swizzle`` 0 / ``None`` / ``'NONE'`` returns ``logical_offset``."""
    span = _swizzle_bytes(swizzle, "smem.apply_swizzle")
    if not span:
        return logical_offset
    b = current("smem.apply_swizzle")
    off = as_reg(logical_offset)
    if not isinstance(off, ir.Reg) or not off.dtype.is_int or off.dtype.bits != 32:
        raise TraceError(f"smem.apply_swizzle takes a 32-bit integer register offset, got "
                         f"{logical_offset!r}", user_location())
    t = b.new_reg(u32)
    b.inst(["and", "b32"], (t, off, {32: 0x80, 64: 0x180, 128: 0x380}[span]))
    b.inst(["shr", "u32"], (t, t, 3))
    p = b.new_reg(u32)
    b.inst(["xor", "b32"], (p, off, t))
    return p


def alloc(dtype: PtxType, shape, *, align: int = 16, dynamic: bool = False,
          swizzle: int | str = 0) -> SharedArray:
    """Declare ``.shared .align A .b8 smemN[bytes]`` for this CTA and return a handle.

    ``dynamic=True`` declares it as dynamic shared memory instead
    (``.extern .shared .align A .b8 smemN[];`` at module scope, CUDA's
    ``extern __shared__``): the launch provides its bytes, which may exceed the 48 KiB
    a kernel can declare statically (the launcher raises the function's limit). A
    kernel has at most one dynamic array; it lies after every static one.

    ``swizzle=32/64/128`` says the array holds a TMA/wgmma swizzled tile (rows of at
    most ``swizzle`` bytes, 16-byte chunks XOR-permuted by row): the array is aligned to
    the pattern (8 rows of ``swizzle`` bytes) and carries ``.swizzle``, which
    ``ptx.wgmma.descriptor`` and TMA boxes read, so the two agree by construction.
    pyptx's spellings ``'32B'``, ``'64B'``, ``'128B'`` and ``'NONE'`` / ``None`` are the
    same sizes.
    """
    return _alloc(dtype, shape, align, dynamic, swizzle)


def _name(b, kind: str) -> str:
    """``smemN`` (N counts the kernel's shared arrays); in a ``style="pyptx"`` kernel
    pyptx's ``smem_N`` / ``mbar_N`` (``kind``: N counts the arrays of that kind)."""
    if b.cache.get("style") != "pyptx":
        return f"smem{len(b.shared)}"
    n = sum(1 for d in b.shared if d.name.startswith(kind + "_"))
    return f"{kind}_{n}"


def _alloc(dtype: PtxType, shape, align: int, dynamic: bool, swizzle,
           stripes: bool = False, kind: str = "smem") -> SharedArray:
    """:func:`alloc`; ``stripes``: rows a multiple of the swizzle span wide, held as
    span-wide stripes (a wide K-major wgmma tile, never indexed by element)."""
    b = current("smem.alloc")
    swizzle = _swizzle_bytes(swizzle, "smem.alloc")
    if swizzle:
        align = max(align, 8 * swizzle)
    if isinstance(shape, int):
        shape = (shape,)
    shape = tuple(shape)
    if not shape or any(not isinstance(d, int) or isinstance(d, bool) or d <= 0 for d in shape):
        raise TraceError(f"smem.alloc shape must be positive ints, got {shape!r}", user_location())
    if align & (align - 1) or align < dtype.bytes:
        raise TraceError(f"align must be a power of two >= the element size, got {align}",
                         user_location())
    if dynamic:
        prior = next((d for d in b.shared if d.dynamic), None)
        if prior is not None:
            raise TraceError(f"kernel '{b.name}' already has a dynamic shared array "
                             f"({prior.name}, declared at {prior.loc}); PTX gives a kernel one "
                             f"dynamic region: make this one part of it (a larger shape) or "
                             f"static", user_location())
    decl = ir.SharedDecl(_name(b, kind), dtype, shape, align, user_location(),
                         dynamic=bool(dynamic))
    b.shared.append(decl)
    arr = SharedArray(decl, b)
    arr.swizzle = swizzle
    if swizzle and shape[-1] * dtype.bytes > swizzle and not (
            stripes and shape[-1] * dtype.bytes % swizzle == 0):
        raise TraceError(f"a {swizzle}-byte swizzled array has rows of at most {swizzle} "
                         f"bytes ({swizzle // dtype.bytes} {dtype.name}), got {shape[-1]}",
                         user_location())
    if swizzle and shape[-1] * dtype.bytes < swizzle:
        # TMA lays a narrower box row one whole span after the previous one
        # (TensorMapSpec.smem_row_bytes): past the end of a dense array of such rows
        raise TraceError(f"a {swizzle}-byte swizzled array needs rows of the whole span, "
                         f"{swizzle // dtype.bytes} {dtype.name}; got {shape[-1]}: TMA writes "
                         f"narrower box rows {swizzle} bytes apart. Declare the full width "
                         f"(the TMA box may stay narrower) or use a smaller swizzle",
                         user_location())
    return arr


class WgmmaTile(SharedArray):
    """A shared array holding wgmma operand tiles in their canonical layout
    (``smem.wgmma_operand``): ``.layout`` is the
    :class:`~ptxdsl.dsl.wgmma.OperandLayout` that ``ptx.wgmma.descriptor`` / ``ptx.wgmma.mma``
    read, ``.swizzle`` the span its TMA box must use, ``.byte_offset`` where this view
    starts. Views record nothing: ``tile[s]`` is stage ``s`` of a staged tile
    (``tile[0]`` of an unstaged one is the tile itself, pyptx's spelling), ``tile.k_step(i)``
    the ``i``-th K step of one wgmma (K = 32 bytes of elements: 16 for f16/bf16) and
    ``tile.offset(nbytes)`` any 16-byte-multiple offset. Elements are not loaded or stored
    one by one (the layout is swizzled): pass the tile to TMA and wgmma."""

    byte_offset = 0
    layout = None
    _root = None

    def _base_reg(self) -> ir.Reg:
        if self._root is not None:
            return self._root._base_reg()
        return super()._base_reg()

    @property
    def tile_shape(self) -> tuple[int, int]:
        return self.shape[-2:]

    def _view(self, off: int, staged: bool) -> "WgmmaTile":
        v = copy.copy(self)
        v._root = self._root or self
        v.byte_offset = self.byte_offset + off
        v._staged = staged
        return v

    def offset(self, nbytes: int) -> "WgmmaTile":
        """The tile ``nbytes`` further on (a multiple of 16)."""
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes % 16 \
                or not 0 <= self.byte_offset + nbytes < self.decl.nbytes:
            raise TraceError(f"a wgmma tile offset is an int multiple of 16 bytes inside "
                             f"{self.decl.name} ({self.decl.nbytes} bytes), got {nbytes!r}",
                             user_location())
        return self._view(nbytes, getattr(self, "_staged", len(self.shape) == 2))

    def k_step(self, i: int, k: int | None = None) -> "WgmmaTile":
        """The tile from K index ``i * k`` on (``k``: one wgmma's K, 32 bytes of
        elements, by default): ``i * k * elem`` bytes along a K-major row, ``i * k`` rows
        down an MN-major tile."""
        k = k if k is not None else 32 // self.dtype.bytes
        kdim = self.tile_shape[1] if self.layout.major == "K" else self.tile_shape[0]
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i * k < kdim:
            raise TraceError(f"k_step({i!r}) of a tile with K = {kdim} in steps of {k}",
                             user_location())
        return self.offset(self.layout.k_offset(i * k))

    def __getitem__(self, stage):
        staged = len(self.shape) == 3 and not getattr(self, "_staged", False)
        n = self.shape[0] if staged else 1
        if isinstance(stage, bool) or not isinstance(stage, int) or not 0 <= stage < n:
            raise TraceIndexError(f"{self.decl.name} holds {n} wgmma tile"
                                  f"{'s' if n > 1 else ''} {self.tile_shape}: index with an "
                                  f"int in 0..{n - 1}, got {stage!r}", user_location())
        rows, cols = self.tile_shape
        return self._view(stage * rows * cols * self.dtype.bytes, True)

    def __setitem__(self, index, value) -> None:
        raise TraceError("a wgmma tile is swizzled: fill it with TMA (ptx.tma.load) or "
                         "address arithmetic of one's own, not element stores",
                         user_location())

    def __ptx_addr__(self) -> ir.Addr:
        return ir.Addr(ir.Symbol(self.decl.name, "shared"), self.byte_offset)

    def __repr__(self) -> str:
        return (f"WgmmaTile({self.decl.name}+{self.byte_offset}, {self.dtype.name}, "
                f"{self.shape}, major={self.layout.major}, swizzle={self.swizzle})")


def wgmma_operand(dtype: PtxType, shape, major: str = "K", *, align: int | None = None,
                  dynamic: bool = False) -> WgmmaTile:
    """Shared memory for a wgmma operand in its canonical layout: ``shape`` is (rows,
    cols) or (stages, rows, cols), row-major; ``major="K"`` for an (M, K) A or (N, K) B,
    ``"MN"`` for a (K, N) B or (K, M) A (see :func:`ptxdsl.dsl.wgmma.operand_layout`: rows of
    32/64/128 bytes are swizzled by their width, 16-byte MN-major rows are not). A K-major
    tile wider than 128 bytes (``(64, 128)`` bf16) is held as 128-byte swizzled stripes of
    all its rows, one after another, as pyptx lays it out: TMA fills it one stripe at a
    time (a box 128 bytes wide, at ``tile.k_step(i)`` of the stripe's first K step) and
    ``tile.k_step(i)`` finds each wgmma's K inside its stripe.

    Records what :func:`alloc` records (a ``.shared .align A .b8 smemN[bytes]``
    declaration, aligned to the swizzle pattern and at least 128 bytes, as TMA wants);
    the returned :class:`WgmmaTile` gives ``ptx.wgmma.mma`` its descriptor fields and its
    transpose, and TMA boxes of ``Tile.wgmma_a`` / ``Tile.wgmma_b`` with the same tile
    shape write it with the same swizzle. pyptx's name: ``smem.wgmma_tile``.
    """
    if isinstance(shape, int) or len(tuple(shape)) not in (2, 3):
        raise TraceError(f"smem.wgmma_operand shape is (rows, cols) or (stages, rows, cols), "
                         f"got {shape!r}", user_location())
    shape = tuple(shape)
    lay = operand_layout(dtype, shape[-2:], major)
    arr = _alloc(dtype, shape, max(align or 0, 128, 8 * lay.swizzle), dynamic, lay.swizzle,
                 stripes=bool(lay.stripe))
    tile = WgmmaTile.__new__(WgmmaTile)
    tile.__dict__.update(arr.__dict__)
    tile.swizzle = lay.swizzle
    tile.layout = lay
    return tile


wgmma_tile = wgmma_operand  # pyptx's name


def mbarrier(count: int = 1):
    """``count`` mbarriers in a new ``.shared .align 8 .b8 smemN[8*count]`` array: an
    :class:`~ptxdsl.dsl.mbarrier.MbarrierArray` (``bars[i]`` for one; see
    :mod:`ptxdsl.dsl.mbarrier` for what its calls record)."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise TraceError(f"smem.mbarrier takes a positive int count, got {count!r}",
                         user_location())
    return MbarrierArray(_alloc(b64, (count,), 8, False, 0, kind="mbar"), 0, count)


def base(name: str | None = None) -> ir.Reg:
    """``mov.u32 r, NAME``: the shared address of the kernel's dynamic (``extern``) shared
    memory (``@kernel(extern_smem=..., smem=BYTES)`` or ``alloc(..., dynamic=True)``);
    ``name`` picks one by name. pyptx's ``smem.base()``."""
    b = current("smem.base")
    dyn = [d for d in b.shared if d.dynamic and (name is None or d.name == name)]
    if not dyn:
        raise TraceError("smem.base() needs dynamic shared memory: @kernel(extern_smem=True, "
                         "smem=BYTES) or smem.alloc(..., dynamic=True)"
                         + (f" named {name!r}" if name else ""), user_location())
    r = b.new_reg(u32)
    b.inst(["mov", "u32"], (r, ir.Symbol(dyn[0].name, "shared")))
    return r


def load(dtype: PtxType, address) -> ir.Reg:
    """pyptx's ``smem.load``: ``ld.shared.T`` from ``address`` (``ptx.addr(...)``, a
    register or a shared array) into a new register."""
    b = current("smem.load")
    r = b.new_reg(dtype)
    b.inst(["ld", "shared", move_type(dtype).name], (r, _shared_address(address)))
    return r


def store(dtype: PtxType, address, value) -> None:
    """pyptx's ``smem.store``: ``st.shared.T`` of ``value`` at ``address``."""
    current("smem.store").inst(["st", "shared", move_type(dtype).name],
                               (_shared_address(address), as_reg(value)))


def _shared_address(a):
    if isinstance(a, ir.Addr):
        return a
    if hasattr(a, "__ptx_addr__"):
        return a.__ptx_addr__()
    if isinstance(a, ir.Reg):
        return ir.Addr(a, 0)
    raise TraceError(f"a shared-memory address is ptx.addr(...), a register or a shared "
                     f"array, got {a!r}", user_location())
