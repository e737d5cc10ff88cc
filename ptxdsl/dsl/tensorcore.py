"""Warp-level tensor cores (``mma.sync``): which (row, col) of a tile each lane's register
holds, and the instructions that move and multiply such fragments.

A warp-wide ``mma.sync`` spreads its A (M x K), B (K x N) and C/D (M x N)
tiles over the 32 lanes of a warp; each lane holds a few elements, packed
into ``.b32`` registers (two 16-bit, four 8-bit or eight 4-bit elements each,
lowest element in the lowest bits; one element per ``.f32``/``.s32``/``.f64``
register). A :class:`Layout` says, for every lane and element, where in the
tile it lives. It is data, and three users read the same object:

* kernels, through :class:`Fragment` (``acc.origin()`` and ``acc.items()``
  give each element's (row, col) without hand-derived lane arithmetic);
* the interpreter's ``mma.sync`` semantics (:mod:`ptxdsl.interp.semantics.tensorcore`);
* the layout figures of the docs (``docs/tensor-cores.md``).

Every layout of the table's forms is ``origin(lane) + offset(element)``:
the origin depends on the lane only, the offset on the element index only,
so an epilogue computes one address per lane and reaches every element with
a constant offset (``tests/interp/test_tensorcore.py`` checks this).

Recording: ``ptx.mma``, ``ptx.ldmatrix``, ``ptx.stmatrix`` and ``ptx.movmatrix``.

Each helper records exactly one instruction (checked against the table like any
``ptx.inst`` call):

=====================================  =====================================================
``ptx.mma(d, a, b, c)``                ``mma.sync.aligned.{shape}.{alayout}.{blayout}
                                       {.satfinite}.{dtype}.{atype}.{btype}.{ctype} d, a, b, c``
                                       (with :class:`Fragment` operands the
                                       shape, types and layouts come from their layouts)
``ptx.mma.sync(shape=(16, 8, 16),      the same instruction, pyptx's spelling (an alias)
dtype_d=, dtype_a=, ..., d=, a=, b=,
c=, a_layout=, b_layout=)``
``ptx.ldmatrix(dst, src, trans=)``     ``ldmatrix.sync.aligned.m8n8.x{len(dst)}{.trans}
                                       .shared.b16 dst, [src]`` (pyptx: ``layout="m8n8.x4"``)
``ptx.stmatrix(dst, src, trans=)``     ``stmatrix.sync.aligned.m8n8.x{len(src)}{.trans}
                                       .shared.b16 [dst], src``
``ptx.movmatrix(d, a)``                ``movmatrix.sync.aligned.m8n8.trans.b16 d, a``
=====================================  =====================================================
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from ..core import ir
from ..core.errors import TraceError, user_location
from ..core.trace import current
from ..core.types import ALL_TYPES, u32
from ..isa.tensorcore import ELEMENT_BITS, MMA_FORMS, lane_registers, mma_registers, shape_mnk
from . import reg
from .inst import inst
from .special import special

__all__ = ["Layout", "Fragment", "RegisterGroup", "layout", "operand_layouts", "fragment",
           "FORMS", "mma", "ldmatrix", "stmatrix", "movmatrix"]


@dataclass(frozen=True)
class Layout:
    """Where each lane's elements of one mma operand live.

    ``operand``: ``"a"``, ``"b"`` or ``"c"`` (C and D share a layout);
    ``shape``/``elem``: the mma shape and element type (``"bf16"``, ``"f32"``...);
    ``order``: ``"row"`` or ``"col"`` (only m8n8k4 .f16 varies it).
    The tile is ``rows x cols`` (A: M x K, B: K x N, C: M x N); m8n8k4 .f16 runs
    four independent products, one per quad pair, so it has ``tiles == 4``.
    """

    operand: str
    shape: str
    elem: str
    order: str = "row"
    tiles: int = field(default=1, compare=False)

    # ------------------------------------------------------------------ sizes
    @property
    def mnk(self) -> tuple[int, int, int]:
        return shape_mnk(self.shape)

    @property
    def rows(self) -> int:
        m, n, k = self.mnk
        return {"a": m, "b": k, "c": m}[self.operand]

    @property
    def cols(self) -> int:
        m, n, k = self.mnk
        return {"a": k, "b": n, "c": n}[self.operand]

    @property
    def bits(self) -> int:
        return ELEMENT_BITS[self.elem]

    @property
    def per_reg(self) -> int:
        """Elements per register (1 for 32- and 64-bit elements)."""
        return max(1, 32 // self.bits)

    @property
    def elems(self) -> int:
        """Elements each lane holds."""
        return self.tiles * self.rows * self.cols // 32

    @property
    def nregs(self) -> int:
        return self.elems // self.per_reg

    @property
    def reg_type(self) -> str:
        """The register type of this operand's list in the instruction table."""
        return lane_registers(self.elems, self.elem)[0]

    # ------------------------------------------------------------------ where things are
    def coord(self, lane: int, i: int) -> tuple[int, int, int]:
        """``(tile, row, col)`` of element ``i`` of lane ``lane``."""
        if not (0 <= lane < 32 and 0 <= i < self.elems):
            raise IndexError(f"lane {lane}, element {i} is outside this {self.elems}-element "
                             f"fragment")
        if self.tiles == 4:
            return _quadpair(self, lane, i)
        return (0, *_standard(self, lane, i))

    def register_of(self, i: int) -> tuple[int, int]:
        """``(register index, bit offset)`` of element ``i`` in the lane's list."""
        return i // self.per_reg, (i % self.per_reg) * self.bits

    @cached_property
    def table(self) -> np.ndarray:
        """``(32, elems, 3)`` int array of ``(tile, row, col)`` for every lane and element."""
        return np.array([[self.coord(ln, i) for i in range(self.elems)] for ln in range(32)],
                        np.int64)

    def owner(self, row: int, col: int, tile: int = 0) -> tuple[int, int]:
        """``(lane, element)`` holding ``(row, col)`` of tile ``tile``."""
        hit = np.argwhere((self.table == (tile, row, col)).all(-1))
        if not len(hit):
            raise IndexError(f"({row}, {col}) is outside the {self.rows}x{self.cols} tile")
        return int(hit[0][0]), int(hit[0][1])

    def origin(self, lane: int) -> tuple[int, int]:
        """(row, col) of the lane's element 0 (the lane-dependent part of every coordinate)."""
        _, r, c = self.coord(lane, 0)
        return r, c

    def offsets(self) -> list[tuple[int, int]]:
        """Per element, its (row, col) minus the lane's origin: the same for every lane."""
        t = self.table
        d = t[:, :, 1:] - t[:, :1, 1:]
        if not (d == d[:1]).all():  # pragma: no cover - every table form is affine
            raise ValueError(f"{self} is not origin + offset")
        return [(int(r), int(c)) for r, c in d[0]]

    def lane_bits(self) -> tuple[list[tuple[int, int, int]], list[tuple[int, int, int]]]:
        """The origin as sums over bit fields of the lane id.

        Returns ``(row_terms, col_terms)``, each a list of ``(shift, mask, scale)``:
        ``origin_row(lane) = sum(((lane >> shift) & mask) * scale)``. Kernels emit
        exactly these instructions (``shr``, ``and``, ``mul``/``shl``, ``add``).
        """
        out = []
        for axis in (0, 1):
            base = self.origin(0)[axis]
            w = [self.origin(1 << b)[axis] - base for b in range(5)]
            for ln in range(32):  # linear over the lane's bits (checked)
                want = base + sum(w[b] for b in range(5) if ln >> b & 1)
                if self.origin(ln)[axis] != want:  # pragma: no cover
                    raise ValueError(f"{self}: origin is not linear in the lane bits")
            terms, b = [], 0
            while b < 5:
                if w[b] == 0:
                    b += 1
                    continue
                lo, n = b, 1
                while lo + n < 5 and w[lo + n] == w[lo] << n:
                    n += 1
                terms.append((lo, (1 << n) - 1, w[lo]))
                b = lo + n
            out.append(terms)
        return out[0], out[1]

    # ------------------------------------------------------------------ numpy helpers
    def gather(self, tiles: np.ndarray) -> np.ndarray:
        """``(..., tiles, rows, cols)`` matrices -> ``(..., 32, elems)`` per-lane elements."""
        t = self.table
        return tiles[..., t[:, :, 0], t[:, :, 1], t[:, :, 2]]

    def scatter(self, elems: np.ndarray) -> np.ndarray:
        """``(..., 32, elems)`` per-lane elements -> ``(..., tiles, rows, cols)`` matrices."""
        t = self.table
        out = np.zeros(elems.shape[:-2] + (self.tiles, self.rows, self.cols), elems.dtype)
        out[..., t[:, :, 0], t[:, :, 1], t[:, :, 2]] = elems
        return out

    def __str__(self) -> str:
        o = f".{self.order}" if self.operand != "c" else ""
        return f"{self.operand.upper()} of {self.shape}{o} .{self.elem}"


def _standard(lay: Layout, lane: int, i: int) -> tuple[int, int]:
    """Every shape but m8n8k4 .f16: lanes in 8 groups of 4 (gid = lane/4, tig = lane%4)."""
    gid, tig = lane >> 2, lane & 3
    per = lay.per_reg
    m, n, k = lay.mnk
    j, p = divmod(i, per)            # register j, position p inside it
    if lay.operand == "c":
        if m == 16:
            return gid + 8 * (i >> 1), 2 * tig + (i & 1)
        return gid, 2 * tig + i
    if lay.operand == "a":          # consecutive k in a register; registers alternate rows
        if m == 16:
            return gid + 8 * (j & 1), tig * per + p + 4 * per * (j >> 1)
        return gid, tig * per + p + 4 * per * j
    return tig * per + p + 4 * per * j, gid   # b: column gid, k runs down the registers


def _quadpair(lay: Layout, lane: int, i: int) -> tuple[int, int, int]:
    """m8n8k4 .f16: quad pair q (lanes 4q..4q+3 and 4q+16..4q+19) owns tile q."""
    q, hi, r = (lane >> 2) & 3, lane >> 4, lane & 3
    if lay.operand == "a":
        return (q, r + 4 * hi, i) if lay.order == "row" else (q, i + 4 * hi, r)
    if lay.operand == "b":
        return (q, r, i + 4 * hi) if lay.order == "row" else (q, i, r + 4 * hi)
    if lay.elem == "f16":
        return q, r + 4 * hi, i
    return q, (lane & 1) + (i & 2) + 4 * hi, (i & 4) + (lane & 2) + (i & 1)


def layout(operand: str, shape: str, elem: str, order: str = "row") -> Layout:
    """The layout of one operand (``"a"``, ``"b"``, ``"c"``/``"d"``) of an mma form."""
    op = "c" if operand == "d" else operand
    if op not in ("a", "b", "c"):
        raise ValueError(f"operand must be 'a', 'b', 'c' or 'd', got {operand!r}")
    if not any(shape in f.shapes for f in MMA_FORMS):
        raise ValueError(f"no mma.sync shape {shape!r}")
    if elem not in ELEMENT_BITS:
        raise ValueError(f"no mma element type {elem!r}")
    # m8n8k4 with .f16 inputs runs one 8x8x4 product per quad pair (its C/D are .f16
    # or .f32); m8n8k4 .f64 is one ordinary 8x8x4 product.
    tiles = 4 if shape == "m8n8k4" and elem != "f64" else 1
    if tiles == 1 or op == "c":
        order = "col" if op == "b" else "row"
    elif order not in ("row", "col"):
        raise ValueError(f"order must be 'row' or 'col', got {order!r}")
    return Layout(op, shape, elem, order, tiles)


def operand_layouts(shape: str, atype: str, btype: str, ctype: str, dtype: str,
                    alayout: str = "row", blayout: str = "col") -> dict[str, Layout]:
    """``{"a", "b", "c", "d"}`` layouts of one mma.sync form."""
    out = {"a": layout("a", shape, atype, alayout), "b": layout("b", shape, btype, blayout),
           "c": layout("c", shape, ctype), "d": layout("c", shape, dtype)}
    regs = mma_registers(shape, atype, btype, ctype, dtype)
    for key, lay in out.items():  # the table and the layouts must agree
        assert (lay.reg_type, lay.nregs) == regs[key], (key, lay, regs[key])
    return out


def _all_forms():
    seen = []
    for fam in MMA_FORMS:
        for shape in fam.shapes:
            for a, b in fam.ab:
                for d, c in fam.dc:
                    seen.append((shape, a, b, c, d))
    return seen


FORMS: tuple[tuple[str, str, str, str, str], ...] = tuple(_all_forms())


# ====================================================================== registers
class RegisterGroup:
    """Registers with a layout (``.layout.offsets()``, ``.layout.per_reg``): usable as an
    instruction's register list, indexable, and ``items()`` yields
    ``((dr, dc), register, part)`` per element (``part`` indexes a packed register).
    Shared by mma fragments and wgmma accumulators."""

    layout: object
    regs: list

    def __ptx_regs__(self):
        return list(self.regs)

    def __len__(self) -> int:
        return len(self.regs)

    def __iter__(self):
        return iter(self.regs)

    def __getitem__(self, i):
        return self.regs[i]

    def items(self):
        """``((dr, dc), register, part)`` per element; ``part`` indexes a packed register."""
        per = self.layout.per_reg
        for i, off in enumerate(self.layout.offsets()):
            yield off, self.regs[i // per], i % per


class Fragment(RegisterGroup):
    """The registers of one lane's share of an mma operand, with their layout.

    Pass it wherever an instruction takes the register list (``mma.sync``,
    ``ldmatrix``). ``origin()`` records the lane arithmetic for this lane's
    (row, col); ``items()`` yields every element with its constant offset from
    there, so an epilogue is ``for (dr, dc), reg, part in acc.items(): ...``.
    """

    def __init__(self, lay: Layout, regs):
        regs = list(regs)
        if len(regs) != lay.nregs:
            raise ValueError(f"{lay} takes {lay.nregs} registers, got {len(regs)}")
        self.layout = lay
        self.regs = regs

    def element(self, dr: int, dc: int):
        """``(register, part)`` of the element at offset ``(dr, dc)`` from the lane's origin."""
        for off, r, part in self.items():
            if off == (dr, dc):
                return r, part
        raise IndexError(f"no element of {self.layout} at offset ({dr}, {dc}) from the lane's "
                         f"origin; offsets are {self.layout.offsets()}")

    def origin(self, lane=None):
        """Record the lane's (row, col) of element 0 as two ``.u32`` registers.

        Emits, per term of :meth:`Layout.lane_bits`, ``shr.u32``/``and.b32``/
        ``mul.lo.u32`` (or ``shl``) and ``add.u32``; ``lane`` defaults to
        ``%laneid`` (read with one ``mov.u32``).
        """
        if lane is None:
            lane = reg.scalar(u32)
            inst.mov.u32(lane, special.laneid())
        out = []
        for terms in self.layout.lane_bits():
            acc = None
            for shift, mask, scale in terms:
                x = lane >> shift if shift else lane
                if mask != 31 >> shift:
                    x = x & mask
                if scale != 1:
                    x = x << (scale.bit_length() - 1) if scale & (scale - 1) == 0 else x * scale
                acc = x if acc is None else acc + x
            if acc is None:
                acc = reg.scalar(u32, init=0)
            out.append(acc)
        return tuple(out)

    def __repr__(self) -> str:
        return f"Fragment({self.layout}, {len(self.regs)} registers)"


def fragment(operand: str, shape: str, elem: str, order: str = "row", init=None) -> Fragment:
    """New registers for one operand of an mma form, as a :class:`Fragment`.

    ``init`` (a number) records one ``mov`` per register (``mov.f32 r, 0f00000000``
    for a zeroed f32 accumulator).
    """
    lay = layout(operand, shape, elem, order)
    t = ALL_TYPES[lay.reg_type]
    regs = [reg.scalar(t, init=init) for _ in range(lay.nregs)]
    return Fragment(lay, regs)


# ====================================================================== recording
def _tname(t) -> str | None:
    if t is None:
        return None
    return getattr(t, "name", str(t)).lstrip(".")


def _shape(shape) -> str | None:
    if shape is None or isinstance(shape, str):
        return shape
    m, n, k = shape
    return f"m{m}n{n}k{k}"


def _regs(x):
    if isinstance(x, Fragment):
        return x
    if hasattr(x, "__ptx_regs__"):
        return list(x.__ptx_regs__())
    return list(x) if isinstance(x, (list, tuple)) else x


class _Mma:
    """``ptx.mma(d, a, b, c=None, ...)``: one warp-wide ``mma.sync``; ``ptx.mma.sync`` is
    pyptx's keyword spelling of the same call."""

    def __call__(self, d, a, b, c=None, *, shape=None, dtype=None, atype=None, btype=None,
                 ctype=None, alayout=None, blayout=None, satfinite: bool = False,
                 bitop: str | None = None, pred=None) -> None:
        """Record ``mma.sync.aligned...`` with ``c`` defaulting to ``d`` (accumulate in place).

        Anything not given is read from Fragment operands' layouts; with plain
        register lists give ``shape`` (``"m16n8k16"`` or ``(16, 8, 16)``) and the
        four types. Layouts default to ``.row.col``. ``.b1`` inputs take
        ``bitop="xor"`` or ``"and"`` (recorded as ``.xor.popc`` / ``.and.popc``).
        """
        c = d if c is None else c
        lay = {k: v.layout for k, v in (("a", a), ("b", b), ("c", c), ("d", d))
               if isinstance(v, Fragment)}
        shape = _shape(shape) or next((x.shape for x in lay.values()), None)
        types = {"d": _tname(dtype), "a": _tname(atype), "b": _tname(btype),
                 "c": _tname(ctype)}
        for k in types:
            if types[k] is None and k in lay:
                types[k] = lay[k].elem
        if types["c"] is None and types["d"] is not None and c is d:
            types["c"] = types["d"]
        if types["d"] is None and types["c"] is not None and c is d:
            types["d"] = types["c"]
        missing = [k for k, v in types.items() if v is None]
        if shape is None or missing:
            what = ", ".join(["shape"] * (shape is None) + [f"{k}type" for k in missing])
            raise TraceError(f"ptx.mma cannot tell the {what} of this mma from plain register "
                             f"lists: pass Fragments (ptxdsl.dsl.tensorcore.fragment) or shape= "
                             f"and dtype=/atype=/btype=/ctype=", user_location())
        alayout = alayout or (lay["a"].order if "a" in lay else "row")
        blayout = blayout or (lay["b"].order if "b" in lay else "col")
        chain = ["mma", "sync", "aligned", shape, alayout, blayout]
        if satfinite:
            chain.append("satfinite")
        chain += [types["d"], types["a"], types["b"], types["c"]]
        if bitop:
            chain += [bitop, "popc"]
        current("ptx.mma").inst(chain, (_regs(d), _regs(a), _regs(b), _regs(c)), guard=pred)

    @staticmethod
    def sync(*, shape, d, a, b, c=None, dtype_d=None, dtype_a=None, dtype_b=None,
             dtype_c=None, a_layout: str = "row", b_layout: str = "col",
             satfinite: bool = False, pred=None) -> None:
        """pyptx's spelling: ``ptx.mma.sync(shape=(16, 8, 16), dtype_d=f32, dtype_a=bf16,
        dtype_b=bf16, dtype_c=f32, d=acc, a=a, b=b, c=acc, a_layout="row",
        b_layout="col")``; records the same instruction as :meth:`__call__`."""
        mma(d, a, b, c, shape=shape, dtype=dtype_d, atype=dtype_a, btype=dtype_b,
            ctype=dtype_c, alayout=a_layout, blayout=b_layout, satfinite=satfinite, pred=pred)


mma = _Mma()


def _matrix_chain(op: str, n: int, layout: str | None, trans: bool, space: str) -> list[str]:
    parts = [p for p in (layout or "").split(".") if p]
    shape = next((p for p in parts if p.startswith("m")), "m8n8")
    num = next((p for p in parts if p.startswith("x")), f"x{n}")
    if num != f"x{n}":
        raise TraceError(f"{op} {num} moves {num[1:]} matrices, one register each, but "
                         f"{n} registers were given", user_location())
    chain = [op, "sync", "aligned", shape, num]
    if trans or "trans" in parts:
        chain.append("trans")
    return chain + [space, "b16"]


def ldmatrix(dst, src, *, layout: str | None = None, trans: bool = False,
             space: str = "shared", pred=None) -> None:
    """``ldmatrix.sync.aligned.m8n8.x{len(dst)}{.trans}.shared.b16 dst, [src]``.

    ``dst``: 1, 2 or 4 ``.b32`` registers (or a Fragment); ``src``: this lane's row
    address (lanes ``8i..8i+7`` name the rows of matrix ``i``). pyptx's
    ``layout="m8n8.x4"`` is accepted.
    """
    regs = _regs(dst)
    n = len(regs)
    current("ptx.ldmatrix").inst(_matrix_chain("ldmatrix", n, layout, trans, space),
                                 (regs, _address(src)), guard=pred)


def stmatrix(dst=None, src=None, *, layout: str | None = None, trans: bool = False,
             space: str = "shared", pred=None, smem=None, regs=None) -> None:
    """``stmatrix.sync.aligned.m8n8.x{len(src)}{.trans}.shared.b16 [dst], src`` (sm_90).
    pyptx's keywords ``smem=`` (for ``dst``) and ``regs=`` (for ``src``) are accepted."""
    dst, src = _keyword_pair("ptx.stmatrix", ("dst", dst), ("smem", smem), ("src", src),
                             ("regs", regs))
    regs = _regs(src)
    current("ptx.stmatrix").inst(_matrix_chain("stmatrix", len(regs), layout, trans, space),
                                 (_address(dst), regs), guard=pred)


def _keyword_pair(what, dst, dst_alias, src, src_alias):
    """Each of two operands given once, by ptxdsl's name or pyptx's."""
    out = []
    for (name, v), (alias, w) in ((dst, dst_alias), (src, src_alias)):
        if (v is None) == (w is None):
            raise TraceError(f"{what} takes {name} (or pyptx's {alias}=) exactly once",
                             user_location())
        out.append(v if w is None else w)
    return out


def movmatrix(d, a, *, pred=None) -> None:
    """``movmatrix.sync.aligned.m8n8.trans.b16 d, a``: transpose an 8x8 fragment."""
    current("ptx.movmatrix").inst(["movmatrix", "sync", "aligned", "m8n8", "trans", "b16"],
                                  (d, a), guard=pred)


def _address(x):
    if isinstance(x, (ir.Addr, ir.Reg)) or hasattr(x, "__ptx_addr__"):
        return x
    raise TraceError(f"expected a shared-memory address (ptx.addr(...) or a register), got "
                     f"{type(x).__name__}", user_location())
