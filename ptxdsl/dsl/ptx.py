"""The ``ptx`` namespace of kernel bodies.

``ptx.inst.<opcode>.<modifiers...>(operands...)`` records one instruction,
checked against the instruction table. Python spells PTX names with two
small rules: a trailing ``_`` dodges a keyword (``global_`` is ``.global``)
and ``__`` stands for ``::`` (``L1__evict_last`` is ``.L1::evict_last``).
The rest of this module are helpers whose docstrings say what they record.
"""
from __future__ import annotations

import contextlib
import string
from typing import Iterator

from ..core import ir
from ..core.errors import TraceError, user_location
from .reg import as_reg, assign
from ..core.trace import current
from ..core.types import PtxType, move_type, pred, u32, u64

__all__ = ["inst", "special", "warp", "bar", "addr", "sink", "global_ptrs", "global_ptr", "if_",
           "else_", "range_", "label", "new_label", "place", "bra", "ret", "exit", "cvt",
           "dim", "select", "fma", "min", "max", "pack", "unpack", "sreg", "param",
           "mbarrier", "cluster", "tma", "fence", "cp", "pipeline", "loop", "kloop",
           "mma", "ldmatrix", "stmatrix", "movmatrix",
           "setmaxnreg", "named_barrier", "stmatrix_x4_trans_f32_bf16", "raw"]


def ptx_name(attr: str) -> str:
    """Python attribute -> PTX modifier.

    ``global_`` -> ``global``, ``L1__evict_last`` -> ``L1::evict_last``, ``_2d`` -> ``2d``
    (a name part that starts with a digit, such as TMA's dimensions).
    """
    if attr[:1] == "_" and attr[1:2].isdigit():
        attr = attr[1:]
    return attr.rstrip("_").replace("__", "::")


class _Chain:
    """An instruction being spelled: each attribute adds one dotted part."""

    __slots__ = ("_parts",)

    def __init__(self, parts: tuple[str, ...]):
        self._parts = parts

    def __getattr__(self, name: str) -> "_Chain":
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _Chain(self._parts + (ptx_name(name),))

    def __call__(self, *operands, pred=None, comment: str | None = None):
        """Record the instruction; returns its destination register (or None)."""
        b = current(f"ptx.inst.{'.'.join(self._parts)}")
        instr = b.inst(self._parts, operands, guard=pred, comment=comment)
        d = instr.dests()
        return d[0] if len(d) == 1 else (d or None)

    def __repr__(self) -> str:
        return f"ptx.inst.{'.'.join(self._parts)}"


class _Inst:
    def __getattr__(self, name: str) -> _Chain:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _Chain((ptx_name(name),))

    def __call__(self, text: str, *operands, pred=None):
        """``ptx.inst("ld.global.L1::evict_last.v4.f32", regs, addr)``: the chain as one string."""
        b = current(f"ptx.inst({text!r})")
        instr = b.inst(tuple(text.split(".")), operands, guard=pred)
        d = instr.dests()
        return d[0] if len(d) == 1 else (d or None)


inst = _Inst()


def raw(text: str, *operands) -> None:
    """Record one PTX instruction line that ptxdsl does NOT check: an escape hatch for
    an instruction the table does not have yet.

    ``text`` is printed verbatim (a trailing ``;`` is added if missing) with each ``{}``
    replaced by the next operand as PTX spells it: registers (``%r3``, named after
    renumbering), ``ptx.addr(...)`` (``[%rd0+8]``), Python ints. Literal braces (vector
    operands) are written ``{{`` and ``}}`` when operands are given. Nothing validates
    the line: ptxas does, at ``kernel.check()``, whose result lists every raw line as
    ``unchecked``; the interpreter refuses a kernel that has one. Registers given as
    operands count as written by the line (so later reads of them pass the verifier).
    """
    b = current("ptx.raw")
    loc = user_location()
    if not isinstance(text, str) or not text.strip():
        raise TraceError(f"ptx.raw takes one PTX instruction as a string, got {text!r}", loc)
    if "\n" in text:
        raise TraceError("ptx.raw takes one instruction line; call it once per line", loc)
    ops = []
    for op in operands:
        if isinstance(op, ir.Reg):
            b.own(op)
        elif isinstance(op, ir.Addr):
            if isinstance(op.base, ir.Reg):
                b.own(op.base)
        elif isinstance(op, bool) or not isinstance(op, (int, ir.Special)):
            raise TraceError(f"ptx.raw operands are registers, ptx.addr(...) addresses, "
                             f"special registers or ints, got {op!r}", loc)
        ops.append(op)
    text = text.strip()
    if ops:
        try:
            fields = [f for _, f, _, _ in string.Formatter().parse(text) if f is not None]
            text.format(*["x"] * len(ops))
        except (IndexError, KeyError, ValueError) as e:
            raise TraceError(f"ptx.raw text {text!r} does not take {len(ops)} operand(s) "
                             f"through {{}} placeholders ({e}); write literal braces as "
                             f"{{{{ and }}}}", loc) from None
        if len(fields) != len(ops):
            raise TraceError(f"ptx.raw got {len(ops)} operand(s) for {len(fields)} {{}} "
                             f"placeholder(s) in {text!r}", loc)
    else:
        text = text.replace("{", "{{").replace("}", "}}")
    node = ir.Raw(text, tuple(str(o) if isinstance(o, int) else o for o in ops), loc)
    for r in node.regs():
        b.writes[r] = b.writes.get(r, 0) + 1
    b.append(node)


from .special import sreg, special  # noqa: E402,F401  (ptx.special, ptx.sreg)


def param(dtype: PtxType, name: str) -> ir.Reg:
    """A kernel parameter's value in a new register: ``ld.param.T`` (``mov.b64 %rd, name``
    for an array parameter such as a tensor map: its address).

    ``name`` is a parameter's PTX name or what the kernel's specs call it: a named dim
    (``"K"`` reads ``K_dim``, what pyptx's ``raw_params`` name), a stride, a tensor (its
    pointer, ``.u64``).
    """
    b = current("ptx.param")
    by_name = {p.name: p for p in b.params}
    p = None
    for cand in (name, f"{name}_dim", f"{name}_stride", f"{name}_ptr"):
        p = by_name.get(cand)
        if p is not None:
            break
    if p is None:
        raise TraceError(f"ptx.param: this kernel has no parameter {name!r} (parameters: "
                         f"{', '.join(by_name) or 'none'})", user_location())
    if p.count > 1:
        if dtype.bits != 64:
            raise TraceError(f"ptx.param({dtype.name}, {name!r}): {p.name} is an array; its "
                             f"address is a 64-bit value", user_location())
        r = b.new_reg(dtype)
        b.inst(["mov", "b64"], (r, ir.Symbol(p.name, "param")))
        return r
    if dtype.bits != p.dtype.bits:
        raise TraceError(f"ptx.param({dtype.name}, {name!r}): {p.name} is .{p.dtype.name} "
                         f"({p.dtype.bits} bits)", user_location())
    r = b.new_reg(dtype)
    b.inst(["ld", "param", dtype.name], (r, ir.Addr(ir.Symbol(p.name, "param"))))
    return r


# ------------------------------------------------------------------ memory helpers
# The sink destination ``_`` (mbarrier.arrive on a peer CTA's barrier returns no state).
sink = ir.SINK


def addr(base, offset=0, *, coords=None) -> ir.Addr:
    """A memory operand ``[base+offset]``.

    ``base`` is a 32/64-bit register or a shared array; an int ``offset`` is
    folded into the operand (no instruction), a register offset records one
    ``add`` (``base + offset``). ``coords=[x, y, ...]`` makes a tensor-map
    operand ``[tmap, {x, y}]`` for TMA copies (``base`` addresses the map).
    """
    if coords is not None:
        if isinstance(base, ir.Special):
            base = as_reg(base)
        if not isinstance(base, (ir.Reg, ir.Symbol)) or offset != 0:
            raise TraceError("a tensor-map operand is ptx.addr(tmap, coords=[...]) with a "
                             ".u64 register or a tensor-map parameter as tmap", user_location())
        return ir.Addr(base, 0, tuple(coords))
    if hasattr(base, "__ptx_addr__"):
        a = base.__ptx_addr__()
        base, offset = a.base, a.offset + offset if isinstance(offset, int) else offset
        if not isinstance(offset, int):
            raise TraceError("a shared array address takes only an int offset; index it "
                             "with alloc.addr(i, j) instead", user_location())
    if isinstance(offset, (ir.Reg, ir.Special)):
        base = as_reg(base) + offset
        offset = 0
    elif isinstance(offset, bool) or not isinstance(offset, int):
        raise TraceError(f"ptx.addr offset must be an int or a register, got {offset!r}",
                         user_location())
    if isinstance(base, ir.Special):
        base = as_reg(base)
    if not isinstance(base, (ir.Reg, ir.Symbol)):
        raise TraceError(f"ptx.addr needs a register (a pointer) or a shared array, got "
                         f"{type(base).__name__}", user_location())
    return ir.Addr(base, offset)


def global_ptr(tensor) -> ir.Reg:
    """``ld.param.u64`` + ``cvta.to.global.u64``: the global address of a tensor argument."""
    b = current("ptx.global_ptr")
    param = getattr(tensor, "param", None)
    if param is None or param.kind != "ptr":
        raise TraceError(f"ptx.global_ptrs takes the kernel's tensor arguments, got "
                         f"{tensor!r}", user_location())
    raw = b.new_reg(u64)
    b.inst(["ld", "param", "u64"], (raw, ir.Addr(ir.Symbol(param.name, "param"))))
    ptr = b.new_reg(u64)
    b.inst(["cvta", "to", "global", "u64"], (ptr, raw))
    return ptr


def global_ptrs(*tensors) -> list[ir.Reg]:
    """One :func:`global_ptr` per argument, in order: ``px, pw, py = ptx.global_ptrs(X, W, Y)``."""
    return [global_ptr(t) for t in tensors]


def dim(name_or_tensor, axis: int | None = None, *, kind: str = "dim"):
    """The value of a dimension: a Python int for concrete dims, else ``ld.param.u32``.

    ``ptx.dim("B")`` reads the named dim; ``ptx.dim(X, 0)`` reads X's axis 0;
    ``ptx.dim("sx", kind="stride")`` reads a named row stride.
    """
    b = current("ptx.dim")
    if axis is not None:
        tile = getattr(name_or_tensor, "tile", None)
        if tile is None:
            raise TraceError(f"ptx.dim(X, axis) takes a tensor argument of the kernel, got "
                             f"{name_or_tensor!r}", user_location())
        if isinstance(axis, bool) or not isinstance(axis, int) or \
                not -len(tile.dims) <= axis < len(tile.dims):
            raise TraceError(f"ptx.dim: no axis {axis} in {tile}, which has "
                             f"{len(tile.dims)} dimensions", user_location())
        size = tile.dims[axis]
        if isinstance(size, int):
            return size
        name = size
    else:
        name = name_or_tensor
    for p in b.params:
        if p.kind == kind and p.name == f"{name}_{kind}":
            r = b.new_reg(u32)
            b.inst(["ld", "param", "u32"], (r, ir.Addr(ir.Symbol(p.name, "param"))))
            return r
    known = sorted(p.name.rsplit("_", 1)[0] for p in b.params if p.kind == kind)
    raise TraceError(f"no dynamic {kind} named {name!r} in this kernel's specs "
                     f"(named dims: {', '.join(known) or 'none'})", user_location())


# ------------------------------------------------------------------ control flow
def _as_pred(p, what: str) -> ir.Reg:
    if isinstance(p, bool):
        raise TraceError(f"{what} got the Python bool {p}: that is decided while tracing, so "
                         f"use a plain Python `if`; {what} needs a predicate register "
                         f"(e.g. tid < n)", user_location())
    if not isinstance(p, ir.Reg) or not p.dtype.is_pred:
        raise TraceError(f"{what} needs a predicate register (a comparison such as "
                         f"`tid < n`), got {p!r}", user_location())
    current().own(p)
    return p


@contextlib.contextmanager
def if_(p) -> Iterator[None]:
    """A run-time branch: the body runs in the threads where ``p`` is true.

    Emits ``@!p bra ELSE/END`` around the body (and ``bra.uni END`` before an
    else branch opened with :func:`else_`).
    """
    b = current("ptx.if_")
    node = ir.If(_as_pred(p, "ptx.if_"), loc=user_location(), label_id=b.new_region_id())
    b.append(node)
    with b.region(node.then_body):
        yield


@contextlib.contextmanager
def else_() -> Iterator[None]:
    """The else branch of the ``ptx.if_`` block that ends right before it."""
    b = current("ptx.else_")
    node = b.last_node
    if not isinstance(node, ir.If) or node.else_body is not None:
        raise TraceError("ptx.else_() must directly follow a `with ptx.if_(...)` block "
                         "that has no else branch yet", user_location())
    node.else_body = []
    with b.region(node.else_body):
        yield


def range_(start, stop=None, step=1, *, dtype: PtxType = u32):
    """A run-time loop: ``for i in ptx.range_(n)`` / ``ptx.range_(start, stop, step)``.

    The body is traced once. Emits ``mov i, start``; at the top
    ``setp.ge i, stop`` (``le`` for a negative step) and ``@p bra END``; at the
    bottom ``add i, i, step`` and ``bra.uni TOP``. ``start``, ``stop`` and
    ``step`` may be registers (a register step must be positive). The counter is
    ``.u32``, or ``.s32`` when the step is negative or a bound is a signed register.
    """
    b = current("ptx.range_")
    if stop is None:
        start, stop = 0, start
    if isinstance(step, int) and step == 0:
        raise TraceError("ptx.range_ step must not be 0", user_location())
    from ..core.types import s32
    start, stop, step = (as_reg(x) for x in (start, stop, step))
    # Count down, or bounded by a signed register: the counter and its compare are
    # signed, so range_(n) with a negative .s32 n runs zero times, as in Python.
    signed = any(isinstance(x, ir.Reg) and x.dtype.kind == "s" for x in (start, stop, step))
    if dtype.kind == "u" and (signed or isinstance(step, int) and step < 0):
        dtype = s32
    loc = user_location()
    var = b.new_reg(dtype)
    for x in (start, stop, step):
        if isinstance(x, ir.Reg):
            b.own(x)
            if not x.dtype.is_int or x.dtype.bits != 32:
                raise TraceError(f"ptx.range_ bounds must be 32-bit integers, got %{x.name} "
                                 f"(.{x.dtype.name})", loc)
    assign(var, start)
    cond = b.new_reg(pred)
    node = ir.Loop(var, start, stop, step, cond, loc=loc, label_id=b.new_region_id())
    # Validate the loop's own instructions now so that errors point here.
    cmp = "le" if isinstance(step, int) and step < 0 else "ge"
    node.check = b.build(["setp", cmp, dtype.name], (cond, var, stop), loc=loc)
    node.incr = b.build(["add", dtype.name], (var, var, step), loc=loc)
    b.append(node)
    with b.region(node.body):
        yield var


def new_label(name: str) -> ir.Label:
    """A label to branch to, placed later with :func:`place`."""
    b = current("ptx.new_label")
    if not name.replace("_", "a").replace("$", "a").isalnum() or name[0].isdigit():
        raise TraceError(f"label name {name!r} must be letters, digits, _ or $ and not "
                         f"start with a digit", user_location())
    if name in b.labels:
        raise TraceError(f"label {name!r} already exists in this kernel", user_location())
    lbl = ir.Label(name, None)
    b.labels[name] = lbl
    return lbl


def place(lbl: ir.Label) -> ir.Label:
    """Put ``lbl`` at this point of the instruction stream."""
    b = current("ptx.place")
    if lbl.loc is not None:
        raise TraceError(f"label {lbl.name!r} was already placed at {lbl.loc}", user_location())
    lbl.loc = user_location()
    b.append(lbl)
    return lbl


def label(name: str) -> ir.Label:
    """Create and place a label here (``name:``)."""
    return place(new_label(name))


def bra(target, pred=None, *, uni: bool = False):
    """``[@p] bra[.uni] target``: an unstructured jump (prefer ``ptx.if_`` / ``ptx.range_``)."""
    b = current("ptx.bra")
    b.inst(["bra", "uni"] if uni else ["bra"], (target,), guard=pred)


def ret():
    """``ret;``: end the kernel for this thread (a body that falls off its end returns too)."""
    current("ptx.ret").inst(["ret"], ())


def exit():  # noqa: A001 - PTX's name
    """``exit;``."""
    current("ptx.exit").inst(["exit"], ())


# ------------------------------------------------------------------ value helpers
def _rounding_for(dst: PtxType, src: PtxType) -> list[str]:
    if dst.is_float and src.is_float:
        if dst.name in ("f16x2", "bf16x2"):
            return ["rn"]
        return ["rn"] if dst.bits < src.bits else []
    if src.is_float and not dst.is_float:
        return ["rzi"]  # C semantics: truncate toward zero
    if dst.is_float:
        return ["rn"]
    return []


def _need_type(what: str, dtype) -> None:
    if not isinstance(dtype, PtxType):
        raise TraceError(f"{what} needs a ptxdsl type such as f32 or u32 (from ptxdsl.types), "
                         f"got {dtype!r}", user_location())


def cvt(dtype: PtxType, x, rounding: str | None = None, *, sat: bool = False) -> ir.Reg:
    """Convert into a new register: ``cvt[.rnd][.sat].dtype.srctype``.

    Defaults follow C: ``.rn`` for int->float and narrowing float->float,
    ``.rzi`` (truncate) for float->int, none for exact widening.
    """
    b = current("ptx.cvt")
    _need_type("ptx.cvt", dtype)
    x = as_reg(x)
    if not isinstance(x, ir.Reg):
        raise TraceError(f"ptx.cvt converts a register, got {x!r}", user_location())
    mods = [rounding] if rounding else _rounding_for(dtype, x.dtype)
    if sat:
        mods.append("sat")
    d = b.new_reg(dtype)
    src = x.dtype if x.dtype.kind != "b" else x.dtype
    b.inst(["cvt", *mods, dtype.name, src.name], (d, x))
    return d


def _typed_by(what: str, *xs) -> PtxType:
    """The type of the first register among ``xs`` (after reading special registers)."""
    for x in xs:
        if isinstance(x, (ir.Reg, ir.Special)):
            return x.dtype
    raise TraceError(f"{what} takes its type from a register operand, got only "
                     f"{', '.join(repr(x) for x in xs)}; put one value in a register first "
                     f"(reg.scalar(f32, init=...))", user_location())


def select(p, a, b_) -> ir.Reg:
    """``selp.T d, a, b, p``: ``a`` where ``p`` holds, else ``b`` (``selp.b16``/``.b32``
    for half-precision registers)."""
    bld = current("ptx.select")
    p = _as_pred(p, "ptx.select")
    t = _typed_by("ptx.select", a, b_)
    d = bld.new_reg(t)
    bld.inst(["selp", move_type(t).name], (d, a, b_, p))
    return d


def fma(a, b_, c) -> ir.Reg:
    """``fma.rn.T d, a, b, c`` into a new register (one rounding)."""
    bld = current("ptx.fma")
    t = _typed_by("ptx.fma", a, b_, c)
    d = bld.new_reg(t)
    bld.inst(["fma", "rn", t.name], (d, a, b_, c))
    return d


def min(a, b_) -> ir.Reg:  # noqa: A001
    """``min.T`` into a new register."""
    bld = current("ptx.min")
    t = _typed_by("ptx.min", a, b_)
    d = bld.new_reg(t)
    bld.inst(["min", t.name], (d, a, b_))
    return d


def max(a, b_) -> ir.Reg:  # noqa: A001
    """``max.T`` into a new register."""
    bld = current("ptx.max")
    t = _typed_by("ptx.max", a, b_)
    d = bld.new_reg(t)
    bld.inst(["max", t.name], (d, a, b_))
    return d


def pack(dtype: PtxType, lo, hi) -> ir.Reg:
    """``mov.b32 d, {lo, hi}``: two 16-bit registers into one 32-bit (e.g. f16x2)."""
    bld = current("ptx.pack")
    _need_type("ptx.pack", dtype)
    d = bld.new_reg(dtype)
    bld.inst(["mov", f"b{dtype.bits}"], (d, [lo, hi]))
    return d


def unpack(x, dtype: PtxType) -> tuple[ir.Reg, ir.Reg]:
    """``mov.b32 {lo, hi}, x``: split a 32-bit register into two 16-bit ones of ``dtype``."""
    bld = current("ptx.unpack")
    x = as_reg(x)
    if not isinstance(x, ir.Reg):
        raise TraceError(f"ptx.unpack splits a register, got {x!r}", user_location())
    _need_type("ptx.unpack", dtype)
    lo, hi = bld.new_reg(dtype), bld.new_reg(dtype)
    bld.inst(["mov", f"b{x.dtype.bits}"], ([lo, hi], x))
    return lo, hi


from . import bar  # noqa: E402
from . import warp  # noqa: E402
# Hopper helpers, each module's docstring lists what its calls record.
from . import cluster, fence, mbarrier, tma  # noqa: E402
from .epilogue import stmatrix_x4_trans_f32_bf16  # noqa: E402
from .loops import kloop, loop  # noqa: E402
from .pipeline import pipeline  # noqa: E402
from .tma import cp  # noqa: E402
from .warpgroup import named_barrier, setmaxnreg  # noqa: E402
from .mma import ldmatrix, mma, movmatrix, stmatrix  # noqa: E402


from . import wgmma  # noqa: E402  (ptx.wgmma.mma / descriptor / fence / commit / wait)
