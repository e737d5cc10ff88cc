"""CPU semantics of Hopper's warpgroup MMA: wgmma.mma_async, wgmma.fence,
wgmma.commit_group and wgmma.wait_group.

wgmma.mma_async
---------------
Each warpgroup (4 aligned warps, all 128 threads together) reads its A and B
operands from shared memory through the descriptor bits exactly as the hardware
does (:class:`~ptxdsl.isa.descriptors.SmemDescriptor`): start address, leading and
stride byte offsets, and the 32/64/128-byte swizzle applied to the absolute
shared address (:func:`~ptxdsl.isa.descriptors.swizzle_offset`). K-major operands
lie as rows of 16-byte chunks (8-row groups ``stride`` bytes apart; without swizzle
each 8x16-byte core matrix is contiguous and the second K chunk is ``leading`` bytes
away); MN-major operands (transpose 1, f16/bf16 only) lie as rows along MN, one row
per k (8-k groups ``stride`` bytes apart, swizzle spans ``leading`` bytes apart).
A from registers uses the mma.sync A fragment layout per warp (16-bit inputs).

The product is computed in float64 (int64 for s8/u8), added to the accumulator
(scale-d), rounded once into the accumulator type and held *in flight*: the
accumulator registers cannot be read or written (an InterpreterError names the
wgmma) until ``wgmma.commit_group`` closes its group and ``wgmma.wait_group`` N
retires it; wgmmas issued back to back on the same accumulator chain as on the GPU.
"""
from __future__ import annotations

import functools

import numpy as np

from ...core import ir
from ...isa.descriptors import SmemDescriptor, swizzle_offset
from ...isa.hopper import wgmma_shape
from ...core.types import bf16_bits_to_f32
from ...dsl.wgmma import WgmmaLayout
from ...core.fp8 import fp8_decode
from ..access import track_block
from ..warps import warpgroups

_ELEM_BYTES = {"f16": 2, "bf16": 2, "tf32": 4, "e4m3": 1, "e5m2": 1, "s8": 1, "u8": 1}


# ---------------------------------------------------------------------- operands
def _values(raw: np.ndarray, t: str) -> np.ndarray:
    """Element bit patterns (uint) -> float64 / int64 values as the tensor core reads them."""
    if t == "f16":
        return raw.astype(np.uint16).view(np.float16).astype(np.float64)
    if t == "bf16":
        return bf16_bits_to_f32(raw.astype(np.uint16)).astype(np.float64)
    if t == "tf32":  # the low 13 bits are ignored
        return (raw.astype(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)
    if t in ("e4m3", "e5m2"):
        return fp8_decode(raw, t)
    if t == "s8":
        return raw.astype(np.uint8).view(np.int8).astype(np.int64)
    return raw.astype(np.int64)


def operand_offsets(desc: SmemDescriptor, rows: int, k: int, ebytes: int,
                    mn_major: bool) -> np.ndarray:
    """Shared byte address of each element (rows x k, rows along M or N) of an operand."""
    r = np.arange(rows)[:, None]
    kk = np.arange(k)[None, :]
    s = desc.swizzle
    if not mn_major:
        kb = kk * ebytes
        if s:
            addr = desc.start + (r % 8) * s + (r // 8) * desc.stride + kb
        else:
            addr = (desc.start + (r % 8) * 16 + (r // 8) * desc.stride + kb % 16
                    + (kb // 16) * desc.leading)
    else:
        if s:
            per = s // ebytes
            addr = (desc.start + (r % per) * ebytes + (r // per) * desc.leading
                    + (kk % 8) * s + (kk // 8) * desc.stride)
        else:
            addr = (desc.start + (r % 8) * ebytes + (r // 8) * desc.stride
                    + (kk % 8) * 16 + (kk // 8) * desc.leading)
    addr = np.asarray(addr, np.int64)
    if s:
        addr = swizzle_offset(addr, s)      # bit operations: the same function on an array
    return addr


def _read_operand(mach, instr, desc_bits: int, rows: int, k: int, t: str, mn_major: bool,
                  thread: int, what: str) -> np.ndarray:
    """The (rows, k) operand values, read (and checked: races, uninitialised bytes, the
    async-proxy fence) as ``thread``'s, the first thread of the issuing warpgroup."""
    desc = SmemDescriptor.decode(desc_bits)
    if desc.base_offset:
        mach.fail(instr, f"{what}'s descriptor has base offset {desc.base_offset}: the "
                         f"interpreter reads swizzled tiles that start on a pattern boundary")
    eb = _ELEM_BYTES[t]
    addr = operand_offsets(desc, rows, k, eb, mn_major)
    sp = mach.spaces["shared"]
    ok = sp.in_bounds(addr.reshape(-1).astype(np.uint64), eb)
    if not np.all(ok):
        bad = int(addr.reshape(-1)[np.argmin(ok)])
        mach.fail(instr, f"{what} (descriptor {desc}) reads shared byte {bad:#x}, "
                         f"{sp.nearest(bad)}")
    off = sp.offsets(addr.reshape(-1).astype(np.uint64), np.full(addr.size, mach.cta[thread]))
    lay = (off.reshape(rows, k).T if mn_major else off.reshape(rows, k)).reshape(-1)
    track_block(mach, instr, sp, thread, lay, eb, "read")   # (contiguous runs first)
    dt = {1: np.uint8, 2: np.uint16, 4: np.uint32}[eb]
    raw = sp.read(off, dt, 1).reshape(rows, k)
    return _values(raw, t), (off[:, None] + np.arange(eb)).reshape(-1)


def _a_from_registers(mach, instr, warps_threads, t: str) -> np.ndarray:
    """(64, 16) A values from the 4 .b32 registers of each thread (16-bit inputs)."""
    if _ELEM_BYTES[t] != 2:
        mach.fail(instr, f"A from registers is interpreted for .f16/.bf16 inputs only, "
                         f"not .{t}; use a descriptor A")
    regs = instr.operands[1].items
    rows, cols = positions(WgmmaLayout(16))              # (128, 8): element 2j + half
    tm = _mask_of(mach, warps_threads)
    words = np.stack([np.asarray(mach.read_reg(r, tm, instr)).view(np.uint32)[warps_threads]
                      for r in regs], axis=1)             # (128, 4)
    halves = (words[:, :, None] >> np.array([0, 16], np.uint32)) & np.uint32(0xFFFF)
    a = np.zeros((64, 16), np.float64)
    a[rows, cols] = _values(halves.reshape(128, 8), t)
    return a


def _mask_of(mach, threads) -> np.ndarray:
    m = np.zeros(mach.T, bool)
    m[threads] = True
    return m


# ---------------------------------------------------------------------- in flight
def _held(mach) -> dict:
    """reg -> (thread mask, wgmma instr) of accumulators in flight (``Machine.held``)."""
    return mach.held


class Pending:
    """One warpgroup's wgmma in flight: its accumulator result and the shared bytes it
    reads until ``wgmma.wait_group`` retires its group."""
    __slots__ = ("threads", "regs", "bits", "gid", "instr", "reads", "step")

    def __init__(self, threads, regs, bits, gid, instr, reads, step):
        self.threads, self.regs, self.bits, self.gid = threads, regs, bits, gid
        self.instr, self.reads, self.step = instr, reads, step


def _pending(mach) -> list:
    if not hasattr(mach, "wgmma_pending"):
        mach.wgmma_pending = []          # [Pending], in issue order
        mach.wgmma_groups = np.zeros(mach.T, np.int64)
    return mach.wgmma_pending


def _hold_reads(mach, reads, delta: int) -> None:
    """Mark (``delta`` 1) or release (-1) operand bytes a wgmma in flight reads
    (``Tracker.reading``: a write to them is an error, :func:`ptxdsl.interp.groups.overwrite`)."""
    tr = mach.spaces["shared"].tracker
    if tr is None or not tr.reads:
        return
    for b in reads:          # (an operand's bytes are distinct; -= undoes += exactly)
        tr.reading[b] += delta
        tr.n_reading += delta * len(b)
    tr.any_reading = tr.n_reading > 0


def _check_fenced(mach, instr, regs, threads, what: str) -> None:
    """``wgmma.fence`` must lie between the warpgroup's ordinary accesses of a wgmma's
    accumulator or A registers and the wgmma (and before its first wgmma at all)."""
    fence = mach.wgmma_fenced
    if fence is None or (fence[threads] < 0).any():
        t = int(threads[0] if fence is None else threads[int(np.argmax(fence[threads] < 0))])
        mach.fail(instr, "no wgmma.fence before this warpgroup's first wgmma.mma_async: "
                         "execute ptx.wgmma.fence() (all four warps) after the accumulators "
                         "are set up and before the first wgmma", t)
    f = fence[threads]
    for r in regs:
        st = mach.reg_steps.get(r)
        if st is None:
            continue
        late = st[threads] > f
        if late.any():
            t = int(threads[int(np.argmax(late))])
            mach.fail(instr, f"{what} register %{r.name} was written by an ordinary "
                             f"instruction after this warpgroup's last wgmma.fence: the "
                             f"wgmma may read it before the write lands (ptxas warns "
                             f"C7517/C7519 and serialises); execute ptx.wgmma.fence() "
                             f"between the write and the wgmma", t)


def _uniform(mach, instr, vals, threads, what):
    v = np.broadcast_to(np.asarray(vals), (mach.T,))[threads]
    if not np.all(v == v[0]):
        mach.fail(instr, f"{what} differs between the threads of a warpgroup; wgmma reads "
                         f"one value per warpgroup", int(threads[int(np.argmax(v != v[0]))]))
    return v[0]


def wgmma_mma_async(mach, instr, mask):
    m = instr.match
    d_t, a_t, b_t = (t.name for t in m.types)
    _, n, k = wgmma_shape(m)
    ops = instr.operands
    a_regs = isinstance(ops[1], ir.Vec)
    idx = 3
    scale_d_op = ops[idx]
    imms = [int(o.value) for o in ops[idx + 1:]]
    scale_a, scale_b = (imms[0], imms[1]) if a_t not in ("s8", "u8") else (1, 1)
    trans = imms[2:]
    trans_a = 0 if a_regs or not trans else trans[0]
    trans_b = (trans[-1] if trans else 0)
    lay = WgmmaLayout(n, d_t)
    acc_regs = list(ops[0].items)
    held = _held(mach)
    pend = _pending(mach)
    for threads in warpgroups(mach, instr, mask):
        tmask = _mask_of(mach, threads)
        first = int(threads[0])
        _check_fenced(mach, instr, acc_regs, threads, "accumulator")
        if a_regs:
            _check_fenced(mach, instr, ops[1].items, threads, "A-fragment")
        reads = []
        if isinstance(scale_d_op, ir.Imm):
            scale_d = bool(scale_d_op.value)
        else:
            scale_d = bool(_uniform(mach, instr, mach.read_reg(scale_d_op, tmask, instr),
                                    threads, "scale-d"))
        if a_regs:
            a = _a_from_registers(mach, instr, threads, a_t)
        else:
            da = int(_uniform(mach, instr, mach.src(instr, 1, tmask), threads, "the A descriptor"))
            a, ra = _read_operand(mach, instr, da, 64, k, a_t, bool(trans_a), first, "A")
            reads.append(ra)
        db = int(_uniform(mach, instr, mach.src(instr, 2, tmask), threads, "the B descriptor"))
        b, rb = _read_operand(mach, instr, db, n, k, b_t, bool(trans_b), first, "B")  # (N, K)
        reads.append(rb)
        prod = (scale_a * a) @ (scale_b * b).T                                     # (64, N)
        c = np.zeros((64, n), np.float64)
        if scale_d:
            c = _current_acc(mach, instr, acc_regs, threads, lay, held, pend)
        bits = _pack(c + prod, lay, d_t, m.has("satfinite"))                   # (128, nregs)
        for r in acc_regs:
            held[r] = (held.get(r, (np.zeros(mach.T, bool), None))[0] | tmask, instr)
        _hold_reads(mach, reads, 1)
        pend.append(Pending(threads, acc_regs, bits, mach.wgmma_groups[threads].copy(), instr,
                            reads, mach.steps))


def _current_acc(mach, instr, regs, threads, lay, held, pend) -> np.ndarray:
    """The accumulator tile: the newest in-flight result for these threads, else the regs."""
    bits = None
    for p in reversed(pend):
        if p.regs is regs or p.regs == regs:
            if np.array_equal(p.threads, threads):
                bits = p.bits
                break
    if bits is None:
        cols = []
        for r in regs:
            if r in held and held[r][0][threads].any():
                mach.fail(instr, f"accumulator %{r.name} is in flight from another wgmma "
                                 f"(at {held[r][1].loc}) with a different register list")
            cols.append(np.asarray(mach.read_reg(r, _mask_of(mach, threads), instr))[threads])
        bits = np.stack([np.asarray(c).view(np.uint32) if np.asarray(c).dtype.itemsize == 4
                         else np.asarray(c) for c in cols], axis=1)
    return _unpack(bits, lay)


@functools.lru_cache(maxsize=64)
def positions(lay: WgmmaLayout) -> tuple[np.ndarray, np.ndarray]:
    """(rows, cols), each (128, elems): where element ``i`` of warpgroup thread ``t`` sits
    (:meth:`WgmmaLayout.position` evaluated on arrays: every thread and element at once)."""
    r, c = lay.position(np.arange(128)[:, None], np.arange(lay.elems)[None, :])
    rows, cols = (np.ascontiguousarray(np.broadcast_to(x, (128, lay.elems)), np.int64)
                  for x in (r, c))
    rows.flags.writeable = cols.flags.writeable = False
    return rows, cols


def _unpack(bits: np.ndarray, lay: WgmmaLayout) -> np.ndarray:
    """(128, nregs) accumulator register bits -> the (64, N) tile as float64."""
    bits = np.asarray(bits).astype(np.uint32)
    if lay.elem == "f16":
        half = (bits[:, :, None] >> np.array([0, 16], np.uint32)) & np.uint32(0xFFFF)
        vals = half.reshape(128, -1).astype(np.uint16).view(np.float16)
    elif lay.elem == "s32":
        vals = bits.view(np.int32)
    else:
        vals = bits.view(np.float32)
    rows, cols = positions(lay)
    out = np.zeros((64, lay.n), np.float64)
    out[rows, cols] = vals
    return out


def _pack(tile: np.ndarray, lay: WgmmaLayout, d_t: str, satfinite: bool) -> np.ndarray:
    if d_t == "s32":
        v = np.round(tile).astype(np.int64)
        v = np.clip(v, -2**31, 2**31 - 1) if satfinite else ((v + 2**31) % 2**32) - 2**31
        words = v.astype(np.int32).view(np.uint32)
    elif d_t == "f16":
        words = tile.astype(np.float16).view(np.uint16).astype(np.uint32)
    else:
        words = tile.astype(np.float32).view(np.uint32)
    rows, cols = positions(lay)
    w = words[rows, cols]                                  # (128, elems)
    if lay.per_reg == 2:
        return (w[:, 0::2] | (w[:, 1::2] << np.uint32(16))).astype(np.uint32)
    return np.ascontiguousarray(w, np.uint32)


def wgmma_fence(mach, instr, mask):
    warpgroups(mach, instr, mask)
    if mach.wgmma_fenced is None:
        mach.wgmma_fenced = np.full(mach.T, -1, np.int64)
    mach.wgmma_fenced[mask] = mach.steps


def wgmma_commit(mach, instr, mask):
    _pending(mach)
    mach.wgmma_groups[mask] += 1


def wgmma_wait(mach, instr, mask):
    """Retire the groups older than the ``N`` newest of each warpgroup in ``mask``: write
    their accumulators, free their operand bytes and order their operand reads before
    every thread of the warpgroup (the reads were recorded as its first thread's)."""
    keep = int(instr.operands[0].value)
    pend = _pending(mach)
    rest, done = [], []
    for p in pend:
        sel = mask[p.threads]
        if (sel & (p.gid < mach.wgmma_groups[p.threads] - keep)).all():
            done.append(p)
        else:
            rest.append(p)
    if not done:
        return
    mach.held = {}
    for p in done:           # in issue order: a chain's newest result is written last
        tm = _mask_of(mach, p.threads)
        for j, r in enumerate(p.regs):
            mach.write_rows(r, p.threads, p.bits[:, j], tm)    # raw .b32 words
        _hold_reads(mach, p.reads, -1)
        hb = mach.hb
        w0 = int(p.threads[0]) // 32
        for w in np.unique(p.threads // 32).tolist():
            hb.K[w, w0] = max(hb.K[w, w0], p.step)
        hb.lanesync[w0] = max(hb.lanesync[w0], p.step)
    held = {}                # rebuilt from the groups still in flight (younger ones too)
    for p in rest:
        tm = _mask_of(mach, p.threads)
        for r in p.regs:
            h = held.get(r)
            held[r] = (tm if h is None else h[0] | tm, p.instr)
    mach.held = held
    mach.wgmma_pending = rest
    mach.events += 1


def at_exit(mach) -> None:
    """A wgmma still in flight when the kernel ends: its warpgroup never waited for it."""
    pend = getattr(mach, "wgmma_pending", None)
    if pend:
        p = pend[0]
        mach.fail(p.instr, "this wgmma.mma_async is still in flight when its warpgroup "
                           "exits: commit its group and retire it (wgmma.commit_group, then "
                           "wgmma.wait_group 0) before the kernel ends", int(p.threads[0]))


HANDLERS = {
    "wgmma.mma_async": wgmma_mma_async,
    "wgmma.fence": wgmma_fence,
    "wgmma.commit_group": wgmma_commit,
    "wgmma.wait_group": wgmma_wait,
}
