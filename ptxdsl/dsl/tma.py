"""``ptx.tma``: tensor-memory-accelerator copies between a tensor (through its tensor
map, ``X.tma_desc()``) and shared memory.

``coords`` are the box's element coordinates, **innermost dimension first** (as PTX
writes ``{c0, c1, ...}``; for a Tile with ``TMA(split=n)`` that is ``{x, row, block}``).
``dst``/``src`` in shared memory are ``.u32`` address registers, shared arrays or
anything with an address; ``mbar`` an mbarrier (:mod:`ptxdsl.dsl.mbarrier`).

===================================  ===============================================
``load(dst, desc, coords, mbar)``    ``cp.async.bulk.tensor.Nd.shared::cluster.global.tile.
                                     mbarrier::complete_tx::bytes [dst], [desc, {c..}],
                                     [mbar]``
``load(..., multicast=mask)``        the same with ``.multicast::cluster`` and the 16-bit
                                     CTA mask as last operand: the box lands at ``dst`` in
                                     every CTA of the mask, each CTA's ``mbar`` completing
``load_cta(dst, desc, coords, mbar,``  ``cp.async.bulk.tensor.Nd.shared::cta.global.tile.
``cta_group=1)``                       mbarrier::complete_tx::bytes.cta_group::{1,2}``
                                     (sm_100a): into this CTA's own shared memory, ``mbar``
                                     maybe the peer CTA's (2-SM ``tcgen05.mma``)
``store(desc, coords, src)``         ``cp.async.bulk.tensor.Nd.global.shared::cta.tile.
                                     bulk_group [desc, {c..}], [src]``
``reduce(desc, coords, src, op)``    ``cp.reduce.async.bulk.tensor.Nd.global.shared::cta.
                                     {op}.tile.bulk_group [desc, {c..}], [src]``: each
                                     element combined with the tensor's (``add``, ...)
``commit()``                         ``cp.async.bulk.commit_group``
``wait(n=0, read=False)``            ``cp.async.bulk.wait_group[.read] n``
===================================  ===============================================

pyptx's spellings, kept as aliases: ``load_3d(dst=, src=, coords=, mbar=)`` (or
``row=, col=`` meaning ``{0, row, col >> 6}``, one ``shr.u32`` for a register
``col``), ``load_3d_multicast(..., mask=, issuer=)`` (``issuer``: a predicate, or a
CTA rank turned into one with ``ptx.cluster.is_rank``), ``store_3d(dst=desc, src=,
row=, col=)``, and ``ptx.cp.async_.bulk.tensor_2d(dst=, src=desc, coord=, mbar=)``
(``.store(dst=desc, src=, coord=)``, ``.shared_cta_global_tile(dst=, src=, coord=,
mbar=, cta_group=)`` for :func:`load_cta`). Every call takes ``pred=``.

``ptx.cp.async_`` also holds Ampere's ``cp.async`` (global -> shared, 4/8/16 bytes):

=====================================  =====================================================
``ptx.cp.async_.cg(dst, src, 16[, n])``  ``cp.async.cg.shared.global [dst], [src], 16[, n]``
                                       (``.ca`` likewise; ``n < 16`` zero-fills the rest)
``ptx.cp.async_.commit_group()``       ``cp.async.commit_group``
``ptx.cp.async_.wait_group(n)``        ``cp.async.wait_group n``
=====================================  =====================================================
"""
from __future__ import annotations

from ..core import ir
from ..core.errors import TraceError, user_location
from ..core.trace import current
from ..core.types import u32
from .cluster import is_rank
from .mbarrier import operand as mbarrier_operand

__all__ = ["load", "load_cta", "store", "reduce", "commit", "wait", "load_3d",
           "load_3d_multicast", "store_3d", "cp"]


def _tensor_operand(desc, coords) -> ir.Addr:
    if hasattr(desc, "tma_desc") and not isinstance(desc, ir.Reg):
        desc = desc.tma_desc()
    if isinstance(desc, str):
        desc = current().symbol(desc)
    if not isinstance(desc, (ir.Reg, ir.Symbol)):
        raise TraceError(f"a TMA copy's tensor map is X.tma_desc() (a .u64 register) or a "
                         f"tensor-map parameter, got {desc!r}", user_location())
    coords = tuple(coords)
    if not 1 <= len(coords) <= 5:
        raise TraceError(f"a TMA box has 1 to 5 coordinates, got {len(coords)}", user_location())
    return ir.Addr(desc, 0, coords)


def _smem(x) -> ir.Addr:
    if isinstance(x, ir.Addr):
        return x
    if hasattr(x, "__ptx_addr__"):
        return x.__ptx_addr__()
    if isinstance(x, ir.Reg):
        return ir.Addr(x)
    if isinstance(x, str):
        return ir.Addr(current().symbol(x))
    raise TraceError(f"expected a shared-memory address (a .u32 register, a shared array), "
                     f"got {x!r}", user_location())


def load(dst, desc, coords, mbar, *, multicast=None, cache_hint=None, pred=None) -> None:
    """TMA load of the box at ``coords`` into ``dst`` (see the module table)."""
    t = _tensor_operand(desc, coords)
    chain = ["cp", "async", "bulk", "tensor", f"{len(t.coords)}d", "shared::cluster", "global",
             "tile", "mbarrier::complete_tx::bytes"]
    ops = [_smem(dst), t, mbarrier_operand(mbar)]
    if multicast is not None:
        chain.append("multicast::cluster")
        ops.append(multicast)
    if cache_hint is not None:
        chain.append("L2::cache_hint")
        ops.append(cache_hint)
    current("ptx.tma.load").inst(chain, tuple(ops), guard=pred)


def load_cta(dst, desc, coords, mbar, *, cta_group: int = 1, pred=None) -> None:
    """Blackwell's TMA load into this CTA's own shared memory (``.shared::cta``), with
    ``cta_group`` 1 or 2: with 2, ``mbar`` may be the peer CTA's barrier (a
    ``.shared::cluster`` address, e.g. from ``ptx.cluster.map_shared_u32``), so one
    barrier counts both CTAs' bytes of a 2-SM ``tcgen05.mma`` (sm_100a only)."""
    if cta_group not in (1, 2):
        raise TraceError(f"cta_group is 1 or 2, got {cta_group!r}", user_location())
    t = _tensor_operand(desc, coords)
    chain = ["cp", "async", "bulk", "tensor", f"{len(t.coords)}d", "shared::cta", "global",
             "tile", "mbarrier::complete_tx::bytes", f"cta_group::{cta_group}"]
    current("ptx.tma.load_cta").inst(chain, (_smem(dst), t, mbarrier_operand(mbar)),
                                     guard=pred)


def store(desc, coords, src, *, cache_hint=None, pred=None) -> None:
    """TMA store of the shared box at ``src`` to the tensor at ``coords`` (a bulk group:
    :func:`commit`, then :func:`wait` before reusing ``src``)."""
    t = _tensor_operand(desc, coords)
    chain = ["cp", "async", "bulk", "tensor", f"{len(t.coords)}d", "global", "shared::cta",
             "tile", "bulk_group"]
    ops = [t, _smem(src)]
    if cache_hint is not None:
        chain.append("L2::cache_hint")
        ops.append(cache_hint)
    current("ptx.tma.store").inst(chain, tuple(ops), guard=pred)


def commit(*, pred=None) -> None:
    """``cp.async.bulk.commit_group``."""
    current("ptx.tma.commit").inst(["cp", "async", "bulk", "commit_group"], (), guard=pred)


def wait(n: int = 0, *, read: bool = False, pred=None) -> None:
    """``cp.async.bulk.wait_group[.read] n``."""
    chain = ["cp", "async", "bulk", "wait_group"] + (["read"] if read else [])
    current("ptx.tma.wait").inst(chain, (n,), guard=pred)


# ---------------------------------------------------------------- pyptx's spellings
def _coords_3d(row, col, coords, what):
    if coords is not None:
        return tuple(coords)
    if row is None or col is None:
        raise TraceError(f"ptx.tma.{what} takes coords=(...) or row= and col=", user_location())
    if isinstance(col, int):
        return (0, row, col // 64)
    b = current(f"ptx.tma.{what}")
    c = b.new_reg(u32)
    b.inst(["shr", "u32"], (c, col, 6))
    return (0, row, c)


def load_3d(dst, src, row=None, col=None, mbar=None, coords=None, *, pred=None) -> None:
    """pyptx's rank-3 load: :func:`load` with ``desc=src`` and ``coords`` (or
    ``{0, row, col >> 6}``)."""
    load(dst, src, _coords_3d(row, col, coords, "load_3d"), mbar, pred=pred)


def load_3d_multicast(dst, src, row=None, col=None, mbar=None, mask=None, coords=None, *,
                      issuer=None, pred=None) -> None:
    """pyptx's rank-3 multicast load: :func:`load` with ``multicast=mask``, issued where
    ``issuer`` (a predicate, or a CTA rank) holds."""
    if issuer is not None:
        if pred is not None:
            raise TraceError("ptx.tma.load_3d_multicast takes issuer= or pred=, not both",
                             user_location())
        if isinstance(issuer, int) and not isinstance(issuer, bool):
            issuer = is_rank(issuer)
        pred = issuer
    if mask is None:
        raise TraceError("ptx.tma.load_3d_multicast needs mask= (the CTAs that receive the "
                         "box)", user_location())
    load(dst, src, _coords_3d(row, col, coords, "load_3d_multicast"), mbar, multicast=mask,
         pred=pred)


def reduce(desc, coords, src, op: str = "add", *, cache_hint=None, pred=None) -> None:
    """TMA reduction of the shared box at ``src`` into the tensor at ``coords`` (each
    element combined with the tensor's by ``op`` as one atomic update; a bulk group like
    :func:`store`)."""
    t = _tensor_operand(desc, coords)
    chain = ["cp", "reduce", "async", "bulk", "tensor", f"{len(t.coords)}d", "global",
             "shared::cta", op, "tile", "bulk_group"]
    ops = [t, _smem(src)]
    if cache_hint is not None:
        chain.append("L2::cache_hint")
        ops.append(cache_hint)
    current("ptx.tma.reduce").inst(chain, tuple(ops), guard=pred)


def store_3d(dst, src, row=None, col=None, coords=None, *, pred=None) -> None:
    """pyptx's rank-3 store: :func:`store` of shared ``src`` to tensor map ``dst``."""
    store(dst, _coords_3d(row, col, coords, "store_3d"), src, pred=pred)


class _TensorOp:
    """``ptx.cp.async_.bulk.tensor_Nd(dst=, src=, coord=, mbar=)``: pyptx's TMA load (and
    ``.store(dst=, src=, coord=)``)."""

    def __init__(self, n: int):
        self.n = n

    def _check(self, coord):
        if coord is None or len(tuple(coord)) != self.n:
            raise TraceError(f"cp.async.bulk.tensor_{self.n}d takes coord= with {self.n} "
                             f"values", user_location())
        return tuple(coord)

    def __call__(self, *, dst, src, coord=None, mbar=None, multicast_mask=None, pred=None,
                 cta_group: int = 1):
        if cta_group != 1:
            raise TraceError("cta_group=2 is a Blackwell (sm_100) form", user_location())
        load(dst, src, self._check(coord), mbar, multicast=multicast_mask, pred=pred)

    def store(self, *, dst, src, coord=None, pred=None):
        store(dst, self._check(coord), src, pred=pred)

    def shared_cta_global_tile(self, *, dst, src, coord=None, mbar=None, cta_group: int = 1,
                               pred=None):
        """pyptx's collective load: :func:`load_cta` (sm_100a)."""
        load_cta(dst, src, self._check(coord), mbar, cta_group=cta_group, pred=pred)


def _tile(n: int):
    def tile(dst, src, coord, *, mbar=None, cache_hint=None, multicast_mask=None,
             cta_group: int = 1, pred=None) -> None:
        if cta_group != 1:
            raise TraceError("cta_group=2 is a Blackwell (sm_100) form", user_location())
        load(dst, src, _TensorOp(n)._check(coord), mbar, multicast=multicast_mask,
             cache_hint=cache_hint, pred=pred)
    tile.__name__ = tile.__qualname__ = f"tile_{n}d"
    tile.__doc__ = (f"TMA load of a {n}-D box: shared ``dst``, tensor map ``src``, ``coord`` "
                    f"({n} values, innermost first), ``mbar=`` (see :func:`load`).")
    return staticmethod(tile)


def _store(n: int):
    def store_nd(dst, src, coord, *, cache_hint=None, pred=None) -> None:
        store(dst, _TensorOp(n)._check(coord), src, cache_hint=cache_hint, pred=pred)
    store_nd.__name__ = store_nd.__qualname__ = f"store_{n}d"
    store_nd.__doc__ = (f"TMA store of a {n}-D box: tensor map ``dst``, shared ``src``, "
                        f"``coord`` ({n} values, innermost first; see :func:`store`).")
    return staticmethod(store_nd)


class _Tensor:
    """``ptx.cp.async_.bulk.tensor.tile_Nd(dst, src, coord, mbar=)`` (load: ``dst`` in shared
    memory, ``src`` the tensor map) and ``.store_Nd(dst, src, coord)`` (``dst`` the tensor
    map, ``src`` in shared memory), N = 1..5: pyptx's typed TMA wrappers over
    :func:`load` / :func:`store`."""

    tile_1d, tile_2d, tile_3d, tile_4d, tile_5d = (_tile(n) for n in range(1, 6))
    store_1d, store_2d, store_3d, store_4d, store_5d = (_store(n) for n in range(1, 6))


class _Bulk:
    tensor_1d, tensor_2d, tensor_3d, tensor_4d, tensor_5d = (_TensorOp(n) for n in range(1, 6))
    tensor = _Tensor()

    @staticmethod
    def commit_group(*, pred=None):
        commit(pred=pred)

    @staticmethod
    def wait_group(n: int = 0, *, read: bool = False, pred=None):
        wait(n, read=read, pred=pred)


class async_copy:
    """Ampere ``cp.async`` (global -> shared, 4/8/16 bytes), as ``ptx.cp.async_.*``."""

    @staticmethod
    def cg(dst, src, size: int = 16, src_size=None, *, pred=None) -> None:
        """``cp.async.cg.shared.global [dst], [src], size[, src_size]`` (16 bytes, L2 only)."""
        args = (dst, src, size) if src_size is None else (dst, src, size, src_size)
        current("ptx.cp.async_.cg").inst(["cp", "async", "cg", "shared", "global"], args,
                                         guard=pred)

    @staticmethod
    def ca(dst, src, size: int = 16, src_size=None, *, pred=None) -> None:
        """``cp.async.ca.shared.global [dst], [src], size[, src_size]`` (4, 8 or 16 bytes)."""
        args = (dst, src, size) if src_size is None else (dst, src, size, src_size)
        current("ptx.cp.async_.ca").inst(["cp", "async", "ca", "shared", "global"], args,
                                         guard=pred)

    @staticmethod
    def commit_group(*, pred=None) -> None:
        """``cp.async.commit_group``."""
        current("ptx.cp.async_.commit_group").inst(["cp", "async", "commit_group"], (),
                                                   guard=pred)

    @staticmethod
    def wait_group(n: int = 0, *, pred=None) -> None:
        """``cp.async.wait_group n``."""
        current("ptx.cp.async_.wait_group").inst(["cp", "async", "wait_group"], (n,),
                                                 guard=pred)

    @staticmethod
    def wait_all(*, pred=None) -> None:
        """``cp.async.wait_all``."""
        current("ptx.cp.async_.wait_all").inst(["cp", "async", "wait_all"], (), guard=pred)


class _Async(async_copy):
    """``ptx.cp.async_``: Ampere's ``cg``/``ca``/``commit_group``/``wait_group`` (from
    above) and the bulk (TMA) forms under ``.bulk``."""

    bulk = _Bulk()


class _Cp:
    """pyptx's ``ptx.cp`` namespace (cp.async and TMA forms; ``ptx.inst.cp...`` spells any)."""

    async_ = _Async()
    async_bulk = _Async.bulk  # pyptx's shorthand for async_.bulk


cp = _Cp()
