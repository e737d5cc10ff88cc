"""Registers for kernel bodies: ``reg.scalar``, ``reg.array`` and register operators.

Every operator records exactly the instruction(s) listed here, nothing else:

==================  ===========================================================
``a + b``           ``add.{u|s|f}N`` (``a - b``: ``sub``)
``a * b``           floats: ``mul.fN``; 64-bit ints: ``mul.lo``; 16/32-bit ints:
                    ``mul.lo`` where the product is used as a 32-bit value and
                    ``mul.wide`` where it meets a 64-bit register (pointer
                    arithmetic), both if used both ways, nothing if unused
``a / b``           floats: ``div.rn.fN``; ints: refused (use ``//``)
``a // b, a % b``   ``div.{u|s}N``, ``rem.{u|s}N``
``& | ^``           ``and/or/xor.bN`` (``.pred`` on predicates)
``<< >>``           ``shl.bN``; ``shr.uN`` / ``shr.sN`` / ``shr.bN`` by signedness
``-a, ~a, abs(a)``  ``neg``, ``not``, ``abs``
``< <= > >=``       ``setp.{lt|le|gt|ge}.T`` -> a new predicate register
``==  !=``          ints: ``setp.eq.bN`` / ``setp.ne.bN`` (equality is bitwise);
                    floats: ``setp.eq.fN`` / ``setp.neu.fN`` (``!=`` is true for
                    NaN, as Python's is)
``64-bit op 32-bit``  the 32-bit side is widened first: the ``mul.wide`` of a
                    product (in a ``style="pyptx"`` kernel ``mul.lo`` and ``cvt`` where
                    the trace proves it fits in 32 bits, :mod:`ptxdsl.dsl.ranges`), else
                    ``cvt.u64.u32`` / ``cvt.s64.s32``
==================  ===========================================================

In-place forms (``a += b``) write the result back into ``a``'s register.
"""
from __future__ import annotations

from ..core import ir
from ..core.errors import (
    OperandTypeError, PtxdslError, TraceError, TraceIndexError, TraceTypeError, user_location)
from ..isa import resolve as resolve_chain
from .ranges import bound
from ..core.operand_text import describe
from ..core.trace import active_builder, current
from ..core.types import (
    ALL_TYPES, PREFIX_TYPE, REG_PREFIX, PtxType, bf16, e4m3, e5m2, f16, float_bits, move_type,
    pred)

# The lane type of each packed float pair: an initialiser is rounded to it and splatted.
LANE_TYPES = {"f16x2": f16, "bf16x2": bf16, "e4m3x2": e4m3, "e5m2x2": e5m2}

_CMP = {"lt": "lt", "le": "le", "gt": "gt", "ge": "ge", "eq": "eq", "ne": "ne"}


class RegArray:
    """A run of registers ``%f0 .. %f{n-1}`` indexed by Python ints at trace time."""

    def __init__(self, regs: list[ir.Reg]):
        self._regs = regs

    def __len__(self) -> int:
        return len(self._regs)

    def __iter__(self):
        return iter(self._regs)

    def __ptx_regs__(self) -> list[ir.Reg]:
        """The registers, for operands that take a register list (mma fragments)."""
        return list(self._regs)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return self._regs[i]
        if isinstance(i, (ir.Reg, ir.Special)):
            raise TraceError(
                "register arrays are indexed by Python ints at trace time; a register "
                "index would need run-time addressing (use smem.alloc or local memory)",
                user_location())
        try:
            return self._regs[i]
        except IndexError:
            raise TraceIndexError(f"register index {i} out of range for reg.array of "
                                  f"{len(self._regs)} (valid: 0 .. {len(self._regs) - 1})",
                                  user_location()) from None
        except TypeError:
            raise TraceError(f"register arrays are indexed by Python ints, got {i!r}",
                             user_location()) from None

    def __setitem__(self, i, value):
        """``arr[i] = x`` records ``mov`` into the slot."""
        dst = self[i]
        current().inst(["mov", _mov_type(dst.dtype)], (dst, value))

    @property
    def dtype(self) -> PtxType:
        return self._regs[0].dtype

    def __repr__(self) -> str:
        return f"RegArray({self._regs[0].name}.., n={len(self._regs)}, {self.dtype.name})"

    def regs(self) -> list:
        """The registers, in order (pyptx's ``RegArray.regs()``)."""
        return list(self._regs)

    @property
    def count(self) -> int:
        return len(self._regs)

    def hw_order(self, *, reverse: bool = False) -> "RegArray":
        """The same registers in declaration order, or reversed (pyptx's spelling for the
        order its GEMM hands a wgmma accumulator over; no instruction)."""
        return RegArray(list(reversed(self._regs)) if reverse else list(self._regs))


def scalar(dtype: PtxType, init=None, name: str | None = None) -> ir.Reg:
    """A new register; with ``init`` also ``mov.T reg, init``.

    f16/bf16 constants are written as ``mov.b16 reg, 0xNNNN`` (PTX has no
    half-precision literals), f16x2/bf16x2 ones as ``mov.b32`` with the value in
    both halves, e4m3x2/e5m2x2 ones as ``mov.b16`` with the value in both bytes
    (rounded to nearest even, saturated to the finite range as ``cvt.rn.satfinite``);
    ``init`` may also be a register.
    """
    b = current("reg.scalar")
    if not isinstance(dtype, PtxType):
        raise TraceError(f"reg.scalar needs a ptxdsl type such as f32 or u32, got {dtype!r}",
                         user_location())
    r = b.new_reg(dtype, name)
    if init is not None:
        assign(r, init)
    return r


def array(dtype: PtxType, n: int, name: str | None = None) -> RegArray:
    """``n`` registers of one type, declared together (``.reg .f32 %f<n>``), all ``n``
    even where some are never used (as pyptx declares an array; an unused
    :func:`scalar` is not declared). ``name`` (pyptx's ``"%acc"`` or ``"acc"``) names
    them ``%acc0 .. %acc{n-1}``; a generated prefix (``"%r"``, ``"%f"``, ...) means the
    default names."""
    b = current("reg.array")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise TraceError(f"reg.array needs a positive int count, got {n!r}", user_location())
    base = None if name is None else str(name).lstrip("%")
    if base is not None and (base in PREFIX_TYPE or not base):
        base = None
    regs = [b.new_reg(dtype, None if base is None else f"{base}{i}") for i in range(n)]
    b.declared.update(dict.fromkeys(regs))
    return RegArray(regs)


def alloc(dtype: PtxType) -> ir.Reg:
    """pyptx's ``reg.alloc(t)``: :func:`scalar` without ``init``."""
    return scalar(dtype)


def alloc_array(dtype: PtxType, count: int) -> RegArray:
    """pyptx's ``reg.alloc_array(t, n)``: :func:`array`."""
    return array(dtype, count)


def wgmma_frag(*, m: int, n: int, dtype: PtxType, name: str | None = None) -> RegArray:
    """The ``m * n / 128`` registers a warpgroup holds of a dense ``m x n`` wgmma
    accumulator (pyptx's spelling; :func:`ptxdsl.dsl.wgmma.accumulator` also knows the
    layout)."""
    if any(isinstance(x, bool) or not isinstance(x, int) or x < 1 for x in (m, n)) or \
            (m * n) % 128:
        raise TraceError(f"reg.wgmma_frag: m * n must be a positive multiple of 128 (a "
                         f"warpgroup's 128 threads share the tile), got m={m!r} n={n!r}",
                         user_location())
    return array(dtype, m * n // 128, name=name)


def from_(src, dtype: PtxType) -> ir.Reg:
    """A new ``dtype`` register and ``mov`` of ``src`` into it: a register, a special
    register, a number, or a shared array's name (its shared address)."""
    b = current("reg.from_")
    if isinstance(src, str):
        known = {d.name for d in b.shared}
        if src not in known:
            raise TraceError(f"reg.from_({src!r}, ...): no shared array named {src!r} in "
                             f"this kernel (have: {', '.join(sorted(known)) or 'none'})",
                             user_location())
        r = b.new_reg(dtype)
        b.inst(["mov", _mov_type(dtype)], (r, ir.Symbol(src, "shared")))
        return r
    return scalar(dtype, init=src)


class NegPred:
    """``@!p``: a predicate read negated, as a guard (``pred=reg.NegPred(p)``). ptxdsl's
    ``~p`` records ``not.pred`` into a new predicate instead (pyptx's ``~p`` is this)."""

    def __init__(self, reg: ir.Reg):
        if not isinstance(reg, ir.Reg) or not reg.dtype.is_pred:
            raise TraceError(f"reg.NegPred takes a predicate register, got {reg!r}",
                             user_location())
        self.reg = reg

    def __invert__(self) -> ir.Reg:
        return self.reg

    def __repr__(self) -> str:
        return f"NegPred(%{self.reg.name})"


Reg = ir.Reg  # pyptx's class name for a register


def assign(dst: ir.Reg, value) -> ir.Reg:
    """Record ``mov`` of ``value`` (register, special register or Python number) into ``dst``."""
    b = current()
    if dst.dtype.is_pred:
        if isinstance(value, ir.Reg):
            b.inst(["mov", "pred"], (dst, value))
            return dst
        raise TraceError("predicates cannot be initialised from numbers; write a "
                         "comparison (p = x < n) instead", user_location())
    if dst.dtype.is_float and dst.dtype.name not in ("f32", "f64") \
            and isinstance(value, (int, float)) and not isinstance(value, bool):
        if dst.dtype.name == "tf32":
            raise TraceError("tf32 registers are written by cvt.rna.tf32.f32; initialise an "
                             "f32 register and convert it", user_location())
        lanes = dst.dtype.lanes
        lane = LANE_TYPES.get(dst.dtype.name, dst.dtype)  # f16x2 -> f16, e4m3x2 -> e4m3
        bits = float_bits(lane, value)
        if lanes == 2:  # splat: both lanes hold the value
            bits |= bits << (dst.dtype.bits // 2)
        b.inst(["mov", f"b{dst.dtype.bits}"], (dst, bits))
        return dst
    if isinstance(value, ir.Reg) and dst.dtype.is_int and value.dtype.is_int \
            and dst.dtype.bits == 64 and value.dtype.bits < 64:
        value = widen(value, dst.dtype)
    b.inst(["mov", _mov_type(dst.dtype)], (dst, value))
    return dst


def _mov_type(t: PtxType) -> str:
    """mov has no half-precision (or tf32) forms: those registers move as raw bits."""
    return move_type(t).name


# --------------------------------------------------------------------- products
class ProductReg(ir.Reg):
    """The result of ``a * b`` on 16/32-bit integers: ``mul.lo`` or ``mul.wide`` by use."""

    __slots__ = ("_wide", "_a", "_b", "_deferred")

    def __init__(self, name, dtype, owner, a, b_):
        super().__init__(name, dtype, owner)
        self._wide = None
        self._a = a
        self._b = b_

    def wide_reg(self) -> ir.Reg | None:
        """The double-width product register, or None once this register was overwritten."""
        if self.owner.writes.get(self, 0):
            return None
        if self._wide is None:
            t = ALL_TYPES[f"{'s' if self.dtype.is_signed else 'u'}{self.dtype.bits * 2}"]
            self._wide = self.owner.new_reg(t)
        return self._wide

    @property
    def wide(self) -> ir.Reg:
        """``mul.wide`` of the same operands (exact, never truncated)."""
        w = self.wide_reg()
        if w is None:
            raise TraceError(f"%{self.name} was overwritten after the multiply, so its "
                             f"wide product no longer exists; widen with cvt instead",
                             user_location())
        return w


def _product(a: ir.Reg, other, loc) -> ir.Reg:
    b = current()
    t = a.dtype if a.dtype.kind != "b" else ALL_TYPES[f"u{a.dtype.bits}"]
    prod = ProductReg(f"{_prefix(t)}{b._counters.get(_prefix(t), 0)}", t, b, a, other)
    b._counters[_prefix(t)] = b._counters.get(_prefix(t), 0) + 1
    b.regs.append(prod)
    # Validate both forms now, so a bad operand fails at the user's line.
    lo_form = b.build(["mul", "lo", t.name], (prod, a, other), loc=loc)
    wide_match = resolve_chain(["mul", "wide", t.name])

    def resolve(used):
        out = []
        wide = prod._wide is not None and prod._wide in used
        if wide and b.cache.get("style") == "pyptx" and _fits_32(prod, b):
            # pyptx's 32-bit offset where it is exact: mul.lo, then widen (dsl.ranges)
            w = prod._wide
            return [lo_form, ir.Instr(resolve_chain(["cvt", w.dtype.name, t.name]), (w, prod),
                                      loc)]
        if prod in used:
            out.append(lo_form)
        if wide:
            out.append(ir.Instr(wide_match, (prod._wide,) + lo_form.operands[1:], loc))
        return out

    node = ir.Deferred(resolve, loc)
    node.reads = tuple(x for x in (a, other) if isinstance(x, ir.Reg))
    b.append(node)
    return prod


def _fits_32(prod: "ProductReg", owner) -> bool:
    """Whether the trace proves ``prod``'s product below 2**32 (2**31 when signed)."""
    v = bound(prod, owner)
    return v is not None and v < (1 << (31 if prod.dtype.is_signed else 32))


def _prefix(t: PtxType) -> str:
    return REG_PREFIX[t.name]


# --------------------------------------------------------------------- operators
def as_reg(x, what="operand"):
    """Registers pass through; special registers are read with ``mov.u32``."""
    if isinstance(x, ir.Reg):
        return x
    if isinstance(x, ir.Special):
        b = current()
        r = b.new_reg(x.dtype)
        b.inst(["mov", x.dtype.name], (r, x))
        return r
    return x


def widen(x: ir.Reg, to: PtxType) -> ir.Reg:
    """A 64-bit view of a 32-bit integer: its ``mul.wide`` product if it is one, else ``cvt``."""
    if isinstance(x, ProductReg):
        w = x.wide_reg()
        if w is not None:
            return w
    b = current()
    t = ALL_TYPES[f"{'s' if x.dtype.is_signed else 'u'}64"]
    r = b.new_reg(t)
    src = x.dtype if x.dtype.kind != "b" else ALL_TYPES[f"u{x.dtype.bits}"]
    b.inst(["cvt", t.name, src.name], (r, x))
    return r


def _int_name(t: PtxType) -> str:
    return t.name if t.kind != "b" else f"u{t.bits}"


def _unify(a, b_, opname):
    """Decide the instruction type of a binary operator and widen operands as needed."""
    a = as_reg(a)
    b_ = as_reg(b_)
    ta = a.dtype
    if isinstance(b_, ir.Reg):
        tb = b_.dtype
        if ta.is_pred or tb.is_pred:
            if ta.is_pred and tb.is_pred:
                return a, b_, pred
            other = tb if ta.is_pred else ta
            raise OperandTypeError(f"cannot {opname} a predicate and a .{other.name} "
                                   f"register; use ptx.select(p, x, y) or a comparison")
        if ta.is_float or tb.is_float:
            if ta != tb:
                raise OperandTypeError(
                    f"cannot {opname} .{ta.name} and .{tb.name} registers; convert one with "
                    f"ptx.cvt({ta.name if ta.is_float else tb.name}, x)")
            return a, b_, ta
        if ta.bits != tb.bits:
            if ta.bits == 64 and tb.bits < 64:
                return a, widen(b_, ta), ta
            if tb.bits == 64 and ta.bits < 64:
                return widen(a, tb), b_, tb
            raise OperandTypeError(f"cannot {opname} .{ta.name} and .{tb.name}; cvt one first")
        return a, b_, ta
    if isinstance(b_, bool) or not isinstance(b_, (int, float)):
        raise OperandTypeError(f"cannot {opname} a register and {describe(b_)}")
    if ta.is_pred:
        raise OperandTypeError(f"cannot {opname} a predicate and a number")
    if not ta.is_float and isinstance(b_, float) and not b_.is_integer():
        raise OperandTypeError(f"cannot {opname} integer register %{a.name} and float {b_!r}; "
                               f"convert with ptx.cvt(f32, x)")
    if ta.is_float and ta.name not in ("f32", "f64"):
        raise OperandTypeError(f"PTX has no .{ta.name} immediates: put {b_!r} in a register "
                               f"(reg.scalar({ta.name}, init={b_!r}))")
    return a, (b_ if ta.is_float else int(b_)), ta  # the tracer checks the range


def binary(op: str, a, b_, *, reflected: bool = False, inplace: bool = False):
    """Record one arithmetic/bitwise operator; see the module table."""
    loc = user_location()
    try:
        return _binary(op, a, b_, reflected, inplace, loc)
    except PtxdslError as e:
        raise e.at(loc) from None


def _binary(op, a, b_, reflected, inplace, loc):
    bld = current(f"the {op} operator on registers")
    x, y, t = _unify(a, b_, op)
    if reflected:
        x, y = y, x
    dst_t = t
    if op in ("add", "sub"):
        if t.is_pred:
            raise OperandTypeError(f"cannot {op} predicates; use & | ^")
        chain = [op, t.name if t.is_float else _int_name(t)]
    elif op == "mul":
        if t.is_pred:
            raise OperandTypeError("cannot multiply predicates; use &")
        if t.is_float:
            chain = ["mul", t.name]
        elif t.bits < 64 and not inplace:
            lhs, rhs = (x, y) if isinstance(x, ir.Reg) else (y, x)
            return _product(lhs, rhs, loc)
        else:
            chain = ["mul", "lo", _int_name(t)]
    elif op == "div":
        if not t.is_float:
            raise OperandTypeError("'/' on integer registers is ambiguous: use '//' for "
                                   "div (truncating) or convert to float with ptx.cvt")
        chain = ["div", "rn", t.name]
    elif op in ("idiv", "rem"):
        if t.is_float or t.is_pred:
            raise OperandTypeError(f"'{'//' if op == 'idiv' else '%'}' is for integer registers")
        chain = ["div" if op == "idiv" else "rem", _int_name(t)]
    elif op in ("and", "or", "xor"):
        if t.is_float:
            raise OperandTypeError(f"cannot {op} float registers; mov them to .b32 first")
        chain = [op, "pred" if t.is_pred else f"b{t.bits}"]
    elif op in ("shl", "shr"):
        if t.is_float or t.is_pred:
            raise OperandTypeError(f"cannot shift .{t.name} registers")
        if isinstance(y, ir.Reg) and y.dtype.bits != 32:
            raise OperandTypeError("shift amounts are 32-bit registers or ints")
        if isinstance(y, int) and y < 0:
            raise OperandTypeError(f"negative shift amount {y}")
        chain = [op, f"b{t.bits}" if op == "shl" or t.kind == "b" else t.name]
    else:  # pragma: no cover
        raise AssertionError(op)
    dst = a if inplace else bld.new_reg(dst_t)
    if inplace and isinstance(a, ir.Reg) and a.dtype.bits < t.bits:
        raise OperandTypeError(f"cannot write a {t.bits}-bit result into %{a.name} "
                               f"(.{a.dtype.name}) in place")
    bld.inst(chain, (dst, x, y), loc=loc)
    return dst


def compare(op: str, a, b_):
    """Record ``setp`` and return the new predicate register.

    Outside any trace, ``==`` and ``!=`` fall back to identity, so that tools can
    keep registers in lists (``reg in program.regs``) without recording anything.
    """
    if op in ("eq", "ne") and active_builder() is None:
        return (a is b_) == (op == "eq")
    loc = user_location()
    try:
        return _compare(op, a, b_, loc)
    except PtxdslError as e:
        raise e.at(loc) from None


def _compare(op, a, b_, loc):
    bld = current("a comparison on registers")
    x, y, t = _unify(a, b_, "compare")
    if t.is_pred:
        raise OperandTypeError("compare predicates with ^ (xor) or &, not comparison operators")
    cmp = _CMP[op]
    if t.is_float and cmp == "ne":
        cmp = "neu"
    tn = t.name if t.is_float else (_int_name(t) if cmp not in ("eq", "ne") else f"b{t.bits}")
    p = bld.new_reg(pred)
    bld.inst(["setp", cmp, tn], (p, x, y), loc=loc)
    return p


def unary(op: str, a):
    loc = user_location()
    try:
        return _unary(op, a, loc)
    except PtxdslError as e:
        raise e.at(loc) from None


def _unary(op, a, loc):
    bld = current(f"the {op} operator on registers")
    a = as_reg(a)
    t = a.dtype
    if op == "not":
        chain = ["not", "pred" if t.is_pred else f"b{t.bits}"]
        if t.is_float:
            raise OperandTypeError("~ is bitwise; float registers have no bitwise not")
    elif op in ("neg", "abs"):
        if t.is_pred:
            raise OperandTypeError(f"cannot {op} a predicate")
        chain = [op, t.name if t.is_float else f"s{t.bits}"]
    else:  # pragma: no cover
        raise AssertionError(op)
    dst = bld.new_reg(t)
    bld.inst(chain, (dst, a), loc=loc)
    return dst


def _no_bool(self):
    raise TraceTypeError(
        f"register %{self.name} has no Python truth value while tracing: its value exists only "
        f"on the GPU. Use `with ptx.if_(pred):` for a run-time branch (or `ptx.select`), and a "
        f"plain Python `if` only on trace-time constants", user_location())


def _no_index(self):
    raise TraceTypeError(
        f"register %{self.name} is a run-time value and cannot be a Python number; use "
        f"`for i in ptx.range_(...)` for a run-time loop, or ptx.cvt to change its type",
        user_location())


def _no_wide(self):
    raise TraceError(
        f"%{self.name} has no .wide: only the product of two 16/32-bit integers (a * b) "
        f"has a double-width form (mul.wide); widen other values with "
        f"ptx.cvt(u64, x) (or s64)", user_location())


def _minmax(op: str, a, b_):
    """``r.max(x)`` / ``r.min(x)``: ``max.T`` / ``min.T`` into a new register."""
    a = as_reg(a)
    bld = current(f"ptx.{op}")
    d = bld.new_reg(a.dtype)
    bld.inst([op, a.dtype.name], (d, a, b_))
    return d


def _install_operators(cls) -> None:
    """Give registers (and special registers) their operators."""
    def bin_(op):
        return (lambda s, o: binary(op, s, o),
                lambda s, o: binary(op, s, o, reflected=True),
                lambda s, o: binary(op, s, o, inplace=True))
    for py, op in (("add", "add"), ("sub", "sub"), ("mul", "mul"), ("truediv", "div"),
                   ("floordiv", "idiv"), ("mod", "rem"), ("and", "and"), ("or", "or"),
                   ("xor", "xor"), ("lshift", "shl"), ("rshift", "shr")):
        f, r, i = bin_(op)
        setattr(cls, f"__{py}__", f)
        setattr(cls, f"__r{py}__", r)
        if cls is ir.Reg:
            setattr(cls, f"__i{py}__", i)
    for py in ("lt", "le", "gt", "ge", "eq", "ne"):
        setattr(cls, f"__{py}__", (lambda op: lambda s, o: compare(op, s, o))(py))
    cls.max = lambda s, o: _minmax("max", s, o)
    cls.min = lambda s, o: _minmax("min", s, o)
    cls.__neg__ = lambda s: unary("neg", s)
    cls.__invert__ = lambda s: unary("not", s)
    cls.__abs__ = lambda s: unary("abs", s)
    cls.__bool__ = _no_bool
    cls.__index__ = _no_index
    cls.__int__ = _no_index
    cls.__float__ = _no_index
    cls.__hash__ = object.__hash__
    if cls is ir.Reg:
        cls.wide = property(_no_wide)  # ProductReg has the real one


_install_operators(ir.Reg)
_install_operators(ir.Special)
ir.Special.__hash__ = lambda s: hash((s.name, s.dtype.name))
