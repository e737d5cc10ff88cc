"""Probe kernels for the tensor-core instructions, shared by the interpreter and GPU tests.

Each kernel is one warp (or a few) that loads raw register bits from global
memory, runs one instruction, and stores the result registers back, so the
test can pack inputs lane by lane and compare every output bit. The numpy
side (random operands, packing with independent formulas, references) lives
here too, so tests/interp/test_tensorcore.py and tests/gpu/test_tensorcore_gpu.py
check exactly the same thing.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from ptxdsl import Tile, kernel, ptx, reg, smem
from ptxdsl.dsl.tensorcore import FORMS, operand_layouts
from ptxdsl.isa.tensorcore import ELEMENT_BITS
from ptxdsl.core.types import ALL_TYPES, b32, u16, u32, u64

# every mma form with its layouts: (shape, atype, btype, ctype, dtype, alayout, blayout)
ALL_MMA = tuple(f + lay + (op,) for f in FORMS for lay in (
    (("row", "row"), ("row", "col"), ("col", "row"), ("col", "col"))
    if f[0] == "m8n8k4" and f[1] == "f16" else (("row", "col"),))
    for op in (("xor", "and") if f[1] == "b1" else ("",)))


def arch_for(form) -> str:
    from ptxdsl.isa import resolve
    m = resolve(chain(form).split("."))
    return f"sm_{max(m.sm, 80)}" + ("a" if m.sm >= 90 else "")


def chain(form) -> str:
    shape, a, b, c, d, la, lb, op = form
    return f"mma.sync.aligned.{shape}.{la}.{lb}.{d}.{a}.{b}.{c}" + (f".{op}.popc" if op else "")


def _width(t: str) -> int:
    return 64 if t == "f64" else 32


@functools.lru_cache(maxsize=None)
def build_mma(form, arch: str | None = None, warps: int = 1):
    """D = mma(A, B, C) for ``warps`` warps; inputs (warps*32, nregs) raw register bits."""
    shape, a, b, c, d, la, lb, _ = form
    lays = operand_layouts(shape, a, b, c, d, la, lb)
    n = {k: lays[k].nregs for k in "abcd"}
    raw = {k: (u64 if lays[k].bits == 64 else u32) for k in "abcd"}
    rtype = {k: ALL_TYPES[lays[k].reg_type] for k in "abcd"}
    T = warps * 32

    @kernel(in_specs=tuple(Tile(T, n[k], raw[k]) for k in "abc"),
            out_specs=(Tile(T, n["d"], raw["d"]),), grid=(1, 1, 1), block=(T, 1, 1),
            arch=arch or arch_for(form))
    def mma_probe(A, B, C, D):
        ptrs = dict(zip("abcd", ptx.global_ptrs(A, B, C, D)))
        tid = reg.scalar(u32)
        ptx.inst.mov.u32(tid, ptx.special.tid.x())
        regs = {}
        for k in "abcd":
            nb = raw[k].bits // 8
            base = ptrs[k] + tid * (n[k] * nb)
            regs[k] = [reg.scalar(rtype[k]) for _ in range(n[k])]
            if k == "d":
                ptrs[k] = base
                continue
            for j, r in enumerate(regs[k]):
                ptx.inst("ld.global.b%d" % raw[k].bits, r, ptx.addr(base, j * nb))
        ptx.inst(chain(form), regs["d"], regs["a"], regs["b"], regs["c"])
        for j, r in enumerate(regs["d"]):
            ptx.inst("st.global.b%d" % raw["d"].bits, ptx.addr(ptrs["d"], j * raw["d"].bits // 8),
                     r)

    return mma_probe


# ---------------------------------------------------------------------- element values
def fp8_value(code: int, name: str) -> float:
    """Independent decoder (math.ldexp over the fields) for the reference."""
    s = -1.0 if code & 0x80 else 1.0
    if name == "e4m3":
        e, m = (code >> 3) & 0xF, code & 7
        if e == 15 and m == 7:
            return math.nan
        return s * (math.ldexp(m, -9) if e == 0 else math.ldexp(8 + m, e - 10))
    e, m = (code >> 2) & 0x1F, code & 3
    if e == 31:
        return s * math.inf if m == 0 else math.nan
    return s * (math.ldexp(m, -16) if e == 0 else math.ldexp(4 + m, e - 17))


def random_elements(rng, elem: str, shape) -> tuple[np.ndarray, np.ndarray]:
    """(bit patterns, values as float64/int64) of random elements of type ``elem``.

    Floats mix magnitudes over several binades and signs so that the order of
    accumulation shows in the low bits of the result.
    """
    if elem == "b1":
        v = rng.integers(0, 2, shape)
        return v.astype(np.uint64), v.astype(np.int64)
    if elem in ("s8", "u8", "s4", "u4"):
        bits = ELEMENT_BITS[elem]
        lo, hi = (-(1 << bits - 1), 1 << bits - 1) if elem[0] == "s" else (0, 1 << bits)
        v = rng.integers(lo, hi, shape)
        return (v & ((1 << bits) - 1)).astype(np.uint64), v.astype(np.int64)
    if elem == "s32":
        v = rng.integers(-2 ** 31, 2 ** 31, shape)
        return (v & 0xFFFFFFFF).astype(np.uint64), v.astype(np.int64)
    if elem in ("e4m3", "e5m2"):
        codes = rng.integers(0, 256, shape)
        table = np.array([fp8_value(i, elem) for i in range(256)])
        # finite and at most 8 in magnitude (sums stay inside .f16's range)
        ok = np.isfinite(table[codes]) & (np.abs(np.nan_to_num(table[codes])) <= 8)
        codes = np.where(ok, codes, codes & 0xBF)   # top exponent bit off: <= 1.875
        return codes.astype(np.uint64), table[codes]
    x = rng.standard_normal(shape) * np.exp2(rng.integers(-6, 7, shape))
    if elem == "f16":
        h = x.astype(np.float16)
        return h.view(np.uint16).astype(np.uint64), h.astype(np.float64)
    if elem == "bf16":
        f = x.astype(np.float32)
        bits = (f.view(np.uint32) >> 16).astype(np.uint64)   # truncate: exact bf16 values
        return bits, (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    if elem in ("f32", "tf32"):
        f = x.astype(np.float32)
        u = f.view(np.uint32)
        # tf32: random low bits the tensor core must ignore
        val = (u & 0xFFFFE000).view(np.float32) if elem == "tf32" else f
        return u.astype(np.uint64), val.astype(np.float64)
    return x.view(np.uint64), x


def pack(lay, bits_tiles: np.ndarray) -> np.ndarray:
    """(warps, tiles, rows, cols) element bits -> (warps*32, nregs) register bits."""
    el = lay.gather(bits_tiles).reshape(-1, lay.elems).astype(np.uint64)
    per = lay.per_reg
    regs = np.zeros((el.shape[0], lay.nregs), np.uint64)
    for i in range(lay.elems):
        j, p = divmod(i, per)
        regs[:, j] |= el[:, i] << np.uint64(p * lay.bits)
    return regs.astype(np.uint64 if lay.bits == 64 else np.uint32)


def unpack(lay, regs: np.ndarray, warps: int) -> np.ndarray:
    """(warps*32, nregs) register bits -> (warps, tiles, rows, cols) element bits."""
    regs = regs.astype(np.uint64)
    per, w = lay.per_reg, lay.bits
    el = np.zeros((regs.shape[0], lay.elems), np.uint64)
    for i in range(lay.elems):
        j, p = divmod(i, per)
        el[:, i] = (regs[:, j] >> np.uint64(p * w)) & np.uint64((1 << w) - 1 if w < 64 else
                                                                 2 ** 64 - 1)
    return lay.scatter(el.reshape(warps, 32, lay.elems))


def decode_result(bits: np.ndarray, elem: str) -> np.ndarray:
    if elem == "f32":
        return bits.astype(np.uint32).view(np.float32).astype(np.float64)
    if elem == "f16":
        return bits.astype(np.uint16).view(np.float16).astype(np.float64)
    if elem == "f64":
        return bits.astype(np.uint64).view(np.float64)
    return bits.astype(np.uint32).view(np.int32).astype(np.int64)


def mma_case(form, seed: int = 0, warps: int = 1):
    """Inputs for ``build_mma(form)`` and what to compare: returns
    (args, check) where ``check(d_regs) -> (max error, bound)`` (integers: exact)."""
    shape, a, b, c, d, la, lb, op = form
    lays = operand_layouts(shape, a, b, c, d, la, lb)
    rng = np.random.default_rng(seed)
    tiles = {}
    args = []
    for k, elem in (("a", a), ("b", b), ("c", c)):
        lay = lays[k]
        bits, val = random_elements(rng, elem, (warps, lay.tiles, lay.rows, lay.cols))
        tiles[k] = val
        args.append(pack(lay, bits))
    ab = np.einsum("wtmk,wtkn->wtmnk", tiles["a"], tiles["b"])
    if op == "xor":   # .b1: popc(a XOR b), term by term
        ab = tiles["a"][..., :, None, :] + np.swapaxes(tiles["b"], -1, -2)[..., None, :, :] \
            - 2 * ab
    exact = ab.sum(-1) + tiles["c"]          # float64: exact for these inputs, or int64
    mag = np.abs(ab).sum(-1) + np.abs(tiles["c"])
    k_dim = lays["a"].cols

    def check(d_regs):
        got = decode_result(unpack(lays["d"], d_regs, warps), d)
        if d == "s32":
            want = exact
            if "satfinite" in chain(form):
                want = np.clip(want, -2 ** 31, 2 ** 31 - 1)
            want = ((want + 2 ** 31) % 2 ** 32) - 2 ** 31
            return int(np.abs(got - want).max()), 0
        p = {"f32": 23, "f64": 52, "f16": 10}[d]
        if a in ("e4m3", "e5m2") and d == "f32":
            p = 13
        bound = (k_dim + 1) * 2.0 ** -p * mag
        if d == "f16":
            bound = bound + np.abs(exact) * 2.0 ** -11
        return float(np.max(np.abs(got - exact) - bound)), 0.0

    return args, check


# ---------------------------------------------------------------------- ldmatrix & co
@functools.lru_cache(maxsize=None)
def build_matrix_ops(num: int, trans: bool, arch: str = "sm_90a"):
    """Loads ``num`` 8x8 b16 matrices (global -> shared), ldmatrix (.trans) them into
    R (32, num) b32; stmatrix (same .trans) of R into S (num*64 b16); movmatrix of R's
    first register into M (32,)."""
    tr = ".trans" if trans else ""

    @kernel(in_specs=(Tile(num * 64, u16),),
            out_specs=(Tile(32, num, u32), Tile(num * 64, u16), Tile(32, u32)),
            grid=(1, 1, 1), block=(32, 1, 1), arch=arch)
    def matrix_ops(X, R, S, M):
        src = smem.alloc(u16, (num * 64,))
        dst = smem.alloc(u16, (num * 64,))
        px, pr, ps, pm = ptx.global_ptrs(X, R, S, M)
        lane = reg.scalar(u32)
        ptx.inst.mov.u32(lane, ptx.special.laneid())
        for i in range(num):         # 128 bytes (one matrix) per step
            v = reg.scalar(u32)
            ptx.inst.ld.global_.u32(v, ptx.addr(px + lane * 4, i * 128))
            ptx.inst.st.shared.u32(ptx.addr(src.base + lane * 4, i * 128), v)
        ptx.bar.sync(0)
        # lane 8i + r names row r of matrix i (lanes beyond num*8 repeat, ignored)
        row = lane & (num * 8 - 1)
        regs = [reg.scalar(b32) for _ in range(num)]
        ptx.inst(f"ldmatrix.sync.aligned.m8n8.x{num}{tr}.shared.b16", regs,
                 ptx.addr(src.base + row * 16))
        for j, r in enumerate(regs):
            ptx.inst.st.global_.b32(ptx.addr(pr + lane * (num * 4), j * 4), r)
        m = reg.scalar(b32)
        ptx.inst("movmatrix.sync.aligned.m8n8.trans.b16", m, regs[0])
        ptx.inst.st.global_.b32(ptx.addr(pm + lane * 4), m)
        ptx.inst(f"stmatrix.sync.aligned.m8n8.x{num}{tr}.shared.b16",
                 ptx.addr(dst.base + row * 16), regs)
        ptx.bar.sync(0)
        for i in range(num):
            v = reg.scalar(u32)
            ptx.inst.ld.shared.u32(v, ptx.addr(dst.base + lane * 4, i * 128))
            ptx.inst.st.global_.u32(ptx.addr(ps + lane * 4, i * 128), v)

    return matrix_ops


def matrix_expect(x: np.ndarray, num: int, trans: bool):
    """What ldmatrix gives lane l in register i: row l/4, columns 2(l%4), 2(l%4)+1
    of matrix i (of its transpose with .trans), low half first."""
    mats = x.reshape(num, 8, 8).astype(np.uint32)
    if trans:
        mats = mats.transpose(0, 2, 1)
    out = np.zeros((32, num), np.uint32)
    for lane in range(32):
        r, c = lane // 4, 2 * (lane % 4)
        for i in range(num):
            out[lane, i] = mats[i, r, c] | (mats[i, r, c + 1] << 16)
    # movmatrix transposes matrix 0 as held in registers
    m0 = mats[0].T
    mov = np.array([m0[ln // 4, 2 * (ln % 4)] | (m0[ln // 4, 2 * (ln % 4) + 1] << 16)
                    for ln in range(32)], np.uint32)
    return out, mov
