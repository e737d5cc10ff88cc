"""``ptx.mbarrier``: mbarriers in shared memory, one at a time or as an array.

An :class:`Mbarrier` is the 8-byte mbarrier object at a shared-memory address (a ``.u32``
register or a shared array, plus a byte offset). An :class:`MbarrierArray` is ``n`` of
them 8 bytes apart: ``bars[i]`` (an int: no instruction) or ``bars.at(stage)`` (a
register: ``shl.b32`` + ``add.u32``, recorded where ``at`` is called).

What each call records (``A`` is the barrier's address operand; ``.shared::cta``
unless stated):

================================  ===============================================
``init(count)``                   ``mbarrier.init.shared::cta.b64 [A], count``
``arrive()``                      ``mbarrier.arrive.shared::cta.b64 state, [A]``
``arrive_expect_tx(nbytes)``      ``mbarrier.arrive.expect_tx.shared::cta.b64 state,
                                  [A], nbytes``
``expect_tx(nbytes)``             ``mbarrier.expect_tx.relaxed.cta.shared::cta.b64
                                  [A], nbytes``
``try_wait(phase)``               ``mbarrier.try_wait.parity.shared::cta.b64 p, [A],
                                  phase`` (returns ``p``)
``wait(phase)``                   a label ``L``, that ``try_wait``, ``@!p bra L``
                                  (with ``pred=``: inside ``ptx.if_(pred)``)
``arrive_remote(cta, count=1)``   ``add.u32`` (the address in a register, if it is not
                                  one), ``mapa.shared::cluster.u32 r, a, cta``,
                                  ``mbarrier.arrive.shared::cluster.b64 _, [r], count``
``inval()``                       ``mbarrier.inval.shared::cta.b64 [A]``
================================  ===============================================

``MbarrierArray.init_all(count)`` and ``.arrive_remote_all(cta, count)`` record the
above once per barrier. Every call takes ``pred=`` (a predicate register guarding each
recorded instruction).

pyptx spells these the same (``ptx.mbarrier.array(base, offset, n)``,
``ptx.mbarrier.init(bar[0], 1)``, ``bar.at(stage).wait(phase)``); its
``smem.mbarrier(n)`` is :func:`ptxdsl.dsl.smem.mbarrier`.
"""
from __future__ import annotations

from ..core import ir
from ..core.errors import TraceError, user_location
from ..core.trace import current
from ..core.types import b64, pred as pred_t, u32
from .control import if_
from .reg import as_reg

__all__ = ["Mbarrier", "MbarrierArray", "array", "init", "arrive", "arrive_expect_tx",
           "expect_tx", "try_wait", "wait", "arrive_remote", "inval", "operand", "MbarrierRef"]


def _base(base):
    """A register or a symbol (shared array, named extern array) to address from."""
    if isinstance(base, str):
        return current().symbol(base)
    if hasattr(base, "__ptx_addr__"):
        a = base.__ptx_addr__()
        if a.offset:
            raise TraceError("an mbarrier base is a register or a shared array", user_location())
        return a.base
    if isinstance(base, ir.Special):
        return as_reg(base)
    if isinstance(base, ir.Symbol) or isinstance(base, ir.Reg) and base.dtype.is_int and \
            base.dtype.bits in (32, 64):
        return base
    raise TraceError(f"an mbarrier lives at a shared-memory address: a .u32 register, a "
                     f"shared array or its name; got {base!r}", user_location())


class Mbarrier:
    """One mbarrier at ``base + offset`` bytes (see the module table)."""

    __slots__ = ("base", "offset", "_reg", "idx", "array")

    def __init__(self, base, offset: int = 0, idx: int | None = None, array=None):
        if isinstance(offset, bool) or not isinstance(offset, int):
            raise TraceError(f"an mbarrier offset is an int (bytes), got {offset!r}",
                             user_location())
        if offset % 8:
            raise TraceError(f"an mbarrier is 8-byte aligned; offset {offset} is not",
                             user_location())
        self.base = _base(base)
        self.offset = offset
        self._reg = None
        self.idx = idx  # its index in the MbarrierArray it came from (pyptx's .idx)
        self.array = array  # that MbarrierArray (pyptx's .array)

    def __repr__(self) -> str:
        return f"Mbarrier({self.base!r}+{self.offset})"

    @property
    def name(self) -> str | None:
        """The shared array's name when the barrier lives in one (pyptx's ``.name``)."""
        return self.base.name if isinstance(self.base, ir.Symbol) else None

    @property
    def byte_offset(self) -> int:
        return self.offset

    def __ptx_addr__(self) -> ir.Addr:
        return ir.Addr(self.base, self.offset)

    def address(self) -> ir.Reg:
        """The barrier's shared address in a ``.u32`` register (``mov.u32`` of a symbol
        and/or ``add.u32`` of the offset, recorded at the first call)."""
        if self._reg is None:
            b = current("Mbarrier.address")
            r = self.base
            if isinstance(r, ir.Symbol):
                reg = b.new_reg(u32)
                b.inst(["mov", "u32"], (reg, r))
                r = reg
            if self.offset:
                reg = b.new_reg(u32)
                b.inst(["add", "u32"], (reg, r, self.offset))
                r = reg
            self._reg = r
        return self._reg

    def init(self, count, *, pred=None) -> None:
        init(self, count, pred=pred)

    def arrive(self, *, pred=None) -> ir.Reg:
        return arrive(self, pred=pred)

    def arrive_expect_tx(self, nbytes, *, pred=None) -> ir.Reg:
        return arrive_expect_tx(self, nbytes, pred=pred)

    def expect_tx(self, nbytes, *, pred=None) -> None:
        expect_tx(self, nbytes, pred=pred)

    def try_wait(self, phase, *, pred=None) -> ir.Reg:
        return try_wait(self, phase, pred=pred)

    def wait(self, phase, *, pred=None) -> None:
        wait(self, phase, pred=pred)

    def arrive_remote(self, cta, count=1, *, pred=None) -> None:
        arrive_remote(self, cta, count, pred=pred)

    def inval(self, *, pred=None) -> None:
        inval(self, pred=pred)


MbarrierRef = Mbarrier  # pyptx's class name for one barrier of an array


class MbarrierArray:
    """``count`` mbarriers, 8 bytes apart, from ``base + offset``."""

    __slots__ = ("base", "offset", "count")

    def __init__(self, base, offset: int, count: int):
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise TraceError(f"an mbarrier array holds a positive int count, got {count!r}",
                             user_location())
        Mbarrier(base, offset)  # checks base and offset
        self.base = _base(base)
        self.offset = offset
        self.count = count

    def __len__(self) -> int:
        return self.count

    @property
    def name(self) -> str | None:
        """The shared array's name when the barriers live in one (pyptx's ``.name``)."""
        return self.base.name if isinstance(self.base, ir.Symbol) else None

    @property
    def byte_offset(self) -> int:
        """Bytes from the base to barrier 0 (pyptx's name)."""
        return self.offset

    def __repr__(self) -> str:
        return f"MbarrierArray({self.base!r}+{self.offset}, n={self.count})"

    def __getitem__(self, i: int) -> Mbarrier:
        """Barrier ``i`` (a Python int; no instruction)."""
        if isinstance(i, (ir.Reg, ir.Special)):
            return self.at(i)
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < self.count:
            raise TraceError(f"mbarrier index {i!r} out of range for an array of {self.count} "
                             f"(ints 0..{self.count - 1}; a register index: .at(reg))",
                             user_location())
        return Mbarrier(self.base, self.offset + 8 * i, i, self)

    def at(self, stage) -> Mbarrier:
        """Barrier ``stage`` (a register): records ``shl.b32 t, stage, 3`` and
        ``add.u32 a, base, t`` (``mov.u32`` first when the base is a shared array)."""
        if isinstance(stage, int) and not isinstance(stage, bool):
            return self[stage]
        b = current("MbarrierArray.at")
        stage = as_reg(stage)
        if not isinstance(stage, ir.Reg) or not stage.dtype.is_int or stage.dtype.bits != 32:
            raise TraceError(f"MbarrierArray.at takes a 32-bit integer register, got {stage!r}",
                             user_location())
        base = self.base
        if isinstance(base, ir.Symbol):
            r = b.new_reg(u32)
            b.inst(["mov", "u32"], (r, base))
            base = r
        t = b.new_reg(u32)
        b.inst(["shl", "b32"], (t, stage, 3))
        a = b.new_reg(u32)
        b.inst(["add", "u32"], (a, base, t))
        return Mbarrier(a, self.offset, stage, self)

    def init_all(self, count, *, pred=None) -> None:
        """``mbarrier.init`` of every barrier with the same arrival count."""
        for i in range(self.count):
            init(self[i], count, pred=pred)

    def arrive_remote_all(self, cta, count=1, *, pred=None) -> None:
        """:func:`arrive_remote` on every barrier of the array."""
        for i in range(self.count):
            arrive_remote(self[i], cta, count, pred=pred)


def array(base, offset: int, count: int) -> MbarrierArray:
    """``count`` mbarriers from ``base + offset`` (no instruction)."""
    return MbarrierArray(base, offset, count)


def operand(mbar) -> ir.Addr:
    """The ``[A]`` operand of an mbarrier (an :class:`Mbarrier`, a shared address)."""
    if isinstance(mbar, ir.Addr):
        return mbar
    if hasattr(mbar, "__ptx_addr__"):
        return mbar.__ptx_addr__()
    if isinstance(mbar, ir.Reg):
        return ir.Addr(mbar)
    raise TraceError(f"expected an mbarrier (ptx.mbarrier.array(...)[i], smem.mbarrier(n)[i] "
                     f"or a shared address), got {mbar!r}", user_location())


def init(mbar, count, *, pred=None) -> None:
    """``mbarrier.init.shared::cta.b64 [A], count``."""
    current("ptx.mbarrier.init").inst(["mbarrier", "init", "shared::cta", "b64"],
                                      (operand(mbar), count), guard=pred)


def arrive(mbar, *, pred=None) -> ir.Reg:
    """``mbarrier.arrive.shared::cta.b64 state, [A]``; returns ``state`` (``.b64``)."""
    b = current("ptx.mbarrier.arrive")
    state = b.new_reg(b64)
    b.inst(["mbarrier", "arrive", "shared::cta", "b64"], (state, operand(mbar)), guard=pred)
    return state


def arrive_expect_tx(mbar, nbytes, *, pred=None) -> ir.Reg:
    """``mbarrier.arrive.expect_tx.shared::cta.b64 state, [A], nbytes``: expect ``nbytes``
    of transactions (TMA copies) in this phase and arrive; returns ``state``."""
    b = current("ptx.mbarrier.arrive_expect_tx")
    state = b.new_reg(b64)
    b.inst(["mbarrier", "arrive", "expect_tx", "shared::cta", "b64"],
           (state, operand(mbar), nbytes), guard=pred)
    return state


def expect_tx(mbar, nbytes, *, pred=None) -> None:
    """``mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [A], nbytes`` (no arrival)."""
    current("ptx.mbarrier.expect_tx").inst(
        ["mbarrier", "expect_tx", "relaxed", "cta", "shared::cta", "b64"],
        (operand(mbar), nbytes), guard=pred)


def try_wait(mbar, phase, *, pred=None) -> ir.Reg:
    """``mbarrier.try_wait.parity.shared::cta.b64 p, [A], phase``; returns ``p`` (true once
    the phase of parity ``phase`` completed)."""
    b = current("ptx.mbarrier.try_wait")
    p = b.new_reg(pred_t)
    b.inst(["mbarrier", "try_wait", "parity", "shared::cta", "b64"], (p, operand(mbar), phase),
           guard=pred)
    return p


def wait(mbar, phase, *, pred=None) -> None:
    """Block until the phase of parity ``phase`` completed: a fresh label ``L``,
    ``mbarrier.try_wait.parity.shared::cta.b64 p, [A], phase`` and ``@!p bra L``."""
    b = current("ptx.mbarrier.wait")
    if pred is not None:  # threads where pred is false skip the loop: a structured branch
        with if_(pred):
            wait(mbar, phase)
        return
    name = f"$L__mbar_wait{b.new_region_id()}"
    lbl = ir.Label(name, user_location())
    b.labels[name] = lbl
    b.append(lbl)
    p = try_wait(mbar, phase)
    br = b.inst(["bra"], (lbl,), guard=p)
    br.guard_negated = True


def arrive_remote(mbar, cta, count=1, *, pred=None) -> None:
    """Arrive on the barrier at the same address in the cluster's CTA of rank ``cta``:
    ``mapa.shared::cluster.u32 r, a, cta`` and
    ``mbarrier.arrive.shared::cluster.b64 _, [r], count`` (after an ``add.u32`` /
    ``mov.u32`` that puts the local address in a register, if needed)."""
    b = current("ptx.mbarrier.arrive_remote")
    m = mbar if isinstance(mbar, Mbarrier) else None
    if m is None:
        a = operand(mbar)
        m = Mbarrier(a.base, a.offset)
    local = m.address()
    remote = b.new_reg(u32)
    b.inst(["mapa", "shared::cluster", "u32"], (remote, local, cta), guard=pred)
    b.inst(["mbarrier", "arrive", "shared::cluster", "b64"], (ir.SINK, ir.Addr(remote), count),
           guard=pred)


def inval(mbar, *, pred=None) -> None:
    """``mbarrier.inval.shared::cta.b64 [A]``."""
    current("ptx.mbarrier.inval").inst(["mbarrier", "inval", "shared::cta", "b64"],
                                       (operand(mbar),), guard=pred)
