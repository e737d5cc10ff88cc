"""``ptxdsl.ops.attention``: the forward in flash_attn_func's layout (check -> plan -> launch).

Torch CUDA tensors run on the GPU; numpy arrays (and torch CPU tensors) on the GPU when
one is present, else on the CPU interpreter (the same kernel). Every argument is checked
here, and a bad one raises :class:`~ptxdsl.LaunchError` naming the caller's line.
"""
from __future__ import annotations

import math

from ...core.errors import LaunchError, caller_location as _caller
from ...core.types import bf16, f16, f32
from ...runtime.adapter import Frame, element_strides as strides
from ...runtime.memo import Launch, Memo, Recording, output, tensor
from .._common.kernels import KernelCache
from . import decode
from .config import BLOCK_M, HEAD_DIMS, Mask
from .counter import takes_counter, tile_counter
from .fwd import build_forward
from .plan import choose

KERNELS = KernelCache(limit=256)
FORWARD = Memo("attention", 4, 5)     # q, k, v, out; causal, scale, window, softcap, lse


def _fail(msg: str):
    raise LaunchError(f"attention: {msg}", _caller())


def _frame(a) -> Frame:
    """The array's framework; an unsupported object is named at the caller's line."""
    try:
        return Frame(a, "attention")
    except LaunchError as e:
        _fail(e.message.removeprefix("attention "))


def _contiguous(a) -> bool:
    want, acc = [], 1
    for n in reversed(a.shape):
        want.insert(0, acc)
        acc *= int(n)
    return all(int(n) == 1 or s == w for n, s, w in zip(a.shape, strides(a), want))


def _check(q, k, v, causal, softmax_scale, window_size, softcap, out, frame):
    arrays = {"q": q, "k": k, "v": v}
    for name, a in arrays.items():
        if _frame(a).kind != frame.kind:
            _fail(f"q, k and v must be arrays of one framework; {name} is "
                  f"{type(a).__name__}, q {type(q).__name__}")
        if len(a.shape) != 4:
            _fail(f"{name} must be 4-d ((B, S, heads, head_dim), flash_attn_func's layout), "
                  f"got shape {tuple(a.shape)}")
        if strides(a)[3] != 1:
            _fail(f"{name}'s last dim must be contiguous (stride 1), got strides "
                  f"{tuple(strides(a))}")
    dtype = {"float16": f16, "bfloat16": bf16}.get(str(q.dtype).replace("torch.", ""))
    if dtype is None:
        _fail(f"q, k and v must be float16 or bfloat16, got {q.dtype}")
    for name in ("k", "v"):
        if str(arrays[name].dtype) != str(q.dtype):
            _fail(f"{name} is {arrays[name].dtype}, q is {q.dtype}: give all three one dtype")
    b, sq, h, d = (int(x) for x in q.shape)
    if tuple(k.shape) != tuple(v.shape):
        _fail(f"k {tuple(k.shape)} and v {tuple(v.shape)} must have one shape")
    bk, sk, hk, dk = (int(x) for x in k.shape)
    if bk != b or dk != d:
        _fail(f"k/v {tuple(k.shape)} must share q's batch and head dim, q is {tuple(q.shape)}")
    if min(b, sq, sk, h, hk) < 1:
        _fail(f"empty input: q {tuple(q.shape)}, k {tuple(k.shape)}")
    if h % hk:
        _fail(f"q's {h} heads must be a multiple of k/v's {hk} (MQA / GQA)")
    if d not in HEAD_DIMS:
        _fail(f"head dim {d} is not supported; the kernel takes {', '.join(map(str, HEAD_DIMS))}")
    if softmax_scale is not None and not (isinstance(softmax_scale, (int, float)) and
                                          math.isfinite(softmax_scale) and softmax_scale > 0):
        _fail(f"softmax_scale must be a positive finite number or None, got {softmax_scale!r}")
    if not (isinstance(window_size, (tuple, list)) and len(window_size) == 2 and
            all(isinstance(w, int) and not isinstance(w, bool) and w >= -1
                for w in window_size)):
        _fail(f"window_size must be a pair of ints >= -1 (-1: unbounded), got {window_size!r}")
    if not isinstance(causal, bool):
        _fail(f"causal must be True or False, got {causal!r}")
    if not (isinstance(softcap, (int, float)) and math.isfinite(softcap) and softcap >= 0):
        _fail(f"softcap must be a finite number >= 0 (0: off), got {softcap!r}")
    if out is not None:
        if _frame(out).kind != frame.kind or tuple(out.shape) != tuple(q.shape) \
                or str(out.dtype) != str(q.dtype):
            _fail(f"out must be an array like q ({tuple(q.shape)}, {q.dtype}), got "
                  f"{type(out).__name__} {tuple(out.shape)} {out.dtype}")
        if not _contiguous(out):
            _fail(f"out must be contiguous, got strides {tuple(strides(out))}")
    if frame.kind == "torch" and not all(a.device == q.device for a in (k, v)):
        _fail(f"q, k and v must be on one device, got {q.device}, {k.device}, {v.device}")
    return dtype, (b, sq, h, d), (sk, hk)


def _tma_ready(a, frame) -> bool:
    """Whether the kernel reads ``a`` in place: contiguous, or on the GPU any strides that
    a tensor map takes (the kernel reads q, k and v only through TMA, whose map encodes
    every stride: a slice of a packed qkv tensor is not copied): unit last stride, the
    others multiples of 16 bytes, a 16-byte aligned start."""
    if _contiguous(a):
        return True
    if not frame.on_gpu() or frame.kind != "torch":
        return False
    st = strides(a)
    return a.data_ptr() % 16 == 0 and all(s % 8 == 0 for s in st[:-1]) and st[-1] == 1


def forward_kernel(head_dim: int, dtype: str = "bf16", *, causal: bool = False,
                   window_size=(-1, -1), softmax_scale: float | None = None,
                   softcap: float = 0.0, arch: str = "sm_90a", sms: int = 132,
                   layout: str = "dense", group: int = 1, seqlen: int | None = None):
    """The kernel :func:`attention` runs for these options (built once per key, from the
    plan table's config): for ``ptxdsl check``, the docs' PTX excerpts and timing.
    ``layout``: ``dense``, ``packed`` (``group`` query heads per K/V head in one tile's
    rows) or ``varlen`` (:func:`~.varlen.attention_varlen`); ``seqlen``: the key length,
    which picks the table's short-sequence rows (none when not given)."""
    dt = {"bf16": bf16, "f16": f16}[dtype]
    scale = float(head_dim ** -0.5 if softmax_scale is None else softmax_scale)
    left, right = window_size
    mask = Mask(left, 0 if causal else right)
    cfg = choose(head_dim, dt.name, mask, 1 if layout == "dense" else group, seqlen, layout)
    key = (cfg, dt.name, head_dim, mask, scale, float(softcap), arch, sms, layout, group)
    return KERNELS.get(key, lambda: build_forward(cfg, dt, head_dim, mask, scale=scale,
                                                  softcap=float(softcap), sms=sms, arch=arch,
                                                  layout=layout, group=group))


def _copy_back(frame, res, out, lse):
    """The interpreter's outputs (numpy) into ``out`` (its bytes) and a new ``lse``."""
    import numpy as np
    o_res, lse_res = res
    if frame.kind == "torch":             # torch CPU tensors come back as torch tensors
        if o_res is not out:
            out.copy_(o_res)
        return lse_res
    o_res, lse_res = np.asarray(o_res), np.asarray(lse_res)
    bits = o_res.view(np.int16).reshape(tuple(out.shape))
    np.copyto(out.view(np.int16), bits)
    return lse_res.reshape(lse.shape)


def attention(q, k, v, *, causal: bool = False, softmax_scale: float | None = None,
              window_size=(-1, -1), softcap: float = 0.0, return_lse: bool = False, out=None):
    """``softmax(q kᵀ * scale [+ mask]) v`` per head: q ``(B, Sq, H, D)``, k and v ``(B, Sk,
    Hkv, D)`` with H a multiple of Hkv (MQA / GQA), float16 or bfloat16, head dims 64, 96,
    128, 192, 256. ``softmax_scale`` defaults to ``D ** -0.5``. ``causal`` and ``window_size =
    (left, right)`` align keys bottom-right (row ``i`` sees key ``j`` iff ``i + Sk - Sq -
    left <= j <= i + Sk - Sq + right``, -1 unbounded; causal sets right = 0); a row that sees
    no key gives 0 (and an LSE of -inf). ``softcap > 0`` caps scores as ``softcap *
    tanh(s / softcap)``. Returns ``out`` (B, Sq, H, D), and the row log-sum-exp (f32, (B, H,
    Sq)) with ``return_lse``. Torch CUDA tensors launch on torch's current stream (CUDA
    graphs capture the call); a repeat call of a signature seen before runs its recorded
    launch (:data:`FORWARD`). Torch tensors that require grad are differentiable (the
    backward: :func:`~.bwd_api.attention_backward`)."""
    if type(window_size) is list:
        window_size = tuple(window_size)
    got = FORWARD.hot(q, k, v, out, causal, softmax_scale, window_size, softcap, return_lse)
    if got is None:
        got = FORWARD.lookup(q, k, v, out, causal, softmax_scale, window_size, softcap,
                             return_lse)
    if got is not None:
        return got
    frame = _frame(q)
    dtype, (b, sq, h, d), (sk, hk) = _check(q, k, v, causal, softmax_scale, window_size,
                                            softcap, out, frame)
    if frame.kind == "torch" and frame.torch.is_grad_enabled() and any(
            a.requires_grad for a in (q, k, v)):
        from .autograd import differentiable    # the autograd node (imports torch)
        return differentiable(q, k, v, causal=causal, softmax_scale=softmax_scale,
                              window_size=window_size, softcap=softcap,
                              return_lse=return_lse, out=out)
    given = (q, k, v, out)
    counter = replay = None               # Config.dynamic's tile counter (dense/packed only)
    if decode.takes(sq, d, h // hk):      # few query rows: split-KV decode (decode.py)
        q, k, v = (a if _contiguous(a) else frame.contiguous(a) for a in (q, k, v))
        if out is None:
            out = frame.empty((b, sq, h, d), q)
        lse = frame.empty((b, h, sq), q, f32)
        launches: list = []
        res, tickets = decode.run(frame, dtype, q, k, v, out, lse, causal=causal,
                                  softcap=softcap, softmax_scale=softmax_scale,
                                  window_size=window_size, launches=launches)
        if tickets is not None:           # a fused plan's per-tile tickets (counter.py)
            counter, replay = tickets
        if not frame.on_gpu():
            lse = _copy_back(frame, res, out, lse)
    else:
        q, k, v = (a if _tma_ready(a, frame) else frame.contiguous(a) for a in (q, k, v))
        group = h // hk if packs(h // hk, sq) else 1
        kern = forward_kernel(d, dtype.name, causal=causal, window_size=window_size,
                              softmax_scale=softmax_scale, softcap=softcap,
                              arch=frame.arch(q), sms=frame.sms(q),
                              layout="packed" if group > 1 else "dense", group=group,
                              seqlen=sk)
        if out is None:
            out = frame.empty((b, sq, h, d), q)
        if group > 1:      # (B, SQ, HK, G, D) views of q and out; the LSE as (B, HK, G, SQ)
            q_, out_ = q.reshape(b, sq, hk, group, d), out.reshape(b, sq, hk, group, d)
            lse = frame.empty((b, hk, group, sq), q, f32)
        else:
            q_, out_ = q, out
            lse = frame.empty((b, h, sq), q, f32)
        if takes_counter(kern):
            counter, replay = tile_counter(frame, q)
        args = (q_, k, v, out_, lse) + (() if counter is None else (counter,))
        launches = [(kern, args)]
        res = frame.run(kern, *args)
        if not frame.on_gpu():            # the interpreter returns its outputs: copy back
            lse = _copy_back(frame, res[:2], out_, lse)
        if group > 1:
            lse = lse.reshape(b, h, sq)
    if frame.cuda_torch and all(a is g for a, g in zip((q, k, v), given)):
        # repeat calls launch on the caller's own pointers: recorded only without copies
        _record(given, out, lse, launches,
                (*given, causal, softmax_scale, window_size, softcap, return_lse), return_lse,
                counter, replay)
    return (out, lse) if return_lse else out


def _record(given, out, lse, launches, key, return_lse, counter=None, replay=None) -> None:
    """Record the launches of a first call for :data:`FORWARD`: each pointer argument is
    the caller's tensor or an output allocated anew per call, told apart by its address
    (a reshaped view keeps its tensor's), or the tile ``counter`` (``replay``: its slot
    and the stream's word, :func:`~.counter.tile_counter`); a call where two differ in
    kind but share an address (empty tensors) is not recorded."""
    slots = {g.data_ptr(): tensor(i) for i, g in enumerate(given) if g is not None}
    if counter is not None:
        if counter.data_ptr() in slots:
            return
        slots[counter.data_ptr()] = replay[0]
    outs = [] if given[3] is not None else [out]
    outs.append(lse)
    for _, args in launches:
        for a in args:
            if a.data_ptr() not in slots and all(a.data_ptr() != o.data_ptr() for o in outs):
                outs.append(a)                    # the decode pass's partials
    allocated = {}
    for j, o in enumerate(outs):
        if o.data_ptr() in slots or o.data_ptr() in allocated:
            return
        allocated[o.data_ptr()] = output(j)
    slots.update(allocated)
    if len(slots) != sum(g is not None for g in given) + len(outs) + (counter is not None):
        return
    o_, l_ = slots[out.data_ptr()], slots[lse.data_ptr()]
    rec = Recording(tuple(Launch(kern, args, tuple(slots[a.data_ptr()] for a in args))
                          for kern, args in launches), tuple(outs),
                    (o_, l_) if return_lse else o_, scratch=replay and replay[1])
    FORWARD.record(key, rec)

def packs(group: int, sq: int) -> bool:
    """Whether the query heads of a GQA group share one tile's rows (``pack_gqa``): when
    one head's rows fill at most half a tile and the group divides it, so that one K/V
    stream serves the group (tested on the interpreter; timed by bench/attention.py's
    GQA rows)."""
    return group > 1 and BLOCK_M % group == 0 and sq <= BLOCK_M // 2


__all__ = ["attention", "forward_kernel", "packs", "KERNELS", "FORWARD"]
