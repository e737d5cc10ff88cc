"""What an 8-bit float product needs beyond a 16-bit one: its dtypes, its scales, its layout.

``matmul(a, b, scale_a=..., scale_b=...)`` with ``float8_e4m3fn`` / ``float8_e5m2``
operands (any mix, as wgmma takes them) computes ``act(scale_a * scale_b * (a @ b) +
bias)`` with f32 accumulation, as ``torch._scaled_mm`` does with per-tensor scales:

* the scales (float32, :func:`scale_args` tells the mode from their shapes, as
  ``torch._scaled_mm`` does):

  - **per tensor**: None (1), a Python number, or a one-element array of the call's
    framework and device (what quantisation code keeps on the GPU; a number becomes such
    an array per call, so repeated calls should pass arrays);
  - **row-wise**: ``scale_a`` ``(M, 1)`` and ``scale_b`` ``(1, N)``, applied in the
    epilogue: ``C[i, j] = act(scale_a[i] * scale_b[j] * (a @ b)[i, j] + bias[j])``;
  - **block-wise** (DeepGEMM's recipe): ``scale_a`` ``(M, ceil(K/128))``, one per 1 x 128
    of ``a``, and ``scale_b`` ``(ceil(K/128), ceil(N/128))``, one per 128 x 128 of ``b``:
    ``C[i, j] = act(sum_kb scale_a[i, kb] * scale_b[kb, j // 128] * P_kb[i, j] + bias[j])``
    with ``P_kb`` the f32 product of K block ``kb``. The kernels keep ``scale_a`` as its
    ``(ceil(K/128), M)`` transpose (a column-major ``scale_a``, ``torch._scaled_mm``'s
    layout, is read in place; a row-major one is copied);
* the output is bf16 unless ``out_dtype`` says f16 or f32 (8-bit outputs are not made);
* the Hopper kernel reads both operands K-major (wgmma has no transposed form for 8-bit
  types): ``a`` row-major (M, K) and ``b`` column-major (K, N), i.e. ``w.T`` of a row-major
  (N, K) weight. Other layouts are copied once into that form (:func:`k_major`); the SIMT
  kernel (the interpreter, and rows TMA cannot describe: K not a multiple of 16) reads
  any layout in place.
"""
from __future__ import annotations

from ...core.specs import Tile
from ...core.types import PtxType, e4m3, e5m2, f32

FP8 = {"float8_e4m3fn": e4m3, "float8_e5m2": e5m2}
MODES = ("tensor", "row", "block")
BLOCK_K = 128          # K per block-wise scale (and the 8-bit Hopper kernel's ring stage)
BLOCK_N = 128          # columns of b per block-wise scale


def scale_specs(mode, grouped: bool = False) -> tuple:
    """The two f32 scale arguments of a float8 scaling mode (:mod:`.fp8`): per tensor one
    value each, row-wise ``(M,)`` and ``(N,)`` (a grouped GEMM's ``scale_b``: ``(G, N)``,
    a row per group), block-wise ``scale_a`` as ``(KB, M)`` (K blocks of 128) and
    ``scale_b`` ``(KB, NB)`` (128-column blocks)."""
    if grouped and mode == "row":
        return (Tile("M", f32), Tile("G", "N", f32))
    return {None: (), "tensor": (Tile(1, f32), Tile(1, f32)),
            "row": (Tile("M", f32), Tile("N", f32)),
            "block": (Tile("KB", "M", f32), Tile("KB", "NB", f32))}[mode]


def mode_of(scaled) -> str | None:
    """``build_*(scaled=)``: False / None (unscaled), True (per tensor) or a mode name."""
    if scaled is True:
        return "tensor"
    if scaled not in (False, None, "tensor", "row", "block"):
        raise ValueError(f"scaled must be False, True or one of 'tensor', 'row', 'block', "
                         f"got {scaled!r}")
    return scaled or None


SCALE_SUFFIX = {None: "", "tensor": "_scaled", "row": "_rowscaled", "block": "_blockscaled"}


def dtype_of(a) -> PtxType | None:
    """e4m3 / e5m2 for a torch or ml_dtypes float8 array, else None."""
    return FP8.get(str(a.dtype).replace("torch.", ""))


def scale_key(scale_a, scale_b) -> tuple:
    """The fast path's key part for the scales (TypeError for a Python number: such a
    call makes its scale array anew and is never recorded)."""
    def one(s):
        if s is None:
            return None
        return (s.shape, s.dtype, s.device, s.data_ptr() & 3)
    return one(scale_a), one(scale_b)


def scale_mode(scale_a, scale_b, m: int, n: int, k: int) -> str | None:
    """``"tensor"``, ``"row"`` or ``"block"`` for scales of these shapes (None for shapes
    no mode takes). One-element scales are per tensor; where K <= 128 a block-wise pair is
    also row-wise (the same product)."""
    def shape(s):
        return () if s is None or isinstance(s, (int, float)) else \
            tuple(int(d) for d in getattr(s, "shape", ()))

    sa, sb = shape(scale_a), shape(scale_b)
    size = [1 if not sh else _prod(sh) for sh in (sa, sb)]
    if size == [1, 1] and len(sa) <= 1 and len(sb) <= 1:
        return "tensor"
    if sa == (m, 1) and sb == (1, n):
        return "row"
    kb, nb = -(-k // BLOCK_K), -(-n // BLOCK_N)
    if sa == (m, kb) and sb == (kb, nb):
        return "block"
    if size == [1, 1]:
        return "tensor"
    return None


def _prod(shape) -> int:
    out = 1
    for d in shape:
        out *= d
    return out


def scale_args(frame, scale_a, scale_b, like, m: int, n: int, k: int, batched: bool,
               error) -> tuple[str, list, bool]:
    """``(mode, [scale_a, scale_b], moved)``: the scale mode (:func:`scale_mode`), the two
    float32 arrays the kernels read (tensor: one element each; row: ``(M,)`` and ``(N,)``;
    block: ``scale_a`` as ``(ceil(K/128), M)``, ``scale_b`` ``(ceil(K/128), ceil(N/128))``,
    both row-major) and whether either is a copy of the caller's."""
    from ...runtime.adapter import address, kind_of
    for s, name in ((scale_a, "scale_a"), (scale_b, "scale_b")):
        if s is None or isinstance(s, (int, float)):
            continue
        if not hasattr(s, "dtype") or kind_of(s, "matmul") != frame.kind:
            raise error(f"{name} must be a number or a float32 array of the same kind as a "
                        f"({frame.kind}), got {type(s).__name__}")
        dt = str(s.dtype).replace("torch.", "")
        if dt != "float32":
            raise error(f"{name} must be a number or a one-element float32 array (per "
                        f"tensor), or a float32 array of a row-wise or block-wise shape, got "
                        f"{dt} of shape {tuple(s.shape)}")
        if frame.kind == "torch" and s.device != like.device:
            raise error(f"{name} is on {s.device}, the operands on {like.device}")
    mode = scale_mode(scale_a, scale_b, m, n, k)
    kb, nb = -(-k // BLOCK_K), -(-n // BLOCK_N)
    if mode is None:
        def shp(s):
            return tuple(getattr(s, "shape", ())) if hasattr(s, "shape") else "a number"
        raise error(f"scale_a / scale_b of shapes {shp(scale_a)} / {shp(scale_b)} fit no "
                    f"scaling mode of an ({m}, {k}) @ ({k}, {n}) product: per tensor (a "
                    f"number or a one-element float32 array each), row-wise (scale_a ({m}, "
                    f"1), scale_b (1, {n})) or block-wise (scale_a ({m}, {kb}), scale_b "
                    f"({kb}, {nb}): 1 x 128 blocks of a, 128 x 128 of b)")
    if mode == "tensor":
        return mode, [_one(frame, s, like, name, error)
                      for s, name in ((scale_a, "scale_a"), (scale_b, "scale_b"))], False
    if batched:
        raise error(f"{mode}-wise scales take 2-D operands (one (M, K) @ (K, N) product), as "
                    f"torch._scaled_mm does; batched operands take per-tensor scales")
    if mode == "row":
        got = [scale_a.reshape(m), scale_b.reshape(n)]
        got = [g if _unit(g) else frame.contiguous(g) for g in got]
    else:
        sat = scale_a.T                     # (KB, M): M-contiguous rows
        got = [sat if _unit(sat) else frame.contiguous(sat),
               scale_b if _unit(scale_b) else frame.contiguous(scale_b)]
    moved = any(address(g) != address(s) for g, s in zip(got, (scale_a, scale_b)))
    return mode, got, moved


def ring_scales_ok(scale_a, m: int) -> bool:
    """Whether the kernel's block-wise ``scale_a`` (``(ceil(K/128), M)``, from
    :func:`scale_args`) can be copied into the ring in 16-byte pieces (``Plan.smem_scales``):
    M a multiple of 4 and a 16-byte aligned base."""
    from ...runtime.adapter import address
    return m % 4 == 0 and address(scale_a) % 16 == 0


def _unit(x) -> bool:
    """Whether ``x`` is packed row-major (unit inner stride; for 2-D, rows its width apart)."""
    from ...runtime.adapter import element_strides
    st = element_strides(x)
    if len(st) == 1:
        return st[0] == 1 or int(x.shape[0]) == 1
    r, c = int(x.shape[0]), int(x.shape[1])
    return (st[1] == 1 or c == 1) and (st[0] == c or r == 1)


def _one(frame, s, like, name, error):
    """A per-tensor scale as the one-element float32 array the kernels read."""
    if s is None or isinstance(s, (int, float)):
        v = 1.0 if s is None else float(s)
        if v != v or v in (float("inf"), float("-inf")):
            raise error(f"{name} must be finite, got {v}")
        arr = frame.empty((1,), like, f32)
        arr[...] = v
        return arr
    return s.reshape(1)


def k_major(frame, a, b, a_k, a_t: bool, b_k, b_t: bool):
    """The arrays 8-bit wgmma reads for the logical operands ``a`` (M, K) and ``b`` (K, N),
    given what :func:`.api._layout` chose (``a_k``, ``b_k`` and whether each is the
    operand's transpose): A as (M, K) and B as (N, K), both row-major; an operand in the
    other major is copied once. Returns ``(a_k, a_t, b_k, b_t, copied)``."""
    copied = False
    if a_t:
        a_k, a_t, copied = frame.contiguous(a), False, True
    if not b_t:
        b_k, b_t, copied = frame.contiguous(b.T), True, True
    return a_k, a_t, b_k, b_t, copied


__all__ = ["FP8", "MODES", "BLOCK_K", "BLOCK_N", "SCALE_SUFFIX", "dtype_of", "mode_of",
           "scale_specs", "scale_key", "scale_mode", "scale_args", "k_major"]
