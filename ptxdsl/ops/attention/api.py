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
from .._common.kernels import KernelCache
from .config import HEAD_DIMS, Mask
from .fwd import build_forward
from .plan import choose

KERNELS = KernelCache(limit=256)


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


def forward_kernel(head_dim: int, dtype: str = "bf16", *, causal: bool = False,
                   window_size=(-1, -1), softmax_scale: float | None = None,
                   softcap: float = 0.0, arch: str = "sm_90a", sms: int = 132):
    """The kernel :func:`attention` runs for these options (built once per key, from the
    plan table's config): for ``ptxdsl check``, the docs' PTX excerpts and timing."""
    dt = {"bf16": bf16, "f16": f16}[dtype]
    scale = float(head_dim ** -0.5 if softmax_scale is None else softmax_scale)
    left, right = window_size
    mask = Mask(left, 0 if causal else right)
    cfg = choose(head_dim, dt.name, mask)
    key = (cfg, dt.name, head_dim, mask, scale, float(softcap), arch, sms)
    return KERNELS.get(key, lambda: build_forward(cfg, dt, head_dim, mask, scale=scale,
                                                  softcap=float(softcap), sms=sms, arch=arch))


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
    Hkv, D)`` with H a multiple of Hkv (MQA / GQA), float16 or bfloat16, head dims 64, 128,
    192, 256. ``softmax_scale`` defaults to ``D ** -0.5``. ``causal`` and ``window_size =
    (left, right)`` align keys bottom-right (row ``i`` sees key ``j`` iff ``i + Sk - Sq -
    left <= j <= i + Sk - Sq + right``, -1 unbounded; causal sets right = 0); a row that sees
    no key gives 0 (and an LSE of -inf). ``softcap > 0`` caps scores as ``softcap *
    tanh(s / softcap)``. Returns ``out`` (B, Sq, H, D), and the row log-sum-exp (f32, (B, H,
    Sq)) with ``return_lse``. Torch tensors that require grad are differentiable (the
    backward: :func:`~.bwd_api.attention_backward`)."""
    frame = _frame(q)
    dtype, (b, sq, h, d), _ = _check(q, k, v, causal, softmax_scale, window_size, softcap,
                                     out, frame)
    if frame.kind == "torch" and frame.torch.is_grad_enabled() and any(
            a.requires_grad for a in (q, k, v)):
        from .autograd import differentiable    # the autograd node (imports torch)
        return differentiable(q, k, v, causal=causal, softmax_scale=softmax_scale,
                              window_size=window_size, softcap=softcap,
                              return_lse=return_lse, out=out)
    # TMA reads q, k, v through 4-d tensor maps of any strides on the interpreter; the GPU
    # launcher binds only contiguous Tiles, so other layouts (a slice of a packed qkv
    # tensor) are copied first.
    q, k, v = (a if _contiguous(a) else frame.contiguous(a) for a in (q, k, v))
    kern = forward_kernel(d, dtype.name, causal=causal, window_size=window_size,
                          softmax_scale=softmax_scale, softcap=softcap, arch=frame.arch(q),
                          sms=frame.sms(q))
    if out is None:
        out = frame.empty((b, sq, h, d), q)
    lse = frame.empty((b, h, sq), q, f32)
    res = frame.run(kern, q, k, v, out, lse)
    if not frame.on_gpu():            # the interpreter returns its outputs: copy them back
        lse = _copy_back(frame, res, out, lse)
    return (out, lse) if return_lse else out


__all__ = ["attention", "forward_kernel", "KERNELS"]
