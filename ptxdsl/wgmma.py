"""``ptx.wgmma``: Hopper warpgroup MMA with keywords, descriptors from named fields.

Every call below records exactly the instructions its docstring lists.

- :func:`accumulator` — a :class:`WgmmaFragment` of N/2 (f32/s32) or N/4 (f16x2)
  registers that knows each register's (row, col) in the 64 x N tile;
- :func:`descriptor` — a 64-bit shared-memory matrix descriptor from a shared
  address and the named fields of :class:`~ptxdsl.isa.descriptors.SmemDescriptor`;
- :func:`masked_descriptor` — pyptx's spelling of the same (``mask=``, ``byte_offset=``,
  ``const_bits=``), kept for compatibility with its GEMMs;
- :func:`mma` — ``wgmma.mma_async`` with keywords; :func:`fence`, :func:`commit`,
  :func:`wait` — ``wgmma.fence`` / ``commit_group`` / ``wait_group``.
"""
from __future__ import annotations

from dataclasses import dataclass

from . import ir
from .errors import TraceError, user_location
from .isa.descriptors import SmemDescriptor
from .trace import current
from .types import ALL_TYPES, PtxType, f32, u32, u64

__all__ = ["WgmmaLayout", "WgmmaFragment", "accumulator", "descriptor", "masked_descriptor",
           "mma", "fence", "commit", "wait", "SmemDescriptor"]

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


class WgmmaFragment:
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

    def __ptx_regs__(self):
        return list(self.regs)

    def __len__(self) -> int:
        return len(self.regs)

    def __iter__(self):
        return iter(self.regs)

    def __getitem__(self, i):
        return self.regs[i]

    def items(self):
        per = self.layout.per_reg
        for i, off in enumerate(self.layout.offsets()):
            yield off, self.regs[i // per], i % per

    def __repr__(self) -> str:
        return f"WgmmaFragment(64x{self.layout.n} {self.layout.elem}, {len(self.regs)} registers)"


def accumulator(n: int, dtype: PtxType = f32, init=None) -> WgmmaFragment:
    """Registers for a 64 x ``n`` accumulator (``.reg`` declarations; with ``init``, one
    ``mov`` per register)."""
    from . import reg
    lay = WgmmaLayout(n, dtype.name)
    if n % 8 or not 8 <= n <= 256:
        raise TraceError(f"a wgmma accumulator is 64 x N with N a multiple of 8 up to 256, "
                         f"got N={n}", user_location())
    t = ALL_TYPES[lay.reg_type]
    return WgmmaFragment(lay, [reg.scalar(t, init=init) for _ in range(lay.nregs)])


def _smem_address(smem):
    """A shared address as a .u32 register: a register, or a shared array's base."""
    if isinstance(smem, ir.Reg):
        return smem, 0
    if hasattr(smem, "base") and hasattr(smem, "decl"):
        return smem.base, 0
    if isinstance(smem, ir.Addr) and isinstance(smem.base, ir.Reg):
        return smem.base, smem.offset
    raise TraceError(f"a wgmma descriptor needs a shared address (a .u32 register or a "
                     f"shared array), got {smem!r}", user_location())


def descriptor(smem, *, leading: int = 16, stride: int = 1024, swizzle: int | None = None,
               base_offset: int = 0, byte_offset: int = 0) -> ir.Reg:
    """The descriptor of the matrix at ``smem`` (+ ``byte_offset``).

    ``swizzle`` defaults to the shared array's own (``smem.alloc(..., swizzle=128)``), so
    the descriptor and the TMA box that filled the array agree. Records
    ``add.u32`` (only for a non-zero ``byte_offset``), ``shr.u32 t, addr, 4``,
    ``and.b32 t, t, 0x3FFF``, ``cvt.u64.u32 d, t`` and ``or.b64 d, d, FIELDS``.
    """
    from . import reg
    if swizzle is None:
        swizzle = getattr(smem, "swizzle", 0) or 0
    fields = SmemDescriptor(0, leading, stride, base_offset, swizzle)
    addr, off = _smem_address(smem)
    b = current("ptx.wgmma.descriptor")
    k = off + byte_offset
    if k:  # a negative offset (pyptx's GEMM passes -8192) adds as .s32: the same bits
        t0 = reg.scalar(u32)
        b.inst(["add", "s32" if k < 0 else "u32"], (t0, addr, k))
        addr = t0
    t = reg.scalar(u32)
    b.inst(["shr", "u32"], (t, addr, 4))
    b.inst(["and", "b32"], (t, t, 0x3FFF))
    d = reg.scalar(u64)
    b.inst(["cvt", "u64", "u32"], (d, t))
    b.inst(["or", "b64"], (d, d, fields.constant_bits()))
    return d


def masked_descriptor(smem_addr, *, byte_offset: int = 0, mask: int = 0x3FF80,
                      const_bits: int = MASKED_DESC_B128) -> ir.Reg:
    """pyptx's descriptor spelling: ``((addr + byte_offset) & mask) >> 4`` OR ``const_bits``.

    The default constant is ``SmemDescriptor(leading=16, stride=1024, swizzle=128)``'s
    fields; prefer :func:`descriptor`, which names them. Records ``add.u32`` (for a
    non-zero offset; ``add.s32`` for a negative one), ``and.b32``, ``shr.u32``, ``cvt.u64.u32`` and ``or.b64``.
    """
    from . import reg
    addr, off = _smem_address(smem_addr)
    b = current("ptx.wgmma.masked_descriptor")
    k = off + byte_offset
    if k:  # a negative offset (pyptx's GEMM passes -8192) adds as .s32: the same bits
        t0 = reg.scalar(u32)
        b.inst(["add", "s32" if k < 0 else "u32"], (t0, addr, k))
        addr = t0
    t = reg.scalar(u32)
    b.inst(["and", "b32"], (t, addr, mask))
    b.inst(["shr", "u32"], (t, t, 4))
    d = reg.scalar(u64)
    b.inst(["cvt", "u64", "u32"], (d, t))
    b.inst(["or", "b64"], (d, d, const_bits))
    return d


_K = {"f16": 16, "bf16": 16, "tf32": 8, "e4m3": 32, "e5m2": 32, "s8": 32, "u8": 32}


def mma(acc, a, b, *, ab_type: PtxType | str, b_type: PtxType | str | None = None,
        accumulate=True, scale_a: int = 1, scale_b: int = 1, transpose_a: int = 0,
        transpose_b: int = 0, satfinite: bool = False, pred=None) -> None:
    """One ``wgmma.mma_async.sync.aligned.m64nNkK.<acc>.<a>.<b>``.

    ``acc``: a :class:`WgmmaFragment` (or its register list; N follows from its
    length); ``a``: a descriptor (.u64) or 4 registers; ``b``: a descriptor.
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
