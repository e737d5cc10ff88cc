"""Tensor maps: what the tensor memory accelerator (TMA) is told about a global tensor.

Two objects, both plain data:

* :class:`TMA` lives on a :class:`~ptxdsl.core.specs.Tile` (``Tile("M", "K", bf16,
  tma=TMA(box=(128, 64), swizzle=128))``) and says how the kernel reads or writes that
  argument through TMA: the box (the tile one ``cp.async.bulk.tensor`` moves), the
  shared-memory swizzle, and the optional reshapes below. It does not know the tensor.
* :class:`TensorMapSpec` is one concrete tensor map: element type, global shape and
  byte strides, box, element strides, swizzle, interleave, L2 promotion and
  out-of-bounds fill, plus the global address. ``TMA.spec_for(...)`` makes one from a
  tensor's shape and strides at launch time. The runtime encodes it into the 128-byte
  ``CUtensorMap`` with the driver's ``cuTensorMapEncodeTiled`` (see
  :mod:`ptxdsl.runtime.tensormaps`), and the CPU interpreter reads its fields directly
  (no driver).

Axis order everywhere here is numpy's: **outermost first** (``shape[-1]`` is the
contiguous dimension). The driver and the PTX coordinate list ``{c0, c1, ...}`` count
from the innermost dimension; :meth:`TensorMapSpec.encode_args` reverses, and
``coordinates`` in a kernel are written innermost first, as PTX writes them.

Reshapes a :class:`TMA` can ask for (both used by Hopper GEMMs):

* ``split=n``: the innermost dimension ``W`` is viewed as ``W/n`` blocks of ``n``
  elements, the block index becoming the new *outermost* dimension: a ``(H, W)``
  tensor gets the rank-3 map ``(W/n, H, n)`` with strides ``(n*e, row, e)``. A box
  ``(bh, bw)`` becomes ``(bw/n, bh, n)``: a box wider than one swizzle span (128 bytes)
  arrives as ``bw/n`` swizzled ``bh x n`` panels, one after the other in shared memory.
  Kernel coordinates are ``{x in 0..n-1, row, block}``.
* ``pad=p`` (with ``split``): the box's innermost extent is ``n + p``. Loads fill the
  extra ``p`` columns out of bounds (zeros); stores from a shared tile whose rows are
  ``n + p`` elements apart write only the ``n`` in-bounds ones. This is how a store
  epilogue reads a shared tile padded against bank conflicts.

pyptx spells these ``Tile(..., Layout.TMA_128B, tma_box=(BM, BK), tma_rank=3,
tma_padding=True)``; :mod:`ptxdsl.specs` translates that spelling to ``TMA(box=(BM, BK),
swizzle=128, split=64, pad=8)``.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

from .errors import TraceError, user_location
from .types import PtxType

__all__ = ["TMA", "TensorMapSpec", "SWIZZLES", "tma_dtype_name"]

SWIZZLES = (0, 32, 64, 128)
INTERLEAVES = (0, 16, 32)
L2_PROMOTIONS = (0, 64, 128, 256)
OOB_FILLS = ("zero", "nan")

# Element types a tensor map can describe, by ptxdsl type name -> the driver's
# CU_TENSOR_MAP_DATA_TYPE_* suffix.
_DATA_TYPES = {
    "u8": "UINT8", "s8": "UINT8", "b8": "UINT8", "e4m3": "UINT8", "e5m2": "UINT8",
    "u16": "UINT16", "s16": "UINT16", "b16": "UINT16",
    "u32": "UINT32", "b32": "UINT32", "s32": "INT32",
    "u64": "UINT64", "b64": "UINT64", "s64": "INT64",
    "f16": "FLOAT16", "f32": "FLOAT32", "f64": "FLOAT64", "bf16": "BFLOAT16",
    "tf32": "TFLOAT32",
}


def tma_dtype_name(dtype: PtxType) -> str:
    """The driver's ``CU_TENSOR_MAP_DATA_TYPE_<name>`` for ``dtype``."""
    try:
        return _DATA_TYPES[dtype.name]
    except KeyError:
        raise TraceError(f"a tensor map cannot describe .{dtype.name} elements; TMA moves "
                         f"{', '.join(sorted(_DATA_TYPES))}", user_location()) from None


class TensorMapError(TraceError):
    """A tensor map the hardware cannot encode (the message says which rule)."""


@dataclass(frozen=True)
class TensorMapSpec:
    """One concrete tensor map (numpy axis order: outermost first).

    ``strides`` are in bytes, one per dimension; the innermost must be the element
    size (TMA reads the innermost dimension contiguously; ``element_strides`` skip
    elements inside the box instead). ``box`` is the number of elements one TMA
    operation moves along each dimension; ``element_strides`` the traversal step.
    ``swizzle`` is the shared-memory swizzle span in bytes (0, 32, 64, 128),
    ``interleave`` 0/16/32 bytes, ``l2_promotion`` 0/64/128/256 bytes, ``oob_fill``
    ``"zero"`` or ``"nan"`` (NaN for floats, the driver's NAN_REQUEST_ZERO_FMA).
    """

    dtype: PtxType
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    box: tuple[int, ...]
    element_strides: tuple[int, ...] = ()
    swizzle: int = 0
    interleave: int = 0
    l2_promotion: int = 0
    oob_fill: str = "zero"
    address: int = 0

    def __post_init__(self):
        if not self.element_strides:
            object.__setattr__(self, "element_strides", (1,) * len(self.shape))
        self.validate()

    # ------------------------------------------------------------------ derived
    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def key(self) -> tuple:
        """Everything the encoded map depends on except the global address: the cache key."""
        return (self.dtype.name, self.shape, self.strides, self.box, self.element_strides,
                self.swizzle, self.interleave, self.l2_promotion, self.oob_fill)

    @property
    def box_elements(self) -> int:
        """Elements one TMA operation moves (``ceil(box / element_stride)`` per axis)."""
        n = 1
        for b, e in zip(self.box, self.element_strides):
            n *= -(-b // e)
        return n

    @property
    def box_bytes(self) -> int:
        """Bytes one TMA load brings into shared memory: what ``expect_tx`` counts
        (out-of-bounds elements are filled and count too)."""
        return self.box_elements * self.dtype.bytes

    @property
    def smem_row_bytes(self) -> int:
        """Bytes one innermost box row takes in shared memory: its elements, padded up to
        the swizzle span when narrower. Measured on an H100 (tests/gpu/
        test_tma_interp_gpu.py): a 16-byte row of a 32-byte-swizzled box lands at a
        32-byte pitch, the rest of the span untouched; ``expect_tx`` still counts
        :attr:`box_bytes`."""
        inner = -(-self.box[-1] // self.element_strides[-1]) * self.dtype.bytes
        return max(inner, self.swizzle)

    @property
    def smem_bytes(self) -> int:
        """The box's footprint in shared memory (rows at :attr:`smem_row_bytes`)."""
        inner = -(-self.box[-1] // self.element_strides[-1])
        return self.box_elements // inner * self.smem_row_bytes

    def with_address(self, address: int) -> "TensorMapSpec":
        return replace(self, address=int(address))

    # ------------------------------------------------------------------ rules
    def validate(self) -> None:
        """The encoding rules of ``cuTensorMapEncodeTiled``, checked before the driver is
        asked, so the error says which one failed."""
        def bad(text):
            raise TensorMapError(f"tensor map {self.describe()}: {text}", user_location())

        r = len(self.shape)
        e = self.dtype.bytes
        tma_dtype_name(self.dtype)
        if not 1 <= r <= 5:
            bad(f"rank {r}; TMA maps have 1 to 5 dimensions")
        for name, t in (("strides", self.strides), ("box", self.box),
                        ("element_strides", self.element_strides)):
            if len(t) != r:
                bad(f"{name} has {len(t)} entries for {r} dimensions")
        if any(not isinstance(d, int) or d < 1 or d > 2 ** 32 for d in self.shape):
            bad("every dimension must be 1 to 2**32 elements")
        if self.swizzle not in SWIZZLES:
            bad(f"swizzle={self.swizzle!r}; use one of {SWIZZLES} (bytes)")
        if self.interleave not in INTERLEAVES:
            bad(f"interleave={self.interleave!r}; use one of {INTERLEAVES} (bytes)")
        if self.l2_promotion not in L2_PROMOTIONS:
            bad(f"l2_promotion={self.l2_promotion!r}; use one of {L2_PROMOTIONS} (bytes)")
        if self.oob_fill not in OOB_FILLS:
            bad(f"oob_fill={self.oob_fill!r}; use 'zero' or 'nan'")
        if self.oob_fill == "nan" and not self.dtype.is_float:
            bad("oob_fill='nan' needs a floating-point element type")
        if self.strides[-1] != e:
            bad(f"the innermost stride is {self.strides[-1]} bytes; TMA reads the innermost "
                f"dimension contiguously ({e} bytes per element): use element_strides to skip")
        for s in self.strides[:-1]:
            if s % 16 or not 0 < s < 2 ** 40:
                bad(f"stride {s} bytes: every stride but the innermost must be a positive "
                    f"multiple of 16 bytes below 2**40 (pad the rows)")
        if self.address % (32 if self.interleave == 32 else 16):
            bad(f"global address {self.address:#x} is not "
                f"{32 if self.interleave == 32 else 16}-byte aligned")
        for b in self.box:
            if not isinstance(b, int) or not 1 <= b <= 256:
                bad(f"box {self.box}: each box extent must be 1 to 256 elements")
        for s in self.element_strides:
            if not isinstance(s, int) or not 1 <= s <= 8:
                bad(f"element_strides {self.element_strides}: each must be 1 to 8")
        inner = self.box[-1] * e
        if self.interleave == 0:
            if inner % 16:
                bad(f"the box's innermost extent is {inner} bytes; it must be a multiple of "
                    f"16 bytes")
            if self.swizzle and inner > self.swizzle:
                bad(f"the box's innermost extent is {inner} bytes, wider than the "
                    f"{self.swizzle}-byte swizzle span: use a narrower box, or split the "
                    f"inner dimension (TMA(..., split={self.swizzle // e}))")
        elif self.interleave == 32 and self.swizzle != 32:
            bad("interleave=32 needs swizzle=32")

    def describe(self) -> str:
        return (f"{self.dtype.name}{list(self.shape)} box {list(self.box)}"
                + (f" swizzle {self.swizzle}B" if self.swizzle else ""))

    # ------------------------------------------------------------------ the driver
    def encode_args(self, cu) -> tuple:
        """The arguments of ``cu.cuTensorMapEncodeTiled`` (innermost first), for the
        ``cuda.bindings.driver`` module ``cu`` (or a fake with the same names)."""
        dt = getattr(cu.CUtensorMapDataType, f"CU_TENSOR_MAP_DATA_TYPE_{tma_dtype_name(self.dtype)}")
        u64, u32 = cu.cuuint64_t, cu.cuuint32_t
        swz = {0: "NONE", 32: "32B", 64: "64B", 128: "128B"}[self.swizzle]
        ilv = {0: "NONE", 16: "16B", 32: "32B"}[self.interleave]
        l2 = {0: "NONE", 64: "L2_64B", 128: "L2_128B", 256: "L2_256B"}[self.l2_promotion]
        oob = "NONE" if self.oob_fill == "zero" else "NAN_REQUEST_ZERO_FMA"
        return (dt, self.rank, self.address,
                [u64(d) for d in reversed(self.shape)],
                [u64(s) for s in reversed(self.strides[:-1])],
                [u32(b) for b in reversed(self.box)],
                [u32(s) for s in reversed(self.element_strides)],
                getattr(cu.CUtensorMapInterleave, f"CU_TENSOR_MAP_INTERLEAVE_{ilv}"),
                getattr(cu.CUtensorMapSwizzle, f"CU_TENSOR_MAP_SWIZZLE_{swz}"),
                getattr(cu.CUtensorMapL2promotion, f"CU_TENSOR_MAP_L2_PROMOTION_{l2}"),
                getattr(cu.CUtensorMapFloatOOBfill, f"CU_TENSOR_MAP_FLOAT_OOB_FILL_{oob}"))


def _unused_strides(shape: tuple, bstrides: tuple) -> tuple:
    """Byte strides with those of extent-1 dims (but the innermost) made legal for TMA: no
    coordinate ever steps along such a dim, so its stride (a (1, K) view's may be 2 bytes)
    is replaced by the inner dims' span rounded up to 16 bytes."""
    out = list(bstrides)
    for i in range(len(shape) - 2, -1, -1):
        if shape[i] == 1:
            span = max(shape[j] * out[j] for j in range(i + 1, len(shape)))
            out[i] = max(16, -(-span // 16) * 16)
    return tuple(out)


@dataclass(frozen=True)
class TMA:
    """How a Tile's tensor is moved by TMA (see the module docstring).

    ``box``: elements per box along each of the tensor's dims (outermost first); an
    entry may be an int, a dim name of the kernel's specs (resolved at launch) or None
    (the tensor's whole extent). ``clamp=True`` shrinks box extents larger than the
    tensor to the tensor (otherwise the out-of-bounds part is filled on loads).
    ``strided=True``: the kernel reads the tensor only through this map, which encodes
    every stride, so the GPU launcher takes any strides with a unit last one (not only
    contiguous tensors).
    """

    box: tuple = ()
    swizzle: int = 0
    split: int | None = None
    pad: int = 0
    element_strides: tuple[int, ...] = ()
    interleave: int = 0
    l2_promotion: int = 0
    oob_fill: str = "zero"
    clamp: bool = False
    strided: bool = False

    def __post_init__(self):
        box = self.box
        if isinstance(box, (int, str)) or box is None:
            box = (box,)
        object.__setattr__(self, "box", tuple(box))
        loc = user_location()
        for b in self.box:
            if not (b is None or isinstance(b, str) and b.isidentifier()
                    or isinstance(b, int) and not isinstance(b, bool) and b > 0):
                raise TraceError(f"TMA box entries are positive ints, dim names or None, got "
                                 f"{b!r}", loc)
        if self.swizzle not in SWIZZLES:
            raise TraceError(f"TMA swizzle={self.swizzle!r}: use one of {SWIZZLES} (bytes)", loc)
        if self.split is not None and (not isinstance(self.split, int) or self.split < 1):
            raise TraceError(f"TMA split={self.split!r}: a positive number of elements", loc)
        if self.pad and self.split is None:
            raise TraceError("TMA pad= widens the split inner box; it needs split=", loc)
        if not isinstance(self.pad, int) or self.pad < 0:
            raise TraceError(f"TMA pad={self.pad!r}: a non-negative number of elements", loc)

    @property
    def rank_extra(self) -> int:
        """Dimensions the map has beyond the tensor's (1 with ``split``)."""
        return 1 if self.split else 0

    def spec_for(self, dtype: PtxType, shape: Sequence[int], strides: Sequence[int] | None = None,
                 *, dims: dict | None = None, address: int = 0) -> TensorMapSpec:
        """The tensor map of a tensor of ``shape`` (and element ``strides``, numpy order;
        None: contiguous) with these TMA settings. ``dims`` resolves named box extents."""
        shape = tuple(int(d) for d in shape)
        e = dtype.bytes
        if strides is None:
            strides, acc = [], 1
            for d in reversed(shape):
                strides.append(acc)
                acc *= d
            strides = tuple(reversed(strides))
        bstrides = _unused_strides(shape, tuple(int(s) * e for s in strides))
        box = self._resolve_box(shape, dims or {})
        el = tuple(self.element_strides) or (1,) * len(shape)
        if len(el) != len(shape):
            raise TensorMapError(f"TMA element_strides {el} has {len(el)} entries for a "
                                 f"{len(shape)}-d tensor", user_location())
        if self.split:
            n = self.split
            if shape[-1] % n or box[-1] % n:
                raise TensorMapError(
                    f"TMA split={n}: the tensor's innermost dim ({shape[-1]}) and the box's "
                    f"({box[-1]}) must be multiples of {n}", user_location())
            shape = (shape[-1] // n,) + shape[:-1] + (n,)
            bstrides = (n * e,) + bstrides[:-1] + (e,)
            box = (box[-1] // n,) + box[:-1] + (n + self.pad,)
            el = (1,) + el
        return TensorMapSpec(dtype, shape, bstrides, box, el, self.swizzle, self.interleave,
                             self.l2_promotion, self.oob_fill, int(address))

    def _resolve_box(self, shape: tuple[int, ...], dims: dict) -> tuple[int, ...]:
        box = self.box or (None,) * len(shape)
        if len(box) != len(shape):
            raise TensorMapError(f"TMA box {box} has {len(box)} entries for a {len(shape)}-d "
                                 f"tensor", user_location())
        out = []
        for b, d in zip(box, shape):
            if b is None:
                b = d
            elif isinstance(b, str):
                if b not in dims:
                    raise TensorMapError(f"TMA box names dim {b!r}, which no argument fixes "
                                         f"(known: {', '.join(sorted(dims)) or 'none'})",
                                         user_location())
                b = dims[b]
            out.append(min(b, d) if self.clamp else b)
        return tuple(out)

    def static_box_bytes(self, dtype: PtxType) -> int | None:
        """Bytes one box moves when every box extent is a Python int (None otherwise):
        what a kernel passes to ``expect_tx``."""
        if not self.box or any(not isinstance(b, int) for b in self.box) or self.clamp:
            return None
        n = 1
        box = list(self.box)
        if self.split:
            box[-1] = box[-1] // self.split * (self.split + self.pad)
        for b in box:
            n *= b
        return n * dtype.bytes
