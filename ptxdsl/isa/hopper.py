"""Hopper's asynchronous machinery (sm_90 / sm_90a): wgmma, TMA, bulk copies,
clusters, distributed shared memory and programmatic dependent launch.

Entries here join the core table in :mod:`ptxdsl.isa`; they use the same
:class:`~ptxdsl.isa.spec.OpSpec` shape and building blocks as :mod:`.table`.
The mbarrier transaction forms (``expect_tx``, ``complete_tx``, remote
arrive, the ``try_wait`` suspend hint) and ``fence.mbarrier_init`` /
``fence.proxy.async`` extend the existing entries in :mod:`.table`.

Minimum PTX ISA versions were measured with ptxas 13 (sm_90 accepts 7.8,
sm_90a needs 8.0): a claim below ptxas's fails ``tests/isa/test_table.py``.
"""
from __future__ import annotations

import re

from .spec import Group, Mod, OpSpec

HOPPER = ((8, 0), 90)


def g(name: str, *mods, required: bool = False) -> Group:
    return Group(name, tuple(m if isinstance(m, Mod) else Mod(m) for m in mods), required)


# ---------------------------------------------------------------- wgmma shapes and types
# Per A/B type: (K, the N values PTX allows, accumulator types).
_N_ALL = tuple(range(8, 257, 8))
_N_INT = (8, 16, 24) + tuple(range(32, 257, 16))
WGMMA_KINDS: dict[str, tuple[int, tuple[int, ...], tuple[str, ...]]] = {
    "f16": (16, _N_ALL, ("f16", "f32")),
    "bf16": (16, _N_ALL, ("f32",)),
    "tf32": (8, _N_ALL, ("f32",)),
    "e4m3": (32, _N_ALL, ("f16", "f32")),
    "e5m2": (32, _N_ALL, ("f16", "f32")),
    "s8": (32, _N_INT, ("s32",)),
    "u8": (32, _N_INT, ("s32",)),
}
_FP8 = ("e4m3", "e5m2")
_INT8 = ("s8", "u8")
WGMMA_SHAPES = tuple(f"m64n{n}k{k}" for k in (16, 8, 32) for n in _N_ALL)
_SHAPE = re.compile(r"^m(\d+)n(\d+)k(\d+)$")


def wgmma_shape(m) -> tuple[int, int, int]:
    """(M, N, K) of a wgmma match, from its shape modifier (``m64n128k16``)."""
    mm, n, k = _SHAPE.match(m.chosen["shape"]).groups()
    return int(mm), int(n), int(k)


def wgmma_acc_type(m) -> str:
    """The register type of the accumulator list: f16 accumulators pack two per .f16x2."""
    d = m.types[0].name
    return "f16x2" if d == "f16" else d


def wgmma_acc_count(m) -> int:
    """Accumulator registers per thread: M*N / 128 values, two f16 per register."""
    _, n, _ = wgmma_shape(m)
    return n // 4 if m.types[0].name == "f16" else n // 2


def wgmma_lists(m) -> dict[str, tuple[str, int]]:
    """The register lists of a wgmma form: the accumulator and a register A (4 x .b32)."""
    return {"acc": (wgmma_acc_type(m), wgmma_acc_count(m)), "a": ("b32", 4)}


def _wgmma_rule(m):
    d, a, b = (t.name for t in m.types)
    _, n, k = wgmma_shape(m)
    if a not in WGMMA_KINDS or b not in WGMMA_KINDS:
        bad = a if a not in WGMMA_KINDS else b
        return (f".{bad} is not an A/B type of wgmma: A and B are .f16, .bf16, .tf32, "
                f".e4m3, .e5m2, .s8 or .u8 (the first type is the accumulator)")
    mixed_int = a in _INT8 and b in _INT8 and a != b
    if a != b and not (a in _FP8 and b in _FP8) and not mixed_int:
        return f"A and B must have the same type (.{a}.{a}), except e4m3/e5m2 and s8/u8 mixes"
    kk, ns, accs = WGMMA_KINDS[a]
    if k != kk:
        return f".{a} inputs take K = {kk}: write m64n{n}k{kk}"
    if n not in ns:
        return (f"N = {n} is not a wgmma shape for .{a}: N is "
                + ("8, 16, 24 or a multiple of 16 up to 256" if a in _INT8
                   else "a multiple of 8 from 8 to 256"))
    if d not in accs:
        return (f"a .{a} wgmma accumulates in "
                f"{' or '.join('.' + x for x in accs)}, not .{d}")
    if m.has("satfinite") and a not in _INT8:
        return ".satfinite applies to the integer (.s32 accumulator) wgmma only"
    if mixed_int:
        return ((8, 4), 90)
    return None


_ACC = "+V:{acc}"
_AREG = "X:{a}"
# operand lists: accumulator, A (descriptor || 4 registers), B descriptor, scale-d
# (predicate or 0/1), then the immediates the type allows: scale-a, scale-b (1 or -1),
# transpose-a (descriptor form only), transpose-b (0 or 1).
_SC = "q:pred{0,1}"
_NEG = "i:s32{1,-1} i:s32{1,-1}"
_WGMMA_HALF = (f"{_ACC} s:b64 s:b64 {_SC} {_NEG} i:s32{{0,1}} i:s32{{0,1}} || "
               f"{_ACC} {_AREG} s:b64 {_SC} {_NEG} i:s32{{0,1}}")
_WGMMA_NOTRANS = f"{_ACC} s:b64 s:b64 {_SC} {_NEG} || {_ACC} {_AREG} s:b64 {_SC} {_NEG}"
_WGMMA_INT = f"{_ACC} s:b64 s:b64 {_SC} || {_ACC} {_AREG} s:b64 {_SC}"

SYNC_ALIGNED = (g("sync", "sync", required=True), g("aligned", "aligned", required=True))

WGMMA = (
    OpSpec("wgmma.mma_async", (*SYNC_ALIGNED, g("shape", *WGMMA_SHAPES, required=True),
                               g("satfinite", "satfinite")),
           ("f32", "f16", "s32", "bf16", "tf32", "e4m3", "e5m2", "s8", "u8"), ntypes=3,
           operands=_WGMMA_HALF,
           variants={"e4m3": _WGMMA_NOTRANS, "e5m2": _WGMMA_NOTRANS, "tf32": _WGMMA_NOTRANS,
                     "s8": _WGMMA_INT, "u8": _WGMMA_INT},
           lists=wgmma_lists,
           ptx=(8, 0), sm=90, arch_specific=True, rule=_wgmma_rule, category="tensorcore",
           scope="warpgroup", effects=frozenset({"accumulate"}), varies=True, interp=True,
           proxy="async",
           doc="Warpgroup matrix multiply-accumulate D = A*B + scale_d*D, asynchronous: "
               "the 128 threads of a warpgroup issue it together; A comes from a shared-"
               "memory descriptor or 4 registers per thread, B from a descriptor. The "
               "accumulator list has N/2 registers (N/4 .f16x2 for an f16 accumulator); "
               "it may not be touched until wgmma.wait_group retires the operation. "
               "Immediates: scale-a, scale-b in {1, -1}; transpose-a/b in {0, 1} "
               "(.f16/.bf16 only).",
           example="wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 "
                   "{%f0, %f1, %f2, %f3}, %rd0, %rd1, %p0, 1, 1, 0, 1"),
    OpSpec("wgmma.fence", SYNC_ALIGNED, (), ntypes=0, operands="", ptx=(8, 0), sm=90,
           arch_specific=True, category="tensorcore", scope="warpgroup",
           effects=frozenset({"fence"}), interp=True,
           doc="Order register and shared-memory accesses before the next wgmma.mma_async "
               "(needed before the first wgmma and whenever its registers were written).",
           example="wgmma.fence.sync.aligned"),
    OpSpec("wgmma.commit_group", SYNC_ALIGNED, (), ntypes=0, operands="", ptx=(8, 0), sm=90,
           arch_specific=True, category="tensorcore", scope="warpgroup",
           effects=frozenset({"accumulate"}), interp=True,
           doc="Close the group of wgmma.mma_async operations issued since the last commit.",
           example="wgmma.commit_group.sync.aligned"),
    OpSpec("wgmma.wait_group", SYNC_ALIGNED, (), ntypes=0, operands="i:u32", ptx=(8, 0),
           sm=90, arch_specific=True, category="tensorcore", scope="warpgroup",
           effects=frozenset({"async_wait"}), interp=True,
           check_operands=lambda m, ops: _range(ops[0], 0, 7, "wgmma.wait_group's N"),
           doc="Wait until at most N committed wgmma groups are pending; their accumulators "
               "become readable.",
           example="wgmma.wait_group.sync.aligned 0"),
)


def _imm(op):
    v = getattr(op, "value", None)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _range(op, lo, hi, what):
    v = _imm(op)
    if v is not None and not lo <= v <= hi:
        return f"{what} must be between {lo} and {hi}, got {v}"
    return None


# ---------------------------------------------------------------- TMA and bulk copies
DIMS = g("dim", "1d", "2d", "3d", "4d", "5d", required=True)
TX = "mbarrier::complete_tx::bytes"
MULTICAST = Mod("multicast::cluster", (8, 0), 90,
                doc="write the box into every CTA of the ctaMask operand (sm_90a for speed)")
CACHE_HINT = Mod("L2::cache_hint", (8, 0), 90, doc="the last operand is an L2 cache policy")
# Blackwell's collective TMA: a load into this CTA's shared memory (PTX 8.6), and the
# CTA pair of a cta_group::2 MMA whose leader's mbarrier tracks the bytes (sm_100a)
SHARED_CTA_DST = Mod("shared::cta", (8, 6), doc="load into the issuing CTA's shared memory")
CTA_GROUPS = tuple(Mod(f"cta_group::{n}", (8, 6), 100, arch_specific=True,
                       doc="the CTA group of a tcgen05 MMA that consumes the box")
                   for n in (1, 2))


def tensor_dims(m) -> int:
    return int(m.chosen["dim"][0])


def tensor_lists(m) -> dict[str, tuple[str, int]]:
    """A tensor copy's coordinates (one s32 per dimension) and im2col offsets (u16)."""
    return {"coords": ("s32", tensor_dims(m)), "im2col": ("u16", max(tensor_dims(m) - 2, 1))}


def _tensor_copy_rule(m):
    dst, src, mode = m.chosen["dst"], m.chosen["src"], m.chosen.get("mode")
    load = dst in ("shared::cluster", "shared::cta")
    if load != (src == "global"):
        return ("a tensor copy goes global -> shared::cluster / shared::cta (a load) or "
                "shared::cta -> global (a store)")
    if dst == "shared::cta" and m.has("multicast::cluster"):
        return ".multicast::cluster loads into shared::cluster, not shared::cta"
    if not load and "cta_group" in m.chosen:
        return f".{m.chosen['cta_group']} is for loads (Blackwell's collective TMA)"
    want = TX if load else "bulk_group"
    if m.chosen["completion"] != want:
        return (f"a tensor {'load' if load else 'store'} completes with .{want}")
    if not load and m.has("multicast::cluster"):
        return ".multicast::cluster is for loads into shared::cluster"
    if mode == "im2col" and (not load or tensor_dims(m) < 3):
        return ".im2col is a load mode of 3-D to 5-D tensors"
    return None


def _bulk_rule(m):
    pair = (m.chosen["dst"], m.chosen["src"])
    completion = m.chosen["completion"]
    ok = {("shared::cluster", "global"): TX, ("global", "shared::cta"): "bulk_group",
          ("shared::cluster", "shared::cta"): TX}
    if pair not in ok:
        return ("cp.async.bulk copies global -> shared::cluster, shared::cta -> global or "
                "shared::cta -> shared::cluster")
    if completion != ok[pair]:
        return f"cp.async.bulk.{pair[0]}.{pair[1]} completes with .{ok[pair]}"
    if m.has("multicast::cluster") and pair[1] != "global":
        return ".multicast::cluster is for global -> shared::cluster copies"
    if m.has("L2::cache_hint") and pair[1] == "shared::cta" and pair[0] != "global":
        return ".L2::cache_hint applies to copies that touch global memory"
    return None


# cp.reduce.async.bulk's element types per operation (shared::cta -> global)
BULK_REDUCE_TYPES = {"add": ("u32", "s32", "u64", "f32", "f64"),
                     "min": ("u32", "s32", "u64", "s64"), "max": ("u32", "s32", "u64", "s64"),
                     "inc": ("u32",), "dec": ("u32",),
                     "and": ("b32", "b64"), "or": ("b32", "b64"), "xor": ("b32", "b64")}


def _bulk_reduce_rule(m):
    op, t = m.chosen["op"], m.type.name
    if t not in BULK_REDUCE_TYPES[op]:
        return (f"cp.reduce.async.bulk .{op} takes "
                f"{', '.join('.' + x for x in BULK_REDUCE_TYPES[op])}, not .{t}")
    return None


def _bulk_size(m, ops):
    v = _imm(ops[2]) if len(ops) > 2 else None
    if v is not None and (v <= 0 or v % 16):
        return f"a bulk copy moves a positive multiple of 16 bytes, got {v}"
    return None


_ASYNC_COPY = frozenset({"async_copy"})
_TX_COPY = frozenset({"async_copy", "mbarrier"})

TMA = (
    OpSpec("cp.async.bulk.tensor",
           (DIMS, g("dst", "shared::cluster", "global", SHARED_CTA_DST, required=True),
            g("src", "global", "shared::cta", required=True), g("mode", "tile", "im2col"),
            g("completion", TX, "bulk_group", required=True), g("multicast", MULTICAST),
            g("cta_group", *CTA_GROUPS), g("hint", CACHE_HINT)), (), ntypes=0,
           operands="a=dst t:{coords} a=shared::cta X:{im2col}@im2col "
                    "s:u16@multicast::cluster r:b64@L2::cache_hint",
           variants={"bulk_group": "t:{coords} a=src r:b64@L2::cache_hint"},
           lists=tensor_lists,
           ptx=(8, 0), sm=90, rule=_tensor_copy_rule, category="async", side_effects=True,
           effects=_TX_COPY, proxy="async",
           doc="TMA: copy a box of a tensor described by a tensor map. Loads "
               "(global -> shared::cluster) complete transaction bytes on an mbarrier, "
               "optionally into several CTAs of the cluster (.multicast::cluster, a 16-bit "
               "ctaMask); stores (shared::cta -> global) join a bulk group.",
           example="cp.async.bulk.tensor.2d.shared::cluster.global.tile."
                   "mbarrier::complete_tx::bytes [%r0], [%rd0, {%r1, %r2}], [%r3]"),
    OpSpec("cp.reduce.async.bulk.tensor",
           (DIMS, g("dst", "global", required=True), g("src", "shared::cta", required=True),
            g("op", "add", "min", "max", "inc", "dec", "and", "or", "xor", required=True),
            g("mode", "tile"), g("completion", "bulk_group", required=True),
            g("hint", CACHE_HINT)), (), ntypes=0,
           operands="t:{coords} a=src r:b64@L2::cache_hint", lists=tensor_lists,
           ptx=(8, 0), sm=90, category="async", side_effects=True, effects=_ASYNC_COPY,
           proxy="async",
           doc="TMA reduction: combine a shared-memory box into a tensor in global memory "
               "(element type from the tensor map).",
           example="cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group "
                   "[%rd0, {%r1, %r2}], [%r0]"),
    OpSpec("cp.reduce.async.bulk",
           (g("dst", "global", required=True), g("src", "shared::cta", required=True),
            g("completion", "bulk_group", required=True), g("hint", CACHE_HINT),
            g("op", "add", "min", "max", "inc", "dec", "and", "or", "xor", required=True)),
           ("b32", "u32", "s32", "b64", "u64", "s64", "f32", "f64"),
           operands="a=dst a=src s:u32 r:b64@L2::cache_hint",
           ptx=(8, 0), sm=90, rule=_bulk_reduce_rule, check_operands=_bulk_size,
           category="async", side_effects=True, effects=_ASYNC_COPY, proxy="async",
           doc="Bulk reduction: combine a contiguous shared-memory range (a multiple of 16 "
               "bytes, 16-byte aligned) into global memory element by element; joins a bulk "
               "group (FlashAttention-4's sm90 backward adds dQ with it).",
           example="cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 "
                   "[%rd0], [%r0], 16384"),
    OpSpec("cp.async.bulk.prefetch.tensor",
           (DIMS, g("level", "L2", required=True), g("src", "global", required=True),
            g("mode", "tile", "im2col"), g("hint", CACHE_HINT)), (), ntypes=0,
           operands="t:{coords} X:{im2col}@im2col r:b64@L2::cache_hint",
           lists=tensor_lists,
           ptx=(8, 0), sm=90, category="async", side_effects=True, interp=True,
           rule=lambda m: (".im2col is a mode of 3-D to 5-D tensors"
                           if m.has("im2col") and tensor_dims(m) < 3 else None),
           doc="Start fetching a tensor box into the L2; nothing waits for it.",
           example="cp.async.bulk.prefetch.tensor.2d.L2.global [%rd0, {%r1, %r2}]"),
    OpSpec("cp.async.bulk",
           (g("dst", "shared::cluster", "global", required=True),
            g("src", "global", "shared::cta", required=True),
            g("completion", TX, "bulk_group", required=True), g("multicast", MULTICAST),
            g("hint", CACHE_HINT)), (), ntypes=0,
           operands="a=dst a=src s:u32 a=shared::cta s:u16@multicast::cluster "
                    "r:b64@L2::cache_hint",
           variants={"bulk_group": "a=dst a=src s:u32 r:b64@L2::cache_hint"},
           ptx=(8, 0), sm=90, rule=_bulk_rule, check_operands=_bulk_size, category="async",
           side_effects=True, effects=_TX_COPY, proxy="async",
           doc="Bulk copy of a contiguous range (a multiple of 16 bytes, 16-byte aligned): "
               "global -> shared::cluster or shared::cta -> shared::cluster completing bytes "
               "on an mbarrier, or shared::cta -> global in a bulk group.",
           example="cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes "
                   "[%r0], [%rd0], 4096, [%r1]"),
    OpSpec("cp.async.bulk.commit_group", (), (), ntypes=0, operands="", ptx=(8, 0), sm=90,
           category="async", side_effects=True, effects=_ASYNC_COPY,
           doc="Close the current bulk group of bulk/tensor copies (the .bulk_group ones).",
           example="cp.async.bulk.commit_group"),
    OpSpec("cp.async.bulk.wait_group", (g("read", "read"),), (), ntypes=0,
           operands="i:u32", ptx=(8, 0), sm=90, category="async", side_effects=True,
           effects=frozenset({"async_wait"}),
           check_operands=lambda m, ops: _range(ops[0], 0, 63, "the pending group count"),
           doc="Wait until at most N bulk groups are pending (.read: until their sources "
               "have been read, so shared memory may be reused).",
           example="cp.async.bulk.wait_group.read 0"),
    OpSpec("prefetch", (g("space", "global", "local", Mod("const", (8, 0), 90),
                          Mod("param", (8, 0), 90)),
                        g("level", "L1", "L2", Mod("L2::evict_last", (7, 4), 80),
                          Mod("L2::evict_normal", (7, 4), 80),
                          Mod("tensormap", (8, 0), 90), required=True)), (), ntypes=0,
           operands="a", ptx=(2, 0), sm=20, interp=True, category="data", side_effects=True,
           rule=lambda m: _prefetch_rule(m),
           doc="Prefetch a line into a cache level, or (.tensormap) a tensor map into the "
               "TMA unit's cache (from .const, .param or a generic address).",
           example="prefetch.tensormap [%rd0]"),
)


def _prefetch_rule(m):
    space, level = m.chosen.get("space"), m.chosen["level"]
    if level == "tensormap":
        if space in ("global", "local"):
            return "prefetch.tensormap reads .const, .param or a generic address"
    elif space in ("const", "param"):
        return f"prefetch from .{space} is prefetch.{space}.tensormap"
    if level.startswith("L2::") and space not in ("global",):
        return f"prefetch.{level} is for .global: prefetch.global.{level}"
    return None


# ---------------------------------------------------------------- clusters, DSMEM, PDL
def _setmaxnreg(m, ops):
    v = _imm(ops[0])
    if v is not None and not (24 <= v <= 256 and v % 8 == 0):
        return f"setmaxnreg takes a register count from 24 to 256, a multiple of 8; got {v}"
    return None


def _red_async_rule(m):
    op, t = m.chosen["op"], m.type.name
    allowed = {"add": ("u32", "s32", "u64"), "min": ("u32", "s32"), "max": ("u32", "s32"),
               "inc": ("u32",), "dec": ("u32",), "and": ("b32",), "or": ("b32",),
               "xor": ("b32",)}[op]
    if t not in allowed:
        return f"red.async.{op} works on {', '.join('.' + x for x in allowed)}, not .{t}"
    return None


def _cluster_barrier_rule(m):
    sem, mode = m.chosen.get("sem"), m.chosen["mode"]
    if sem in ("relaxed", "release") and mode == "wait":
        return f"only barrier.cluster.arrive takes .{sem} (the wait is .acquire)"
    if sem == "acquire" and mode == "arrive":
        return "only barrier.cluster.wait takes .acquire (an arrive is .release or .relaxed)"
    return None


CLUSTER = (
    OpSpec("setmaxnreg", (g("action", "inc", "dec", required=True), *SYNC_ALIGNED), ("u32",),
           operands="i:u32", ptx=(8, 0), sm=90, arch_specific=True, category="sync",
           scope="warpgroup", side_effects=True, check_operands=_setmaxnreg, interp=True,
           doc="Raise (.inc) or lower (.dec) the register budget of every thread of the "
               "warpgroup to N (24..256, a multiple of 8); warp-specialised kernels give the "
               "producer few registers and the consumers many.",
           example="setmaxnreg.inc.sync.aligned.u32 240"),
    OpSpec("barrier.cluster", (g("mode", "arrive", "wait", required=True),
                               g("sem", Mod("relaxed", (8, 0)), Mod("release", (8, 0)),
                                 Mod("acquire", (8, 0))), g("aligned", "aligned")),
           (), ntypes=0, operands="", ptx=(7, 8), sm=90, category="sync", scope="cluster",
           side_effects=True, effects=frozenset({"barrier"}), rule=_cluster_barrier_rule,
           doc="Cluster barrier in two halves: every thread of every CTA of the cluster "
               "arrives (.release, the default, or .relaxed), then waits (.acquire) before "
               "touching peer CTAs' shared memory.",
           example="barrier.cluster.arrive.aligned"),
    OpSpec("mapa", (g("space", "shared::cluster"),), ("u32", "u64"),
           operands="d:T &s:T s:u32", ptx=(7, 8), sm=90, category="data",
           doc="Map an address of this CTA's shared memory (or a generic one) to the same "
               "variable in the CTA of the given rank in the cluster.",
           example="mapa.shared::cluster.u32 %r2, %r0, %r1"),
    OpSpec("getctarank", (g("space", "shared::cluster"),), ("u32", "u64"),
           operands="d:u32 &s:T", ptx=(7, 8), sm=90, category="data",
           doc="The rank in the cluster of the CTA whose shared memory an address names.",
           example="getctarank.shared::cluster.u32 %r1, %r0"),
    OpSpec("st.async", (g("weak", "weak"), g("space", "shared::cluster", required=True),
                        g("completion", TX, required=True), g("vec", "v2", "v4")),
           ("b32", "b64", "u32", "s32", "u64", "s64", "f32", "f64"),
           operands="a X:T a", ptx=(8, 1), sm=90, category="async", side_effects=True,
           effects=_TX_COPY,
           rule=lambda m: (f"st.async.v4 stores 32-bit values only (.v2 for .{m.type.name})"
                           if m.vector == 4 and m.type.bits == 64 else None),
           doc="Store into a peer CTA's shared memory and complete the bytes on that CTA's "
               "mbarrier (also in shared::cluster).",
           example="st.async.shared::cluster.mbarrier::complete_tx::bytes.u32 "
                   "[%r0], %r1, [%r2]"),
    OpSpec("red.async", (g("sem", "relaxed", required=True), g("scope", "cluster",
                                                              required=True),
                         g("space", "shared::cluster", required=True),
                         g("completion", TX, required=True),
                         g("op", "add", "min", "max", "inc", "dec", "and", "or", "xor",
                           required=True)),
           ("b32", "u32", "s32", "u64"), operands="a s:T a", ptx=(8, 1), sm=90,
           category="atomic", side_effects=True, effects=_TX_COPY, rule=_red_async_rule,
           doc="Atomic reduction into a peer CTA's shared memory that completes its bytes "
               "on that CTA's mbarrier.",
           example="red.async.relaxed.cluster.shared::cluster.mbarrier::complete_tx::bytes."
                   "add.u32 [%r0], %r1, [%r2]"),
    # Programmatic dependent launch (a kernel launched with ``pdl=True``): two entries,
    # so that the wait's effect is data the verifier and the interpreter read.
    OpSpec("griddepcontrol.launch_dependents", (), (), ntypes=0, operands="", ptx=(7, 8),
           sm=90, category="sync", side_effects=True, interp=True,
           doc="Programmatic dependent launch: lets the next kernel of the stream (one "
               "launched with the programmatic-serialization attribute) start once every CTA "
               "of this grid has executed it or exited; it orders no memory.",
           example="griddepcontrol.launch_dependents"),
    OpSpec("griddepcontrol.wait", (), (), ntypes=0, operands="", ptx=(7, 8), sm=90,
           category="sync", side_effects=True, effects=frozenset({"grid_wait"}), interp=True,
           doc="Programmatic dependent launch: blocks the thread until the grids this one "
               "depends on have finished and their memory is visible; a no-op in a kernel "
               "launched without the attribute.",
           example="griddepcontrol.wait"),
)

TABLE: tuple[OpSpec, ...] = WGMMA + TMA + CLUSTER
