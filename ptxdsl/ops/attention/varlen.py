"""``ptxdsl.ops.attention_varlen``: packed sequences of different lengths, flash_attn's
``flash_attn_varlen_func`` layout, in one launch of the forward kernel (after an order
pass of one CTA).

The kernels read ``cu_seqlens_q`` / ``cu_seqlens_k`` themselves (:mod:`.varlen_tiles`:
the grid depends only on the packed length, the number of sequences and the heads), so a
call on CUDA tensors reads nothing back to the host and a CUDA graph may replay it with
new offsets. Host arrays (numpy, torch CPU tensors) have their offsets checked here; device
offsets are the caller's promise, as in flash_attn.

Two kernels run: :mod:`.varlen_order` sorts the m-blocks by the keys they see, longest
first, and the forward (:mod:`.fwd` with the :class:`~.varlen_tiles.Varlen` schedule) takes
its tiles in that order. With GQA (``H / Hkv`` in :data:`PACKED_GROUPS`) a tile holds the
query heads of a group, which share each K/V block.
"""
from __future__ import annotations

from ...core.types import f32, s32
from ...runtime.adapter import element_strides as strides
from .api import KERNELS, _check, _contiguous, _copy_back, _fail, _frame, _tma_ready, \
    forward_kernel
from .config import Mask
from .plan import choose
from .varlen_order import build_order
from .varlen_tiles import SEQ_BITS, Varlen

PACKED_GROUPS = (2, 4, 8)      # GQA groups whose query heads share a tile's rows


def _offsets(cu, name: str, total: int, frame, q) -> int:
    """Checks ``cu`` (1-d; int32 on the GPU, any integers on the host); its values too
    where they are on the host. Returns the number of sequences."""
    if frame.kind == "torch":
        if not isinstance(cu, frame.torch.Tensor) or cu.device != q.device:
            _fail(f"{name} must be a torch int32 tensor on {q.device}, got "
                  f"{type(cu).__name__} {getattr(cu, 'device', '')}")
    if len(getattr(cu, "shape", ())) != 1 or int(cu.shape[0]) < 2:
        _fail(f"{name} must be a 1-d array of sequence offsets (number of sequences + 1), "
              f"got shape {tuple(getattr(cu, 'shape', ()))}")
    if frame.cuda_torch and str(cu.dtype) != "torch.int32":
        _fail(f"{name} must be int32, got {cu.dtype}")
    if not frame.cuda_torch:
        vals = [int(x) for x in cu.tolist()]
        if vals[0] != 0 or any(b < a for a, b in zip(vals, vals[1:])) or vals[-1] != total:
            _fail(f"{name} must start at 0, never decrease and end at the packed length "
                  f"{total}, got {vals}")
    return int(cu.shape[0]) - 1


def _host_int32(cu):
    """The interpreter's int32 copy of host offsets of any integer dtype."""
    import numpy as np
    return np.asarray(cu.tolist(), np.int32)


def checked_offsets(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, tq: int,
                    tk: int, frame, q):
    """The offsets of a varlen call (the forward's and the backward's) checked, a bad one
    named at the caller's line, and as the kernels take them: int32 copies of host
    offsets, device offsets as they are (the caller's promise)."""
    nq = _offsets(cu_seqlens_q, "cu_seqlens_q", tq, frame, q)
    nk = _offsets(cu_seqlens_k, "cu_seqlens_k", tk, frame, q)
    if nq != nk:
        _fail(f"cu_seqlens_q has {nq} sequences, cu_seqlens_k {nk}")
    if nq >= 1 << SEQ_BITS:
        _fail(f"{nq} sequences: the kernel takes fewer than {1 << SEQ_BITS}")
    for name, x in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
        if not isinstance(x, int) or isinstance(x, bool) or x < 0:
            _fail(f"{name} must be an int >= 0, got {x!r}")
    if frame.cuda_torch:
        return cu_seqlens_q, cu_seqlens_k
    cq, ck = (_host_int32(c) for c in (cu_seqlens_q, cu_seqlens_k))
    lq, lk = int((cq[1:] - cq[:-1]).max()), int((ck[1:] - ck[:-1]).max())
    if lq > max_seqlen_q or lk > max_seqlen_k:
        _fail(f"max_seqlen_q / max_seqlen_k ({max_seqlen_q}, {max_seqlen_k}) are below "
              f"the longest sequences ({lq}, {lk})")
    return cq, ck


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q: int,
                     max_seqlen_k: int, *, causal: bool = False,
                     softmax_scale: float | None = None, window_size=(-1, -1),
                     softcap: float = 0.0, return_lse: bool = False, out=None):
    """Attention over packed sequences: q ``(total_q, H, D)``, k and v ``(total_k, Hkv, D)``;
    sequence ``i`` is rows ``cu_seqlens_q[i]:cu_seqlens_q[i+1]`` of q against rows
    ``cu_seqlens_k[i]:cu_seqlens_k[i+1]`` of k and v (int32 offsets, on q's device), with
    the options of :func:`~.api.attention` (causal aligned bottom-right per sequence).
    Returns ``out`` ``(total_q, H, D)`` and, with ``return_lse``, the LSE ``(H, total_q)``
    (f32; -inf for rows of a sequence without keys). ``max_seqlen_q/k`` are checked
    against host offsets; the kernel does not need them. Torch tensors that require grad
    are differentiable (the backward: :func:`~.bwd_api.attention_varlen_backward`)."""
    frame = _frame(q)
    for name, a in (("q", q), ("k", k), ("v", v)):
        if len(getattr(a, "shape", ())) != 3:
            _fail(f"{name} must be 3-d ((total, heads, head_dim), packed sequences), got "
                  f"shape {tuple(getattr(a, 'shape', ()))}")
    if out is not None and len(getattr(out, "shape", ())) != 3:
        _fail(f"out must have q's shape {tuple(q.shape)}, got {tuple(out.shape)}")
    tq, tk = int(q.shape[0]), int(k.shape[0])
    cq, ck = checked_offsets(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, tq, tk,
                             frame, q)
    if tq and tk:       # the 4-d checks of attention() on one-batch views
        dtype, _, _ = _check(q[None], k[None], v[None], causal, softmax_scale, window_size,
                             softcap, None, frame)
    h = int(q.shape[1])
    if out is None:
        out = frame.empty(tuple(q.shape), q)
    elif tuple(out.shape) != tuple(q.shape) or not _contiguous(out):
        _fail(f"out must be a contiguous array of q's shape {tuple(q.shape)}, got "
              f"{tuple(out.shape)} strides {tuple(strides(out))}")
    if frame.kind == "torch" and frame.torch.is_grad_enabled() and any(
            a.requires_grad for a in (q, k, v)):
        from .autograd import differentiable_varlen   # the autograd node (imports torch)
        return differentiable_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                     max_seqlen_k, causal=causal, softmax_scale=softmax_scale,
                                     window_size=window_size, softcap=softcap,
                                     return_lse=return_lse, out=out)
    lse = frame.empty((h, tq), q, f32)
    if not (tq and tk):                   # no rows, or no keys anywhere: nothing to launch
        if tq:
            out[...] = 0
            lse[...] = float("-inf")
        return (out, lse) if return_lse else out
    if tq * packed_group(h, int(k.shape[1])) >= 1 << 31:
        _fail(f"{tq} query rows x {packed_group(h, int(k.shape[1]))} heads per tile: the "
              f"kernels number fewer than 2**31 packed rows")
    q, k, v = (a if _tma_ready(a, frame) else frame.contiguous(a) for a in (q, k, v))
    lse = run(frame, dtype, q, k, v, cq, ck, out, lse, causal=causal,
              softmax_scale=softmax_scale, window_size=window_size, softcap=softcap)
    return (out, lse) if return_lse else out


def packed_group(h: int, hk: int) -> int:
    """The query heads a tile holds: the GQA group ``h / hk`` where it is in
    :data:`PACKED_GROUPS`, else 1 (a tile per head)."""
    return h // hk if h // hk in PACKED_GROUPS else 1


def run(frame, dtype, q, k, v, cq, ck, out, lse, *, causal: bool, softmax_scale,
        window_size, softcap: float, group: int | None = None, ordered: bool = True):
    """The order pass (when ``ordered``) and the forward on checked arguments; returns the
    LSE (the interpreter's copy on the host). ``group``: the query heads per tile (None:
    :func:`packed_group`); ``group`` and ``ordered`` override the choice for tests and
    tuning."""
    tq, h, d = (int(x) for x in q.shape)
    hk = int(k.shape[1])
    if group is None:
        group = packed_group(h, hk)
    arch = frame.arch(q)
    layout = "varlen" if ordered else "varlen_unordered"
    kern = forward_kernel(d, dtype.name, causal=causal, window_size=window_size,
                          softmax_scale=softmax_scale, softcap=softcap, arch=arch,
                          sms=frame.sms(q), layout=layout, group=group)
    if group > 1:          # (TQ, HK, G, D) views of q and out; the LSE as (HK, G, TQ)
        q_, out_ = q.reshape(tq, hk, group, d), out.reshape(tq, hk, group, d)
        lse_ = lse.reshape(hk, group, tq)
    else:
        q_, out_, lse_ = q, out, lse
    args = [q_, k, v, cq, ck]
    if ordered:
        left, right = window_size
        mask = Mask(left, 0 if causal else right)
        cfg = choose(d, dtype.name, mask, group, layout=layout)
        order = KERNELS.get(("varlen_order", group, cfg.block_m, cfg.block_n, mask, arch),
                            lambda: build_order(group, cfg.block_m, cfg.block_n, mask,
                                                arch=arch))
        sched = Varlen(dtype, d, cfg.block_n, block_m=cfg.block_m, group=group)
        entries = frame.empty((sched.blocks(int(cq.shape[0]) - 1, tq), 2), q, s32)
        res = frame.run(order, cq, ck, entries)
        args.append(entries if frame.on_gpu() else res)
    res = frame.run(kern, *args, out_, lse_)
    if not frame.on_gpu():
        lse = _copy_back(frame, res, out_, lse_).reshape(h, tq)
    return lse


__all__ = ["attention_varlen", "run", "packed_group", "PACKED_GROUPS"]
