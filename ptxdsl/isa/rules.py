"""Cross-group constraints of a few opcodes that plain groups cannot express.

Each rule reads a :class:`~ptxdsl.isa.spec.Match` and returns ``None`` when
the form is legal, an error message saying what would be right, or a
``(ptx_version, sm)`` pair when the exact form needs more than its entry says.
"""
from __future__ import annotations

import numpy as np

HALF = {"f16", "bf16", "f16x2", "bf16x2"}
WIDE64 = {"b64", "u64", "s64", "f64"}


def _mem_common(m, op):
    space = m.chosen.get("space")
    sem = m.chosen.get("sem")
    if m.has("nc") and space != "global":
        return "non-coherent loads (.nc) read only .global memory: write ld.global.nc..."
    if (m.chosen.get("L1") or m.chosen.get("L2")) and space not in ("global", None):
        return "cache eviction/prefetch hints apply to .global accesses only"
    if m.chosen.get("hint"):
        if space not in ("global", None):
            return (f".L2::cache_hint applies to .global (or generic) accesses, not "
                    f".{space}; drop the hint and its policy operand")
        if sem == "volatile":
            return ".L2::cache_hint does not combine with .volatile; drop one of them"
    if sem in ("relaxed", "acquire", "release") and "scope" not in m.chosen:
        return f".{sem} needs a scope (.cta, .gpu, .sys or .cluster) right after it"
    if "scope" in m.chosen and sem not in ("relaxed", "acquire", "release"):
        return "a scope (.cta/.gpu/.sys/.cluster) is only allowed after .relaxed/.acquire/.release"
    if m.vector == 4 and m.type is not None and m.type.name in WIDE64:
        return (f"{op}.v4 of a 64-bit type would be 32 bytes; the widest vector access "
                f"is 16 bytes (.v2.{m.type.name} or .v4 of a 32-bit type)")
    if m.has("nc") and sem:
        return f"ld.global.nc is a non-coherent read and takes no .{sem}"
    cop = m.chosen.get("cop")
    if sem in ("relaxed", "acquire", "release"):
        if space in ("local", "param", "const"):
            return (f".{sem} orders accesses that other threads see; .{space} memory "
                    f"takes no memory order")
        if cop:
            return f"{op}.{sem} takes no cache operator (.{cop})"
    if sem == "volatile":
        if space in ("local", "param", "const"):
            return f".volatile does not apply to .{space} memory"
        if m.chosen.get("cop") or m.chosen.get("L1"):
            what = m.chosen.get("cop") or m.chosen.get("L1")
            return f".volatile accesses take no cache hint (.{what})"
    if m.chosen.get("cop") and m.chosen.get("L1"):
        return (f"choose either the cache operator .{m.chosen['cop']} or the eviction "
                f"priority .{m.chosen['L1']}, not both")
    return None


def ld(m):
    msg = _mem_common(m, "ld")
    if msg:
        return msg
    if m.chosen.get("cop") and m.has("nc") and m.chosen["cop"] not in ("ca", "cg", "cs"):
        return "ld.global.nc takes only .ca, .cg or .cs as cache operator"
    return None


def st(m):
    return _mem_common(m, "st")


def st_param_target(m, operands):
    """st.param writes a call's argument or return variable, never a kernel parameter."""
    if m.chosen.get("space") != "param":
        return None
    base = operands[0].base if hasattr(operands[0], "base") else None
    if getattr(base, "writable", False):
        return None
    return ("st.param writes a .param variable declared for a call (or a .func's return "
            "value); a kernel's parameters are read-only (ptxas: 'Illegal to write to "
            "function input parameter')")


FP8X2 = {"e4m3x2", "e5m2x2"}


def cvt_fp8(m, dst, src):
    """cvt to and from packed 8-bit floats: .rn, .satfinite going down, .relu optional."""
    extra = [x for x in ("irnd", "ftz", "sat") if x in m.chosen]
    if dst.name in FP8X2:
        if src.name not in ("f32", "f16x2"):
            return (f"cvt to .{dst.name} reads two .f32 (cvt.rn.satfinite.{dst.name}.f32 d, "
                    f"hi, lo) or one .f16x2, not .{src.name}")
        if m.chosen.get("frnd") != "rn" or not m.has("satfinite"):
            return f"cvt to .{dst.name} rounds to nearest and saturates: write cvt.rn.satfinite"
    else:
        if dst.name != "f16x2":
            return (f"cvt from .{src.name} widens to .f16x2 only: write "
                    f"cvt.rn.f16x2.{src.name} (then .f16x2 -> .f32 with mov and cvt)")
        if m.chosen.get("frnd") != "rn" or m.has("satfinite"):
            return f"cvt from .{src.name} is written cvt.rn{{.relu}}.f16x2.{src.name} (exact)"
    if extra:
        return f"cvt with .{dst.name if dst.name in FP8X2 else src.name} takes no ." \
               f"{m.chosen[extra[0]]}; only .relu may be added"
    # sm_89 got these conversions with PTX 8.1 (sm_90 already at 7.8)
    return ((8, 1), 89)


def cvt(m):
    dst, src = m.types
    if "relu" in m.chosen and "relu_after_satfinite" in m.chosen:
        return ".relu is written twice; write it once, before or after .satfinite"
    irnd, frnd = m.chosen.get("irnd"), m.chosen.get("frnd")
    need = None
    if dst.name in FP8X2 or src.name in FP8X2:
        return cvt_fp8(m, dst, src)
    if irnd and frnd:
        return (f"cvt takes one rounding modifier: .{irnd} rounds to an integral value, "
                f".{frnd} rounds a float result; drop one")
    if dst.name in ("f16x2", "bf16x2"):
        if src.name != "f32" or frnd not in ("rn", "rz"):
            return (f"cvt to .{dst.name} packs two f32 values: write "
                    f"cvt.rn.{dst.name}.f32 d, hi, lo")
        if m.has("ftz") or m.has("sat"):
            bad = "ftz" if m.has("ftz") else "sat"
            return f"cvt to .{dst.name} takes .relu/.satfinite, not .{bad}"
        return ((7, 0), 80)
    if src.name in ("f16x2", "bf16x2"):
        return f"cvt cannot read packed .{src.name}; unpack it with mov.b32 {{lo, hi}}, x first"
    if dst.name == "tf32":
        if src.name != "f32" or frnd not in ("rna", "rn", "rz"):
            return "cvt to .tf32 is written cvt.rna.tf32.f32 (sm_90: also .rn / .rz)"
        if m.has("relu") or m.has("ftz") or m.has("sat"):
            return f"cvt.{frnd}.tf32.f32 takes only .satfinite"
        if frnd == "rna":
            return ((7, 0), 80)
        # .rn/.rz arrived with sm_90, and .satfinite on them with sm_100
        return ((8, 6), 100) if m.has("satfinite") else ((7, 8), 90)
    if frnd == "rna":
        return ".rna is only for cvt.rna.tf32.f32"
    if src.name == "tf32":
        return "cvt cannot read .tf32; use the register as .b32/.f32"
    if src.is_float and dst.is_float:
        if dst.bits < src.bits:
            if frnd is None:
                return (f"narrowing .{src.name} to .{dst.name} needs a float rounding "
                        f"modifier (.rn, .rz, .rm or .rp)")
        elif dst.bits > src.bits:
            if frnd or irnd:
                return f"widening .{src.name} to .{dst.name} is exact: drop the rounding modifier"
        elif dst == src:
            if frnd:
                return (f"cvt.{dst.name}.{src.name} rounds to an integral value: use .rni, "
                        f".rzi, .rmi or .rpi, not .{frnd}")
        else:  # f16 <-> bf16: sm_90, and rounded either way (neither holds the other)
            if frnd is None:
                return (f"cvt between .{src.name} and .{dst.name} rounds: write "
                        f"cvt.rn.{dst.name}.{src.name} (sm_90), or go through .f32")
    elif src.is_float and not dst.is_float:
        if irnd is None:
            return ("float to integer needs an integer rounding modifier: .rzi truncates "
                    "(C semantics), .rni rounds to nearest even")
        if frnd:
            return "float to integer takes an integer rounding (.rni/.rzi/.rmi/.rpi), not .rn"
    elif dst.is_float:
        if irnd:
            return "integer to float takes a float rounding (.rn/.rz/.rm/.rp), not an integer one"
        if frnd is None:
            return "integer to float needs a float rounding modifier (usually .rn)"
    else:
        if irnd or frnd:
            return "integer to integer conversions take no rounding modifier"
    if m.has("relu") and dst.name not in ("f16", "bf16"):
        return ".relu applies to conversions to .f16/.bf16"
    clamp = "relu" if m.has("relu") else "satfinite" if m.has("satfinite") else None
    if clamp and (m.has("ftz") or m.has("sat")):
        return f".{clamp} does not combine with .{'ftz' if m.has('ftz') else 'sat'}"
    if m.has("satfinite") and dst.name not in ("f16", "bf16"):
        return ".satfinite applies to conversions of .f32 to .f16/.bf16/.f16x2/.bf16x2/.tf32"
    if (m.has("relu") or m.has("satfinite")) and (src.name != "f32" or frnd not in ("rn", "rz")):
        word = "relu" if m.has("relu") else "satfinite"
        return f".{word} is for rounding .f32 down: write cvt.rn.{word}.{dst.name}.f32"
    if m.has("ftz") and "f32" not in (dst.name, src.name):
        return ".ftz applies only when .f32 is the source or destination"
    if m.has("sat"):
        msg = _cvt_sat(dst, src)
        if msg:
            return msg
    if "bf16" in (dst.name, src.name):
        other = src if dst.name == "bf16" else dst
        if other.bits == 8:
            return "cvt has no form between .bf16 and 8-bit integers; convert through .s16/.u16"
        # f32 -> bf16 arrived with sm_80 (PTX 7.0), bf16 -> f32 with PTX 7.1, the rest sm_90.
        need = {("bf16", "f32"): ((7, 0), 80), ("f32", "bf16"): ((7, 1), 80)}.get(
            (dst.name, src.name), ((7, 8), 90))
        if m.has("ftz") and src.name == "bf16":
            need = ((7, 8), 90)
    return need


def _cvt_sat(dst, src):
    """Where ptxas allows cvt.sat: conversions that can overflow their destination."""
    if not dst.is_float and not src.is_float:
        fits = (dst.kind == src.kind and dst.bits >= src.bits) or (
            dst.kind == "s" and src.kind == "u" and dst.bits > src.bits)
        if fits:
            return (f"every .{src.name} value fits .{dst.name}, so there is nothing to "
                    f"saturate: drop .sat")
    if "bf16" in (src.name, dst.name):
        return ".sat does not apply to .bf16 conversions"
    if dst.is_float and src.name == "f16":
        return ".sat on a float destination does not take a .f16 source"
    return None


def add_sub(m):
    if m.has("sat") and m.has("cc"):
        return ".sat and .cc do not combine: a carry-out needs the wrapped sum"
    return None


def fma(m):
    if m.has("sat") and m.has("relu"):
        return ".sat and .relu do not combine; pick one clamp"
    return None


def int_mode(m):
    t = m.type
    if t.is_int and "mode" not in m.chosen:
        return (f"integer mul needs .lo, .hi or .wide: mul.lo.{t.name} keeps the low half, "
                f"mul.wide.{t.name} the double-width product")
    if m.has("sat") and not t.is_float:
        return ".sat applies to float multiply only"
    return None


def mad(m):
    t = m.type
    if t.is_int and "mode" not in m.chosen:
        return (f"integer mad needs .lo, .hi or .wide: mad.lo.{t.name} keeps the low half, "
                f"mad.wide.{t.name} the double-width product")
    if t.is_float and "rounding" not in m.chosen:
        return f"mad.{t.name} needs a rounding modifier; write mad.rn.{t.name} (or fma.rn.{t.name})"
    if m.has("sat") and t.name != "f32" and not (t.name == "s32" and m.has("hi")):
        return ".sat applies to mad.f32 and mad.hi.sat.s32 only"
    return None


def float_kind_required(m):
    if m.type.is_float and "kind" not in m.chosen:
        return (f"float division needs .approx, .full or a rounding mode: div.rn.{m.type.name} "
                f"is IEEE, div.approx.f32 the fast form")
    return None


def rcp(m):
    if m.type.name == "f64" and m.has("approx") and not m.has("ftz"):
        return "rcp.approx.f64 exists only as rcp.approx.ftz.f64"
    if m.type.name == "f64" and m.has("ftz") and not m.has("approx"):
        return f".ftz on .f64 belongs to rcp.approx.ftz.f64; rcp.{m.chosen['kind']}.f64 is IEEE"
    return None


def mbarrier(m):
    sem, scope = m.chosen.get("sem"), m.chosen.get("scope")
    if sem and not scope:
        return f".{sem} needs a scope right after it: .{sem}.cta or .{sem}.cluster"
    if scope and not sem:
        want = "acquire" if "wait" in m.spec.opcode else "release"
        return f"a scope needs the memory order before it: .{want}.{scope}"
    return None


def mbarrier_tx(m):
    """expect_tx / complete_tx: .relaxed and a scope come together (or neither)."""
    if m.chosen.get("sem") and not m.chosen.get("scope"):
        return ".relaxed needs a scope right after it: .relaxed.cta or .relaxed.cluster"
    if m.chosen.get("scope") and not m.chosen.get("sem"):
        return f"a scope needs the memory order before it: .relaxed.{m.chosen['scope']}"
    return None


def compare(m):
    cmp = m.chosen["cmp"]
    t = m.type
    if cmp in ("lo", "ls", "hi", "hs") and t.kind != "u":
        other = {"lo": "lt", "ls": "le", "hi": "gt", "hs": "ge"}[cmp]
        return (f".{cmp} is an unsigned-integer comparison (.u16/.u32/.u64); "
                f".{t.name} compares with .{other}")
    if cmp in ("equ", "neu", "ltu", "leu", "gtu", "geu", "num", "nan") and not t.is_float:
        return f".{cmp} is a float (NaN-aware) comparison; integers use eq/ne/lt/le/gt/ge"
    if t.kind == "b" and cmp not in ("eq", "ne"):
        return f".{t.name} values have no order: compare them with eq/ne or use .u/.s types"
    if t.name in HALF and t.name.endswith("x2"):
        return "setp on packed x2 types writes two predicates; unpack first"
    return None


def set_(m):
    if m.types[0].name not in ("u32", "s32", "f32"):
        return (f"set writes .u32, .s32 or .f32 (0xffffffff or 1.0 for true), not "
                f".{m.types[0].name}: set.<cmp>.u32.{m.types[1].name}")
    if m.has("ftz") and m.types[1].name != "f32":
        return ".ftz applies to .f32 sources: set.cmp.ftz.<dtype>.f32"
    if m.types[1].name in HALF and m.types[0].name == "f32":
        return (f"set on .{m.types[1].name} writes an integer mask: "
                f"set.<cmp>.u32.{m.types[1].name} (or .s32)")
    return compare(m.__class__(m.spec, m.mods, m.chosen, m.types[1:], m.operands, m.ptx, m.sm))


def ex2(m):
    t = m.type.name
    if t in ("f16", "f16x2"):
        if m.has("ftz"):
            return f"ex2.approx.{t} takes no .ftz"
        return ((7, 0), 75)
    if t in ("bf16", "bf16x2"):
        if not m.has("ftz"):
            return f"ex2 on .{t} exists only as ex2.approx.ftz.{t}"
        return ((7, 8), 90)
    return None


def vote(m):
    mode, t = m.chosen["mode"], m.type.name
    if mode == "ballot" and t != "b32":
        return "vote.sync.ballot writes a 32-bit mask: vote.sync.ballot.b32"
    if mode != "ballot" and t != "pred":
        return f"vote.sync.{mode} writes a predicate: vote.sync.{mode}.pred"
    return None


def redux(m):
    op, t = m.chosen["op"], m.type.name
    if op in ("and", "or", "xor") and t != "b32":
        return f"redux.sync.{op} works on .b32"
    if op in ("add", "min", "max") and t not in ("u32", "s32"):
        return f"redux.sync.{op} works on .u32 or .s32"
    return None


def fence(m):
    sem, kind, order = m.chosen.get("sem"), m.chosen.get("proxykind"), m.chosen.get("order")
    if order and sem is None and not kind:      # fence.acquire / fence.release (PTX 8.6)
        if m.chosen.get("scope") not in ("cta", "cluster", "gpu", "sys"):
            return (f"fence.{order} needs a scope: fence.{order}.cta / .cluster / .gpu / "
                    f".sys")
        return None
    if sem == "mbarrier_init" or order:
        if (sem, kind, m.chosen.get("order"), m.chosen.get("scope")) != (
                "mbarrier_init", None, "release", "cluster"):
            return ("fence.mbarrier_init is written fence.mbarrier_init.release.cluster; "
                    "fence.acquire / fence.release take a scope and nothing else")
        return None
    if sem == "proxy" and not kind:
        return "fence.proxy needs a proxy kind: fence.proxy.async or fence.proxy.alias"
    if kind and sem != "proxy":
        return f".{kind} belongs after .proxy: fence.proxy.{kind}"
    if sem in ("sc", "acq_rel", None) and not kind and "scope" not in m.chosen:
        return "fence needs a scope: fence{.sc|.acq_rel}.cta / .cluster / .gpu / .sys"
    if sem in ("sc", "acq_rel", None) and m.chosen.get("scope", "").startswith(("shared", "glob")):
        return "a state space after fence belongs to fence.proxy.async only"
    if kind == "alias" and "scope" in m.chosen:
        return "fence.proxy.alias takes no scope or state space"
    if kind == "async" and m.chosen.get("scope") in ("cta", "cluster", "gpu", "sys"):
        return ("fence.proxy.async takes a state space (.shared::cta, .shared::cluster, "
                ".global), not a scope")
    return None


_ATOM_TYPES = {
    "add": {"u32", "s32", "u64", "f32", "f64"},
    "min": {"u32", "s32", "u64", "s64"}, "max": {"u32", "s32", "u64", "s64"},
    "inc": {"u32"}, "dec": {"u32"},
    "cas": {"b32", "b64"}, "exch": {"b32", "b64"},
    "and": {"b32", "b64"}, "or": {"b32", "b64"}, "xor": {"b32", "b64"},
}


def atom(m):
    op, t = m.chosen["op"], m.type.name
    allowed = _ATOM_TYPES[op]
    if t not in allowed:
        return f".{op} works on {', '.join('.' + x for x in sorted(allowed))}, not .{t}"
    if t == "f64" and op == "add":
        return ((5, 0), 60)
    if t in ("u64", "s64") and op in ("min", "max"):
        return ((2, 0), 32)
    return None


def cp_async_operands(m, ops):
    """cp.async copies 4, 8 or 16 bytes (.cg: 16 only); an immediate source size is at most
    the copy size (the rest of the destination is zero-filled)."""
    size = _imm(ops[2]) if len(ops) > 2 else None
    if size is None:
        return None
    if size not in (4, 8, 16):
        return f"cp.async copies 4, 8 or 16 bytes, got {size}"
    if m.chosen.get("cache") == "cg" and size != 16:
        return f"cp.async.cg copies 16 bytes only, got {size}; use cp.async.ca for {size}"
    src = _imm(ops[3]) if len(ops) > 3 else None
    if src is not None and not 0 <= src <= size:
        return f"cp.async source size {src} must be between 0 and the copy size {size}"
    return None


def bulk_prefetch_operands(m, ops):
    """cp.async.bulk.prefetch.L2 fetches a positive multiple of 16 bytes."""
    size = _imm(ops[1]) if len(ops) > 1 else None
    if size is not None and (size <= 0 or size % 16 or size > 1048560):
        return (f"cp.async.bulk.prefetch.L2 fetches a positive multiple of 16 bytes, got "
                f"{size} (at most 1048560)")
    return None


def discard_operands(m, ops):
    """discard.L2 drops exactly one 128-byte line."""
    size = _imm(ops[1]) if len(ops) > 1 else None
    if size != 128:
        return f"discard.L2 drops one 128-byte line: its size must be the immediate 128, " \
               f"got {ops[1] if len(ops) > 1 else 'nothing'}"
    return None


# ---------------------------------------------------------------- immediate operand values
def _imm(op):
    """The value of an immediate operand, or None for registers and the like."""
    value = getattr(op, "value", None)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def bit_field_operands(m, ops):
    """bfe/bfi take the field position and length as 0..255 (ptxas rejects more)."""
    for what, op in zip(("position", "length"), ops[-2:]):
        v = _imm(op)
        if v is not None and not 0 <= v <= 255:
            return f"bit-field {what} {v} is out of range: immediates must be 0..255"
    return None


def fraction_operand(m, ops):
    """createpolicy.fractional takes a fraction in (0, 1]: an f32 register or a constant."""
    if len(ops) < 2:
        return None
    v = getattr(ops[1], "value", None)
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return None  # a register: its value is the program's business
    with np.errstate(all="ignore"):
        f32 = float(np.float32(v))  # what the .f32 immediate holds (5e-324 becomes 0)
    if not 0.0 < f32 <= 1.0:
        return f"createpolicy fraction {v} is out of range: it must be in (0, 1]"
    return None


def barrier_operands(m, ops):
    v = _imm(ops[0]) if ops else None
    if v is not None and not 0 <= v <= 15:
        return f"barrier number {v} is out of range: a CTA has barriers 0 to 15"
    n = _imm(ops[1]) if len(ops) > 1 else None
    if n is not None and (n <= 0 or n % 32):
        return f"barrier thread count {n} must be a positive multiple of the warp size (32)"
    return None


def bar_red_operands(m, ops):
    """bar.red d, a{, b}, c: the barrier id and count are the barrier's rules."""
    return barrier_operands(m, ops[1:-1])


def bar_red(m):
    op, t, name = m.chosen["op"], m.type.name, m.spec.opcode
    if op == "popc" and t != "u32":
        return f"{name}.popc counts threads into a .u32: {name}.popc.u32"
    if op != "popc" and t != "pred":
        return f"{name}.{op} reduces predicates: {name}.{op}.pred"
    return None


def mbarrier_arrive_operands(m, ops):
    """A peer CTA's mbarrier (.shared::cluster) returns no state: its destination is _."""
    sink = getattr(ops[0], "is_sink", False)
    if m.chosen.get("space") == "shared::cluster" and not sink:
        return ("an arrive on a .shared::cluster mbarrier (a peer CTA's, from mapa) returns "
                "no state: pass ptx.sink as the destination")
    count = _imm(ops[2]) if len(ops) > 2 else None
    if count is not None and not 1 <= count < (1 << 20):
        return f"an arrive count is 1 to 2^20 - 1, got {count}"
    return None


def parity_operands(m, ops):
    v = _imm(ops[2]) if len(ops) > 2 else None
    if m.has("parity") and v is not None and v not in (0, 1):
        return f"a phase parity is 0 or 1, not {v}"
    return None
