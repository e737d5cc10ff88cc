"""``ptx.wgmma``: Hopper warpgroup MMA with keywords, descriptors from named fields.

Every call below records exactly the instructions its docstring lists.

- :func:`accumulator` — a :class:`WgmmaFragment` of N/2 (f32/s32) or N/4 (f16x2)
  registers that knows each register's (row, col) in the 64 x N tile;
- :func:`descriptor` — a 64-bit shared-memory matrix descriptor from a shared
  address and the named fields of :class:`~ptxdsl.isa.descriptors.SmemDescriptor`;
- :func:`masked_descriptor` — pyptx's spelling of the same (``mask=``, ``byte_offset=``,
  ``const_bits=``), kept for compatibility with its GEMMs;
- :func:`operand_layout` — the canonical shared-memory layout (swizzle, leading and
  stride byte offsets) of a wgmma operand tile, which ``smem.wgmma_operand`` allocates;
- :func:`mma` — ``wgmma.mma_async`` with keywords (A and B: descriptors, or
  ``smem.wgmma_operand`` tiles whose descriptors it builds); :func:`fence`,
  :func:`commit`, :func:`wait` — ``wgmma.fence`` / ``commit_group`` / ``wait_group``;
- pyptx's spellings, kept as aliases: :func:`mma_async` (``shape=, dtype_d=, dtype_a=,
  dtype_b=, d=, a=, b=, scale_d=, trans_a=, trans_b=, a_k_offset=, b_k_offset=``),
  ``commit_group``, ``wait_group``, :func:`make_descriptor` (layout codes) and
  :func:`auto_descriptor` (from dtype, shape and major, via :func:`canonical_layout`).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..core import ir
from ..core.errors import TraceError, user_location
from ..isa.descriptors import SmemDescriptor
from ..core.trace import current
from ..core.types import ALL_TYPES, PtxType, f32, u32, u64
from . import reg
from .tensorcore import RegisterGroup

__all__ = ["canonical_layout", "make_descriptor", "auto_descriptor", "WgmmaLayout",
           "WgmmaFragment", "accumulator", "descriptor", "masked_descriptor",
           "mma", "fence", "commit", "wait", "SmemDescriptor", "OperandLayout",
           "operand_layout", "mma_async", "commit_group", "wait_group", "SWIZZLE_NONE",
           "SWIZZLE_128B", "SWIZZLE_64B", "SWIZZLE_32B", "MASKED_DESC_B128"]

# pyptx's constant for a K-major bf16 tile with 128-byte swizzle: LBO 16, SBO 1024
MASKED_DESC_B128 = SmemDescriptor(0, 16, 1024, 0, 128).constant_bits()


@dataclass(frozen=True)
class WgmmaLayout:
    """Where each thread's accumulator elements sit in the 64 x N tile of a wgmma.

    Thread ``t`` of the warpgroup (warp ``w = t // 32``, lane ``l``) holds element
    ``i`` at row ``16 w + l // 4 + 8 ((i // 2) % 2)``, column ``2 (l % 4) + i % 2 +
    8 (i // 4)``. ``elem`` is the accumulator type (f32, f16, s32): f16 packs two
    elements (``i``, ``i + 1``) per register.
    """

    n: int
    elem: str = "f32"

    @property
    def rows(self) -> int:
        return 64

    @property
    def cols(self) -> int:
        return self.n

    @property
    def elems(self) -> int:
        return self.n // 2

    @property
    def per_reg(self) -> int:
        return 2 if self.elem == "f16" else 1

    @property
    def nregs(self) -> int:
        return self.elems // self.per_reg

    @property
    def reg_type(self) -> str:
        return "f16x2" if self.elem == "f16" else self.elem

    def position(self, thread: int, i: int) -> tuple[int, int]:
        """(row, col) of element ``i`` of warpgroup thread ``thread`` (0..127)."""
        w, lane = divmod(thread, 32)
        return (16 * w + lane // 4 + 8 * ((i // 2) % 2), 2 * (lane % 4) + i % 2 + 8 * (i // 4))

    def offsets(self) -> list[tuple[int, int]]:
        """Each element's (row, col) relative to the thread's element 0."""
        r0, c0 = self.position(0, 0)
        return [(r - r0, c - c0) for r, c in (self.position(0, i) for i in range(self.elems))]


class WgmmaFragment(RegisterGroup):
    """A thread's accumulator registers of a wgmma, with their :class:`WgmmaLayout`.

    Pass it as the accumulator of :func:`mma` or ``ptx.inst.wgmma.mma_async``;
    ``items()`` yields ``((dr, dc), register, part)`` per element.
    """

    def __init__(self, lay: WgmmaLayout, regs):
        regs = list(regs)
        if len(regs) != lay.nregs:
            raise TraceError(f"a 64x{lay.n} {lay.elem} accumulator has {lay.nregs} registers, "
                             f"got {len(regs)}", user_location())
        self.layout = lay
        self.regs = regs

    def __repr__(self) -> str:
        return f"WgmmaFragment(64x{self.layout.n} {self.layout.elem}, {len(self.regs)} registers)"


def accumulator(n: int, dtype: PtxType = f32, init=None) -> WgmmaFragment:
    """Registers for a 64 x ``n`` accumulator (``.reg`` declarations; with ``init``, one
    ``mov`` per register)."""
    lay = WgmmaLayout(n, dtype.name)
    if n % 8 or not 8 <= n <= 256:
        raise TraceError(f"a wgmma accumulator is 64 x N with N a multiple of 8 up to 256, "
                         f"got N={n}", user_location())
    t = ALL_TYPES[lay.reg_type]
    return WgmmaFragment(lay, [reg.scalar(t, init=init) for _ in range(lay.nregs)])


@dataclass(frozen=True)
class OperandLayout:
    """The canonical shared-memory layout of a wgmma operand tile (one of the four the
    hardware reads: no swizzle, 32-, 64- or 128-byte swizzle).

    ``major``: ``"K"`` (K contiguous: A as M x K rows, B as N x K rows) or ``"MN"`` (M/N
    contiguous: B as K x N rows, A as K x M rows); ``row_bytes``: one tile row;
    ``swizzle``: the span TMA writes and wgmma reads through (the row width; 16-byte rows
    are not swizzled); ``leading`` / ``stride``: the descriptor's LBO / SBO in bytes.
    K-major: 8-row groups are ``stride = 8 * row_bytes`` apart (LBO unused, 16). A
    K-major tile wider than 128 bytes is ``stripe``-byte apart 128-byte stripes (each all
    rows of 128 bytes of K, 128-byte swizzled; LBO, which the hardware ignores for
    K-major swizzled tiles, is the stripe distance as pyptx sets it); ``stripe`` is 0
    for a tile of one stripe.
    MN-major swizzled: 8-K-row groups are ``stride = 8 * row_bytes`` apart (LBO unused,
    16); MN-major unswizzled (one 16-byte core matrix wide): 8-K-row core matrices are
    ``leading = 128`` bytes apart (SBO unused, 16).
    """

    major: str
    elem_bytes: int
    row_bytes: int
    swizzle: int
    leading: int
    stride: int
    stripe: int = 0

    def fields(self) -> SmemDescriptor:
        """The descriptor fields (start address 0)."""
        return SmemDescriptor(0, self.leading, self.stride, 0, self.swizzle)

    def k_offset(self, k: int) -> int:
        """Byte offset of K index ``k`` (a multiple of 8) from the tile's start: along a
        row for K-major tiles (into the stripe holding it), ``k`` rows down for MN-major
        ones."""
        if self.major == "K" and self.stripe:
            off = k * self.elem_bytes
            return off // 128 * self.stripe + off % 128
        return k * self.elem_bytes if self.major == "K" else k * self.row_bytes


def operand_layout(dtype: PtxType, shape, major: str = "K") -> OperandLayout:
    """The canonical layout of a wgmma operand tile of ``shape`` (rows, cols), row-major
    in shared memory: ``major="K"`` for (M, K) A / (N, K) B, ``"MN"`` for (K, N) B /
    (K, M) A. Rows of 32, 64 or 128 bytes are swizzled by their width; an MN-major tile
    may also have 16-byte rows (no swizzle); a K-major tile rows of a multiple of 128
    bytes, held as 128-byte swizzled stripes (one wgmma's K, 32 bytes, lies in one
    stripe; the PTX ISA fixes the row pitch inside a K-major swizzle atom at the
    swizzle width). Records nothing."""
    loc = user_location()
    if major not in ("K", "MN"):
        raise TraceError(f"a wgmma operand is major='K' or major='MN', got {major!r}", loc)
    shape = tuple(shape)
    if len(shape) != 2 or any(not isinstance(d, int) or isinstance(d, bool) or d <= 0
                              for d in shape):
        raise TraceError(f"a wgmma operand tile is (rows, cols) positive ints, got {shape!r}",
                         loc)
    rows, cols = shape
    row = cols * dtype.bytes
    ok = (32, 64, 128) if major == "K" else (16, 32, 64, 128)
    if major == "K" and row > 128 and row % 128 == 0 and rows % 8 == 0:
        return OperandLayout(major, dtype.bytes, 128, 128, rows * 128, 8 * 128, rows * 128)
    if row not in ok:
        raise TraceError(f"a {major}-major wgmma operand of {dtype.name} has rows of "
                         f"{'/'.join(map(str, ok))} bytes ({', '.join(str(b // dtype.bytes) for b in ok)} "
                         f"elements{', or a multiple of 128 bytes' if major == 'K' else ''}), got "
                         f"{cols} ({row} bytes); split a wider tile into tiles of at most "
                         f"128-byte rows", loc)
    if rows % 8:
        raise TraceError(f"a wgmma operand tile has a multiple of 8 rows, got {rows}", loc)
    swz = 0 if row == 16 else row
    if swz:
        return OperandLayout(major, dtype.bytes, row, swz, 16, 8 * row)
    return OperandLayout(major, dtype.bytes, row, 0, 8 * row, 16)


def _smem_address(smem):
    """A shared address as a .u32 register: a register, or a shared array's base."""
    if isinstance(smem, ir.Reg):
        return smem, 0
    if hasattr(smem, "base") and hasattr(smem, "decl"):
        b = current("ptx.wgmma.descriptor")
        if b.cache.get("style") == "pyptx":
            t = reg.scalar(u32)
            b.inst(["mov", "u32"], (t, ir.Symbol(smem.decl.name, "shared")))
            return t, getattr(smem, "byte_offset", 0)
        return smem.base, getattr(smem, "byte_offset", 0)
    if isinstance(smem, ir.Addr) and isinstance(smem.base, ir.Reg):
        return smem.base, smem.offset
    raise TraceError(f"a wgmma descriptor needs a shared address (a .u32 register or a "
                     f"shared array), got {smem!r}", user_location())


def descriptor(smem, *, leading: int | None = None, stride: int | None = None,
               swizzle: int | None = None, base_offset: int = 0,
               byte_offset: int = 0) -> ir.Reg:
    """The descriptor of the matrix at ``smem`` (+ ``byte_offset``).

    ``swizzle`` defaults to the shared array's own (``smem.alloc(..., swizzle=128)``), so
    the descriptor and the TMA box that filled the array agree; ``leading`` and
    ``stride`` default to the layout of an ``smem.wgmma_operand`` tile (otherwise 16 and
    1024: a K-major 128-byte-swizzled tile); a tile view (``tile.k_step(i)``,
    ``tile[stage]``) adds its byte offset. Records
    ``add.u32`` (only for a non-zero ``byte_offset``), ``shr.u32 t, addr, 4``,
    ``and.b32 t, t, 0x3FFF``, ``cvt.u64.u32 d, t`` and ``or.b64 d, d, FIELDS``.
    """
    if swizzle is None:
        swizzle = getattr(smem, "swizzle", 0) or 0
    lay = getattr(smem, "layout", None)
    if leading is None:
        leading = lay.leading if isinstance(lay, OperandLayout) else 16
    if stride is None:
        stride = lay.stride if isinstance(lay, OperandLayout) else 1024
    try:
        fields = SmemDescriptor(0, leading, stride, base_offset, swizzle)
    except ValueError as e:
        raise TraceError(f"ptx.wgmma.descriptor: {e}", user_location()) from None
    addr, off = _smem_address(smem)
    b = current("ptx.wgmma.descriptor")
    addr = _add_offset(b, addr, off + byte_offset)
    t = reg.scalar(u32)
    b.inst(["shr", "u32"], (t, addr, 4))
    b.inst(["and", "b32"], (t, t, 0x3FFF))
    d = reg.scalar(u64)
    b.inst(["cvt", "u64", "u32"], (d, t))
    b.inst(["or", "b64"], (d, d, fields.constant_bits()))
    return d


def _add_offset(b, addr, k: int):
    """``addr + k`` in a new .u32 register (``add.u32``; a negative k, as pyptx's GEMM
    passes -8192, is added as its 32-bit two's complement: the same bits), or ``addr``
    itself when k is 0."""
    if not k:
        return addr
    t = reg.scalar(u32)
    b.inst(["add", "u32"], (t, addr, k & 0xFFFFFFFF))
    return t


def masked_descriptor(smem_addr, *, byte_offset: int = 0, mask: int = 0x3FF80,
                      const_bits: int = MASKED_DESC_B128) -> ir.Reg:
    """pyptx's descriptor spelling: ``((addr + byte_offset) & mask) >> 4`` OR ``const_bits``.

    The default constant is ``SmemDescriptor(leading=16, stride=1024, swizzle=128)``'s
    fields; prefer :func:`descriptor`, which names them. Records ``add.u32`` (for a
    non-zero offset), ``and.b32``, ``shr.u32``, ``cvt.u64.u32`` and ``or.b64``.
    """
    addr, off = _smem_address(smem_addr)
    b = current("ptx.wgmma.masked_descriptor")
    addr = _add_offset(b, addr, off + byte_offset)
    t = reg.scalar(u32)
    b.inst(["and", "b32"], (t, addr, mask))
    b.inst(["shr", "u32"], (t, t, 4))
    d = reg.scalar(u64)
    b.inst(["cvt", "u64", "u32"], (d, t))
    b.inst(["or", "b64"], (d, d, const_bits))
    return d


_K = {"f16": 16, "bf16": 16, "tf32": 8, "e4m3": 32, "e5m2": 32, "s8": 32, "u8": 32}


def _operand(x, trans, name: str, type_name: str):
    """A tile operand's descriptor and transpose (from its major); others as given."""
    lay = getattr(x, "layout", None)
    if not isinstance(lay, OperandLayout):
        return x, 0 if trans is None else trans
    want = 1 if lay.major == "MN" else 0
    if trans is not None and int(trans) != want:
        raise TraceError(f"operand {name} is a {lay.major}-major tile, which wgmma reads "
                         f"with transpose_{name}={want}, got {trans}", user_location())
    if x.dtype.name != type_name and not (x.dtype.bytes == 4 and type_name == "tf32"):
        raise TraceError(f"operand {name} is a {x.dtype.name} tile, the wgmma's {name} type "
                         f"is {type_name}", user_location())
    return descriptor(x), want


def mma(acc, a, b, *, ab_type: PtxType | str, b_type: PtxType | str | None = None,
        accumulate=True, scale_a: int = 1, scale_b: int = 1, transpose_a: int | None = None,
        transpose_b: int | None = None, satfinite: bool = False, pred=None) -> None:
    """One ``wgmma.mma_async.sync.aligned.m64nNkK.<acc>.<a>.<b>``.

    ``acc``: a :class:`WgmmaFragment` (or its register list; N follows from its
    length); ``a``: a descriptor (.u64), 4 registers or an ``smem.wgmma_operand`` tile
    (or view: ``tile.k_step(i)``); ``b``: a descriptor or a tile. For each tile it first
    records :func:`descriptor`'s instructions, and its transpose follows from the tile's
    major (``"MN"``: 1, ``"K"``: 0; a contradicting ``transpose_*`` is refused).
    ``accumulate``: True / False, or a predicate register (the scale-d operand: D =
    A*B + D, or D = A*B). ``scale_a``/``scale_b``: 1 or -1 (not for integers);
    ``transpose_a``/``transpose_b``: 0 or 1 (f16/bf16 only; ``transpose_a`` only with a
    descriptor A). Records that one instruction.
    """
    a_t = getattr(ab_type, "name", ab_type)
    b_t = getattr(b_type, "name", b_type) or a_t
    if isinstance(acc, WgmmaFragment):
        lay = acc.layout
    else:
        regs = list(acc)
        reg_t = regs[0].dtype.name if regs and isinstance(regs[0], ir.Reg) else "f32"
        elem = {"f16x2": "f16", "s32": "s32", "u32": "s32"}.get(reg_t, "f32")
        lay = WgmmaLayout(len(regs) * (4 if elem == "f16" else 2), elem)
    if a_t not in _K:
        raise TraceError(f"ab_type {a_t!r} is not a wgmma input type ({', '.join(_K)})",
                         user_location())
    a, transpose_a = _operand(a, transpose_a, "a", a_t)
    b, transpose_b = _operand(b, transpose_b, "b", b_t)
    transpose_a = transpose_a or 0
    chain = ["wgmma", "mma_async", "sync", "aligned", f"m64n{lay.n}k{_K[a_t]}"]
    if satfinite:
        chain.append("satfinite")
    chain += [lay.elem, a_t, b_t]
    scale_d = accumulate if isinstance(accumulate, ir.Reg) else int(bool(accumulate))
    ops = [acc, a if isinstance(a, ir.Reg) else list(a), b, scale_d]
    if a_t not in ("s8", "u8"):
        ops += [scale_a, scale_b]
    if a_t in ("f16", "bf16"):
        if isinstance(a, ir.Reg):
            ops.append(transpose_a)
        elif transpose_a:
            raise TraceError("transpose_a applies to a descriptor A; registers hold A as is",
                             user_location())
        ops.append(transpose_b)
    elif transpose_a or transpose_b:
        raise TraceError(f"wgmma transposes only .f16/.bf16 inputs, not .{a_t}",
                         user_location())
    current("ptx.wgmma.mma").inst(chain, tuple(ops), guard=pred)


def fence(*, pred=None) -> None:
    """``wgmma.fence.sync.aligned``."""
    current("ptx.wgmma.fence").inst(["wgmma", "fence", "sync", "aligned"], (), guard=pred)


def commit(*, pred=None) -> None:
    """``wgmma.commit_group.sync.aligned``."""
    current("ptx.wgmma.commit").inst(["wgmma", "commit_group", "sync", "aligned"], (),
                                     guard=pred)


def wait(n: int = 0, *, pred=None) -> None:
    """``wgmma.wait_group.sync.aligned n``."""
    current("ptx.wgmma.wait").inst(["wgmma", "wait_group", "sync", "aligned"], (n,),
                                   guard=pred)


def mma_async(*, shape, dtype_d, dtype_a, dtype_b, d, a, b, scale_d=False, scale_a: int = 1,
              scale_b: int = 1, trans_a: int = 0, trans_b: int = 0, a_k_offset: int = 0,
              b_k_offset: int = 0, pred=None) -> None:
    """pyptx's keyword spelling of :func:`mma`: ``shape=(64, N, K)``, ``dtype_d/a/b``,
    ``d`` (accumulator registers), ``a``/``b`` (descriptors or ``smem.wgmma_tile``
    tiles), ``scale_d`` (False: D = A*B, the default; True or a predicate: D += A*B),
    ``trans_a/b``, and ``a_k_offset``/``b_k_offset``: byte offsets into a tile operand
    (ptxdsl spells them ``tile.k_step(i)``). Records what :func:`mma` records: each tile
    operand's :func:`descriptor` instructions, then one ``wgmma.mma_async``."""
    loc = user_location()
    shape = tuple(shape)
    a_t, b_t, d_t = (getattr(t, "name", t) for t in (dtype_a, dtype_b, dtype_d))
    if len(shape) != 3 or shape[0] != 64 or a_t not in _K or shape[2] != _K[a_t]:
        raise TraceError(f"wgmma shape is (64, N, {_K.get(a_t, 'K')}) for .{a_t} inputs, got "
                         f"{shape!r}", loc)
    regs = list(d)
    per = 4 if d_t == "f16" else 2
    if len(regs) * per != shape[1]:
        raise TraceError(f"a 64x{shape[1]} .{d_t} accumulator is {shape[1] // per} registers "
                         f"per thread, d has {len(regs)}", loc)
    if isinstance(dtype_d, PtxType) and regs and isinstance(regs[0], ir.Reg) \
            and regs[0].dtype.name != ("f16x2" if d_t == "f16" else d_t) \
            and not (d_t == "f16" and regs[0].dtype.bits == 32):
        raise TraceError(f"dtype_d is {d_t}, d holds {regs[0].dtype.name} registers", loc)
    a = _offset_operand(a, a_k_offset, "a")
    b = _offset_operand(b, b_k_offset, "b")
    mma(regs, a, b, ab_type=a_t, b_type=b_t, accumulate=scale_d, scale_a=scale_a,
        scale_b=scale_b, transpose_a=trans_a, transpose_b=trans_b, pred=pred)


def _offset_operand(x, off: int, name: str):
    if not off:
        return x
    if not isinstance(getattr(x, "layout", None), OperandLayout):
        raise TraceError(f"{name}_k_offset applies to an smem.wgmma_tile operand; offset a "
                         f"descriptor with ptx.wgmma.descriptor(..., byte_offset=)",
                         user_location())
    return x.offset(off)


class _Bytes:
    """An element size standing in for a dtype (operand_layout reads ``.bytes``/``.name``)."""

    def __init__(self, n: int):
        self.bytes = n
        self.name = f"{n}-byte elements"


def canonical_layout(elem_bytes: int, m_or_n: int, k: int, major: str) -> tuple[int, int, int]:
    """``(swizzle, leading, stride)`` in bytes of an ``m_or_n`` x ``k`` operand tile,
    ``major`` ``"K"`` or ``"MN"`` (pyptx's ``pick_gmma_layout``): :func:`operand_layout`,
    plus a K-major tile of 16-byte rows (no swizzle, LBO 16, SBO 128) and rows wider
    than 128 bytes (128-byte swizzled stripes ``rows * 128`` bytes apart, SBO 1024)."""
    loc = user_location()
    if any(isinstance(x, bool) or not isinstance(x, int) or x <= 0
           for x in (elem_bytes, m_or_n, k)):
        raise TraceError(f"a wgmma tile takes positive ints, got elem_bytes={elem_bytes!r} "
                         f"m_or_n={m_or_n!r} k={k!r}", loc)
    if major not in ("K", "MN"):
        raise TraceError(f"a wgmma operand is major='K' or major='MN', got {major!r}", loc)
    row = (k if major == "K" else m_or_n) * elem_bytes
    rows = m_or_n if major == "K" else k
    if rows % 8:
        what = "M divisible by 8" if major == "K" else "K divisible by 8"
        raise TraceError(f"a {major}-major wgmma tile needs {what} (8-row core matrices), "
                         f"got {rows}", loc)
    if row > 128:
        if row % 128:
            raise TraceError(f"a {major}-major wgmma tile of {row}-byte rows: {row} is not "
                             f"one of the canonical row widths 16, 32, 64, 128 or a multiple "
                             f"of 128 (128-byte stripes)", loc)
        return 128, rows * 128, 8 * 128
    if row not in (16, 32, 64, 128):
        raise TraceError(f"a {major}-major wgmma tile of {row}-byte rows: {row} is not one of "
                         f"the canonical row widths 16, 32, 64, 128", loc)
    if major == "K" and row == 16:
        return 0, 16, 8 * 16
    lay = operand_layout(_Bytes(elem_bytes), (rows, row // elem_bytes), major)
    return lay.swizzle, lay.leading, lay.stride


_SWIZZLE_OF_CODE = {0: 0, 1: 128, 2: 64, 3: 32}  # the descriptor's layout field
# pyptx's names of those codes (make_descriptor(swizzle=ptx.wgmma.SWIZZLE_128B))
SWIZZLE_NONE, SWIZZLE_128B, SWIZZLE_64B, SWIZZLE_32B = 0, 1, 2, 3


def make_descriptor(smem_base, *, leading_byte_offset: int, stride_byte_offset: int,
                    swizzle: int = 0, base_offset: int = 0,
                    addr_byte_offset: int = 0) -> ir.Reg:
    """pyptx's spelling of :func:`descriptor`: ``swizzle`` is the descriptor's layout code
    (0 none, 1 128-byte, 2 64-byte, 3 32-byte: ``SWIZZLE_NONE/128B/64B/32B``),
    ``base_offset`` the descriptor's field of that name and ``addr_byte_offset`` bytes
    added to the address (``descriptor``'s ``byte_offset``)."""
    if swizzle not in _SWIZZLE_OF_CODE:
        raise TraceError(f"make_descriptor swizzle= is the layout code 0 (none), 1 (128B), "
                         f"2 (64B) or 3 (32B), got {swizzle!r}", user_location())
    return descriptor(smem_base, leading=leading_byte_offset, stride=stride_byte_offset,
                      swizzle=_SWIZZLE_OF_CODE[swizzle], base_offset=base_offset,
                      byte_offset=addr_byte_offset)


def auto_descriptor(smem_base, *, dtype: PtxType, shape, major="K") -> ir.Reg:
    """The descriptor of a ``shape`` tile at ``smem_base``: ``(M, K)`` / ``(N, K)`` for
    ``major="K"``, ``(K, N)`` for ``"MN"``, in its canonical layout
    (:func:`canonical_layout`; pyptx's ``auto_descriptor``). Records what
    :func:`descriptor` records."""
    if not isinstance(major, str):
        major = ("K", "MN")[int(major)]
    major = major.upper()
    shape = tuple(shape)
    if len(shape) != 2:
        raise TraceError(f"auto_descriptor shape= is (rows, cols), got {shape!r}",
                         user_location())
    m_or_n, k = (shape[0], shape[1]) if major == "K" else (shape[1], shape[0])
    swz, lbo, sbo = canonical_layout(dtype.bytes, m_or_n, k, major)
    return descriptor(smem_base, leading=lbo, stride=sbo, swizzle=swz)


commit_group = commit  # pyptx's name
wait_group = wait      # pyptx's name
