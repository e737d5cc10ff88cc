"""pyptx's spellings that have no better home: loops written as PTX writes them, the
Hopper GEMM epilogue store, and three ways of grouping instructions.

Grouping: ``ptx.pipe(r).add.s32(t, -8192).and_.b32(u, mask)`` records one instruction
per step, ``op.mods dst, <previous step's dst>, operands...`` (the first step reads
``r``), each checked as ``ptx.inst`` checks it. ``with ptx.expr():`` and
``with ptx.scope():`` record nothing themselves: pyptx uses them to group an
expression's instructions and to open a PTX ``{ }`` block whose registers are local;
ptxdsl declares every register once at the top of the kernel with a name of its own (a
second ``reg.scalar(b32, name="tmp")`` is ``%tmp_1``), so the body's PTX is the same
instructions without the braces.

Loops: a label and a backward branch (``ptx.loop``), and a counted loop unrolled with
a peeled tail (``ptx.kloop``). ``ptx.range_`` is the structured loop to prefer; these
two exist for persistent-tile and K loops whose bodies branch out
(``ptx.bra("exit", pred=...)``), as pyptx's Hopper GEMM writes them.

Epilogue: ``stmatrix_x4_trans_f32_bf16(frag=, smem_base=, lane=, row_stride=)`` stores
a wgmma ``m64nN`` f32 accumulator fragment (``N/2`` registers per thread, in the order the
``wgmma`` consumed them) to a shared tile of bf16, transposed, ``row_stride`` elements
between rows; pyptx's Hopper GEMM epilogue. It records, once::

    and.b32 l, lane, 31;  shr.u32 w, lane, 5
    mad.lo.s32 o, w, 16, 0;  and.b32 t, l, 7;   mad.lo.s32 o, t, row_stride, o
    shr.u32 t2, l, 4;        mad.lo.s32 o, t2, 8*row_stride, o
    and.b32 t3, l, 8;        add.s32 o, o, t3
    shl.b32 o2, o, 1;        add.u32 base, smem_base, o2

and per group of 8 registers ``g``: 8 ``cvt.rn.bf16.f32``, 4 ``mov.b32 {lo, hi}`` and
``stmatrix.sync.aligned.m8n8.x4.trans.shared::cta.b16 [base + g*32*row_stride],
{p0, p1, p2, p3}``.
"""
from __future__ import annotations

import contextlib
from typing import Callable, Iterator

from ..core import ir
from ..core.errors import TraceError, user_location
from ..core.trace import current
from ..core.types import b32, bf16, pred as pred_t, u32
from .control import if_, label as place_label
from .inst import inst
from .reg import as_reg

__all__ = ["loop", "kloop", "stmatrix_x4_trans_f32_bf16", "pipe", "expr", "scope"]


@contextlib.contextmanager
def loop(label: str, *, pred=None) -> Iterator[None]:
    """``label:`` before the body and, after it, ``@pred bra label`` (``bra.uni label``
    without ``pred``: leave such a loop with ``ptx.bra``). The body runs at least once;
    ``pred`` is read at the bottom, so update it in the body."""
    b = current("ptx.loop")
    place_label(label)
    yield
    if pred is None:
        b.inst(["bra", "uni"], (label,))
    else:
        b.inst(["bra"], (label,), guard=pred)


def kloop(total, *, unroll: int, body: Callable[[], None], loop_label: str = "kloop") -> None:
    """Run ``body()`` (which records instructions) ``total`` times, ``unroll`` copies per
    iteration.

    A Python int ``total`` records ``total`` copies. A register ``total`` (32-bit
    integer) records::

        and r, total, unroll-1;  sub m, total, r          // whole iterations' count
        @!(total >= unroll) skip:                         // ptx.if_
            mov left, m;  setp.ne.u32 keep, left, 0   (.s32 for an s32 total)
          loop_label:  body() x unroll;  sub left, left, unroll;  setp.ne keep, left, 0
            @keep bra loop_label
        tail: r copies of body() behind nested ptx.if_ (r != 0, r != 1, ...)

    ``unroll`` is a power of two.
    """
    if isinstance(unroll, bool) or not isinstance(unroll, int) or unroll < 1 or \
            unroll & (unroll - 1):
        raise TraceError(f"ptx.kloop unroll= is a positive power of two, got {unroll!r}",
                         user_location())
    if not callable(body):
        raise TraceError("ptx.kloop body= is a function of no arguments that records the "
                         "loop body", user_location())
    if isinstance(total, int) and not isinstance(total, bool):
        for _ in range(total):
            body()
        return
    b = current("ptx.kloop")
    total = as_reg(total)
    if not isinstance(total, ir.Reg) or not total.dtype.is_int or total.dtype.bits != 32:
        raise TraceError(f"ptx.kloop total is an int or a 32-bit integer register, got "
                         f"{total!r}", user_location())
    t = total.dtype
    cmp = f"{'s' if t.kind == 's' else 'u'}32"   # setp.ne.u32, as pyptx's kloop
    remainder = total & (unroll - 1)
    rounded = total - remainder
    with if_(total >= unroll):
        left = b.new_reg(t)
        b.inst(["mov", f"b{t.bits}"], (left, rounded))
        keep = b.new_reg(pred_t)
        b.inst(["setp", "ne", cmp], (keep, left, 0))
        with loop(loop_label, pred=keep):
            for _ in range(unroll):
                body()
            b.inst(["sub", "s32" if t.kind == "s" else "u32"], (left, left, unroll))
            b.inst(["setp", "ne", cmp], (keep, left, 0))

    def tail(index: int) -> None:
        if index >= unroll:
            return
        with if_(remainder != (index - 1)):
            body()
            tail(index + 1)

    with if_(remainder != 0):
        body()
        tail(2)


def stmatrix_x4_trans_f32_bf16(*, frag, smem_base, lane, row_stride: int, tmp_bf16=None,
                               tmp_pack=None) -> None:
    """See the module docstring's epilogue. ``tmp_bf16`` (8 16-bit registers) and
    ``tmp_pack`` (4 32-bit) are scratch registers to reuse (fresh ones when not given)."""
    b = current("ptx.stmatrix_x4_trans_f32_bf16")
    regs = list(frag.__ptx_regs__() if hasattr(frag, "__ptx_regs__") else frag)
    if not regs or len(regs) % 8:
        raise TraceError(f"stmatrix_x4_trans_f32_bf16: frag holds a multiple of 8 registers, "
                         f"got {len(regs)}", user_location())
    if isinstance(row_stride, bool) or not isinstance(row_stride, int) or row_stride < 1:
        raise TraceError(f"row_stride is a positive int (elements), got {row_stride!r}",
                         user_location())
    rs = list(tmp_bf16) if tmp_bf16 is not None else [b.new_reg(bf16) for _ in range(8)]
    pack = list(tmp_pack) if tmp_pack is not None else [b.new_reg(b32) for _ in range(4)]
    if len(rs) != 8 or len(pack) != 4:
        raise TraceError("tmp_bf16 holds 8 registers and tmp_pack 4", user_location())
    lane = as_reg(lane)
    l32 = lane & 31
    warp = lane >> 5
    off = b.new_reg(u32)
    b.inst(["mad", "lo", "s32"], (off, warp, 16, 0))
    b.inst(["mad", "lo", "s32"], (off, l32 & 7, row_stride, off))
    b.inst(["mad", "lo", "s32"], (off, l32 >> 4, row_stride * 8, off))
    b.inst(["add", "s32"], (off, off, l32 & 8))
    base = smem_base + (off << 1)
    group_bytes = row_stride * 16 * 2
    for g in range(len(regs) // 8):
        for k in range(8):
            b.inst(["cvt", "rn", "bf16", "f32"], (rs[k], regs[g * 8 + k]))
        for k in range(4):
            b.inst(["mov", "b32"], (pack[k], [rs[2 * k], rs[2 * k + 1]]))
        b.inst(["stmatrix", "sync", "aligned", "m8n8", "x4", "trans", "shared::cta", "b16"],
               (ir.Addr(base, g * group_bytes), pack))


class _PipeStep:
    """``ptx.pipe(src).<opcode>.<mods>``: spelled like ``ptx.inst``, called with the
    destination and the operands after ``src``."""

    __slots__ = ("_src", "_chain")

    def __init__(self, src, chain):
        self._src, self._chain = src, chain

    def __getattr__(self, name: str) -> "_PipeStep":
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _PipeStep(self._src, getattr(self._chain, name))

    def __call__(self, dst, *operands, pred=None) -> "_Pipe":
        self._chain(dst, self._src, *operands, pred=pred)
        return _Pipe(dst)


class _Pipe:
    """A chain of instructions, each reading the previous one's destination (see the
    module docstring); ``.reg`` is that destination."""

    __slots__ = ("reg",)

    def __init__(self, src):
        self.reg = src

    def __getattr__(self, name: str) -> _PipeStep:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _PipeStep(self.reg, getattr(inst, name))


def pipe(src) -> _Pipe:
    """pyptx's ``ptx.pipe(src)``: see the module docstring."""
    current("ptx.pipe")
    return _Pipe(src)


@contextlib.contextmanager
def expr() -> Iterator[None]:
    """pyptx's ``with ptx.expr():`` (records nothing; see the module docstring)."""
    current("ptx.expr")
    yield


@contextlib.contextmanager
def scope() -> Iterator[None]:
    """pyptx's ``with ptx.scope():`` (records nothing; see the module docstring)."""
    current("ptx.scope")
    yield
