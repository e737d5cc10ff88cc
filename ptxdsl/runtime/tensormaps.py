"""Tensor-map kernel parameters: encoded once per shape, re-pointed per call.

A kernel whose body called ``X.tma_desc()`` has a parameter
``.param .align 64 .b8 X_tmap[128]`` (kind ``"tmap"``): the 128-byte ``CUtensorMap``
of argument ``X``, passed by value as a grid constant. For each call the runtime

1. makes the :class:`~ptxdsl.core.tensormap.TensorMapSpec` from the Tile's ``tma=`` and the
   argument's shape and strides (:meth:`TensorMapParams.specs`);
2. looks its encoding up in a :class:`TensorMapCache`, keyed by everything the map
   depends on except the global address (dtype, shape, strides, box, element strides,
   swizzle, interleave, L2 promotion, OOB fill); on a miss it calls the driver's
   ``cuTensorMapEncodeTiled`` and keeps the 128 bytes;
3. copies those bytes into the parameter buffer and **re-points** them at the
   argument's address with ``cuTensorMapReplaceAddress`` on the buffer itself (no
   re-encoding).

The fast path does only step 3's re-pointing: its entry is made for one argument
signature (shapes and strides), so the bytes already in the entry's buffer are right
but for the address. Where the driver stores that address as a plain little-endian
64-bit field (:meth:`TensorMapParams.address_offset` finds out once per kernel by
encoding one map at three addresses and comparing the 128 bytes), a bound launch
(:func:`ptxdsl.runtime.fastpath.bind`) writes it there with ``struct.pack_into``
instead of calling ``cuTensorMapReplaceAddress``.
"""
from __future__ import annotations

import ctypes
import struct
from collections import OrderedDict

from ..core.errors import LaunchError, user_location
from ..core.tensormap import TensorMapError, TensorMapSpec

__all__ = ["TensorMapCache", "TensorMapParams", "TMAP_BYTES"]

TMAP_BYTES = 128


class TensorMapCache:
    """Encoded tensor maps by ``TensorMapSpec.key``: a bounded LRU (``capacity`` maps).

    ``hits`` / ``misses`` / ``encodes`` count lookups, for tests and the curious.
    """

    def __init__(self, drv, capacity: int = 256):
        if capacity < 1:
            raise ValueError("TensorMapCache capacity must be >= 1")
        self.drv = drv
        self.capacity = capacity
        self._maps: OrderedDict = OrderedDict()
        self.hits = self.misses = self.encodes = 0

    def __len__(self) -> int:
        return len(self._maps)

    def clear(self) -> None:
        self._maps.clear()

    def get(self, spec: TensorMapSpec) -> bytes:
        """The 128 encoded bytes of ``spec`` (pointing at ``spec.address`` only if this
        lookup encoded it: re-point before use)."""
        key = spec.key
        hit = self._maps.get(key)
        if hit is not None:
            self.hits += 1
            self._maps.move_to_end(key)
            return hit
        self.misses += 1
        blob = encode(self.drv, spec)
        self._maps[key] = blob
        if len(self._maps) > self.capacity:
            self._maps.popitem(last=False)
        return blob


def encode(drv, spec: TensorMapSpec) -> bytes:
    """``cuTensorMapEncodeTiled`` of ``spec``: the 128 bytes of the ``CUtensorMap``."""
    cu = drv.cu
    fn = getattr(cu, "cuTensorMapEncodeTiled", None)
    if fn is None:
        raise LaunchError("this cuda.bindings has no cuTensorMapEncodeTiled (TMA needs CUDA 12 "
                          "or newer)", user_location())
    result = fn(*spec.encode_args(cu))
    if result[0]:
        raise LaunchError(f"cuTensorMapEncodeTiled refused the tensor map {spec.describe()} "
                          f"(strides {spec.strides} bytes, element strides "
                          f"{spec.element_strides}): {drv.error_name(result[0])}: "
                          f"{drv.error_string(result[0])}", user_location())
    return ctypes.string_at(int(result[1].getPtr()), TMAP_BYTES)


class TensorMapParams:
    """The tensor-map parameters of one kernel (see the module docstring)."""

    def __init__(self, drv, sig, params, capacity: int = 256):
        self.drv = drv
        self.sig = sig
        # (position in params, argument index, TMA settings, element type)
        self.slots: list[tuple[int, int, object, object]] = []
        for k, p in enumerate(params):
            if p.kind != "tmap":
                continue
            try:
                i = sig.arg_names.index(p.tensor)
            except ValueError:
                raise LaunchError(f"kernel {sig.name}: tensor-map parameter {p.name} names "
                                  f"no argument") from None
            self.slots.append((k, i, p.tma, sig.specs[i].dtype))
        self.cache = TensorMapCache(drv, capacity)
        self._replace = getattr(drv.cu, "cuTensorMapReplaceAddress", None)
        self._wrap = getattr(drv.cu, "CUtensorMap", None)
        self._address_offset: int | None | bool = False     # False: not asked yet

    def __bool__(self) -> bool:
        return bool(self.slots)

    @property
    def args(self) -> tuple[int, ...]:
        """The argument index each tensor-map parameter describes, in parameter order."""
        return tuple(i for _, i, _, _ in self.slots)

    def specs(self, views, dims: dict) -> list[TensorMapSpec]:
        """The concrete tensor map of each slot for these argument views."""
        out = []
        for _, i, tma, dtype in self.slots:
            v = views[i]
            try:
                out.append(tma.spec_for(dtype, v.shape, v.strides, dims=dims, address=v.ptr))
            except TensorMapError as exc:
                raise LaunchError(f"{self.sig.describe_call()}: the tensor map of "
                                  f"{self.sig.arg_names[i]} (shape {tuple(v.shape)}): "
                                  f"{exc.message}", user_location()) from None
        return out

    def values(self, views, dims: dict) -> dict[int, bytes]:
        """Parameter position -> the encoded 128 bytes (not yet re-pointed)."""
        return {k: self.cache.get(spec)
                for (k, _, _, _), spec in zip(self.slots, self.specs(views, dims))}

    def handles(self, slot_addrs) -> tuple:
        """``CUtensorMap`` objects over the given parameter-buffer slots, for
        :meth:`repoint_handle` (the fast path makes them once per entry)."""
        return tuple(self._wrap(_ptr=a) for a in slot_addrs)

    def repoint_handle(self, handle, ptr: int) -> int:
        """Point an encoded map at ``ptr``; returns the CUresult (0: done)."""
        return int(self._replace(handle, ptr)[0])

    def address_offset(self) -> int | None:
        """Where an encoded map keeps its global address, if the driver stores it as a
        plain little-endian u64: the byte offset, or None (then only
        ``cuTensorMapReplaceAddress`` re-points). Found once per kernel: the first slot's
        map is encoded at three addresses (different alignments, high and low) and must
        differ only in those 8 bytes, which must hold each address."""
        if self._address_offset is not False:
            return self._address_offset
        found = None
        if self.slots:
            from ..core.types import bf16
            from ..core.tensormap import TMA
            spec = TMA(box=(8, 64), swizzle=128).spec_for(bf16, (64, 64))
            addrs = (0x7F00_0000_1230, 0x10_0000_0000, 0x2468_ACE0)
            try:
                blobs = [encode(self.drv, spec.with_address(a)) for a in addrs]
            except Exception:  # noqa: BLE001 - no answer: re-point through the driver
                blobs = None
            if blobs:
                for off in range(0, TMAP_BYTES - 7, 8):
                    if all(b[off:off + 8] == a.to_bytes(8, "little")
                           and b[:off] == blobs[0][:off] and b[off + 8:] == blobs[0][off + 8:]
                           for a, b in zip(addrs, blobs)):
                        found = off
                        break
        self._address_offset = found
        return found

    PACK_ADDRESS = staticmethod(struct.Struct("<Q").pack_into)

    def repoint(self, slot_addrs, ptrs) -> None:
        """Re-point the maps in parameter-buffer ``slot_addrs`` at their arguments'
        addresses (``ptrs``: every argument's pointer); raises on failure."""
        for a, (_, i, _, _) in zip(slot_addrs, self.slots):
            code = self.repoint_handle(self._wrap(_ptr=a), ptrs[i])
            if code:
                raise self.drv.error(code, "cuTensorMapReplaceAddress",
                                     f"the tensor map of {self.sig.arg_names[i]} at "
                                     f"{ptrs[i]:#x} (TMA needs 16-byte aligned tensors)")
