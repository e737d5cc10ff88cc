"""``ptxdsl.ops.matmul``: ``act(a @ b + bias)`` on the tensor cores.

Arrays may be numpy (the GPU when one is present, else the CPU interpreter),
torch CUDA tensors, or ``__cuda_array_interface__`` / ``__dlpack__`` device
arrays. The rules:

* ``a`` is ``(M, K)`` or ``(batch, M, K)``, ``b`` is ``(K, N)`` or ``(batch, K, N)``
  (a 2-D operand beside a 3-D one is shared by every batch entry);
* both ``float16`` or both ``bfloat16``; f32 accumulation; the output is
  ``out_dtype`` (``float16``, ``bfloat16`` or ``float32``; default: the inputs');
* or 8-bit floats (``float8_e4m3fn`` / ``float8_e5m2``, any mix) with ``scale_a`` /
  ``scale_b`` per tensor, row-wise or block-wise (``torch._scaled_mm``'s shapes):
  ``act(scale_a * scale_b * (a @ b) + bias)``, bf16 output by default (:mod:`.fp8` has
  their rules);
* any M, N, K (K = 0 gives ``act(bias)``); each matrix row-major or column-major
  (a transposed view such as ``w.T``) with any leading stride; a matrix with neither
  unit stride is copied once. The Hopper kernel reads either major of each operand in
  place (``a`` row-major or column-major, ``b`` row-major ``(K, N)`` or a transposed
  row-major ``(N, K)``: ``x @ w.T``; :mod:`.operands`), as does the SIMT kernel;
* ``bias`` is ``(N,)`` of the inputs' dtype or float32; ``activation`` is None,
  ``"relu"``, ``"gelu"`` (tanh form) or ``"silu"``;
* ``out``, when given, has the result's shape and ``out_dtype`` and unit inner stride;
* torch tensors that require grad go through an autograd Function whose backward
  is two matmuls (:mod:`.autograd`).

:func:`kernel_for` says which kernel a call runs: the Hopper kernel (TMA, wgmma,
:mod:`.hopper`) where the device is sm_90 and TMA can describe every operand, the
SIMT kernel (:mod:`.simt`) everywhere else.
"""
from __future__ import annotations

import logging

import numpy as np

from ...core.errors import LaunchError, caller_location as _caller
from ...core.types import PtxType, bf16, f16, f32
from ...runtime.adapter import DTYPES as _DTYPES, Frame, address as data_ptr, kind_of
from ...runtime.adapter import element_strides as strides
from ...runtime.memo import Launch, Memo, Recording, output, tensor
from ...runtime.memo import scratch as memo_scratch
from . import fp8 as _fp8
from .._common.kernels import KernelCache
from .._common.torch_registry import TORCH_OPS
from .epilogue import ACTIVATIONS
from .plan import choose, device_class, fallback_plan, for_majors, for_scaling, tma_ok
from .simt import build_simt

log = logging.getLogger("ptxdsl.ops")

ALIASES = {"gelu_tanh": "gelu", "gelu-tanh": "gelu", "swish": "silu"}


def _error(msg: str) -> LaunchError:
    return LaunchError(f"matmul: {msg}", _caller())


KERNELS = KernelCache()
# Repeat torch calls: (a, b, bias, scale_a, scale_b; out_dtype, activation).
MATMUL = Memo("matmul", 5, 2, limit=512)


def clear() -> None:
    """Forget every recorded call (the next call of each signature takes the general path)."""
    MATMUL.clear()


# ---------------------------------------------------------------- array plumbing
def _operand_dtypes(a, b, scale_a, scale_b, fail=_error) -> tuple[PtxType, PtxType]:
    """``a``'s and ``b``'s element types, checked together (one 16-bit type, or both
    float8) and against the scales (float8 operands only); ``fail``: the op's error."""
    dt, bt = _dtype_of(a), _dtype_of(b)
    eight = dt.bytes == 1
    if (bt.bytes == 1) != eight or (not eight and bt != dt):
        raise fail(f"a and b must have one dtype (or both be float8), got {a.dtype} and "
                   f"{b.dtype}")
    if not eight and (scale_a is not None or scale_b is not None):
        raise fail(f"scale_a / scale_b scale float8 operands; {a.dtype} operands take none")
    return dt, bt


def _dtype_of(a) -> PtxType:
    name = str(a.dtype).replace("torch.", "")
    t = _DTYPES.get(name) or _fp8.FP8.get(name)
    if t not in (f16, bf16) and t not in _fp8.FP8.values():
        raise _error(f"supports float16, bfloat16 and float8 (e4m3fn / e5m2) operands, got "
                     f"{a.dtype}")
    return t


def _out_dtype(spec, default: PtxType) -> PtxType:
    if spec is None:
        return default
    if isinstance(spec, PtxType):
        t = spec if spec in (f16, bf16, f32) else None
    else:
        name = str(spec).replace("torch.", "")
        if not isinstance(spec, str):
            try:
                name = np.dtype(spec).name
            except TypeError:
                pass
        t = _DTYPES.get({"f32": "float32", "f16": "float16", "bf16": "bfloat16"}.get(name, name))
    if t is None:
        raise _error(f"out_dtype must be float16, bfloat16 or float32, got {spec!r}")
    return t


# ---------------------------------------------------------------- the call
def matmul(a, b, *, out=None, out_dtype=None, bias=None, activation: str | None = None,
           scale_a=None, scale_b=None):
    """``activation(a @ b + bias)``, or ``activation(scale_a * scale_b * (a @ b) + bias)``
    for float8 operands; see the module docstring for shapes, dtypes, layouts."""
    if activation is not None and not isinstance(activation, str):
        raise _error(f"activation must be None or a name ('relu', 'gelu', 'silu'), got "
                     f"{activation!r}")
    activation = ALIASES.get(activation, activation)
    if activation not in ACTIVATIONS:
        raise _error(f"activation must be None, 'relu', 'gelu' (tanh form) or 'silu', got "
                     f"{activation!r}")
    if out is None:
        # A repeat torch call: the last signature's guard, else the signature key.
        got = MATMUL.hot(a, b, bias, scale_a, scale_b, out_dtype, activation)
        if got is None:
            got = MATMUL.lookup(a, b, bias, scale_a, scale_b, out_dtype, activation)
        if got is not None:
            return got
    frame = Frame(a, "matmul", "a")
    if kind_of(b, "matmul", "b") != frame.kind:
        raise _error(f"a and b must be the same kind of array, got {type(a).__name__} and "
                     f"{type(b).__name__}")
    scaled = scale_a is not None or scale_b is not None
    if frame.kind == "torch" and frame.torch.is_grad_enabled() and (
            a.requires_grad or b.requires_grad or (bias is not None and bias.requires_grad)):
        if _fp8.dtype_of(a) or _fp8.dtype_of(b) or scaled:
            raise _error("a float8 product is not differentiable (no backward is defined for "
                         "scaled operands); call it under torch.no_grad()")
        if out is not None:
            raise _error("out= writes into a caller tensor and is not differentiable; call "
                         "it under torch.no_grad(), or leave out= for training")
        from .autograd import matmul_autograd  # imports torch
        return matmul_autograd(a, b, bias, activation, out_dtype, forward)
    return forward(frame, a, b, out, out_dtype, bias, activation, scale_a, scale_b)


def torch_dtype(spec):
    """``out_dtype`` as the ``torch.dtype`` the custom op's schema takes."""
    if spec is None or not isinstance(spec, str):
        return spec
    import torch
    name = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}.get(spec, spec)
    return getattr(torch, name)


def _shapes(a, b):
    if a.ndim not in (2, 3) or b.ndim not in (2, 3):
        raise _error(f"a and b must be 2-D (M, K) / (K, N) or 3-D batched, got shapes "
                     f"{tuple(a.shape)} and {tuple(b.shape)}")
    m, k = int(a.shape[-2]), int(a.shape[-1])
    k2, n = int(b.shape[-2]), int(b.shape[-1])
    if k != k2:
        raise _error(f"a's last dim ({k}) must equal b's first matrix dim ({k2}): shapes "
                     f"{tuple(a.shape)} @ {tuple(b.shape)}")
    ba = int(a.shape[0]) if a.ndim == 3 else None
    bb = int(b.shape[0]) if b.ndim == 3 else None
    if ba is not None and bb is not None and ba != bb:
        raise _error(f"batch sizes differ: a has {ba}, b has {bb}")
    return ba if ba is not None else bb, m, n, k


def forward(frame, a, b, out, out_dtype, bias, activation, scale_a=None, scale_b=None):
    """The call without autograd: checks, allocation, batching, kernel choice; a plain
    2-D torch CUDA call's launch is recorded in :data:`MATMUL` for its repeat calls."""
    if frame.kind == "torch":
        TORCH_OPS.ensure()
    call = (a, b, bias, scale_a, scale_b, out_dtype, activation)
    # Recorded: no out= (a caller's tensor), per-tensor scales as tensors (a number makes
    # its scale array anew per call), and below, 2-D operands read in place.
    record = out is None and frame.cuda_torch and not any(
        isinstance(s, (int, float)) for s in (scale_a, scale_b))
    batch, m, n, k = _shapes(a, b)
    dt, bt = _operand_dtypes(a, b, scale_a, scale_b)
    eight = dt.bytes == 1
    odt = _out_dtype(out_dtype, bf16 if eight else dt)
    mode = None
    scales = None
    if eight:
        mode, scales, moved = _fp8.scale_args(frame, scale_a, scale_b, a, m, n, k,
                                              batch is not None, _error)
        record = record and not moved
    bdt = None
    if bias is not None:
        if kind_of(bias, "matmul", "bias") != frame.kind or tuple(bias.shape) != (n,):
            raise _error(f"bias must be a ({n},) array of the same kind as a, got "
                         f"{type(bias).__name__} of shape {tuple(getattr(bias, 'shape', ()))}")
        bdt = _DTYPES.get(str(bias.dtype).replace("torch.", ""))
        allowed = "float16, bfloat16 or float32" if eight else f"a's ({dt.name}) or float32"
        if bdt is None or not eight and bdt not in (dt, f32):
            raise _error(f"bias dtype must be {allowed}, got {bias.dtype}")
        if strides(bias)[0] != 1:
            bias = frame.contiguous(bias)
            record = False              # a copied bias: not the caller's pointer
    shape = ((batch,) if batch is not None else ()) + (m, n)
    if out is None:
        out = frame.empty(shape, a, odt)
    else:
        if kind_of(out, "matmul", "out") != frame.kind or tuple(out.shape) != shape:
            raise _error(f"out must be an array of shape {shape}, got "
                         f"{tuple(getattr(out, 'shape', ()))}")
        if _dtype_of_any(out) != odt:
            raise _error(f"out's dtype ({out.dtype}) must be out_dtype ({odt.name})")
        if m and n and strides(out)[-1] != 1 and n > 1:
            raise _error(f"out needs unit inner stride, got strides {strides(out)}")
    if 0 in (m, n) or batch == 0:
        return out
    if k == 0:
        _fill_bias(frame, out, bias, activation)
        return out
    for i in range(batch or 1):
        ai = a[i] if a.ndim == 3 else a
        bi = b[i] if b.ndim == 3 else b
        oi = out[i] if batch is not None else out
        k, a_t, b_t, copied, args, scratch = _one(frame, ai, bi, oi, dt, odt, bias, bdt,
                                                  activation, bt, scales, mode)
    if record and batch is None and not copied:
        # the operands' pointers (a transposed view's is its base's), the bias, the
        # scales (a None scale: the general path's 1.0, kept), C
        order = [tensor(0), tensor(1)] + ([tensor(2)] if bias is not None else [])
        for slot, given, made in zip((3, 4), (scale_a, scale_b), scales or ()):
            order.append(tensor(slot) if given is not None else made.data_ptr())
        if scratch is not None:         # the stream's stream-K workspace, looked up per call
            from .streamk import FLAGS_AT, PARTIALS_AT
            order += [memo_scratch(FLAGS_AT), memo_scratch(PARTIALS_AT)]
        MATMUL.record(call, Recording((Launch(k, tuple(args), tuple(order + [output(0)])),),
                                      (out,), output(0), keep=tuple(scales or ()),
                                      scratch=scratch))
    return out


def _dtype_of_any(a) -> PtxType | None:
    return _DTYPES.get(str(a.dtype).replace("torch.", ""))


def _layout(frame, x):
    """(the array the kernel reads, transposed?): x itself when its rows are contiguous,
    its transpose (a view) when its columns are, else a contiguous copy."""
    s = strides(x)
    r, c = int(x.shape[0]), int(x.shape[1])
    if s[1] == 1 or c == 1:
        return x, False
    if s[0] == 1 or r == 1:
        return x.T, True
    return frame.contiguous(x), False


def _one(frame, a, b, out, dt, odt, bias, bdt, activation, bt=None, scales=None, mode=None):
    """One (M, K) @ (K, N) product into ``out`` (``bt``: b's dtype where it is not a's,
    ``scales``: the two scale arrays of a float8 product, ``mode`` their
    :data:`.fp8.MODES` entry)."""
    bt = bt or dt
    a_k, a_t = _layout(frame, a)
    b_k, b_t = _layout(frame, b)
    info = frame.device(a)
    k = None
    copied = not (a_k is a or a_t) or not (b_k is b or b_t)
    use_hopper = False
    if info is not None and getattr(info, "cc", None) == (9, 0):
        if dt.bytes == 1:           # 8-bit wgmma reads K-major operands only
            ka, ta, kb, tb, moved = _fp8.k_major(frame, a, b, a_k, a_t, b_k, b_t)
            use_hopper = _hopper_ok(info, ka, kb, out, dt, odt)
            if use_hopper:
                a_k, a_t, b_k, b_t, copied = ka, ta, kb, tb, copied or moved
        else:
            use_hopper = _hopper_ok(info, a_k, b_k, out, dt, odt)
    if use_hopper:
        # The Hopper kernel reads each operand in its own major: a row-major a and a
        # transposed (N, K) b are K-major, a column-major a (passed as its (K, M)
        # transpose) and a row-major (K, N) b are MN-major.
        k = hopper_kernel(int(a.shape[0]), int(b.shape[1]), int(a.shape[1]), dt, odt,
                          bdt, activation, info.sm_count, "MN" if a_t else "K",
                          "K" if b_t else "MN", device_class(info), bt, mode or False,
                          smem_scales=mode == "block"
                          and _fp8.ring_scales_ok(scales[0], int(a.shape[0])))
    if k is None:
        k = kernel_for(dt, odt, a_t, b_t, bdt, activation, b_dtype=bt, scaled=mode or False)
    log.debug("matmul %dx%dx%d %s->%s (a%s b%s, bias %s, %s): %s", int(a.shape[0]),
              int(b.shape[1]), int(a.shape[1]), dt.name, odt.name, ".T" if a_t else "",
              ".T" if b_t else "", bdt.name if bdt else None, activation, k.name)
    args = [a_k, b_k] + ([bias] if bias is not None else []) + list(scales or [])
    skp, scratch = getattr(k, "stream_k_plan", None), None
    if skp is not None:             # a stream-K plan: its flags and partials (.streamk)
        from . import streamk
        ws, scratch = streamk.workspace_args(frame, a, skp, int(a.shape[0]), int(b.shape[1]),
                                             int(a.shape[1]), info.sm_count, info.ordinal)
        args += ws
    res = frame.run(k, *args, out)
    if frame.kind == "numpy" and res is not None and res is not out:
        out[...] = res
    return k, a_t, b_t, copied, args + [out], scratch


def _hopper_ok(info, a_k, b_k, out, dt, odt) -> bool:
    """The Hopper kernel reads its operands through TMA (either major: ``a_k``, ``b_k``
    are the row-major arrays it is given): every base 16-byte aligned, every row stride
    a multiple of 16 bytes (C's too); an sm_90 device."""
    if getattr(info, "cc", None) != (9, 0) or strides(out)[-1] != 1 \
            or strides(a_k)[-1] != 1 or strides(b_k)[-1] != 1:
        return False
    return (tma_ok(data_ptr(a_k), strides(a_k)[0], int(a_k.shape[0]), dt)
            and tma_ok(data_ptr(b_k), strides(b_k)[0], int(b_k.shape[0]), dt)
            and tma_ok(data_ptr(out), strides(out)[0], int(out.shape[0]), odt))


def hopper_plan(m, n, k, dt, odt, sms, device, scaled=False, smem_scales=False,
                a_major="K", b_major="K"):
    """The plan the Hopper kernel of :func:`hopper_kernel` runs: the table's or the rules'
    (for this scaling mode's rows), fitted to the operands' majors and the scaling mode."""
    p = for_majors(choose(m, n, k, dt, odt, sms, device=device, b_major=b_major,
                          scaling=scaled or None), dt, odt, a_major, b_major)
    return for_scaling(p, scaled, dt, odt, smem_scales, one_row=64 < m <= 128)


def hopper_kernel(m, n, k, dt, odt, bdt, activation, sms, a_major="K", b_major="K",
                  device="H100", bt=None, scaled=False, smem_scales=False):
    """The Hopper kernel for an (M, N, K) product (the plan depends on the shape class
    and the ``device`` class, :func:`.plan.device_class`) with operands of these majors
    (``"K"`` / ``"MN"``, :mod:`.operands`); ``bt``: B's dtype where it is not A's;
    ``scaled``: the float8 scale arguments (True or ``"tensor"``: per tensor; ``"row"``,
    ``"block"``: :mod:`.fp8`); ``smem_scales``: block-wise ``scale_a`` may go through the
    ring (:func:`.fp8.ring_scales_ok`)."""
    from .hopper import build_hopper
    bt = bt or dt
    scaled = "tensor" if scaled is True else scaled
    p = hopper_plan(m, n, k, dt, odt, sms, device, scaled, smem_scales, a_major, b_major)
    key = ("hopper", p, dt.name, bt.name, odt.name, bdt.name if bdt else None, activation,
           sms, scaled, a_major, b_major)     # the majors last (tests read them there)
    return KERNELS.get(key, lambda: build_hopper(p, dt, odt, bias=bdt, activation=activation,
                                                 sms=sms, a_major=a_major, b_major=b_major,
                                                 b_dtype=bt, scaled=scaled))


def describe(m, n, k, dt=bf16, odt=None, sms=132, device="H100", scaling=None) -> str:
    """Which kernel and plan an (M, N, K) K-major product runs on an sm_90 device of
    class ``device`` (:func:`.plan.device_class`); ``scaling``: a float8 scaling mode
    (block-wise: ``scale_a`` through the ring, as for M a multiple of 4 and an aligned base)."""
    p = hopper_plan(m, n, k, dt, odt or dt, sms, device, scaling or False, m % 4 == 0)
    return (f"hopper {p.bm}x{p.bn}x{p.bk} stages={p.stages} cluster={p.cluster} "
            f"group={p.group_m}" + (f" split={p.split}" if p.split > 1 else "")
            + (f" cluster_n={p.cluster_n}" if p.cluster_n > 1 else "")
            + (f" a_rows={p.a_rows}" if p.a_rows else "")
            + (f" kb_roll={p.kb_roll}" if p.kb_roll else "")
            + (" sb_ring" if p.sb_ring else ""))


def kernel_for(dt, odt, a_t, b_t, bdt, activation, frame=None, *, b_dtype=None,
               scaled=False):
    """The SIMT kernel for one layout and epilogue (any shape, stride, alignment)."""
    bt = b_dtype or dt
    scaled = "tensor" if scaled is True else scaled
    key = ("simt", dt.name, bt.name, odt.name, a_t, b_t, bdt.name if bdt else None,
           activation, scaled)
    return KERNELS.get(key, lambda: build_simt(fallback_plan(), dt, odt, a_t=a_t, b_t=b_t,
                                               bias=bdt, activation=activation,
                                               b_dtype=bt, scaled=scaled))


def _fill_bias(frame, out, bias, activation):
    """K = 0: every output is ``act(bias)`` (or act(0))."""
    from .epilogue import reference
    if frame.kind == "torch":
        t = frame.torch
        v = (bias.double() if bias is not None
             else t.zeros(out.shape[-1], dtype=t.float64, device=out.device))
        out[...] = reference(v, activation, _TorchMath(t)).to(out.dtype)
        return
    v = np.zeros(out.shape[-1]) if bias is None else np.asarray(bias, np.float64)
    out[...] = reference(v, activation, np).astype(out.dtype)


class _TorchMath:
    """The numpy names :func:`.epilogue.reference` uses, on torch tensors."""

    def __init__(self, torch):
        self.tanh, self.exp = torch.tanh, torch.exp
        self.maximum = lambda x, y: torch.clamp(x, min=y)


__all__ = ["matmul", "forward", "kernel_for", "hopper_kernel", "describe", "KERNELS", "MATMUL",
           "clear"]
