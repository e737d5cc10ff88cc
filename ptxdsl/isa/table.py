"""The instruction table: every opcode family ptxdsl knows, as data.

Each entry gives the modifier groups in PTX order, the types, the operand
signature (see :class:`~ptxdsl.isa.spec.Operand` for the letters) and the
minimum PTX ISA version and ``sm_`` the form needs. Adding an instruction
means adding one entry here (and, if it runs on the CPU, one semantic
function in ``ptxdsl/interp``).
"""
from __future__ import annotations

from .spec import Group, Mod, OpSpec
from . import rules

U = ("u16", "u32", "u64")
S = ("s16", "s32", "s64")
B = ("b16", "b32", "b64")
INT = U + S
F = ("f32", "f64")
H = ("f16", "f16x2", "bf16", "bf16x2")
FALL = ("f16", "f16x2", "bf16", "bf16x2", "f32", "f64")


def g(name: str, *mods, required: bool = False) -> Group:
    """A modifier group; plain strings become Mods with no extra needs."""
    return Group(name, tuple(m if isinstance(m, Mod) else Mod(m) for m in mods), required)


def only(*types: str) -> frozenset[str]:
    return frozenset(types)


FLT = only(*FALL)
F32 = only("f32")
# Half-precision arithmetic rounds to nearest only (ptxas: "Illegal rounding modifier").
RND_F = g("rounding", Mod("rn", types=FLT), *(Mod(r, types=only(*F)) for r in ("rz", "rm", "rp")))
FTZ = g("ftz", Mod("ftz", types=only("f32", "f16", "f16x2")))
FTZ_F64 = g("ftz", Mod("ftz", types=only("f32", "f64")))  # rcp/rsqrt.approx.ftz.f64
SAT = g("sat", Mod("sat", types=only("s32", "f32", "f16", "f16x2")))
SYNC = g("sync", "sync", required=True)
NAN = g("nan", Mod("NaN", (7, 0), 80, types=only("f32", *H)))
ALIGNED = g("aligned", "aligned")
SCOPE = g("scope", "cta", Mod("cluster", (7, 8), 90), "gpu", "sys")
SEM_LD = g("sem", "weak", "volatile", Mod("relaxed", (6, 0), 70), Mod("acquire", (6, 0), 70))
SEM_ST = g("sem", "weak", "volatile", Mod("relaxed", (6, 0), 70), Mod("release", (6, 0), 70))
VEC2_4 = g("vec", "v2", "v4")
L1_EVICT = g("L1", Mod("L1::evict_normal", (7, 4), 70), Mod("L1::evict_unchanged", (7, 4), 70),
             Mod("L1::evict_first", (7, 4), 70), Mod("L1::evict_last", (7, 4), 70),
             Mod("L1::no_allocate", (7, 4), 70))
# An L2 eviction policy (a .b64 register from createpolicy) as the last operand.
L2_HINT = g("hint", Mod("L2::cache_hint", (7, 4), 80,
                        doc="the last operand is a 64-bit L2 policy made by createpolicy"))
L2_PREFETCH = g("L2", Mod("L2::64B", (7, 4), 75), Mod("L2::128B", (7, 4), 75),
                Mod("L2::256B", (7, 4), 80))
# .shared::cta is a PTX 7.8 spelling of .shared that ptxas takes for every target.
SHARED_CTA = Mod("shared::cta", (7, 8))
LD_SPACES = ("global", "shared", "local", "param", "const", SHARED_CTA,
             Mod("shared::cluster", (7, 8), 90))
# ld/st/mov have no half-precision types: f16/bf16 registers move as .b16, x2 as .b32.
MEM_TYPES = ("b8", "b16", "b32", "b64", "u8", "u16", "u32", "u64", "s8", "s16", "s32", "s64",
             "f32", "f64")
# Half-precision math that arrived with sm_80 rather than sm_53 (f16) / sm_90 (bf16).
HALF_SM80 = {"f16": ((7, 0), 80), "f16x2": ((7, 0), 80),
             "bf16": ((7, 0), 80), "bf16x2": ((7, 0), 80)}
BF16_SM80 = {"bf16": ((7, 0), 80), "bf16x2": ((7, 0), 80)}
MBAR = frozenset({"mbarrier"})
# A peer CTA's mbarrier, addressed through mapa (sm_90, PTX 8.0).
MBAR_CLUSTER = Mod("shared::cluster", (8, 0), 90)
CMP = ("eq", "ne", "lt", "le", "gt", "ge", "lo", "ls", "hi", "hs",
       "equ", "neu", "ltu", "leu", "gtu", "geu", "num", "nan")

TABLE: tuple[OpSpec, ...] = (
    # ---------------------------------------------------------------- data movement
    OpSpec("mov", (), ("pred", *B, *INT, "f32", "f64"),
           operands="d:T %s:T", variants={}, category="data",
           doc="Copy a register, immediate, special register or symbol address; "
               "mov.b32/b64 with a register list packs or unpacks halves.",
           example="mov.u32 %r0, %tid.x", packs=True, moves_bits=True,
           uniformity="copy"),
    OpSpec("ld", (SEM_LD, SCOPE, g("space", *LD_SPACES),
                  g("cop", "ca", "cg", "cs", "lu", "cv"), g("nc", Mod("nc", (3, 1), 32)),
                  L1_EVICT, L2_HINT, L2_PREFETCH, VEC2_4),
           MEM_TYPES, operands="V:T a", variants={"L2::cache_hint": "V:T a r:b64"},
           category="data", side_effects=False,
           doc="Load from a state space; .v2/.v4 take a register list as destination; "
               ".nc reads global memory through the non-coherent (texture) path.",
           example="ld.global.v4.f32 {%f0, %f1, %f2, %f3}, [%rd0]", rule=rules.ld,
           access="read", subword=True, moves_bits=True),
    # st.param writes only a call's argument or return variable: kernel parameters
    # are read-only (ptxas: "Illegal to write to function input parameter").
    OpSpec("st", (SEM_ST, SCOPE, g("space", "global", "shared", "local", SHARED_CTA,
                                   Mod("shared::cluster", (7, 8), 90), "param"),
                  g("cop", "wb", "cg", "cs", "wt"), L1_EVICT, L2_HINT, VEC2_4),
           MEM_TYPES, operands="a X:T", variants={"L2::cache_hint": "a X:T r:b64"},
           category="data", side_effects=True,
           doc="Store to a state space; .v2/.v4 take a register list as source.",
           example="st.global.v4.f32 [%rd0], {%f0, %f1, %f2, %f3}", rule=rules.st,
           check_operands=rules.st_param_target,
           access="write", subword=True, moves_bits=True),
    OpSpec("createpolicy", (g("kind", "fractional", required=True),
                            g("primary", "L2::evict_last", "L2::evict_normal",
                              "L2::evict_first", "L2::evict_unchanged", required=True),
                            g("secondary", "L2::evict_first", "L2::evict_unchanged")),
           ("b64",), operands="d:b64 s:f32?", ptx=(7, 4), sm=80, category="data",
           doc="Make an L2 eviction policy for ld/st .L2::cache_hint: the given fraction "
               "(an f32 register or a constant 0 < f <= 1, default 1) of the lines an access "
               "touches get the primary priority, the rest the secondary (default "
               ".L2::evict_unchanged).",
           example="createpolicy.fractional.L2::evict_last.b64 %rd0",
           check_operands=rules.fraction_operand),
    OpSpec("cvt", (g("irnd", "rni", "rzi", "rmi", "rpi"),
                   g("frnd", "rn", "rz", "rm", "rp", Mod("rna", (7, 0), 80)),
                   g("ftz", "ftz"), g("sat", "sat"), g("relu", Mod("relu", (7, 0), 80)),
                   g("satfinite", Mod("satfinite", (8, 1))),
                   # The PTX ISA writes the fp8 forms .satfinite{.relu} and the f16 ones
                   # {.relu}{.satfinite}; ptxas takes either order for both.
                   g("relu_after_satfinite", Mod("relu", (7, 0), 80))),
           (*U, *S, "u8", "s8", "f16", "bf16", "f32", "f64", "f16x2", "bf16x2", "tf32",
            "e4m3x2", "e5m2x2"),
           # ptxas takes a special register as cvt's source (cvt.u64.u32 %rd0, %ctaid.x)
           ntypes=2, operands="d:T0 %s:T1", variants={
               # two f32 pack into e4m3x2/e5m2x2; one f16x2 converts either way
               "e4m3x2+f32": "d:T0 s:T1 s:T1", "e5m2x2+f32": "d:T0 s:T1 s:T1",
               "e4m3x2": "d:T0 s:T1", "e5m2x2": "d:T0 s:T1",
               "f16x2": "d:T0 s:T1 s:T1", "bf16x2": "d:T0 s:T1 s:T1"},
           category="convert", rule=rules.cvt,
           doc="Convert between types: integer rounding (.rni/.rzi/.rmi/.rpi) for float to "
               "int, float rounding (.rn/.rz/.rm/.rp) for narrowing float and int to float; "
               "cvt.rn.f16x2.f32 / bf16x2 packs two f32 (first operand goes high); "
               "cvt.rn.satfinite.e4m3x2.f32 / e5m2x2 packs two f32 into 8-bit floats "
               "(sm_89+), cvt.rn.f16x2.e4m3x2 widens them.",
           example="cvt.rn.bf16.f32 %hb0, %f0", subword=True, moves_bits=True),
    OpSpec("cvta", (g("to", "to"), g("space", "global", "shared", "local", "const",
                                     Mod("param", (7, 7), 70), required=True)),
           ("u64",), operands="d:T s:T", category="data",
           doc="Convert between generic and state-space addresses: cvta.space.u64 makes a "
               "generic address, cvta.to.space.u64 a state-space one (.u32 forms are for "
               "32-bit addressing, which ptxas no longer supports).",
           example="cvta.to.global.u64 %rd1, %rd0"),
    # ---------------------------------------------------------------- integer / float arithmetic
    OpSpec("add", (RND_F, FTZ, SAT, g("cc", Mod("cc", types=only("u32", "s32", "u64", "s64")))),
           (*INT, *FALL), operands="d:T s:T s:T", rule=rules.add_sub, category="arith",
           doc="d = a + b.", example="add.f32 %f2, %f0, %f1"),
    OpSpec("sub", (RND_F, FTZ, SAT, g("cc", Mod("cc", types=only("u32", "s32", "u64", "s64")))),
           (*INT, *FALL), operands="d:T s:T s:T", rule=rules.add_sub, category="arith",
           doc="d = a - b.", example="sub.s32 %r2, %r0, %r1"),
    OpSpec("mul", (g("mode", Mod("lo", types=only(*INT)), Mod("hi", types=only(*INT)),
                     Mod("wide", types=only("u16", "u32", "s16", "s32"))),
                   RND_F, FTZ, SAT),
           (*INT, *FALL), operands="d:T s:T s:T", variants={"wide": "d:W s:T s:T"},
           category="arith", rule=rules.int_mode,
           doc="Integer multiply keeps the .lo or .hi half, or the .wide double-width "
               "product; float multiply rounds as told (default .rn).",
           example="mul.wide.u32 %rd0, %r0, 4"),
    OpSpec("mad", (g("mode", Mod("lo", types=only(*INT)), Mod("hi", types=only(*INT)),
                     Mod("wide", types=only("u16", "u32", "s16", "s32"))),
                   RND_F, FTZ, SAT),
           (*INT, "f32", "f64"), operands="d:T s:T s:T s:T",
           variants={"wide": "d:W s:T s:T s:W"},
           category="arith", rule=rules.mad,
           doc="d = a * b + c (integers: .lo/.hi/.wide; floats need a rounding mode and are "
               "fused).",
           example="mad.lo.u32 %r3, %r0, %r1, %r2"),
    # fma.bf16 takes every IEEE rounding, fma.f16 only .rn (ptxas 13, sm_80+).
    OpSpec("fma", (g("rounding", Mod("rn", types=FLT), *(Mod(r, types=only(*F, "bf16", "bf16x2"))
                                                        for r in ("rz", "rm", "rp")),
                     required=True), FTZ, SAT,
                   g("relu", Mod("relu", (7, 0), 80, types=only(*H)))),
           FALL, operands="d:T s:T s:T s:T", ptx=(1, 4), rule=rules.fma, category="arith",
           type_needs=BF16_SM80,
           doc="Fused d = a * b + c with a single rounding.",
           example="fma.rn.f32 %f3, %f0, %f1, %f2"),
    OpSpec("div", (g("kind", Mod("approx", types=F32), Mod("full", types=F32),
                     Mod("rn", types=only(*F)), Mod("rz", types=only(*F)),
                     Mod("rm", types=only(*F)), Mod("rp", types=only(*F))), FTZ),
           (*INT, *F), operands="d:T s:T s:T", category="arith", rule=rules.float_kind_required,
           doc="Integer division truncates toward zero; float division needs .approx, .full "
               "or an IEEE rounding mode.", example="div.rn.f32 %f2, %f0, %f1",
           uniformity="div"),
    OpSpec("rem", (), INT, operands="d:T s:T s:T", category="arith",
           doc="Integer remainder (sign of the dividend).", example="rem.u32 %r2, %r0, %r1"),
    OpSpec("abs", (FTZ,), ("s16", "s32", "s64", *FALL), operands="d:T s:T", category="arith",
           type_needs={"f16": ((6, 5), 53), "f16x2": ((6, 5), 53), **BF16_SM80},
           doc="Absolute value.", example="abs.f32 %f1, %f0"),
    OpSpec("neg", (FTZ,), ("s16", "s32", "s64", *FALL), operands="d:T s:T", category="arith",
           type_needs=BF16_SM80, doc="Negate.", example="neg.s32 %r1, %r0"),
    OpSpec("min", (FTZ, NAN),
           (*INT, "f32", "f64", *H), operands="d:T s:T s:T", category="arith",
           type_needs=HALF_SM80,
           doc="Minimum (floats: a NaN operand yields the other unless .NaN).",
           example="min.f32 %f2, %f0, %f1"),
    OpSpec("max", (FTZ, NAN),
           (*INT, "f32", "f64", *H), operands="d:T s:T s:T", category="arith",
           type_needs=HALF_SM80,
           doc="Maximum (floats: a NaN operand yields the other unless .NaN).",
           example="max.u32 %r2, %r0, %r1"),
    OpSpec("copysign", (), F, operands="d:T s:T s:T", ptx=(2, 0), category="arith",
           doc="d = |b| with the sign of a.", example="copysign.f32 %f2, %f0, %f1"),
    # ---------------------------------------------------------------- bits
    OpSpec("and", (), ("pred", *B), operands="d:T s:T s:T", category="bits",
           doc="Bitwise and.", example="and.b32 %r2, %r0, %r1"),
    OpSpec("or", (), ("pred", *B), operands="d:T s:T s:T", category="bits",
           doc="Bitwise or.", example="or.b32 %r2, %r0, %r1"),
    OpSpec("xor", (), ("pred", *B), operands="d:T s:T s:T", category="bits",
           doc="Bitwise exclusive or.", example="xor.b32 %r2, %r0, %r1"),
    OpSpec("not", (), ("pred", *B), operands="d:T s:T", category="bits",
           doc="Bitwise complement.", example="not.b32 %r1, %r0"),
    OpSpec("shl", (), B, operands="d:T s:T s:u32", category="bits",
           doc="Shift left; shifts >= the width give 0.", example="shl.b32 %r1, %r0, 2"),
    OpSpec("shr", (), (*B, *INT), operands="d:T s:T s:u32", category="bits",
           doc="Shift right: arithmetic for .s types, logical otherwise.",
           example="shr.u32 %r1, %r0, 5", uniformity="shr"),
    OpSpec("bfe", (), ("u32", "u64", "s32", "s64"), operands="d:T s:T s:u32 s:u32", ptx=(2, 0),
           check_operands=rules.bit_field_operands, category="bits",
           doc="Extract a bit field (position, length); .s sign-extends.",
           example="bfe.u32 %r1, %r0, 8, 4"),
    OpSpec("bfi", (), ("b32", "b64"), operands="d:T s:T s:T s:u32 s:u32", ptx=(2, 0),
           check_operands=rules.bit_field_operands, category="bits",
           doc="Insert the low bits of a into b at (position, length).",
           example="bfi.b32 %r2, %r0, %r1, 8, 4"),
    OpSpec("popc", (), ("b32", "b64"), operands="d:u32 s:T", ptx=(2, 0), category="bits",
           doc="Count set bits.", example="popc.b32 %r1, %r0"),
    OpSpec("clz", (), ("b32", "b64"), operands="d:u32 s:T", ptx=(2, 0), category="bits",
           doc="Count leading zeros.", example="clz.b32 %r1, %r0"),
    OpSpec("brev", (), ("b32", "b64"), operands="d:T s:T", ptx=(2, 0), category="bits",
           doc="Reverse bit order.", example="brev.b32 %r1, %r0"),
    OpSpec("prmt", (g("mode", "f4e", "b4e", "rc8", "ecl", "ecr", "rc16"),), ("b32",),
           operands="d:T s:T s:T s:T", ptx=(2, 0), category="bits",
           doc="Pick bytes of {b, a} by the selector c.", example="prmt.b32 %r3, %r0, %r1, 0x3210"),
    # ---------------------------------------------------------------- compare / select
    OpSpec("setp", (g("cmp", *CMP, required=True), g("bool", "and", "or", "xor"), FTZ),
           (*B, *INT, "f16", "bf16", "f32", "f64"), operands="p:pred s:T s:T", variants={
               "and": "p:pred s:T s:T q:pred", "or": "p:pred s:T s:T q:pred",
               "xor": "p:pred s:T s:T q:pred"},
           category="compare", rule=rules.compare,
           doc="Compare and set a predicate; lo/ls/hi/hs are unsigned, the u-suffixed "
               "forms are true for NaN.", example="setp.lt.u32 %p0, %r0, 16",
           uniformity="compare"),
    OpSpec("selp", (), (*B, *INT, "f32", "f64"), operands="d:T s:T s:T q:pred",
           category="compare", doc="d = c ? a : b.", example="selp.f32 %f2, %f0, %f1, %p0",
           moves_bits=True),
    OpSpec("set", (g("cmp", *CMP, required=True), g("bool", "and", "or", "xor"),
                   g("ftz", "ftz")),
           # destination .u32/.s32/.f32 (the rule checks), sources of any compared type
           ("u32", "s32", "f32", "b16", "b32", "b64", "u16", "u64", "s16", "s64", "f16",
            "bf16", "f64"), ntypes=2, type_needs={"f16": ((6, 5), 53)},
           operands="d:T0 s:T1 s:T1", variants={
               "and": "d:T0 s:T1 s:T1 q:pred", "or": "d:T0 s:T1 s:T1 q:pred",
               "xor": "d:T0 s:T1 s:T1 q:pred"},
           category="compare", rule=rules.set_,
           doc="Compare and write 0xffffffff / 1.0 for true, 0 for false.",
           example="set.lt.u32.f32 %r0, %f0, %f1"),
    # ---------------------------------------------------------------- transcendentals
    OpSpec("ex2", (g("approx", "approx", required=True), g("ftz", "ftz")),
           ("f32", "f16", "f16x2", "bf16", "bf16x2"),
           operands="d:T s:T", ptx=(2, 0), category="math",
           doc="2^a (max relative error 2^-22.5 for f32 on the hardware).",
           example="ex2.approx.f32 %f1, %f0", rule=rules.ex2),
    OpSpec("lg2", (g("approx", "approx", required=True), FTZ), ("f32",), operands="d:T s:T",
           category="math", doc="log2(a) (max absolute error 2^-22 in (0.5, 2)).",
           example="lg2.approx.f32 %f1, %f0"),
    OpSpec("rsqrt", (g("approx", "approx", required=True), FTZ_F64), F, operands="d:T s:T",
           category="math", doc="1/sqrt(a) (max relative error 2^-22.9 for f32).",
           example="rsqrt.approx.f32 %f1, %f0"),
    OpSpec("rcp", (g("kind", Mod("approx"), "rn", "rz", "rm", "rp", required=True), FTZ_F64), F,
           operands="d:T s:T", category="math",
           doc="1/a, .approx (max relative error 2^-23) or IEEE rounded.",
           example="rcp.approx.f32 %f1, %f0", rule=rules.rcp),
    OpSpec("sqrt", (g("kind", Mod("approx", types=F32), "rn", "rz", "rm", "rp", required=True),
                    FTZ), F, operands="d:T s:T", category="math",
           doc="sqrt(a), .approx or IEEE rounded.", example="sqrt.rn.f32 %f1, %f0"),
    OpSpec("sin", (g("approx", "approx", required=True), FTZ), ("f32",), operands="d:T s:T",
           category="math", doc="sin(a) (max absolute error 2^-20.9 in [-pi, pi]).",
           example="sin.approx.f32 %f1, %f0"),
    OpSpec("cos", (g("approx", "approx", required=True), FTZ), ("f32",), operands="d:T s:T",
           category="math", doc="cos(a) (max absolute error 2^-20.9 in [-pi, pi]).",
           example="cos.approx.f32 %f1, %f0"),
    OpSpec("tanh", (g("approx", "approx", required=True),), ("f32", "f16", "f16x2", "bf16",
                                                              "bf16x2"),
           operands="d:T s:T", ptx=(7, 0), sm=75, category="math",
           doc="tanh(a) (max relative error 2^-11 for f32).", example="tanh.approx.f32 %f1, %f0"),
    # ---------------------------------------------------------------- warp
    OpSpec("shfl.sync", (g("mode", "up", "down", "bfly", "idx", required=True),), ("b32",),
           operands="d:T p:pred? s:T s:u32 s:u32 s:u32", ptx=(6, 0), sm=30, category="warp",
           form="pipe_pred",
           doc="Exchange a register within a warp: operands are value, lane/offset b, "
               "c = (segmask << 8) | clamp, membermask; the optional predicate destination "
               "(printed d|p) is true where the source lane was in range (else a lane reads "
               "its own value). Over whole 32-lane warps c is 0 for .up (the lowest lane "
               "that may be read) and 31 for .down, .bfly and .idx (the highest): .up with "
               "c = 31 reads no other lane (every lane keeps its value). Segments of w "
               "lanes: c = ((32 - w) << 8) | (0 for .up, w - 1 otherwise).",
           example="shfl.sync.bfly.b32 %r1, %r0, 16, 31, 0xffffffff",
           scope="warp", varies=True, moves_bits=True, uniformity="broadcast"),
    OpSpec("vote.sync", (g("mode", "all", "any", "uni", "ballot", required=True),),
           ("pred", "b32"), operands="d:T q:pred s:u32", ptx=(6, 0), sm=30, category="warp",
           rule=rules.vote, doc="Warp vote: .all/.any/.uni give a predicate, .ballot a "
                                "32-bit mask (the source predicate may be negated).",
           example="vote.sync.ballot.b32 %r0, %p0, 0xffffffff", scope="warp", varies=True),
    OpSpec("match.sync", (g("mode", "any", "all", required=True),), ("b32", "b64"),
           operands="d:b32 s:T s:u32", variants={"all": "d:b32 s:T s:u32"},
           ptx=(6, 0), sm=70, category="warp",
           doc="Mask of the lanes whose value equals this lane's value (.all: all or none).",
           example="match.sync.any.b32 %r1, %r0, 0xffffffff", scope="warp", varies=True),
    OpSpec("redux.sync", (g("op", "add", "min", "max", "and", "or", "xor", required=True),),
           ("u32", "s32", "b32"), operands="d:T s:T s:u32", ptx=(7, 0), sm=80,
           category="warp", rule=rules.redux,
           doc="Warp-wide integer reduction (add/min/max on u32/s32, and/or/xor on b32).",
           example="redux.sync.add.u32 %r1, %r0, 0xffffffff", scope="warp"),
    OpSpec("elect.sync", (), (), ntypes=0, operands="d:b32 p:pred s:u32", ptx=(8, 0), sm=90,
           category="warp", doc="Elect one leader lane of the membermask: d = its lane, "
                                "p true on the leader.",
           example="elect.sync %r0|%p0, 0xffffffff", scope="warp", varies=True,
           form="pipe_pred"),
    OpSpec("activemask", (), ("b32",), operands="d:T", ptx=(6, 2), sm=30, category="warp",
           varies=True,
           doc="The mask of the lanes of this warp that execute it (no synchronisation).",
           example="activemask.b32 %r0"),
    OpSpec("bar.warp.sync", (), (), ntypes=0, operands="s:u32", ptx=(6, 0), sm=30,
           category="warp", scope="warp", effects=frozenset({"barrier"}), side_effects=True,
           doc="Wait until every lane of the membermask has reached a bar.warp.sync with "
               "the same mask (and order their memory accesses).",
           example="bar.warp.sync 0xffffffff"),
    # ---------------------------------------------------------------- synchronisation
    OpSpec("bar", (g("mode", "sync", "arrive", required=True),), (),
           ntypes=0, operands="s:u32 s:u32?", variants={"arrive": "s:u32 s:u32"},
           check_operands=rules.barrier_operands, category="sync", side_effects=True,
           doc="CTA barrier: bar.sync a{, b} waits for b threads (default all) at barrier a; "
               "bar.arrive a, b arrives without waiting (b is required).",
           example="bar.sync 0", scope="cta", effects=frozenset({"barrier"}), aligned=True),
    OpSpec("barrier", (g("cta", Mod("cta", (7, 8))), g("mode", "sync", "arrive",
                                                       required=True), ALIGNED), (),
           ntypes=0, operands="s:u32 s:u32?", variants={"arrive": "s:u32 s:u32"},
           ptx=(6, 0), sm=70, check_operands=rules.barrier_operands, category="sync",
           side_effects=True, doc="barrier.sync: like bar.sync, also usable by divergent "
                                  "threads when not .aligned.",
           example="barrier.sync 0", scope="cta", effects=frozenset({"barrier"}),
           aligned="aligned"),
    OpSpec("bar.red", (g("op", "popc", "and", "or", required=True),), ("u32", "pred"),
           operands="p:pred s:u32 s:u32? q:pred",
           variants={"popc": "d:u32 s:u32 s:u32? q:pred"},
           check_operands=rules.bar_red_operands, rule=rules.bar_red, category="sync",
           side_effects=True, scope="cta", effects=frozenset({"barrier"}), aligned=True,
           doc="CTA barrier with a reduction: like bar.sync a{, b}, and every waiting thread "
               "receives .popc (the number of arriving threads whose predicate c is true, "
               ".u32) or .and / .or of c over them (.pred). c is a predicate register "
               "(negate it with not.pred first: the {!}c spelling is not taken).",
           example="bar.red.popc.u32 %r0, 1, %p0"),
    # barrier{.cta}.red: bar.red's later spelling (bar.red is barrier.red.aligned); without
    # .aligned the threads of a warp may reach it apart. Two entries, because the opcode is
    # the longest dotted prefix of a written chain and .cta comes between.
    *(OpSpec(name, (g("op", "popc", "and", "or", required=True), ALIGNED), ("u32", "pred"),
             operands="p:pred s:u32 s:u32? q:pred",
             variants={"popc": "d:u32 s:u32 s:u32? q:pred"}, ptx=ver, sm=70,
             check_operands=rules.bar_red_operands, rule=rules.bar_red, category="sync",
             side_effects=True, scope="cta", effects=frozenset({"barrier"}),
             aligned="aligned",
             doc="bar.red's later spelling (bar.red is barrier.red.aligned): the same "
                 "reduction; without .aligned the threads of a warp may arrive apart.",
             example=f"{name}.popc.aligned.u32 %r0, 1, %p0")
      for name, ver in (("barrier.red", (6, 0)), ("barrier.cta.red", (7, 8)))),
    OpSpec("membar", (g("level", "cta", "gl", "sys", required=True),), (), ntypes=0,
           operands="", ptx=(1, 4), category="sync", side_effects=True,
           doc="Memory barrier at a level.", example="membar.gl", effects=frozenset({"fence"})),
    OpSpec("fence", (g("sem", Mod("sc", (6, 0), 70), Mod("acq_rel", (6, 0), 70),
                       Mod("proxy", (7, 5), 70), Mod("mbarrier_init", (8, 0), 90)),
                     g("proxykind", Mod("async", (8, 0), 90), Mod("alias", (7, 5), 70)),
                     g("order", Mod("release", (8, 0), 90), Mod("acquire", (8, 6), 90)),
                     g("scope", "cta", Mod("cluster", (7, 8), 90), "gpu", "sys",
                       Mod("shared::cta", (8, 0), 90), Mod("global", (8, 0), 90),
                       Mod("shared::cluster", (8, 0), 90))),
           (), ntypes=0, operands="", ptx=(6, 0), sm=70, category="sync", side_effects=True,
           rule=rules.fence, effects=frozenset({"fence"}),
           doc="Memory fence: fence{.sc|.acq_rel|.acquire|.release}.scope (.acq_rel when "
               "omitted; .acquire/.release: PTX 8.6), "
               "fence.proxy.async{.space} between the generic and the async proxy (sm_90: "
               "before a TMA or wgmma reads what threads wrote), or "
               "fence.mbarrier_init.release.cluster (mbarrier.init visible to the cluster).",
           example="fence.acq_rel.gpu"),
    # ---------------------------------------------------------------- atomics
    OpSpec("atom", (g("sem", Mod("relaxed", (6, 0), 70), Mod("acquire", (6, 0), 70),
                      Mod("release", (6, 0), 70), Mod("acq_rel", (6, 0), 70)), SCOPE,
                    g("space", "global", "shared", SHARED_CTA, Mod("shared::cluster", (7, 8), 90)),
                    g("op", "add", "min", "max", "inc", "dec", "cas", "exch", "and", "or",
                      "xor", required=True)),
           ("b32", "b64", "u32", "u64", "s32", "s64", "f32", "f64"),
           operands="d:T a s:T", variants={"cas": "d:T a s:T s:T"}, ptx=(1, 1), sm=20,
           category="atomic", side_effects=True, rule=rules.atom,
           doc="Atomic read-modify-write; d gets the old value.",
           example="atom.global.add.f32 %f1, [%rd0], %f0", varies=True, access="read_write",
           moves_bits=True),
    OpSpec("red", (g("sem", Mod("relaxed", (6, 0), 70), Mod("release", (6, 0), 70)), SCOPE,
                   g("space", "global", "shared", SHARED_CTA, Mod("shared::cluster", (7, 8), 90)),
                   g("op", "add", "min", "max", "inc", "dec", "and", "or", "xor",
                     required=True)),
           ("b32", "b64", "u32", "u64", "s32", "s64", "f32", "f64"),
           operands="a s:T", ptx=(1, 2), sm=20, category="atomic", side_effects=True,
           rule=rules.atom, doc="Atomic reduction into memory, no result.",
           example="red.global.add.f32 [%rd0], %f0", access="read_write", moves_bits=True),
    # ---------------------------------------------------------------- control
    OpSpec("bra", (g("uni", "uni"),), (), ntypes=0, operands="l", category="control",
           side_effects=True, doc="Branch to a label (optionally guarded).",
           example="bra.uni $L_end", effects=frozenset({"branch"})),
    OpSpec("call", (g("uni", "uni"),), (), ntypes=0, operands="c l c", category="control",
           side_effects=True, form="call", interp=False,
           doc="Call a .func: call (return values), name, (arguments); each list holds the "
               ".param variables (or, for .reg parameters, the registers) passed. The PTX "
               "front end runs calls on the interpreter by inlining the callee.",
           example="call.uni (%r0), callee, (%r1)"),
    OpSpec("ret", (g("uni", "uni"),), (), ntypes=0, operands="", category="control",
           side_effects=True, doc="Return from the kernel.", example="ret",
           effects=frozenset({"exit"})),
    OpSpec("exit", (), (), ntypes=0, operands="", category="control", side_effects=True,
           doc="Terminate the thread.", example="exit", effects=frozenset({"exit"})),
    OpSpec("trap", (), (), ntypes=0, operands="", category="control", side_effects=True,
           doc="Abort the kernel: the launch fails with an error (and the CUDA context is "
               "lost), for states that must never be reached.", example="trap"),
    # ---------------------------------------------------------------- async copies (sm_80+)
    OpSpec("cp.async", (g("cache", "ca", "cg", required=True),
                        g("dst", "shared", SHARED_CTA, required=True),
                        g("src", "global", required=True), L2_PREFETCH),
           (), ntypes=0, operands="a=dst a=src i:u32 s:u32?", ptx=(7, 0), sm=80,
           category="async",
           side_effects=True, check_operands=rules.cp_async_operands,
           doc="Asynchronous global->shared copy of 4, 8 or 16 bytes (.cg: 16 only); the "
               "optional last operand is the source size (zero-fills the rest).",
           example="cp.async.cg.shared.global [%r0], [%rd0], 16",
           effects=frozenset({"async_copy"})),
    OpSpec("cp.async.commit_group", (), (), ntypes=0, operands="", ptx=(7, 0), sm=80,
           category="async", side_effects=True,
           doc="Close the current group of cp.async copies.", example="cp.async.commit_group",
           effects=frozenset({"async_copy"})),
    OpSpec("cp.async.wait_group", (), (), ntypes=0, operands="i:u32", ptx=(7, 0), sm=80,
           category="async", side_effects=True,
           doc="Wait until at most N groups of cp.async copies are pending.",
           example="cp.async.wait_group 0", effects=frozenset({"async_wait"})),
    OpSpec("cp.async.wait_all", (), (), ntypes=0, operands="", ptx=(7, 0), sm=80,
           category="async", side_effects=True, doc="Wait for every cp.async copy.",
           example="cp.async.wait_all", effects=frozenset({"async_wait"})),
    OpSpec("cp.async.bulk.prefetch.L2", (g("src", "global", required=True), L2_HINT), (),
           ntypes=0, operands="a=src s:u32", variants={"L2::cache_hint": "a=src s:u32 r:b64"},
           ptx=(8, 0), sm=90, category="async", side_effects=True,
           check_operands=rules.bulk_prefetch_operands,
           doc="Start fetching a range of global memory (16-byte aligned, a multiple of 16 "
               "bytes) into the L2, by the bulk copy engine; nothing waits for it.",
           example="cp.async.bulk.prefetch.L2.global [%rd0], 16384",
           effects=frozenset({"async_copy"})),
    # A write as far as ordering goes (the line's contents become undefined), but nothing
    # is stored: "access" stays None, and the interpreter checks and poisons the line.
    OpSpec("discard", (g("space", "global"), g("level", "L2", required=True)), (), ntypes=0,
           operands="a i:u32", ptx=(7, 4), sm=80, category="data", side_effects=True,
           check_operands=rules.discard_operands, extent=128,
           doc="Drop a 128-byte line (128-byte aligned) from the L2 without writing it back "
               "to memory: its contents become undefined. For scratch data that was written "
               "and read once, so that its dirty lines cost no DRAM write.",
           example="discard.global.L2 [%rd0], 128"),
    # ---------------------------------------------------------------- mbarrier (sm_80/sm_90)
    OpSpec("mbarrier.init", (g("space", "shared", SHARED_CTA),), ("b64",),
           operands="a s:u32", ptx=(7, 0), sm=80, category="mbarrier", side_effects=True,
           effects=MBAR,
           doc="Initialise an mbarrier object with an expected arrival count.",
           example="mbarrier.init.shared.b64 [%r0], 128"),
    # A peer CTA's barrier (.shared::cluster, an address from mapa) returns no state:
    # its destination is the sink ptx.sink (printed _).
    OpSpec("mbarrier.arrive", (g("sem", Mod("release", (8, 0))),
                               g("scope", Mod("cta", (8, 0)), Mod("cluster", (8, 0), 90)),
                               g("space", "shared", SHARED_CTA, MBAR_CLUSTER)), ("b64",),
           operands="d:b64 a s:u32?!7.8/90", ptx=(7, 0), sm=80, rule=rules.mbarrier,
           check_operands=rules.mbarrier_arrive_operands,
           category="mbarrier", side_effects=True, effects=MBAR,
           doc="Arrive on an mbarrier (optionally count times, sm_90); d receives the phase "
               "state token (the sink _ for a peer CTA's barrier in .shared::cluster).",
           example="mbarrier.arrive.shared.b64 %rd0, [%r0]"),
    OpSpec("mbarrier.arrive.expect_tx", (g("sem", Mod("release", (8, 0))),
                                         g("scope", Mod("cta", (8, 0)),
                                           Mod("cluster", (8, 0), 90)),
                                         g("space", "shared", SHARED_CTA, MBAR_CLUSTER)),
           ("b64",), operands="d:b64 a s:u32", ptx=(8, 0), sm=90, rule=rules.mbarrier,
           check_operands=rules.mbarrier_arrive_operands,
           category="mbarrier", side_effects=True, effects=MBAR,
           doc="Arrive and add an expected transaction byte count (the byte count first, "
               "then the arrival, as one step).",
           example="mbarrier.arrive.expect_tx.shared.b64 %rd0, [%r0], 4096"),
    OpSpec("mbarrier.expect_tx", (g("sem", "relaxed"), g("scope", "cta", "cluster"),
                                  g("space", "shared", SHARED_CTA, MBAR_CLUSTER)),
           ("b64",), operands="a s:u32", ptx=(8, 0), sm=90, rule=rules.mbarrier_tx,
           interp=True, category="mbarrier", side_effects=True, effects=MBAR,
           doc="Add to the transaction bytes the current phase waits for (without arriving).",
           example="mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%r0], 4096"),
    OpSpec("mbarrier.complete_tx", (g("sem", "relaxed"), g("scope", "cta", "cluster"),
                                    g("space", "shared", SHARED_CTA, MBAR_CLUSTER)),
           ("b64",), operands="a s:u32", ptx=(8, 0), sm=90, rule=rules.mbarrier_tx,
           interp=True, category="mbarrier", side_effects=True, effects=MBAR,
           doc="Complete transaction bytes of the current phase as a copy would.",
           example="mbarrier.complete_tx.relaxed.cta.shared::cta.b64 [%r0], 4096"),
    OpSpec("mbarrier.test_wait", (g("parity", Mod("parity", (7, 1))),
                                  g("sem", Mod("acquire", (8, 0))),
                                  g("scope", Mod("cta", (8, 0)), Mod("cluster", (8, 0), 90)),
                                  g("space", "shared", SHARED_CTA)),
           ("b64",), operands="p:pred a s:b64", variants={"parity": "p:pred a s:u32{0,1}"},
           ptx=(7, 0), sm=80, rule=rules.mbarrier,
           category="mbarrier", side_effects=True, effects=MBAR, polls=True,
           doc="Test (without blocking) whether a phase completed, by state token or by "
               ".parity.",
           example="mbarrier.test_wait.shared.b64 %p0, [%r0], %rd0"),
    OpSpec("mbarrier.try_wait", (g("parity", "parity"),
                                 g("sem", Mod("acquire", (8, 0))),
                                 g("scope", Mod("cta", (8, 0)), Mod("cluster", (8, 0), 90)),
                                 g("space", "shared", SHARED_CTA)),
           ("b64",), operands="p:pred a s:b64 s:u32?", variants={"parity": "p:pred a s:u32 s:u32?"},
           ptx=(7, 8), sm=90, rule=rules.mbarrier, check_operands=rules.parity_operands,
           category="mbarrier", side_effects=True, effects=MBAR, polls=True,
           doc="Wait (for a bounded time) for a phase, by state token or by .parity; the "
               "optional last operand is a suspend-time hint in nanoseconds.",
           example="mbarrier.try_wait.parity.shared.b64 %p0, [%r0], 0"),
    OpSpec("mbarrier.inval", (g("space", "shared", SHARED_CTA),), ("b64",),
           operands="a", ptx=(7, 0), sm=80, category="mbarrier", side_effects=True,
           effects=MBAR,
           doc="Invalidate an mbarrier object.", example="mbarrier.inval.shared.b64 [%r0]"),
)
