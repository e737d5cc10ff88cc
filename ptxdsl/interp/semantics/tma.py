"""CPU semantics of TMA: ``cp.async.bulk.tensor`` box loads and stores and
``cp.reduce.async.bulk.tensor`` reductions through tensor maps (bulk groups: :mod:`.bulk`).

Tensor maps. The launcher binds each tensor-map parameter (``X.tma_desc()``, a
``.param .align 64 .b8 X_tmap[128]``) to the :class:`~ptxdsl.core.tensormap.TensorMapSpec`
the runtime would encode for that argument (its shape, strides, the Tile's TMA box
and swizzle, the argument's interpreter address). The 128 parameter bytes hold an
opaque handle (a magic word and an index into ``param_space.tensormaps``), which the
copy handlers map back to the spec; an address that holds no handle is an error.

Loads (global -> shared::cluster, ``.tile`` mode, 1-D to 5-D). The box at the
coordinates (innermost first, as PTX writes them; each may be negative or run past
the tensor) is gathered with the map's element strides, out-of-bounds elements
filled with zeros (or NaN with ``oob_fill="nan"``), and written densely (innermost
dimension contiguous) at the 128-byte aligned shared address, every byte placed by
:func:`~ptxdsl.isa.descriptors.swizzle_offset` of its absolute shared address: the
function wgmma's descriptors read through, so TMA tiles and wgmma operands agree.
The copy is in flight until it lands (:mod:`ptxdsl.interp.landing`: when a thread
waits on its mbarrier, at the latest): its writes are checked as the issuing thread's at
issue, its destination bytes cannot be touched until it lands, and then the whole box's
bytes (out-of-bounds ones included, as the hardware counts) complete on the mbarrier,
whose phase acquire orders them before a consumer's reads.
The destination and the mbarrier (shared::cluster addresses) may name a peer CTA of
the cluster (both the same one); ``.multicast::cluster`` writes the box at the same
CTA-local offset into every CTA of the 16-bit ctaMask and completes its bytes on the
mbarrier at the same offset in each (see :mod:`ptxdsl.interp.cluster`). ``.im2col`` is refused.

Reductions (``cp.reduce.async.bulk.tensor``, shared::cta -> global, ``.bulk_group``):
like stores, but each element inside the tensor is combined with the tensor's (``.add``,
``.min``, ``.max``, ``.inc``, ``.dec``, ``.and``, ``.or``, ``.xor``; the element type is the
tensor map's: see ``_REDUCE_TYPES``) as an atomic update. Float adds round the exact
sum once to nearest even, without flushing subnormals; float min / max return the non-NaN
operand (either zero of a pair of zeros). (Not yet checked against a GPU:
``tests/gpu/test_tma_reduce_gpu.py``.)

Stores (shared::cta -> global, ``.bulk_group``). The shared box is read through the
same swizzle when the store issues (reads of the issuing thread), and the elements
inside the tensor are written; out-of-bounds ones are clipped. The store completes
at once, which is one legal timing; ``commit_group`` closes a group and
``wait_group[.read] N`` retires all but the N newest, checked as ordering points
(a wait retires only groups its own thread committed).
"""
from __future__ import annotations

import numpy as np

from ...core import ir
from ...core.types import s32
from .. import cluster, groups, landing
from ..access import track, track_block
from ..addressing import addresses
from ..tensormaps import tensormap_spec
from .atomic import combine_bytes
from .mbarrier import mbarrier_complete_tx

def _coords(mach, instr, op: ir.Addr, mask) -> list[np.ndarray]:
    out = []
    for c in op.coords:
        if isinstance(c, (int, np.integer)):
            c = ir.Imm(int(c))
        v = mach.value(c, s32, mask, instr)
        out.append(np.broadcast_to(np.asarray(v).astype(np.int64), (mach.T,)))
    return out


def _box(spec, origin) -> tuple[np.ndarray, np.ndarray]:
    """Global element byte offsets (from the tensor's address) of the box at ``origin``
    (outermost first) in shared-memory order, and which lie inside the tensor."""
    axes = [o + np.arange(-(-b // e)) * e
            for o, b, e in zip(origin, spec.box, spec.element_strides)]
    grids = np.meshgrid(*axes, indexing="ij")
    inside = np.ones(grids[0].shape, bool)
    off = np.zeros(grids[0].shape, np.int64)
    for g, n, s in zip(grids, spec.shape, spec.strides):
        inside &= (g >= 0) & (g < n)
        off += g * s
    return off.reshape(-1), inside.reshape(-1)


def _smem_addrs(spec, base: int) -> np.ndarray:
    """Absolute shared address of each box element's first byte (swizzled)."""
    e = spec.dtype.bytes
    i = np.arange(spec.box_elements, dtype=np.int64)
    n = -(-spec.box[-1] // spec.element_strides[-1])    # elements of one box row
    # rows narrower than the swizzle span lie one span apart (TensorMapSpec.smem_row_bytes)
    a = base + ((i // n) * (spec.smem_row_bytes // e) + i % n) * e
    if spec.swizzle:
        a = a ^ (((a >> 7) & (spec.swizzle // 16 - 1)) << 4)
    return a


def _fill(spec) -> np.ndarray:
    e = spec.dtype.bytes
    if spec.oob_fill == "nan":
        if spec.dtype.name == "bf16":
            return np.array([0x7FC0], np.uint16).view(np.uint8)
        return np.array([np.nan], {2: np.float16, 4: np.float32, 8: np.float64}[e]).view(np.uint8)
    return np.zeros(e, np.uint8)


def _shared(mach, instr, t: int, base: int, spec, write: bool, row=None):
    """(space, offsets) of the box's elements in CTA ``row`` (default: thread ``t``'s;
    ``base`` CTA-local), checked."""
    sp = mach.spaces["shared"]
    what = "destination" if write else "source"
    if base % 128:
        mach.fail(instr, f"the shared {what} {base:#x} of a tensor copy must be 128-byte "
                         f"aligned", t)
    addr = _smem_addrs(spec, base).astype(np.uint64)
    ok = sp.in_bounds(addr, spec.dtype.bytes)
    if not ok.all():
        bad = int(addr[np.argmin(ok)])
        mach.fail(instr, f"the {spec.box_bytes}-byte box ({spec.describe()}) at shared "
                         f"{what} {base:#x} reaches byte {bad:#x}, {sp.nearest(bad)}", t)
    off = sp.offsets(addr, np.full(addr.size, mach.cta[t] if row is None else row))
    return sp, off


def _own(mach, instr, threads, a: np.ndarray) -> np.ndarray:
    """The CTA-local shared addresses of a copy's shared::cta operand (refused if one
    names another CTA of the cluster)."""
    a = a & np.uint64(0xFFFFFFFF)
    a[threads] = cluster.shared_rows(mach, instr, threads, a[threads], False)[0]
    return a


def _global(mach, instr, t: int, spec, gaddr: np.ndarray):
    gsp = mach.spaces["global"]
    a = (np.uint64(spec.address) + gaddr.astype(np.uint64))
    ok = gsp.in_bounds(a, spec.dtype.bytes)
    if not ok.all():
        bad = int(a[np.argmin(ok)])
        mach.fail(instr, f"tensor map {spec.describe()} reaches global {bad:#x} "
                         f"({gsp.nearest(bad)})", t)
    return gsp, gsp.offsets(a, None)


def _bytes_at(sp, off: np.ndarray, e: int) -> np.ndarray:
    return sp.buf[off[:, None] + np.arange(e)]


def tensor_copy(mach, instr, mask):
    m = instr.match
    if m.chosen["dst"] == "shared::cta" or "cta_group" in m.chosen:
        mach.fail(instr, "the interpreter does not model Blackwell's collective tensor "
                         "copies (a .shared::cta destination, .cta_group); they run on a GPU")
    load = m.chosen["dst"] == "shared::cluster"
    if m.chosen.get("mode") == "im2col":
        mach.fail(instr, "the interpreter runs .tile mode tensor copies, not .im2col")
    ops = instr.operands
    top = ops[1] if load else ops[0]
    threads = np.flatnonzero(mask)
    maps = addresses(mach, instr, top, mask)
    coords = _coords(mach, instr, top, mask)
    shared_op = ops[0] if load else ops[1]
    sh = addresses(mach, instr, shared_op, mask) & np.uint64(0xFFFFFFFF)
    if load:
        mbar = addresses(mach, instr, ops[2], mask) & np.uint64(0xFFFFFFFF)
        cmask = None
        if m.has("multicast::cluster"):
            cmask = np.broadcast_to(np.asarray(mach.src(instr, 3, mask)).astype(np.int64),
                                    (mach.T,))
    else:
        sh = _own(mach, instr, threads, sh)
    for t in threads.tolist():
        spec = tensormap_spec(mach, instr, t, int(maps[t]))
        if len(coords) != spec.rank:
            mach.fail(instr, f"a {len(coords)}-d tensor copy through a rank-{spec.rank} "
                             f"tensor map ({spec.describe()}): use {spec.rank} coordinates", t)
        origin = [int(c[t]) for c in reversed(coords)]
        gaddr, inside = _box(spec, origin)
        e = spec.dtype.bytes
        if inside.any():
            gsp, goff = _global(mach, instr, t, spec, gaddr[inside])
        if load:   # into the CTA the address names, or every CTA of the multicast mask
            dst, bar, rows = cluster.copy_rows(mach, instr, t, int(sh[t]), int(mbar[t]),
                                               None if cmask is None else int(cmask[t]))
            data = np.broadcast_to(_fill(spec), (spec.box_elements, e)).copy()
            if inside.any():
                track(mach, instr, gsp, np.full(goff.size, t), goff, e, "read")
                data[inside] = _bytes_at(gsp, goff, e)
            boff = cluster.mbar_offset(mach, instr, t, bar)
            dests, bars = [], []
            for row in rows:
                ssp, soff = _shared(mach, instr, t, dst, spec, True, row)
                track_block(mach, instr, ssp, t, soff, e, "write")
                dests.append((ssp, (soff[:, None] + np.arange(e)).reshape(-1), data.reshape(-1)))
                bars.append((boff + row * ssp.row_bytes, spec.box_bytes))
            landing.start(mach, instr, t, dests, bars, mbarrier_complete_tx)
        else:
            ssp, soff = _shared(mach, instr, t, int(sh[t]), spec, load)
            th = np.full(soff.size, t)
            track_block(mach, instr, ssp, t, soff, e, "read")
            if inside.any():
                data = _bytes_at(ssp, soff[inside], e)
                track(mach, instr, gsp, th[inside], goff, e, "write")
                gsp.buf[goff[:, None] + np.arange(e)] = data
                gsp.version += 1
            groups.issued(mach, instr, t, ssp, (soff[:, None] + np.arange(e)).reshape(-1))
    mach.events += 1


# ---------------------------------------------------------------- TMA reductions
# The element types each reduction takes (the tensor map's element type decides).
_REDUCE_TYPES = {
    "add": ("u32", "s32", "u64", "f32", "f16", "bf16"),
    "min": ("u32", "s32", "u64", "s64", "f16", "bf16"),
    "max": ("u32", "s32", "u64", "s64", "f16", "bf16"),
    "inc": ("u32",), "dec": ("u32",),
    "and": ("u32", "s32", "u64", "s64", "b32", "b64"),
    "or": ("u32", "s32", "u64", "s64", "b32", "b64"),
    "xor": ("u32", "s32", "u64", "s64", "b32", "b64"),
}


def tensor_reduce(mach, instr, mask):
    """Combine the shared box into the tensor (elements inside it; the rest clipped) with
    the operation, element by element, as one atomic update per element."""
    op = instr.match.chosen["op"]
    ops = instr.operands
    threads = np.flatnonzero(mask)
    maps = addresses(mach, instr, ops[0], mask)
    coords = _coords(mach, instr, ops[0], mask)
    sh = _own(mach, instr, threads, addresses(mach, instr, ops[1], mask))
    for t in threads.tolist():
        spec = tensormap_spec(mach, instr, t, int(maps[t]))
        if spec.dtype.name not in _REDUCE_TYPES[op]:
            mach.fail(instr, f"a .{op} tensor reduction of .{spec.dtype.name} elements (the "
                             f"tensor map's type): .{op} takes "
                             f"{', '.join('.' + x for x in _REDUCE_TYPES[op])}", t)
        if len(coords) != spec.rank:
            mach.fail(instr, f"a {len(coords)}-d tensor reduction through a rank-{spec.rank} "
                             f"tensor map ({spec.describe()}): use {spec.rank} coordinates", t)
        gaddr, inside = _box(spec, [int(c[t]) for c in reversed(coords)])
        e = spec.dtype.bytes
        ssp, soff = _shared(mach, instr, t, int(sh[t]), spec, False)
        th = np.full(soff.size, t)
        track_block(mach, instr, ssp, t, soff, e, "read")
        if inside.any():
            gsp, goff = _global(mach, instr, t, spec, gaddr[inside])
            track(mach, instr, gsp, th[inside], goff, e, "atomic")
            cur = _bytes_at(gsp, goff, e)
            gsp.buf[goff[:, None] + np.arange(e)] = combine_bytes(
                op, spec.dtype, cur, _bytes_at(ssp, soff[inside], e))
        groups.issued(mach, instr, t, ssp, (soff[:, None] + np.arange(e)).reshape(-1))
    mach.events += 1


HANDLERS = {
    "cp.async.bulk.tensor": tensor_copy,
    "cp.reduce.async.bulk.tensor": tensor_reduce,
}
