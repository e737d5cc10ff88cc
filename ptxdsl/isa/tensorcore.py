"""Tensor-core instructions of the warp (sm_75+): mma.sync, ldmatrix, stmatrix, movmatrix.

Entries here join the core table in :mod:`ptxdsl.isa`; they use the same
:class:`~ptxdsl.isa.spec.OpSpec` shape and building blocks as :mod:`.table`.

``mma.sync`` has four type slots (``.dtype.atype.btype.ctype``); they are
matched as four positional modifier groups and the legal combinations are
the rows of :data:`MMA_FORMS` (one row per family, with the PTX ISA and
``sm_`` it needs, as measured against ptxas 13). How many registers each
operand list holds follows from the shape and the element width
(:func:`mma_registers`); :mod:`ptxdsl.dsl.tensorcore` knows which (row, col) each
of them holds.
"""
from __future__ import annotations

from dataclasses import dataclass

from .spec import Group, Mod, OpSpec

Version = tuple[int, int]


def _g(name: str, *mods, required: bool = False) -> Group:
    return Group(name, tuple(m if isinstance(m, Mod) else Mod(m) for m in mods), required)


@dataclass(frozen=True)
class MmaFamily:
    """A row of mma.sync forms: shapes x (atype, btype) x (dtype, ctype), one ISA need."""

    shapes: tuple[str, ...]
    ab: tuple[tuple[str, str], ...]
    dc: tuple[tuple[str, str], ...]
    ptx: Version
    sm: int
    any_layout: bool = False     # .row/.col free for A and B (m8n8k4 .f16 only)
    satfinite: bool = False      # integer forms may clamp the s32 result
    bitop: bool = False          # .b1 forms: .xor.popc or .and.popc after the types


def _pairs(xs, ys=None):
    return tuple((x, y) for x in xs for y in (xs if ys is None else ys))


_F16_DC = (("f16", "f16"), ("f32", "f32"))
_I8, _I4, _F8 = ("s8", "u8"), ("s4", "u4"), ("e4m3", "e5m2")
MMA_FORMS: tuple[MmaFamily, ...] = (
    # (an f16 result from f32 accumulators is the one mix ptxas refuses)
    MmaFamily(("m8n8k4",), (("f16", "f16"),), (("f16", "f16"), ("f32", "f16"), ("f32", "f32")),
              (6, 4), 70, any_layout=True),
    MmaFamily(("m16n8k8",), (("f16", "f16"),), _F16_DC, (6, 5), 75),
    MmaFamily(("m16n8k16",), (("f16", "f16"),), _F16_DC, (7, 0), 80),
    MmaFamily(("m16n8k8", "m16n8k16"), (("bf16", "bf16"),), (("f32", "f32"),), (7, 0), 80),
    MmaFamily(("m16n8k4", "m16n8k8"), (("tf32", "tf32"),), (("f32", "f32"),), (7, 0), 80),
    MmaFamily(("m8n8k4",), (("f64", "f64"),), (("f64", "f64"),), (7, 0), 80),
    MmaFamily(("m16n8k4", "m16n8k8", "m16n8k16"), (("f64", "f64"),), (("f64", "f64"),),
              (7, 8), 90),
    MmaFamily(("m8n8k16",), _pairs(_I8), (("s32", "s32"),), (6, 5), 75, satfinite=True),
    MmaFamily(("m16n8k16", "m16n8k32"), _pairs(_I8), (("s32", "s32"),), (7, 0), 80,
              satfinite=True),
    MmaFamily(("m8n8k32",), _pairs(_I4), (("s32", "s32"),), (6, 5), 75, satfinite=True),
    MmaFamily(("m16n8k32", "m16n8k64"), _pairs(_I4), (("s32", "s32"),), (7, 0), 80,
              satfinite=True),
    # .b1: d = c + popc(a XOR/AND b) over K (.and needs sm_80 and PTX 7.1)
    MmaFamily(("m8n8k128",), (("b1", "b1"),), (("s32", "s32"),), (7, 0), 75, bitop=True),
    MmaFamily(("m16n8k128", "m16n8k256"), (("b1", "b1"),), (("s32", "s32"),), (7, 0), 80,
              bitop=True),
    MmaFamily(("m16n8k32",), _pairs(_F8), (("f32", "f32"),), (8, 4), 89),
    MmaFamily(("m16n8k32",), _pairs(_F8), (("f16", "f16"),), (8, 7), 89),
    MmaFamily(("m16n8k16",), _pairs(_F8), (("f32", "f32"), ("f16", "f16")), (8, 7), 89),
)

SHAPES = ("m16n8k16", "m16n8k8", "m16n8k32", "m16n8k4", "m16n8k64", "m8n8k4", "m8n8k16",
          "m8n8k32", "m8n8k128", "m16n8k128", "m16n8k256")
ELEMENT_BITS = {"f16": 16, "bf16": 16, "tf32": 32, "f64": 64, "f32": 32, "s32": 32,
                "s8": 8, "u8": 8, "s4": 4, "u4": 4, "e4m3": 8, "e5m2": 8, "b1": 1}


def shape_mnk(shape: str) -> tuple[int, int, int]:
    """``"m16n8k16"`` -> ``(16, 8, 16)``."""
    m, rest = shape[1:].split("n")
    n, k = rest.split("k")
    return int(m), int(n), int(k)


def _family(shape, a, b, d, c) -> MmaFamily | None:
    for fam in MMA_FORMS:
        if shape in fam.shapes and (a, b) in fam.ab and (d, c) in fam.dc:
            return fam
    return None


def _alts(xs) -> str:
    return ", ".join("." + x for x in sorted(set(xs)))


def mma_rule(m):
    """Legal shape/type/layout combinations of mma.sync (:data:`MMA_FORMS`)."""
    ch = m.chosen
    shape, a, b, d, c = ch["shape"], ch["atype"], ch["btype"], ch["dtype"], ch["ctype"]
    fams = [f for f in MMA_FORMS if shape in f.shapes]
    inputs = [ab for f in fams for ab in f.ab]
    if not any(x == a for x, _ in inputs):
        return (f".{shape} takes no .{a} inputs; its A/B types are "
                f"{_alts(x for x, _ in inputs)} (the shapes for .{a}: "
                f"{_alts(s for f in MMA_FORMS if any(x == a for x, _ in f.ab) for s in f.shapes)})")
    if (a, b) not in inputs:
        return (f"with A of type .{a}, B must be {_alts(y for x, y in inputs if x == a)} "
                f"for .{shape}")
    fams = [f for f in fams if (a, b) in f.ab]
    accs = [dc for f in fams for dc in f.dc]
    if (d, c) not in accs:
        return (f".{shape} with .{a} inputs accumulates as (dtype, ctype) "
                f"{', '.join(f'.{x}.{a}.{b}.{y}' for x, y in accs)}; "
                f".{d} ... .{c} is not one of them")
    fam = _family(shape, a, b, d, c)
    if not fam.any_layout and (ch["alayout"], ch["blayout"]) != ("row", "col"):
        return (f".{shape} with .{a} inputs is .row.col only (A row-major, B column-major); "
                f"other layouts exist only for .m8n8k4 with .f16 inputs")
    if m.has("satfinite") and not fam.satfinite:
        return ".satfinite applies to the integer forms (.s8/.u8/.s4/.u4 inputs, .s32 result)"
    if fam.bitop != ("bitop" in ch and "popc" in ch) or not fam.bitop and (
            "bitop" in ch or "popc" in ch):
        if fam.bitop:
            return ".b1 inputs need a bit operation and the popc reduction after the types: " \
                   "write ....s32.b1.b1.s32.xor.popc (or .and.popc)"
        return ".xor/.and and .popc apply to .b1 inputs only"
    if ch.get("bitop") == "and":
        return max(fam.ptx, (7, 1)), max(fam.sm, 80)
    return fam.ptx, fam.sm


def lane_registers(count_elems: int, elem: str) -> tuple[str, int]:
    """(register type, count) holding ``count_elems`` elements of type ``elem`` per lane."""
    bits = ELEMENT_BITS[elem]
    if bits == 64:
        return "f64", count_elems
    per = 32 // bits
    reg = {"f16": "f16x2", "bf16": "bf16x2", "tf32": "tf32", "f32": "f32",
           "s32": "s32"}.get(elem, "b32")
    return reg, count_elems // per


def mma_registers(shape: str, atype: str, btype: str, ctype: str, dtype: str
                  ) -> dict[str, tuple[str, int]]:
    """Per lane: ``{"a"|"b"|"c"|"d": (register type, count)}`` of one mma.sync form.

    A warp holds the whole M x K tile of A (K x N of B, M x N of C/D), spread
    evenly over its 32 lanes; m8n8k4 with .f16 inputs runs four independent
    8x8x4 products, one per quad pair, so it holds four tiles.
    """
    mm, nn, kk = shape_mnk(shape)
    tiles = 4 if shape == "m8n8k4" and atype == "f16" else 1
    return {
        "a": lane_registers(tiles * mm * kk // 32, atype),
        "b": lane_registers(tiles * kk * nn // 32, btype),
        "c": lane_registers(tiles * mm * nn // 32, ctype),
        "d": lane_registers(tiles * mm * nn // 32, dtype),
    }


def _mma_lists(m):
    ch = m.chosen
    return mma_registers(ch["shape"], ch["atype"], ch["btype"], ch["ctype"], ch["dtype"])


def _matrix_lists(key: str):
    def lists(m):
        return {key: ("b32", int(m.chosen["num"][1:]))}
    return lists


_LAYOUT = ("row", "col")
_SPACE = _g("space", "shared", Mod("shared::cta", (7, 8)))
_NUM = _g("num", "x1", "x2", "x4", required=True)

TABLE: tuple[OpSpec, ...] = (
    OpSpec("mma.sync", (
        _g("aligned", "aligned", required=True),
        _g("shape", *SHAPES, required=True),
        _g("alayout", *_LAYOUT, required=True),
        _g("blayout", *_LAYOUT, required=True),
        _g("satfinite", "satfinite"),
        _g("dtype", "f16", "f32", "f64", "s32", required=True),
        _g("atype", "f16", "bf16", "tf32", "f64", "s8", "u8", "s4", "u4", "e4m3", "e5m2", "b1",
           required=True),
        _g("btype", "f16", "bf16", "tf32", "f64", "s8", "u8", "s4", "u4", "e4m3", "e5m2", "b1",
           required=True),
        _g("ctype", "f16", "f32", "f64", "s32", required=True),
        _g("bitop", "xor", "and"), _g("popc", "popc")),
        (), ntypes=0, operands="V:{d} X:{a} X:{b} X:{c}", ptx=(6, 4), sm=70,
        category="tensor core", rule=mma_rule, lists=_mma_lists, scope="warp", varies=True,
        aligned=True,
        doc="Warp-wide matrix multiply-accumulate D = A x B + C on register fragments: "
            "the shape .mMnNkK, the layouts of A and B, then the types of D, A, B and C. "
            "Each operand is a register list whose length depends on shape and type "
            "(ptxdsl.dsl.tensorcore says which element each lane's register holds).",
        example="mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%f0, %f1, %f2, %f3}, "
                "{%r0, %r1, %r2, %r3}, {%r4, %r5}, {%f4, %f5, %f6, %f7}"),
    OpSpec("ldmatrix.sync", (
        _g("aligned", "aligned", required=True), _g("shape", "m8n8", required=True),
        _NUM, _g("trans", "trans"), _SPACE),
        ("b16",), operands="V:{d} a", ptx=(6, 5), sm=75, category="tensor core",
        lists=_matrix_lists("d"), scope="warp", varies=True, aligned=True,
        doc="Load one, two or four 8x8 .b16 matrices from shared memory into mma "
            "fragments: lanes 8i..8i+7 give the row addresses of matrix i, and each lane "
            "receives one .b32 (two adjacent elements) of each matrix; .trans transposes.",
        example="ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%r0, %r1, %r2, %r3}, [%r4]"),
    OpSpec("stmatrix.sync", (
        _g("aligned", "aligned", required=True), _g("shape", "m8n8", required=True),
        _NUM, _g("trans", "trans"), _SPACE),
        ("b16",), operands="a X:{s}", ptx=(7, 8), sm=90, category="tensor core",
        lists=_matrix_lists("s"), scope="warp", side_effects=True, aligned=True,
        doc="Store one, two or four 8x8 .b16 matrices from mma fragments to shared memory "
            "(the inverse of ldmatrix): lanes 8i..8i+7 give the row addresses of matrix i.",
        example="stmatrix.sync.aligned.m8n8.x4.shared.b16 [%r4], {%r0, %r1, %r2, %r3}"),
    OpSpec("movmatrix.sync", (
        _g("aligned", "aligned", required=True), _g("shape", "m8n8", required=True),
        _g("trans", "trans", required=True)),
        ("b16",), operands="d:b32 r:b32", ptx=(7, 8), sm=75, category="tensor core",
        scope="warp", varies=True, aligned=True,
        doc="Transpose an 8x8 .b16 matrix held in mma fragment layout across the warp "
            "(one .b32 per lane in, one out).",
        example="movmatrix.sync.aligned.m8n8.trans.b16 %r1, %r0"),
)
