"""``ptxdsl.ops.attention_backward`` (and its varlen form): the gradients of
:func:`~.api.attention` (check -> plan -> three launches: :mod:`.bwd_prep`'s preprocess,
:mod:`.bwd`'s main kernel, the postprocess).

Torch CUDA tensors run on the GPU; numpy arrays (and torch CPU tensors) on the GPU when
one is present, else on the CPU interpreter. Every argument is checked here, and a bad one
raises :class:`~ptxdsl.LaunchError` naming the caller's line.
"""
from __future__ import annotations

from dataclasses import replace

from ...core.types import bf16, f16, f32
from ...runtime.adapter import element_strides as strides
from .._common.kernels import KernelCache
from .api import _check, _contiguous, _fail, _frame
from .bwd import build_backward
from .bwd_config import BLOCK_M, BWD_HEAD_DIMS, choose_bwd
from .bwd_prep import build_postprocess, build_preprocess
from .bwd_prepw import build_postprocess_frag, build_postprocess_wide, build_preprocess_wide
from .bwd_m80 import build_backward_m80
from .bwd_wg3 import build_backward_wg3
from .config import Mask
from .varlen import checked_offsets

BWD_KERNELS = KernelCache(limit=256)


def backward_kernels(head_dim: int, dtype: str = "bf16", *, causal: bool = False,
                     window_size=(-1, -1), softmax_scale: float | None = None,
                     softcap: float = 0.0, deterministic: bool = False, arch: str = "sm_90a",
                     varlen: bool = False):
    """The (preprocess, main, postprocess) kernels :func:`attention_backward` (``varlen``:
    :func:`attention_varlen_backward`) runs for these options, built once per key from the
    plan table's config (``ptxdsl check``, timing)."""
    dt = {"bf16": bf16, "f16": f16}[dtype]
    scale = float(head_dim ** -0.5 if softmax_scale is None else softmax_scale)
    left, right = window_size
    mask = Mask(left, 0 if causal else right)
    cfg = choose_bwd(head_dim, dt.name, mask, bool(softcap), bool(deterministic), varlen)
    if varlen and cfg.dq_frag:                # (dq_frag's blocks are dense rows)
        cfg = replace(cfg, dq_frag=False)
    if varlen and cfg.block_m != BLOCK_M:     # its padded rows start every 64, not 128
        cfg = replace(cfg, block_m=BLOCK_M, ds_double=cfg.ds_double and cfg.dq_split)
    if (varlen or deterministic) and cfg.kv_pair:   # (one key block a CTA: varlen's
        # numbering, the deterministic turns' launch order)
        cfg = replace(cfg, kv_pair=False, dkv_stage=False, pair_max=0)
    if varlen and cfg.dkv_tma:                # a sequence's last key block: not whole
        cfg = replace(cfg, dkv_tma=False)
    key = (cfg, dt.name, head_dim, mask, scale, float(softcap), bool(deterministic), arch) \
        + (("varlen",) if varlen else ())
    wide = cfg.prep_wide and not varlen      # (varlen: bwd_prep's padded-row kernels)
    return BWD_KERNELS.get(key, lambda: (
        build_preprocess_wide(dt, head_dim, deterministic=deterministic, arch=arch) if wide
        else build_preprocess(dt, head_dim, deterministic=deterministic, arch=arch,
                              varlen=varlen),
        (build_backward_wg3 if cfg.wg3 else
         build_backward_m80 if cfg.dq_swap else build_backward)(
            cfg, dt, head_dim, mask, scale=scale, softcap=float(softcap),
            deterministic=deterministic, arch=arch, varlen=varlen),
        build_postprocess_frag(dt, head_dim, scale, arch=arch) if cfg.dq_frag else
        build_postprocess_wide(dt, head_dim, scale, arch=arch) if wide else
        build_postprocess(dt, head_dim, scale, arch=arch, varlen=varlen)))


def attention_backward(dout, q, k, v, out, lse, *, causal: bool = False,
                       softmax_scale: float | None = None, window_size=(-1, -1),
                       softcap: float = 0.0, deterministic: bool = False, dq=None, dk=None,
                       dv=None, dlse=None):
    """``(dq, dk, dv)`` of :func:`~.api.attention` with the same options, given ``dout``
    (the gradient of ``out``), the forward's ``out`` and its row log-sum-exp ``lse`` (f32,
    ``(B, H, Sq)``, ``return_lse=True``). q, dout, out ``(B, Sq, H, D)``; k, v ``(B, Sk,
    Hkv, D)``; dk and dv are summed over each GQA group. Head dims 64, 96, 128,
    192 and 256.
    ``deterministic`` orders dQ's f32 additions (each 64-row block takes them n-block by
    n-block), so results are bitwise identical run to run (on the interpreter, whose
    schedule is fixed, the default kernel is already reproducible and runs instead). ``dq``,
    ``dk``, ``dv``: contiguous arrays to write into. ``dlse``: the gradient of ``lse``
    (f32, its shape), for a loss that uses the LSE too: since ∂lse/∂S = P it adds
    ``dlse · P`` to dS, which is ``D - dlse`` in place of ``D``."""
    frame = _frame(q)
    dtype, (b, sq, h, d) = _checks(dout, q, k, v, out, lse, causal, softmax_scale,
                                   window_size, softcap, deterministic, dq, dk, dv, frame)
    if dlse is not None:
        _check_dlse(dlse, lse, frame)
    q, k, v, dout, out, lse = (a if _contiguous(a) else frame.contiguous(a)
                               for a in (q, k, v, dout, out, lse))
    on_gpu = frame.on_gpu()
    det = deterministic and on_gpu
    pre, main, post = backward_kernels(d, dtype.name, causal=causal, window_size=window_size,
                                       softmax_scale=softmax_scale, softcap=softcap,
                                       deterministic=det, arch=frame.arch(q))
    dq = frame.empty(tuple(q.shape), q) if dq is None else dq
    dk = frame.empty(tuple(k.shape), q) if dk is None else dk
    dv = frame.empty(tuple(k.shape), q) if dv is None else dv
    sqp = -(-sq // BLOCK_M) * BLOCK_M
    dpsum = frame.empty((b, h, sqp), q, f32)
    nlse2 = frame.empty((b, h, sqp), q, f32)
    dq_acc = frame.empty((b, h, sqp, d), q, f32)
    extra = []
    if det:
        shape = (b, h, sqp // BLOCK_M)      # the preprocess zeroes it
        extra = [frame.torch.empty(shape, dtype=frame.torch.uint32, device=q.device)
                 if frame.kind == "torch" else frame.zeros_u32(b * h * shape[2], q).reshape(shape)]
    frame.run(pre, out, dout, lse, dpsum, nlse2, dq_acc, *extra)
    if dlse is not None:
        dpsum[:, :, :sq] -= dlse
    frame.run(main, q, k, v, dout, nlse2, dpsum, dq_acc, dk, dv, *extra)
    frame.run(post, dq_acc, dq)
    return dq, dk, dv


def _check_dlse(dlse, lse, frame) -> None:
    if _frame(dlse).kind != frame.kind or tuple(dlse.shape) != tuple(lse.shape) \
            or "float32" not in str(dlse.dtype):
        _fail(f"dlse must be a float32 array of lse's shape {tuple(lse.shape)}, got "
              f"{type(dlse).__name__} {tuple(getattr(dlse, 'shape', ()))} "
              f"{getattr(dlse, 'dtype', None)}")
    if frame.kind == "torch" and dlse.device != lse.device:
        _fail(f"dlse must be on lse's device {lse.device}, got {dlse.device}")


def _padded_rows(frame, cq, tq: int):
    """Each packed row's padded row (sequence ``i``'s from ``(i + cu_q[i] // 64) · 64``),
    computed where the offsets are (device offsets are not read back)."""
    import numpy as np
    if isinstance(cq, np.ndarray):
        t = np.arange(tq, dtype=np.int64)
        cq = cq.astype(np.int64)
        seq = np.searchsorted(cq[1:], t, side="right")
    else:
        t = frame.torch.arange(tq, dtype=cq.dtype, device=cq.device)
        seq = frame.torch.searchsorted(cq[1:].contiguous(), t, right=True)
    first = cq[seq]
    rows = (seq + first // BLOCK_M) * BLOCK_M + (t - first)
    return frame.torch.from_numpy(rows) if frame.kind == "torch" and \
        isinstance(rows, np.ndarray) else rows


def _checks(dout, q, k, v, out, lse, causal, softmax_scale, window_size, softcap,
            deterministic, dq, dk, dv, frame):
    """Every argument of :func:`attention_backward` (4-d), a bad one named at the caller's
    line; returns q's dtype and shape."""
    dtype, (b, sq, h, d), _ = _check(q, k, v, causal, softmax_scale, window_size, softcap,
                                     None, frame)
    if d not in BWD_HEAD_DIMS:
        _fail(f"head dim {d}: the backward takes head dims "
              f"{', '.join(map(str, BWD_HEAD_DIMS))}")
    if not isinstance(deterministic, bool):
        _fail(f"deterministic must be True or False, got {deterministic!r}")
    for name, a in (("dout", dout), ("out", out)):
        if a is None or _frame(a).kind != frame.kind or tuple(a.shape) != tuple(q.shape) \
                or str(a.dtype) != str(q.dtype):
            _fail(f"{name} must be an array like q ({tuple(q.shape)}, {q.dtype}), got "
                  f"{type(a).__name__} {tuple(getattr(a, 'shape', ()))} "
                  f"{getattr(a, 'dtype', None)}")
    if _frame(lse).kind != frame.kind or tuple(lse.shape) != (b, h, sq) \
            or "float32" not in str(lse.dtype):
        _fail(f"lse must be the forward's float32 row log-sum-exp of shape {(b, h, sq)}, got "
              f"{type(lse).__name__} {tuple(lse.shape)} {lse.dtype}")
    for name, a, shape in (("dq", dq, q.shape), ("dk", dk, k.shape), ("dv", dv, k.shape)):
        if a is not None:
            if _frame(a).kind != frame.kind or tuple(a.shape) != tuple(shape) \
                    or str(a.dtype) != str(q.dtype):
                _fail(f"{name} must be an array of shape {tuple(shape)} and dtype {q.dtype}, "
                      f"got {type(a).__name__} {tuple(a.shape)} {a.dtype}")
            if not _contiguous(a):
                _fail(f"{name} must be contiguous, got element strides {tuple(strides(a))}")
    if frame.kind == "torch" and not all(a.device == q.device for a in (dout, out, lse)):
        _fail(f"dout, q, k, v, out and lse must be on one device, got {dout.device}, "
              f"{q.device}, {out.device}, {lse.device}")
    return dtype, (b, sq, h, d)


def attention_varlen_backward(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k,
                              max_seqlen_q: int, max_seqlen_k: int, *, causal: bool = False,
                              softmax_scale: float | None = None, window_size=(-1, -1),
                              softcap: float = 0.0, deterministic: bool = False, dq=None,
                              dk=None, dv=None, dlse=None):
    """``(dq, dk, dv)`` of :func:`~.varlen.attention_varlen` over packed sequences: dout, q,
    out ``(total_q, H, D)``, k, v ``(total_k, Hkv, D)``, lse ``(H, total_q)`` (the forward's,
    ``return_lse=True``), ``cu_seqlens_q/k`` int32 offsets on q's device. Three launches
    for every sequence together: the kernels read the offsets themselves (nothing is read
    back to the host for CUDA tensors, and a CUDA graph may replay with new offsets), with
    the options of :func:`attention_backward` (``dlse`` of lse's ``(H, total_q)``).
    ``max_seqlen_q/k`` are checked against host offsets; the kernels do not need them."""
    frame = _frame(q)
    for name, a in (("dout", dout), ("q", q), ("k", k), ("v", v), ("out", out)):
        if len(getattr(a, "shape", ())) != 3:
            _fail(f"{name} must be 3-d ((total, heads, head_dim), packed sequences), got "
                  f"shape {tuple(getattr(a, 'shape', ()))}")
    tq, tk = int(q.shape[0]), int(k.shape[0])
    cq, ck = checked_offsets(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, tq, tk,
                             frame, q)
    nq = int(cq.shape[0]) - 1
    h, d = int(q.shape[1]), int(q.shape[2])
    if tuple(lse.shape) != (h, tq) or "float32" not in str(lse.dtype) \
            or _frame(lse).kind != frame.kind:
        _fail(f"lse must be the forward's float32 (H, total_q) = {(h, tq)}, got "
              f"{type(lse).__name__} {tuple(lse.shape)} {lse.dtype}")
    if dlse is not None:
        _check_dlse(dlse, lse, frame)
    dq, dk, dv = (frame.empty(tuple(like.shape), q) if a is None else a
                  for a, like in ((dq, q), (dk, k), (dv, k)))
    if not (tq and tk):          # no rows, or no keys anywhere: every gradient is 0
        for a in (dq, dk, dv):
            a[...] = 0
        return dq, dk, dv
    # attention_backward's checks on one-batch views (dtypes, head dims, options, dq/dk/dv)
    one = lambda a: None if a is None else a[None]
    dtype, _ = _checks(one(dout), one(q), one(k), one(v), one(out), lse[None], causal,
                       softmax_scale, window_size, softcap, deterministic, one(dq), one(dk),
                       one(dv), frame)
    q, k, v, dout, out, lse = (a if _contiguous(a) else frame.contiguous(a)
                               for a in (q, k, v, dout, out, lse))
    det = deterministic and frame.on_gpu()
    pre, main, post = backward_kernels(d, dtype.name, causal=causal, window_size=window_size,
                                       softmax_scale=softmax_scale, softcap=softcap,
                                       deterministic=det, arch=frame.arch(q), varlen=True)
    sqp = (nq + tq // BLOCK_M) * BLOCK_M       # each sequence's rows from a multiple of 64
    dpsum, nlse2 = frame.empty((h, sqp), q, f32), frame.empty((h, sqp), q, f32)
    dq_acc = frame.empty((h, sqp, d), q, f32)
    extra = []
    if det:                                    # the preprocess zeroes it
        n = sqp // BLOCK_M
        extra = [frame.torch.empty((h, n), dtype=frame.torch.uint32, device=q.device)
                 if frame.kind == "torch" else frame.zeros_u32(h * n, q).reshape((h, n))]
    frame.run(pre, out, dout, lse, cq, dpsum, nlse2, dq_acc, *extra)
    if dlse is not None:
        dpsum[:, _padded_rows(frame, cq, tq)] -= dlse
    frame.run(main, q, k, v, dout, nlse2, dpsum, cq, ck, dq_acc, dk, dv, *extra)
    frame.run(post, dq_acc, cq, dq)
    return dq, dk, dv


__all__ = ["attention_backward", "attention_varlen_backward", "backward_kernels",
           "BWD_KERNELS"]
