"""``ptx.tcgen05``: Blackwell's tensor core and tensor memory (sm_100a), in pyptx's
spellings.

Every call records the instructions its docstring names (checked against the
instruction table, :mod:`ptxdsl.isa.blackwell`); every one takes ``pred=`` (a predicate
register, or ``~p``, guarding what it records). TMEM addresses are 32-bit registers
(``tcgen05.alloc`` writes the base to shared memory; read it back with ``smem.load``).

============================================  =========================================
``alloc(slot, ncols, cta_group=1)``            ``tcgen05.alloc...shared::cta.b32 [slot], n``
``dealloc(taddr, ncols)``,                     ``tcgen05.dealloc`` / ``relinquish_alloc_permit``
``relinquish_alloc_permit()``
``mma(d, a, b, idesc, kind=, cta_group=,       ``tcgen05.mma`` (see :func:`mma`)
pred_operand=, ...)``
``commit(mbar, cta_group=, multicast_mask=)``  ``tcgen05.commit...shared::cluster.b64``
``fence_before_thread_sync()``, ``fence_after   the fences and waits
_thread_sync()``, ``wait_ld()``, ``wait_st()``
``ld(regs, taddr, shape=, count=)``,           ``tcgen05.ld`` / ``tcgen05.st``
``st(taddr, regs, shape=, count=)``
``cp(taddr, desc, size=)``, ``shift(taddr)``   ``tcgen05.cp`` / ``tcgen05.shift``
``descriptor(smem_addr, stride_bytes=, ...)``  a 64-bit shared-memory descriptor register
``masked_descriptor(smem_addr, ...)``          pyptx's fixed-constant spelling of the same
``instr_desc(...)``,                           the 32-bit instruction descriptor (an int)
``make_instr_desc_f16bf16_f32(...)``
============================================  =========================================

The interpreter does not model tensor memory: a kernel using these runs on the GPU only
(``kernel.interpret`` refuses it, naming the instruction).
"""
from __future__ import annotations

from ..core import ir
from ..core.errors import TraceError, user_location
from ..core.trace import current
from ..core.types import b64, pred as pred_t, u32, u64
from ..isa.tcgen05_descriptors import InstrDescriptor, SmemDescriptor100
from . import reg

__all__ = ["alloc", "dealloc", "relinquish_alloc_permit", "mma", "commit",
           "fence_before_thread_sync", "fence_after_thread_sync", "wait_ld", "wait_st",
           "ld", "st", "cp", "shift", "descriptor", "masked_descriptor", "instr_desc",
           "make_instr_desc_f16bf16_f32", "BLACKWELL_MASKED_DESC_B128"]

# pyptx's constant for a K-major 128-byte-swizzled bf16 tile: LBO 16, SBO 1024, version 1
BLACKWELL_MASKED_DESC_B128 = SmemDescriptor100(0, 16, 1024, 0, "128B").encode()
_KINDS = ("f16", "tf32", "f8f6f4", "i8")
_BLOCK_KINDS = ("mxf8f6f4", "mxf4", "mxf4nvf4")
_SCALE_VECS = {"1X": "scale_vec::1X", "2X": "scale_vec::2X", "4X": "scale_vec::4X",
               "block16": "block16", "block32": "block32"}
_COLLECTOR_A = ("discard", "lastuse", "fill", "use")


def _group(cta_group) -> str:
    if cta_group not in (1, 2):
        raise TraceError(f"cta_group is 1 or 2, got {cta_group!r}", user_location())
    return f"cta_group::{cta_group}"


def _addr(x, what: str):
    """An address operand: a ``ptx.addr``, a register holding the address, a shared array."""
    if isinstance(x, ir.Addr):
        return x
    if hasattr(x, "__ptx_addr__"):
        return x.__ptx_addr__()
    if isinstance(x, ir.Special):
        x = reg.as_reg(x)
    if isinstance(x, ir.Reg):
        return ir.Addr(x)
    raise TraceError(f"{what} is an address: a 32-bit register, ptx.addr(reg, offset) or a "
                     f"shared array, got {x!r}", user_location())


def _regs(x, what: str) -> list:
    if hasattr(x, "__ptx_regs__"):
        return list(x.__ptx_regs__())
    if isinstance(x, (list, tuple)):
        return list(x)
    if isinstance(x, ir.Reg):
        return [x]
    raise TraceError(f"{what} is a list of .b32 registers (or a reg.array), got {x!r}",
                     user_location())


def _inst(name: str, chain: list[str], args: tuple, pred) -> None:
    current(f"ptx.tcgen05.{name}").inst(["tcgen05", *chain], args, guard=pred)


# ---------------------------------------------------------------- allocation
def alloc(tmem_addr, ncols, *, cta_group: int = 1, pred=None) -> None:
    """``tcgen05.alloc.cta_group::N.sync.aligned.shared::cta.b32 [tmem_addr], ncols``: a
    whole warp allocates ``ncols`` (32..512, a power of two) TMEM columns and the base
    address lands at the shared address ``tmem_addr``."""
    if isinstance(ncols, int) and (ncols < 32 or ncols > 512 or ncols & (ncols - 1)):
        raise TraceError(f"tcgen05.alloc takes a power of two from 32 to 512 columns, got "
                         f"{ncols}", user_location())
    _inst("alloc", ["alloc", _group(cta_group), "sync", "aligned", "shared::cta", "b32"],
          (_addr(tmem_addr, "tcgen05.alloc's slot"), ncols), pred)


def dealloc(taddr, ncols, *, cta_group: int = 1, pred=None) -> None:
    """``tcgen05.dealloc.cta_group::N.sync.aligned.b32 taddr, ncols``."""
    _inst("dealloc", ["dealloc", _group(cta_group), "sync", "aligned", "b32"],
          (reg.as_reg(taddr), ncols), pred)


def relinquish_alloc_permit(*, cta_group: int = 1, pred=None) -> None:
    """``tcgen05.relinquish_alloc_permit.cta_group::N.sync.aligned``."""
    _inst("relinquish_alloc_permit",
          ["relinquish_alloc_permit", _group(cta_group), "sync", "aligned"], (), pred)


# ---------------------------------------------------------------- mma
def _enable_pred(value, pred):
    """The enable-input-d predicate: a .pred register as is; another register tested
    against zero (``setp.ne.b32``); a Python bool through ``mov.u32`` + ``setp.ne.b32``
    (pyptx's spelling; PTX wants a predicate register)."""
    if isinstance(value, ir.Reg) and value.dtype == pred_t:
        return value
    b = current("ptx.tcgen05.mma")
    p = reg.scalar(pred_t)
    if isinstance(value, (ir.Reg, ir.Special)):
        b.inst(["setp", "ne", "b32"], (p, reg.as_reg(value), 0), guard=pred)
        return p
    if not isinstance(value, (bool, int)):
        raise TraceError(f"tcgen05.mma's enable-input-d is a predicate, a register or a "
                         f"bool, got {value!r}", user_location())
    w = reg.scalar(u32)
    b.inst(["mov", "u32"], (w, 1 if value else 0), guard=pred)
    b.inst(["setp", "ne", "b32"], (p, w, 0), guard=pred)
    return p


def _word(w, pred):
    """A mask word as a register (list operands take registers): ``mov.u32`` for an int."""
    if not isinstance(w, int):
        return w
    r = reg.scalar(u32)
    current("ptx.tcgen05.mma").inst(["mov", "u32"], (r, w), guard=pred)
    return r


def mma(d_tmem, a_desc, b_desc, idesc, *, cta_group: int = 1, kind: str = "f16",
        enable_input_d=True, scale_d=None, pred_operand=None, sparse: bool = False,
        sparse_metadata=None, ashift: bool = False, collector_a: str | None = None,
        a_is_tmem: bool = False, disable_output_lane=None, scale_c: int | None = None,
        scale_a_tmem=None, scale_b_tmem=None, scale_vec: str | None = None,
        pred=None) -> None:
    """``tcgen05.mma[.sp].cta_group::N.kind::K[.ashift][.collector::a::X] [d_tmem], a,
    b_desc, [meta,] idesc[, {mask}], p[, scale_c]``: D (TMEM) = A*B (+ D where ``p``).

    - ``a_desc``: A's shared-memory descriptor, or with ``a_is_tmem=True`` (or a
      ``ptx.addr``) A's TMEM address; ``b_desc``: B's descriptor; ``idesc``: the 32-bit
      instruction descriptor (:func:`instr_desc`; a register or an int);
    - the accumulate predicate ``p`` is ``pred_operand`` when given (pyptx's name), else
      ``scale_d`` when given, else ``enable_input_d``: each a .pred register, another
      register (tested ``!= 0``) or a bool (materialised with ``mov`` + ``setp``);
    - ``disable_output_lane``: the mask of 4 (cta_group 1) or 8 (cta_group 2) .b32
      registers/ints (left out: every lane written); ``scale_c``: scale-input-d, 0..15
      (kind f16 / tf32); ``sparse`` with ``sparse_metadata`` (its TMEM address);
    - the block-scaled kinds (``mxf8f6f4``, ``mxf4``, ``mxf4nvf4``: ``.block_scale``) take
      ``scale_a_tmem`` and ``scale_b_tmem`` (the TMEM addresses of the scale factors) and
      ``scale_vec`` (``"1X"``, ``"2X"``, ``"4X"``, ``"block16"``, ``"block32"``; None: the
      kind's default, PTX 8.8), and no mask or ``scale_c``.
    """
    block = kind in _BLOCK_KINDS
    if kind not in _KINDS and not block:
        raise TraceError(f"tcgen05.mma kind is one of {', '.join(_KINDS + _BLOCK_KINDS)}, "
                         f"got {kind!r}", user_location())
    if block != (scale_a_tmem is not None and scale_b_tmem is not None):
        raise TraceError(f"the block-scaled kinds ({', '.join(_BLOCK_KINDS)}) take "
                         f"scale_a_tmem= and scale_b_tmem= (their scale factors' TMEM "
                         f"addresses), and only they do; kind={kind!r}", user_location())
    if scale_vec is not None and scale_vec not in _SCALE_VECS:
        raise TraceError(f"scale_vec is one of {', '.join(_SCALE_VECS)}, got {scale_vec!r}",
                         user_location())
    if collector_a is not None and collector_a not in _COLLECTOR_A:
        raise TraceError(f"collector_a is one of {', '.join(_COLLECTOR_A)}, got "
                         f"{collector_a!r}", user_location())
    if sparse != (sparse_metadata is not None):
        raise TraceError("a sparse tcgen05.mma takes sparse_metadata= (its TMEM address), "
                         "and only a sparse one does", user_location())
    chain = ["mma", *(["sp"] if sparse else []), _group(cta_group), f"kind::{kind}",
             *(["block_scale"] if block else []),
             *([_SCALE_VECS[scale_vec]] if scale_vec else []),
             *(["ashift"] if ashift else []),
             *([f"collector::a::{collector_a}"] if collector_a else [])]
    a_tmem = a_is_tmem or isinstance(a_desc, ir.Addr) or ashift
    args = [_addr(d_tmem, "tcgen05.mma's D"),
            _addr(a_desc, "tcgen05.mma's TMEM A") if a_tmem else reg.as_reg(a_desc),
            reg.as_reg(b_desc)]
    if sparse:
        args.append(_addr(sparse_metadata, "tcgen05.mma's sparsity metadata"))
    args.append(idesc)
    if block:
        args += [_addr(scale_a_tmem, "tcgen05.mma's A scale factors"),
                 _addr(scale_b_tmem, "tcgen05.mma's B scale factors")]
    if disable_output_lane is not None:
        words = [disable_output_lane] * (4 * cta_group) \
            if isinstance(disable_output_lane, int) else \
            _regs(disable_output_lane, "disable_output_lane")
        args.append([_word(w, pred) for w in words])
    chosen = pred_operand if pred_operand is not None else \
        scale_d if scale_d is not None else enable_input_d
    args.append(_enable_pred(chosen, pred))
    if scale_c is not None:
        args.append(int(scale_c))
    _inst("mma", chain, tuple(args), pred)


def commit(mbar, *, cta_group: int = 1, multicast: bool = False, multicast_mask=None,
           space: str = "cluster", pred=None) -> None:
    """``tcgen05.commit.cta_group::N.mbarrier::arrive::one.shared::cluster[.multicast::
    cluster].b64 [mbar][, mask]``: the mbarrier at ``mbar`` (a 32-bit shared address)
    gets one arrival when this thread's earlier tcgen05 operations finish; with
    ``multicast_mask`` (a 16-bit register of CTA ranks), on each of those CTAs."""
    if space != "cluster":
        raise TraceError(f"tcgen05.commit's mbarrier is a .shared::cluster address (ptxas "
                         f"refuses .shared::{space}: 'State space incorrect'); a CTA's own "
                         f"shared address is one, so pass space='cluster'", user_location())
    multicast = multicast or multicast_mask is not None
    if multicast and multicast_mask is None:
        raise TraceError("tcgen05.commit(multicast=True) needs multicast_mask= (a .b16 "
                         "register of CTA ranks)", user_location())
    chain = ["commit", _group(cta_group), "mbarrier::arrive::one", "shared::cluster",
             *(["multicast::cluster"] if multicast else []), "b64"]
    args = (_addr(mbar, "tcgen05.commit's mbarrier"),) + (
        (reg.as_reg(multicast_mask),) if multicast else ())
    _inst("commit", chain, args, pred)


def fence_before_thread_sync(*, pred=None) -> None:
    """``tcgen05.fence::before_thread_sync``."""
    _inst("fence_before_thread_sync", ["fence::before_thread_sync"], (), pred)


def fence_after_thread_sync(*, pred=None) -> None:
    """``tcgen05.fence::after_thread_sync``."""
    _inst("fence_after_thread_sync", ["fence::after_thread_sync"], (), pred)


def wait_ld(*, pred=None) -> None:
    """``tcgen05.wait::ld.sync.aligned``: this thread's tcgen05.ld results are readable."""
    _inst("wait_ld", ["wait::ld", "sync", "aligned"], (), pred)


def wait_st(*, pred=None) -> None:
    """``tcgen05.wait::st.sync.aligned``: this thread's tcgen05.st writes are done."""
    _inst("wait_st", ["wait::st", "sync", "aligned"], (), pred)


# ---------------------------------------------------------------- ld / st / cp / shift
def _ldst_chain(op, shape, count, dtype, half):
    if dtype != "b32":
        raise TraceError(f"tcgen05.{op} moves .b32 registers, got dtype={dtype!r}",
                         user_location())
    return [op, "sync", "aligned", shape.lstrip("."), f"x{count}", *half, "b32"]


def ld(dst_regs, taddr, *, shape: str = "16x128b", count: int = 1, dtype: str = "b32",
       pack: bool = False, offset: int | None = None, pred=None):
    """``tcgen05.ld.sync.aligned.<shape>.x<count>[.pack::16b].b32 {regs}, [taddr][,
    offset]``: a warp reads its lanes of TMEM into ``dst_regs`` (``count`` times the
    shape's registers: 1 for .32x32b / .16x64b / .16x32bx2, 2 for .16x128b, 4 for
    .16x256b); ``offset`` is .16x32bx2's second-half column offset. Asynchronous: read
    the registers after :func:`wait_ld`. Returns the registers."""
    regs = _regs(dst_regs, "tcgen05.ld's destination")
    args = [regs, _addr(taddr, "tcgen05.ld's TMEM address")]
    if offset is not None:
        args.append(offset)
    _inst("ld", _ldst_chain("ld", shape, count, dtype, ["pack::16b"] if pack else []),
          tuple(args), pred)
    return regs


def st(taddr, src_regs, *, shape: str = "16x128b", count: int = 1, dtype: str = "b32",
       unpack: bool = False, offset: int | None = None, pred=None) -> None:
    """``tcgen05.st.sync.aligned.<shape>.x<count>[.unpack::16b].b32 [taddr][, offset],
    {regs}``: the inverse of :func:`ld`; :func:`wait_st` before relying on it."""
    args = [_addr(taddr, "tcgen05.st's TMEM address")]
    if offset is not None:
        args.append(offset)
    args.append(_regs(src_regs, "tcgen05.st's source"))
    _inst("st", _ldst_chain("st", shape, count, dtype, ["unpack::16b"] if unpack else []),
          tuple(args), pred)


def cp(taddr, src, *, cta_group: int = 1, size: str = "128x256b", multicast: str | None = None,
       decompress: str | None = None, src_is_addr=None, pred=None) -> None:
    """``tcgen05.cp.cta_group::N.<size>[.<multicast>][.b8x16.<decompress>] [taddr], desc``:
    copy the shared-memory matrix of descriptor ``src`` into TMEM. ``multicast``:
    ``"warpx2::02_13"`` / ``"warpx2::01_23"`` (64x128b) or ``"warpx4"`` (32x128b);
    ``decompress``: ``"b6x16_p32"`` or ``"b4x16_p64"``. pyptx's ``size="64x128b.warpx2::02_13"``
    (the multicast written after the size) is the same instruction."""
    del src_is_addr  # pyptx's switch; the source is always a descriptor register here
    if isinstance(size, str) and "." in size and multicast is None:
        size, multicast = size.split(".", 1)
    chain = ["cp", _group(cta_group), size, *([multicast] if multicast else []),
             *(["b8x16", decompress] if decompress else [])]
    _inst("cp", chain, (_addr(taddr, "tcgen05.cp's TMEM address"), reg.as_reg(src)), pred)


def shift(taddr, *, cta_group: int = 1, pred=None) -> None:
    """``tcgen05.shift.cta_group::N.down [taddr]``."""
    _inst("shift", ["shift", _group(cta_group), "down"],
          (_addr(taddr, "tcgen05.shift's TMEM address"),), pred)


# ---------------------------------------------------------------- descriptors
_SWIZZLES = ("NONE", "128B_BASE32B", "128B", "64B", "32B")


def _smem_reg(smem_addr):
    if hasattr(smem_addr, "__ptx_addr__"):
        smem_addr = smem_addr.__ptx_addr__()
    if isinstance(smem_addr, ir.Addr):
        return reg.as_reg(smem_addr.base), smem_addr.offset
    if isinstance(smem_addr, (ir.Reg, ir.Special)):
        return reg.as_reg(smem_addr), 0
    raise TraceError(f"a tcgen05 descriptor needs a shared address (a .u32 register or a "
                     f"shared array), got {smem_addr!r}", user_location())


def _masked(name: str, smem_addr, byte_offset: int, mask: int, const_bits: int) -> ir.Reg:
    """``((addr + byte_offset) & mask) >> 4`` (its 14-bit start field) OR ``const_bits``:
    ``add.u32``, ``and.b32``, ``shr.u32``, ``cvt.u64.u32``, ``or.b64``."""
    addr, off = _smem_reg(smem_addr)
    b = current(f"ptx.tcgen05.{name}")
    off += byte_offset
    if off:
        t = reg.scalar(u32)
        b.inst(["add", "s32" if off < 0 else "u32"], (t, addr, off))
        addr = t
    t = reg.scalar(u32)
    b.inst(["and", "b32"], (t, addr, mask))
    b.inst(["shr", "u32"], (t, t, 4))
    d = reg.scalar(u64)
    b.inst(["cvt", "u64", "u32"], (d, t))
    out = reg.scalar(b64)
    b.inst(["or", "b64"], (out, d, const_bits))
    return out


def descriptor(smem_addr, *, byte_offset: int = 0, stride_bytes: int,
               leading_bytes: int = 16, swizzle: str = "128B", version: int = 1,
               base_offset: int = 0, lbo_mode: int = 0) -> ir.Reg:
    """The 64-bit shared-memory descriptor of the matrix at ``smem_addr + byte_offset``
    (:class:`~ptxdsl.isa.tcgen05_descriptors.SmemDescriptor100`'s fields: ``swizzle`` one
    of NONE, 128B_BASE32B, 128B, 64B, 32B; byte offsets multiples of 16)."""
    if swizzle not in _SWIZZLES:
        raise TraceError(f"swizzle is one of {', '.join(_SWIZZLES)}, got {swizzle!r}",
                         user_location())
    layout = {"NONE": "none", "128B_BASE32B": "128B_base32B"}.get(swizzle, swizzle)
    try:
        fields = SmemDescriptor100(0, leading_bytes, stride_bytes, base_offset, layout,
                                   bool(lbo_mode), version)
    except ValueError as e:
        raise TraceError(str(e), user_location()) from None
    return _masked("descriptor", smem_addr, byte_offset, 0x3FFF0, fields.constant_bits())


def masked_descriptor(smem_addr, *, byte_offset: int = 0, mask: int = 0x3FFF0,
                      const_bits: int = BLACKWELL_MASKED_DESC_B128) -> ir.Reg:
    """pyptx's spelling: ``((addr + byte_offset) & mask) >> 4`` OR ``const_bits`` (by
    default a K-major 128-byte-swizzled tile with LBO 16 and SBO 1024)."""
    return _masked("masked_descriptor", smem_addr, byte_offset, mask, const_bits)


def instr_desc(*, kind: str = "f16", m: int = 128, n: int = 256, a: str = "bf16",
               b: str | None = None, d: str = "f32", a_major: str = "K", b_major: str = "K",
               negate_a: bool = False, negate_b: bool = False, saturate: bool = False,
               sparse: bool = False, max_shift: int = 0) -> int:
    """The 32-bit instruction descriptor (an int; put it in a register with
    ``reg.scalar(b32, init=...)`` or pass it to :func:`mma` as is)."""
    try:
        return InstrDescriptor(kind, m, n, a, a if b is None else b, d, a_major, b_major,
                               negate_a, negate_b, saturate, sparse, max_shift).encode()
    except ValueError as e:
        raise TraceError(f"tcgen05 instruction descriptor: {e}", user_location()) from None


def make_instr_desc_f16bf16_f32(*, m: int = 128, n: int = 256, ab_dtype: str = "bf16",
                                a_major: str = "K", b_major: str = "K", scale_a: int = 1,
                                scale_b: int = 1, saturate: bool = False,
                                sparse: bool = False, max_shift: int = 0) -> int:
    """pyptx's spelling of :func:`instr_desc` for f16/bf16/tf32 inputs and an f32
    accumulator (``scale_a`` / ``scale_b``: 1, or -1 to negate)."""
    for name, v in (("scale_a", scale_a), ("scale_b", scale_b)):
        if v not in (1, -1):
            raise TraceError(f"{name} is 1 or -1, got {v!r}", user_location())
    kind = "tf32" if ab_dtype == "tf32" else "f16"
    return instr_desc(kind=kind, m=m, n=n, a=ab_dtype, d="f32", a_major=a_major,
                      b_major=b_major, negate_a=scale_a == -1, negate_b=scale_b == -1,
                      saturate=saturate, sparse=sparse, max_shift=max_shift)
