"""Instructions that PTX from other compilers uses and ptxdsl's own kernels do not:
wmma (sm_70+ warp matrix fragments), mbarrier's drop / noComplete / pending_count
forms, the tensor-map rewrite of Hopper (tensormap.replace, tensormap.cp_fenceproxy,
fence.proxy.tensormap::generic) and cluster launch control (try_cancel, query_cancel).
Blackwell's tcgen05 family is in :mod:`.blackwell`.

The PTX front end (:mod:`ptxdsl.frontend`) checks imported code against these entries
as against the rest of the table; each form is assembled by ptxas in
``tests/isa/test_table.py``. None has CPU semantics (``interp=False``): a kernel that
uses one is refused by the interpreter, naming the instruction.
"""
from __future__ import annotations

from .spec import Group, Mod, OpSpec
from .tensorcore import shape_mnk


def g(name: str, *mods, required: bool = False) -> Group:
    return Group(name, tuple(m if isinstance(m, Mod) else Mod(m) for m in mods), required)


SYNC = g("sync", "sync", required=True)
ALIGNED = g("aligned", "aligned", required=True)
SHARED_CTA = Mod("shared::cta", (7, 8))

# ---------------------------------------------------------------- wmma
# Per input type: the shapes it takes, the (dtype, ctype) accumulations, PTX ISA, sm_.
WMMA_KINDS = {
    "f16": (("m16n16k16", "m32n8k16", "m8n32k16"), ("f16", "f32"), (6, 1), 70),
    "bf16": (("m16n16k16", "m32n8k16", "m8n32k16"), ("f32",), (7, 0), 80),
    "tf32": (("m16n16k8",), ("f32",), (7, 0), 80),
    "s8": (("m16n16k16", "m32n8k16", "m8n32k16"), ("s32",), (6, 3), 75),
    "u8": (("m16n16k16", "m32n8k16", "m8n32k16"), ("s32",), (6, 3), 75),
    "f64": (("m8n8k4",), ("f64",), (7, 0), 80),
}
WMMA_SHAPES = ("m16n16k16", "m32n8k16", "m8n32k16", "m16n16k8", "m8n8k4")
_ACC_REG = {"f16": "b32", "f32": "f32", "s32": "s32", "f64": "f64"}


def wmma_registers(frag: str, shape: str, elem: str) -> tuple[str, int]:
    """(register type, count) of one lane's wmma fragment: A is M x K, B is K x N, C and
    D are M x N, spread over 32 lanes; f16 inputs are held twice over (8 registers for
    every shape), as the PTX ISA lays them out."""
    m, n, k = shape_mnk(shape)
    if frag in ("c", "d"):
        elems = m * n // 32
        return _ACC_REG[elem], elems // 2 if elem == "f16" else elems
    if elem == "f16":
        return "b32", 8
    elems = (m * k if frag == "a" else k * n) // 32
    if elem == "f64":
        return "f64", elems
    per = {"bf16": 2, "tf32": 1, "s8": 4, "u8": 4}[elem]
    return "b32", max(elems // per, 1)


def _wmma_input(shape: str, elem: str):
    if elem not in WMMA_KINDS:
        return f".{elem} is no wmma input type ({', '.join('.' + t for t in WMMA_KINDS)})"
    shapes, _, ptx, sm = WMMA_KINDS[elem]
    if shape not in shapes:
        return f".{elem} inputs take the shapes {', '.join('.' + s for s in shapes)}"
    return ptx, sm


def _wmma_acc(shape: str, elem: str):
    for t, (shapes, accs, ptx, sm) in WMMA_KINDS.items():
        if shape in shapes and elem in accs:
            return ptx, sm
    return f".{shape} accumulates in no .{elem}"


def wmma_mma_rule(m):
    ch = m.chosen
    a, b = ch.get("atype", "f16"), ch.get("btype", "f16")
    if a != b:
        return f"A and B have one type (.{a} .{a}), got .{a} .{b}"
    need = _wmma_input(ch["shape"], a)
    if isinstance(need, str):
        return need
    accs = WMMA_KINDS[a][1]
    if ch["dtype"] not in accs or ch["ctype"] not in accs:
        return f".{a} inputs accumulate in {', '.join('.' + x for x in accs)}"
    if "satfinite" in ch and a not in ("s8", "u8"):
        return ".satfinite applies to the integer forms"
    return need


def _wmma_mma_lists(m):
    ch = m.chosen
    a = ch.get("atype", "f16")
    return {"a": wmma_registers("a", ch["shape"], a), "b": wmma_registers("b", ch["shape"], a),
            "c": wmma_registers("c", ch["shape"], ch["ctype"]),
            "d": wmma_registers("d", ch["shape"], ch["dtype"])}


def wmma_load_rule(m):
    ch = m.chosen
    if ch["frag"] == "c":
        return _wmma_acc(ch["shape"], ch["type"])
    return _wmma_input(ch["shape"], ch["type"])


def wmma_store_rule(m):
    return _wmma_acc(m.chosen["shape"], m.chosen["type"])


def _wmma_frag_lists(m):
    ch = m.chosen
    return {"r": wmma_registers(ch["frag"], ch["shape"], ch["type"])}


_WSPACE = g("space", "global", "shared", SHARED_CTA)
_LAYOUT = ("row", "col")
_INPUTS = ("bf16", "tf32", "s8", "u8", "f64")
_ACCS = ("f16", "f32", "s32", "f64")

WMMA = (
    OpSpec("wmma.load", (g("frag", "a", "b", "c", required=True), SYNC, ALIGNED,
                         g("layout", *_LAYOUT, required=True),
                         g("shape", *WMMA_SHAPES, required=True), _WSPACE,
                         g("type", "f16", *_INPUTS[:-1], "f32", "s32", "f64", required=True)),
           (), ntypes=0, operands="V:{r} a s:u32?", ptx=(6, 0), sm=70, interp=False,
           category="tensor core", rule=wmma_load_rule, lists=_wmma_frag_lists,
           scope="warp", aligned=True, varies=True,
           doc="Load a warp's wmma fragment (A, B or the accumulator C) of a row- or "
               "column-major matrix; the optional last operand is the row stride in "
               "elements.",
           example="wmma.load.a.sync.aligned.row.m16n16k8.shared.tf32 {%r0, %r1, %r2, %r3}, "
                   "[%r4], 8"),
    OpSpec("wmma.store", (g("frag", "d", required=True), SYNC, ALIGNED,
                          g("layout", *_LAYOUT, required=True),
                          g("shape", *WMMA_SHAPES, required=True), _WSPACE,
                          g("type", *_ACCS, required=True)),
           (), ntypes=0, operands="a X:{r} s:u32?", ptx=(6, 0), sm=70, interp=False,
           category="tensor core", rule=wmma_store_rule, lists=_wmma_frag_lists,
           scope="warp", aligned=True, side_effects=True,
           doc="Store a warp's wmma accumulator fragment D as a row- or column-major "
               "matrix; the optional last operand is the row stride in elements.",
           example="wmma.store.d.sync.aligned.row.m16n16k16.global.f32 [%rd0], "
                   "{%f0, %f1, %f2, %f3, %f4, %f5, %f6, %f7}, 16"),
    OpSpec("wmma.mma", (SYNC, ALIGNED, g("alayout", *_LAYOUT, required=True),
                        g("blayout", *_LAYOUT, required=True),
                        g("shape", *WMMA_SHAPES, required=True),
                        g("dtype", *_ACCS, required=True), g("atype", *_INPUTS),
                        g("btype", *_INPUTS), g("ctype", *_ACCS, required=True),
                        g("satfinite", "satfinite")),
           (), ntypes=0, operands="V:{d} X:{a} X:{b} X:{c}", ptx=(6, 0), sm=70, interp=False,
           category="tensor core", rule=wmma_mma_rule, lists=_wmma_mma_lists, scope="warp",
           aligned=True, varies=True,
           doc="Warp-wide D = A x B + C on wmma fragments: the layouts of A and B, the shape, "
               "then .dtype.ctype for .f16 inputs or .dtype.atype.btype.ctype for the others.",
           example="wmma.mma.sync.aligned.row.col.m16n16k8.f32.tf32.tf32.f32 "
                   "{%f0, %f1, %f2, %f3, %f4, %f5, %f6, %f7}, {%r0, %r1, %r2, %r3}, "
                   "{%r4, %r5, %r6, %r7}, {%f8, %f9, %f10, %f11, %f12, %f13, %f14, %f15}"),
)

# ---------------------------------------------------------------- mbarrier
_MSPACE = g("space", "shared", SHARED_CTA)


def _mbar_order(m):
    sem, scope = m.chosen.get("sem"), m.chosen.get("scope")
    if bool(sem) != bool(scope):
        return "a memory order and a scope come together: .release.cta or .release.cluster"
    return None


def _positive_count(m, ops):
    # ptxas: "value '0' expected to be a non-zero positive"
    v = getattr(ops[2], "value", None) if len(ops) > 2 else None
    if isinstance(v, int) and v < 1:
        return f"the arrival count is a positive number, got {v}"
    return None


def _mbar_groups(cluster: bool = True):
    # ptxas: "Modifier '.cluster' cannot be combined with modifier '.noComplete'"
    scopes = (Mod("cta", (8, 0)),) + ((Mod("cluster", (8, 0), 90),) if cluster else ())
    return (g("sem", Mod("release", (8, 0))), g("scope", *scopes), _MSPACE)


MBARRIER = (
    OpSpec("mbarrier.arrive_drop", _mbar_groups(), ("b64",), operands="d:b64 a s:u32?!7.8/90",
           check_operands=_positive_count,
           ptx=(7, 0), sm=80, rule=_mbar_order, category="mbarrier", side_effects=True,
           effects=frozenset({"mbarrier"}), interp=False,
           doc="Arrive on an mbarrier and drop this thread from the expected count of the "
               "phases after it (optionally count arrivals, sm_90).",
           example="mbarrier.arrive_drop.shared.b64 %rd0, [%r0]"),
    OpSpec("mbarrier.arrive_drop.noComplete", _mbar_groups(False), ("b64",),
           check_operands=_positive_count,
           operands="d:b64 a s:u32", ptx=(7, 0), sm=80, rule=_mbar_order,
           category="mbarrier", side_effects=True, effects=frozenset({"mbarrier"}),
           interp=False,
           doc="arrive_drop of count arrivals that must not complete the phase.",
           example="mbarrier.arrive_drop.noComplete.shared.b64 %rd0, [%r0], %r1"),
    OpSpec("mbarrier.arrive.noComplete", _mbar_groups(False), ("b64",),
           check_operands=_positive_count,
           operands="d:b64 a s:u32", ptx=(7, 0), sm=80, rule=_mbar_order,
           category="mbarrier", side_effects=True, effects=frozenset({"mbarrier"}),
           interp=False,
           doc="Arrive count times on an mbarrier, where the arrivals must not complete "
               "the phase.",
           example="mbarrier.arrive.noComplete.shared.b64 %rd0, [%r0], %r1"),
    OpSpec("mbarrier.arrive_drop.expect_tx", _mbar_groups(), ("b64",),
           operands="d:b64 a s:u32", ptx=(8, 0), sm=90, rule=_mbar_order,
           category="mbarrier", side_effects=True, effects=frozenset({"mbarrier"}),
           interp=False,
           doc="Add expected transaction bytes, then arrive_drop, as one step.",
           example="mbarrier.arrive_drop.expect_tx.shared.b64 %rd0, [%r0], 4096"),
    OpSpec("mbarrier.pending_count", (), ("b64",), operands="d:u32 r:b64", ptx=(7, 0), sm=80,
           category="mbarrier", interp=False,
           doc="The pending arrival count held in a state token from mbarrier.test_wait's "
               "arrive.",
           example="mbarrier.pending_count.b64 %r0, %rd0"),
)

# ---------------------------------------------------------------- tensor-map rewrite
TMAP_FIELDS_1 = ("global_address", "rank")
TMAP_FIELDS_2 = ("box_dim", "global_dim", "global_stride", "element_stride")
TMAP_FIELDS_3 = ("elemtype", "interleave_layout", "swizzle_mode", "fill_mode")
# the enumerated values each layout field takes at PTX 8.3 (ptxas 13 checks the ranges;
# later ISAs add elemtype 13-15 and swizzle_mode 4)
TMAP_VALUES = {"elemtype": 12, "interleave_layout": 2, "swizzle_mode": 3,
               "swizzle_atomicity": 3, "fill_mode": 1}
TMAP_NEED = ((8, 3), 90)


def _tmap_rule(m):
    field = m.chosen["field"]
    want = "b64" if field in ("global_address", "global_stride") else "b32"
    if m.type.name != want:
        return f"tensormap.replace.tile.{field} writes a .{want} value"
    return None


def _tmap_operands(m, ops):
    field = m.chosen["field"]
    v = getattr(ops[1], "value", None) if len(ops) > 1 else None
    if field in TMAP_FIELDS_2 and isinstance(v, int) and not 0 <= v <= 4:
        return f".{field} names a dimension from 0 to 4, got {v}"
    return None


TENSORMAP = (
    OpSpec("tensormap.replace", (g("mode", "tile", required=True),
                                 g("field", *TMAP_FIELDS_1, *TMAP_FIELDS_2, *TMAP_FIELDS_3,
                                   Mod("swizzle_atomicity", (8, 6), 100), required=True),
                                 g("space", "global", "shared::cta"),
                                 g("size", "b1024", required=True)),
           ("b32", "b64"), operands="a s:T",
           variants={**{f: "a i:u32 s:T" for f in TMAP_FIELDS_2},
                     **{f: "a i:u32{%s}" % ",".join(map(str, range(n + 1)))
                        for f, n in TMAP_VALUES.items()}},
           ptx=TMAP_NEED[0], sm=TMAP_NEED[1], arch_specific=True, interp=False,
           category="tma", side_effects=True, rule=_tmap_rule,
           check_operands=_tmap_operands,
           doc="Rewrite one field of a 128-byte tensor map in global or shared memory "
               "(per-dimension fields take the dimension first; layout fields take an "
               "enumerated immediate).",
           example="tensormap.replace.tile.global_address.shared::cta.b1024.b64 [%r0], %rd0"),
    OpSpec("tensormap.cp_fenceproxy", (g("dst", "global", required=True),
                                       g("src", "shared::cta", required=True),
                                       g("proxy", "tensormap::generic", required=True),
                                       g("sem", "release", required=True),
                                       g("scope", "cta", "cluster", "gpu", "sys",
                                         required=True), SYNC, ALIGNED),
           (), ntypes=0, operands="a=dst a=src i:u32{128}", ptx=TMAP_NEED[0],
           sm=TMAP_NEED[1], interp=False, category="tma", side_effects=True,
           effects=frozenset({"fence"}),
           doc="Copy a 128-byte tensor map from shared to global memory and release it to "
               "the tensor-map proxy (pair with fence.proxy.tensormap::generic.acquire).",
           example="tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.gpu"
                   ".sync.aligned [%rd0], [%r0], 128"),
    OpSpec("fence.proxy.tensormap::generic", (g("sem", "release", "acquire", required=True),
                                              g("scope", "cta", "cluster", "gpu", "sys",
                                                required=True)),
           (), ntypes=0, operands="", variants={"acquire": "a i:u32{128}"},
           ptx=TMAP_NEED[0], sm=TMAP_NEED[1], interp=False, category="sync",
           side_effects=True, effects=frozenset({"fence"}),
           doc="Order tensor-map writes of the generic proxy (release) before the TMA "
               "reads of the tensor map at an address (acquire, with its 128 bytes).",
           example="fence.proxy.tensormap::generic.acquire.gpu [%rd0], 128"),
)

# ---------------------------------------------------------------- cluster launch control
CLC_NEED = dict(ptx=(8, 6), sm=100, interp=False, category="cluster")

CLUSTER_LAUNCH_CONTROL = (
    OpSpec("clusterlaunchcontrol.try_cancel",
           (g("async", "async", required=True), g("space", "shared::cta", required=True),
            g("completion", "mbarrier::complete_tx::bytes", required=True),
            g("multicast", "multicast::cluster::all")), ("b128",),
           operands="a a", side_effects=True, effects=frozenset({"mbarrier"}), **CLC_NEED,
           doc="Ask to cancel a cluster not yet launched: the 16-byte response lands at the "
               "first address, and the mbarrier at the second completes its 16 bytes.",
           example="clusterlaunchcontrol.try_cancel.async.shared::cta."
                   "mbarrier::complete_tx::bytes.b128 [%r0], [%r1]"),
    OpSpec("clusterlaunchcontrol.query_cancel.is_canceled",
           (g("dtype", "pred", required=True), g("htype", "b128", required=True)), (),
           ntypes=0, operands="p:pred r:b128", **CLC_NEED,
           doc="Whether a try_cancel response cancelled a cluster.",
           example="clusterlaunchcontrol.query_cancel.is_canceled.pred.b128 %p0, %rq0"),
) + tuple(
    OpSpec(f"clusterlaunchcontrol.query_cancel.get_first_ctaid::{axis}",
           (g("dtype", "b32", required=True), g("htype", "b128", required=True)), (),
           ntypes=0, operands="d:b32 r:b128", **CLC_NEED,
           doc=f"The {axis} coordinate of the first CTA of the cluster a try_cancel "
               f"response cancelled.",
           example=f"clusterlaunchcontrol.query_cancel.get_first_ctaid::{axis}.b32.b128 "
                   f"%r0, %rq0")
    for axis in "xyz")

TABLE: tuple[OpSpec, ...] = WMMA + MBARRIER + TENSORMAP + CLUSTER_LAUNCH_CONTROL
