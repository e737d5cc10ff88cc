"""Blackwell's fifth-generation tensor core (sm_100a): the ``tcgen05`` family and its
tensor memory (TMEM).

TMEM addresses are 32-bit values (lane in the high half, column in the low half) that
``tcgen05.alloc`` writes to shared memory; the operand slots below name their state
space ``tmem`` (``a=tmem``), which takes 32-bit address registers. ``tcgen05.mma`` is
issued by one thread and runs asynchronously (``tcgen05.commit`` makes an mbarrier
track it); ``tcgen05.ld`` / ``tcgen05.st`` move a warp's slice of TMEM to and from
registers and are waited for with ``tcgen05.wait::ld`` / ``wait::st``.

The forms and limits follow the PTX ISA as ptxas 13 checks it (``ptxas -arch=sm_100a``;
``tests/isa/test_tcgen05.py`` assembles them). None has CPU semantics (``interp=False``):
the interpreter refuses a kernel that uses one, naming the instruction. The ``.ws`` forms
are not in the table yet.
"""
from __future__ import annotations

from .spec import Group, Mod, OpSpec


def g(name: str, *mods, required: bool = False) -> Group:
    return Group(name, tuple(m if isinstance(m, Mod) else Mod(m) for m in mods), required)


NEED = dict(ptx=(8, 6), sm=100, arch_specific=True, interp=False, category="tcgen05",
            side_effects=True)
SYNC = g("sync", "sync", required=True)
ALIGNED = g("aligned", "aligned", required=True)
CTA_GROUP = g("cta_group", "cta_group::1", "cta_group::2", required=True)

def tmem_32bit(m, ops):
    """TMEM addresses are 32-bit: a 64-bit register (a descriptor, a generic pointer) in a
    TMEM slot is a mistake ptxas reports as an argument mismatch."""
    for slot, op in zip(m.operands, ops):
        base = getattr(op, "base", None)
        if slot.role == "a" and slot.space_group == "tmem" and \
                getattr(getattr(base, "dtype", None), "bits", 32) != 32:
            return (f"a tensor-memory address is a 32-bit register, got %{base.name} "
                    f"(.{base.dtype.name})")
    return None


def _checks(*fns):
    def run(m, ops):
        for fn in fns:
            verdict = fn(m, ops)
            if verdict:
                return verdict
        return None
    return run


# ---------------------------------------------------------------- alloc, fences, commit
def _ncols(m, ops):
    v = getattr(ops[1], "value", None)
    if isinstance(v, int) and not (32 <= v <= 512 and v & (v - 1) == 0):
        return f"the column count is a power of two from 32 to 512, got {v}"
    return None


BASICS = (
    OpSpec("tcgen05.alloc", (CTA_GROUP, SYNC, ALIGNED, g("space", "shared::cta")), ("b32",),
           operands="a s:u32", check_operands=_ncols, scope="warp", aligned=True, **NEED,
           doc="Allocate ncols (a power of two, 32 to 512) tensor-memory columns; the "
               "address is written to shared memory.",
           example="tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%r0], %r1"),
    OpSpec("tcgen05.dealloc", (CTA_GROUP, SYNC, ALIGNED), ("b32",), operands="r:b32 s:u32",
           check_operands=_ncols, scope="warp", aligned=True, **NEED,
           doc="Free tensor-memory columns tcgen05.alloc gave.",
           example="tcgen05.dealloc.cta_group::1.sync.aligned.b32 %r0, %r1"),
    OpSpec("tcgen05.relinquish_alloc_permit", (CTA_GROUP, SYNC, ALIGNED), (), ntypes=0,
           scope="warp", aligned=True, **NEED,
           doc="Give up the CTA's right to allocate tensor memory again.",
           example="tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned"),
    OpSpec("tcgen05.fence::before_thread_sync", (), (), ntypes=0,
           effects=frozenset({"fence"}), **NEED,
           doc="Order earlier tcgen05 operations before the next thread synchronisation.",
           example="tcgen05.fence::before_thread_sync"),
    OpSpec("tcgen05.fence::after_thread_sync", (), (), ntypes=0,
           effects=frozenset({"fence"}), **NEED,
           doc="Order later tcgen05 operations after the last thread synchronisation.",
           example="tcgen05.fence::after_thread_sync"),
    OpSpec("tcgen05.wait::ld", (SYNC, ALIGNED), (), ntypes=0, scope="warp", aligned=True,
           effects=frozenset({"async_wait"}), **NEED,
           doc="Wait for this thread's tcgen05.ld operations.",
           example="tcgen05.wait::ld.sync.aligned"),
    OpSpec("tcgen05.wait::st", (SYNC, ALIGNED), (), ntypes=0, scope="warp", aligned=True,
           effects=frozenset({"async_wait"}), **NEED,
           doc="Wait for this thread's tcgen05.st operations.",
           example="tcgen05.wait::st.sync.aligned"),
    OpSpec("tcgen05.commit", (CTA_GROUP, g("arrive", "mbarrier::arrive::one", required=True),
                              g("space", "shared::cluster"),
                              g("multicast", "multicast::cluster")), ("b64",),
           operands="a", variants={"multicast::cluster": "a r:b16"},
           effects=frozenset({"mbarrier"}), **NEED,
           doc="Make an mbarrier track the completion of this thread's earlier async "
               "tcgen05 operations (one arrival when they finish; with "
               ".multicast::cluster, on the mbarrier at that offset of each CTA whose bit "
               "the 16-bit mask sets).",
           example="tcgen05.commit.cta_group::1.mbarrier::arrive::one.b64 [%rd0]"),
)

# ---------------------------------------------------------------- mma
KINDS = ("kind::f16", "kind::tf32", "kind::f8f6f4", "kind::i8")
# The block-scaled kinds: A and B scaled per block of K by factors held in TMEM (two more
# TMEM address operands after the instruction descriptor). Per kind, the scale-vector
# sizes ptxas 13 takes, and whether the size may be left out (PTX 8.8, the default size).
BLOCK_KINDS = {"kind::mxf8f6f4": (("scale_vec::1X", "block32"), True),
               "kind::mxf4": (("scale_vec::2X", "block32"), True),
               "kind::mxf4nvf4": (("scale_vec::2X", "scale_vec::4X", "block16", "block32"),
                                  False)}
_KIND_MODS = tuple(Mod(k) for k in KINDS) + (
    Mod("kind::mxf8f6f4"), Mod("kind::mxf4"), Mod("kind::mxf4nvf4", (8, 7)))
_SCALE_VEC = (Mod("scale_vec::1X"), Mod("scale_vec::2X"), Mod("scale_vec::4X"),
              Mod("block16", (8, 8)), Mod("block32", (8, 8)))
# scale-input-d (D = A*B + D * 2^-scale) exists for these kinds only (PTX ISA; ptxas 13
# refuses it for f8f6f4 and, leniently, takes it for i8)
SCALED_KINDS = ("kind::f16", "kind::tf32")
COLLECTOR_A = ("collector::a::discard", "collector::a::lastuse", "collector::a::fill",
               "collector::a::use")
_SCALE = "i:u32{%s}?" % ",".join(map(str, range(16)))
# D in TMEM; A a shared-memory descriptor or (second spelling) a TMEM address; B a
# descriptor; the 32-bit instruction descriptor; optionally the disable-output-lane mask
# (4 words for cta_group::1, 8 for ::2); the enable-input-d predicate; scale-input-d.
_D, _B, _ID = "a=tmem", "r:b64", "s:b32"


def _mma_sig(meta: str, a_forms=("r:b64", "a=tmem")) -> str:
    forms = []
    for a in a_forms:
        for mask in ("", " X:{mask}"):
            forms.append(f"{_D} {a} {_B}{meta} {_ID}{mask} q:pred {_SCALE}")
    return " || ".join(forms)


def _block_sig(meta: str) -> str:
    # no lane mask, no scale-input-d: the scale factors' TMEM addresses instead
    return " || ".join(f"{_D} {a} {_B}{meta} {_ID} a=tmem a=tmem q:pred"
                       for a in ("r:b64", "a=tmem"))


def _mma_rule(m):
    ch = m.chosen
    if "ashift" in ch and ch.get("collector") in ("collector::a::fill", "collector::a::use"):
        return f".ashift cannot be combined with .{ch['collector']}"
    block = BLOCK_KINDS.get(ch["kind"])
    if block is None:
        if "block_scale" in ch or "scale_vec" in ch:
            return (f".{ch.get('block_scale') or ch['scale_vec']} is for the block-scaled "
                    f"kinds ({', '.join('.' + k for k in BLOCK_KINDS)})")
        return None
    if "block_scale" not in ch:
        return f".{ch['kind']} is block-scaled: write .{ch['kind']}.block_scale"
    if "ashift" in ch:
        return ".ashift is not for the block-scaled kinds"
    sizes, default_ok = block
    size = ch.get("scale_vec")
    if size is None:
        if not default_ok:
            return f".{ch['kind']} names its scale-vector size: one of " \
                   f"{', '.join('.' + s for s in sizes)}"
        return (8, 8), 100     # the default size arrived with PTX 8.8
    if size not in sizes:
        return f".{ch['kind']} takes the scale-vector sizes {', '.join('.' + s for s in sizes)}"
    return None


def _mma_operands(m, ops):
    kind = m.chosen["kind"]
    if kind in BLOCK_KINDS:          # their signature has no scale-input-d slot
        return None
    sparse = "sp" in m.chosen
    base = 6 if sparse else 5  # operands before scale-input-d, without the mask
    has_mask = any(s.is_list for s in m.operands[:len(ops)])
    if len(ops) > base + has_mask and kind not in SCALED_KINDS:
        return (f"scale-input-d applies to {' and '.join('.' + k for k in SCALED_KINDS)} "
                f"only, not .{kind}")
    return None


def _mma_lists(m):
    return {"mask": ("b32", 8 if m.chosen["cta_group"] == "cta_group::2" else 4)}


MMA = (
    OpSpec("tcgen05.mma", (g("sp", "sp"), CTA_GROUP, g("kind", *_KIND_MODS, required=True),
                           g("block_scale", "block_scale"), g("scale_vec", *_SCALE_VEC),
                           g("ashift", "ashift"), g("collector", *COLLECTOR_A)), (),
           ntypes=0, operands=_mma_sig(""),
           # .ashift shifts an A held in tensor memory: no descriptor form
           variants={"sp+block_scale": _block_sig(" a=tmem"), "block_scale": _block_sig(""),
                     "sp+ashift": _mma_sig(" a=tmem", ("a=tmem",)),
                     "sp": _mma_sig(" a=tmem"), "ashift": _mma_sig("", ("a=tmem",))},
           rule=_mma_rule, check_operands=_checks(tmem_32bit, _mma_operands),
           lists=_mma_lists, proxy="async",
           effects=frozenset({"async_copy"}), **NEED,
           doc="D (in tensor memory) = A*B + D, issued by one thread and asynchronous "
               "(tcgen05.commit tracks it): A a shared-memory descriptor or a TMEM address, "
               "B a descriptor, then the 32-bit instruction descriptor (shape, types, "
               "majors), optionally the disable-output-lane mask ({4 words} for "
               "cta_group::1, {8} for ::2), the enable-input-d predicate (false: D = A*B) "
               "and, for kind::f16/tf32, the scale-input-d immediate (0-15). .sp adds the "
               "sparsity metadata's TMEM address before the instruction descriptor. The "
               "block-scaled kinds (.kind::mxf8f6f4 / mxf4 / mxf4nvf4 .block_scale with a "
               "scale-vector size) take the TMEM addresses of A's and B's scale factors "
               "after the instruction descriptor, and no mask or scale-input-d.",
           example="tcgen05.mma.cta_group::1.kind::f16 [%r0], %rd0, %rd1, %r1, %p0"),
)

# ---------------------------------------------------------------- ld / st / cp / shift
# Per shape: the largest .num and the 32-bit registers per thread of one repetition.
LD_SHAPES = {"16x64b": (128, 1), "16x128b": (64, 2), "16x256b": (32, 4), "32x32b": (128, 1),
             "16x32bx2": (128, 1)}
NUMS = tuple(f"x{1 << i}" for i in range(8))


def _ldst_rule(m):
    shape, num = m.chosen["shape"], int(m.chosen["num"][1:])
    most, _ = LD_SHAPES[shape]
    if num > most:
        return f".{shape} repeats at most .x{most} times (128 registers), got .x{num}"
    return None


def _ldst_lists(m):
    shape, num = m.chosen["shape"], int(m.chosen["num"][1:])
    return {"r": ("b32", num * LD_SHAPES[shape][1])}


def _half_split(m, ops):
    # 16x32bx2's immediate: the column offset of the second 16-lane half
    if m.chosen["shape"] != "16x32bx2":
        return None
    v = getattr(ops[2 if m.spec.opcode.endswith("ld") else 1], "value", None)
    if isinstance(v, int) and not 0 <= v < 1 << 31:
        return f"the half-split offset of .16x32bx2 is a non-negative column count, got {v}"
    return None


def _ldst(op: str, pack: str, sig: str, split: str, doc: str, example: str) -> OpSpec:
    return OpSpec(op, (SYNC, ALIGNED, g("shape", *LD_SHAPES, required=True),
                       g("num", *NUMS, required=True), g("pack", pack)), ("b32",),
                  operands=sig, variants={"16x32bx2": split}, rule=_ldst_rule,
                  lists=_ldst_lists, check_operands=_checks(tmem_32bit, _half_split),
                  scope="warp",
                  aligned=True, varies=op.endswith("ld"), **NEED, doc=doc, example=example)


LDST = (
    _ldst("tcgen05.ld", "pack::16b", "V:{r} a=tmem", "V:{r} a=tmem i:u32",
          "Load a warp's slice of tensor memory into registers (asynchronous: read them "
          "after tcgen05.wait::ld): the shape (lanes x bits) repeated .num times along "
          "the columns; .32x32b.xN gives N registers, .16x128b 2N, .16x256b 4N; "
          ".16x32bx2 takes the second half's column offset as an immediate; .pack::16b "
          "packs two adjacent 16-bit columns into each register.",
          "tcgen05.ld.sync.aligned.32x32b.x2.b32 {%r0, %r1}, [%r2]"),
    _ldst("tcgen05.st", "unpack::16b", "a=tmem X:{r}", "a=tmem i:u32 X:{r}",
          "Store registers into a warp's slice of tensor memory (asynchronous: "
          "tcgen05.wait::st before reusing what it writes); shapes and register counts "
          "as tcgen05.ld; .unpack::16b splits each register into two 16-bit columns.",
          "tcgen05.st.sync.aligned.32x32b.x2.b32 [%r0], {%r1, %r2}"),
)

CP_SHAPES = ("128x256b", "4x256b", "128x128b", "64x128b", "32x128b")
# the warp multicast each shape needs (ptxas: "Modifier '.warptype' require ...")
CP_MULTICAST = {"64x128b": ("warpx2::02_13", "warpx2::01_23"), "32x128b": ("warpx4",)}


def _cp_rule(m):
    ch = m.chosen
    shape, mc = ch["shape"], ch.get("multicast")
    want = CP_MULTICAST.get(shape, ())
    if want and mc not in want:
        return f".{shape} copies with {' or '.join('.' + w for w in want)}"
    if not want and mc:
        return f".{shape} takes no warp multicast (.{mc} is for .64x128b / .32x128b)"
    if ("dst_fmt" in ch) != ("src_fmt" in ch):
        return "decompression names both formats: .b8x16.b6x16_p32 or .b8x16.b4x16_p64"
    return None


COPY = (
    OpSpec("tcgen05.cp", (CTA_GROUP, g("shape", *CP_SHAPES, required=True),
                          g("multicast", "warpx2::02_13", "warpx2::01_23", "warpx4"),
                          g("dst_fmt", "b8x16"), g("src_fmt", "b6x16_p32", "b4x16_p64")),
           (), ntypes=0, operands="a=tmem s:b64", rule=_cp_rule, check_operands=tmem_32bit,
           proxy="async", **NEED,
           doc="Copy a shared-memory matrix (named by a 64-bit descriptor) into tensor "
               "memory, asynchronously (tcgen05.commit tracks it); .64x128b and .32x128b "
               "multicast across warps; .b8x16.b6x16_p32 / .b4x16_p64 decompress 6- or "
               "4-bit elements to 8 bits.",
           example="tcgen05.cp.cta_group::1.128x256b [%r0], %rd0"),
    OpSpec("tcgen05.shift", (CTA_GROUP, g("dir", "down", required=True)), (), ntypes=0,
           operands="a=tmem", check_operands=tmem_32bit, **NEED,
           doc="Shift the 32-byte rows of a TMEM matrix down by one row, asynchronously "
               "(ordered with the tcgen05.mma operations of the thread).",
           example="tcgen05.shift.cta_group::1.down [%r0]"),
)

TABLE: tuple[OpSpec, ...] = BASICS + MMA + LDST + COPY
