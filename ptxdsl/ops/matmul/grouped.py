"""``ptxdsl.ops.grouped_matmul``: one GEMM per group of rows, in one launch (mixture of experts).

``grouped_matmul(a, b, offs)`` is ``torch._grouped_mm``'s 2-D x 3-D form: ``a`` (total_M, K)
holds the rows of ``G`` groups one after the other, group ``g`` being rows ``offs[g-1] ..
offs[g]`` (``offs`` int32 ``(G,)``, the cumulative ends; ``offs[-1] = 0``), ``b`` is ``(G,
K, N)``, and ``out[rows of g] = act(scale_a * scale_b * (a[rows of g] @ b[g]))``. The rules:

* ``offs`` an int32 array of the call's framework and device (read there by the kernel:
  a CUDA ``offs`` is never copied to the host), or ``m_splits=`` the group sizes as Python
  ints; empty groups are allowed. Host-side ``offs`` (numpy, torch CPU) are checked:
  non-decreasing, the last at most total_M. Rows past ``offs[-1]`` are not written.
* ``b`` ``(G, K, N)`` either stored so (N contiguous) or as the transpose view of a
  ``(G, N, K)`` stack (``w.transpose(1, 2)`` of per-expert ``nn.Linear`` weights: K
  contiguous, the K-major layout the Hopper kernel prefers); other strides are copied.
* bf16 / f16 operands, or float8 (e4m3 / e5m2, any mix) with float32 scales per tensor
  (:mod:`.fp8`) or row-wise, ``torch._scaled_grouped_mm``'s: ``scale_a`` ``(total_M,)``
  (or ``(total_M, 1)``) per row of ``a``, ``scale_b`` ``(G, N)`` (or ``(G, 1, N)``) per
  column of each ``b[g]``; f32 accumulation; ``out_dtype`` bf16 / f16 / f32 (default:
  the inputs', bf16 for float8); ``activation`` as :func:`.api.matmul`'s.
* Not differentiable (a tensor that requires grad is refused; call it under
  ``torch.no_grad()``).

The kernels (:func:`kernel_for`): on sm_90 the Hopper kernel (:mod:`.hopper` with
``grouped=True``: a persistent grid walks every group's tiles (:func:`plan_for`) in the order of
:mod:`.groups`, TMA loads of A's rows and of group ``g``'s matrix of the stacked B, rows
stored only up to the group's end); elsewhere, and where TMA cannot describe an operand,
the SIMT kernel (:mod:`.simt` with ``grouped=True``).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ...core.errors import LaunchError, caller_location as _caller
from ...core.types import PtxType, bf16
from ...runtime.adapter import Frame, address as data_ptr, kind_of
from ...runtime.adapter import element_strides as strides
from . import fp8 as _fp8
from .api import ALIASES, KERNELS, _dtype_of_any, _operand_dtypes, _out_dtype
from .epilogue import ACTIVATIONS
from .plan import bk_for, fallback_plan, fitted, tma_ok
from .config import Plan


def _error(msg: str) -> LaunchError:
    return LaunchError(f"grouped_matmul: {msg}", _caller())


def grouped_matmul(a, b, offs=None, *, m_splits=None, out=None, out_dtype=None,
                   activation: str | None = None, scale_a=None, scale_b=None):
    """``out[rows of g] = act(scale_a * scale_b * (a[rows of g] @ b[g]))`` for each group
    ``g`` of ``a``'s rows (see the module docstring)."""
    activation = ALIASES.get(activation, activation)
    if activation not in ACTIVATIONS:
        raise _error(f"activation must be None, 'relu', 'gelu' (tanh form) or 'silu', got "
                     f"{activation!r}")
    frame = Frame(a, "grouped_matmul")
    if frame.kind not in ("numpy", "torch") or kind_of(b, "grouped_matmul") != frame.kind:
        raise _error(f"a and b must both be numpy arrays or both torch tensors, got "
                     f"{type(a).__name__} and {type(b).__name__}")
    if frame.kind == "torch" and frame.torch.is_grad_enabled() and (
            a.requires_grad or b.requires_grad):
        raise _error("grouped_matmul is not differentiable; call it under torch.no_grad()")
    if a.ndim != 2 or b.ndim != 3:
        raise _error(f"a must be 2-D (total_M, K) and b 3-D (G, K, N), got shapes "
                     f"{tuple(a.shape)} and {tuple(b.shape)}")
    total, k = int(a.shape[0]), int(a.shape[1])
    g, k2, n = (int(d) for d in b.shape)
    if k != k2:
        raise _error(f"a's K ({k}) must equal b's (G, K, N) middle dim ({k2})")
    offs = _offsets(frame, a, offs, m_splits, g, total)
    dt, bt = _operand_dtypes(a, b, scale_a, scale_b, _error)
    eight = dt.bytes == 1
    scales, mode = None, None
    if eight:
        mode, scales = _scales(frame, scale_a, scale_b, a, total, g, n, k)
    odt = _out_dtype(out_dtype, bf16 if eight else dt)
    if out is None:
        out = frame.empty((total, n), a, odt)
    elif kind_of(out, "grouped_matmul") != frame.kind or tuple(out.shape) != (total, n) \
            or _dtype_of_any(out) != odt or (total and n > 1 and strides(out)[1] != 1):
        raise _error(f"out must be a ({total}, {n}) array of out_dtype ({odt.name}) with "
                     f"unit inner stride, got {type(out).__name__} of shape "
                     f"{tuple(getattr(out, 'shape', ()))} and dtype "
                     f"{getattr(out, 'dtype', None)}")
    if 0 in (total, n, g):
        return out
    if k == 0:                  # every activation maps 0 to 0
        out[...] = 0
        return out
    a_k = a if strides(a)[1] == 1 else frame.contiguous(a)
    b2, b_t = _stacked(frame, b, g, k, n)
    kern, b2 = _hopper(frame, a_k, b2, b_t, out, dt, bt, odt, activation, mode, k, n)
    if kern is None:
        kern = kernel_for(dt, odt, b_t, activation, bt, mode or False)
    res = frame.run(kern, *([a_k, b2, offs] + list(scales or []) + [out]))
    if frame.kind == "numpy" and res is not None and res is not out:
        out[...] = res
    return out


def _scales(frame, scale_a, scale_b, a, total: int, g: int, n: int, k: int):
    """``(mode, [scale_a, scale_b])``: per tensor (:func:`.fp8.scale_args`) or row-wise,
    ``scale_a`` as ``(total_M,)`` and ``scale_b`` as ``(G, N)``, packed float32."""
    def shape(s):
        return tuple(int(d) for d in s.shape) if hasattr(s, "shape") else None
    sa, sb = shape(scale_a), shape(scale_b)
    if sa in ((total,), (total, 1)) and sb in ((g, n), (g, 1, n)) and total * g * n > 1:
        got = []
        for s, name, want in ((scale_a, "scale_a", (total,)), (scale_b, "scale_b", (g, n))):
            if kind_of(s, "grouped_matmul") != frame.kind or \
                    str(s.dtype).replace("torch.", "") != "float32":
                raise _error(f"{name} must be a float32 array of the same kind as a, got "
                             f"{type(s).__name__} {s.dtype}")
            if frame.kind == "torch" and s.device != a.device:
                raise _error(f"{name} is on {s.device}, the operands on {a.device}")
            got.append(frame.contiguous(s.reshape(want)))
        return "row", got
    try:
        mode, got, _ = _fp8.scale_args(frame, scale_a, scale_b, a, total, n, k, False,
                                       LaunchError)
    except LaunchError:
        mode = None
    if mode != "tensor":
        raise _error(f"scale_a / scale_b of shapes {sa} / {sb} are neither per tensor (a "
                     f"number or a one-element float32 array each) nor row-wise (float32 "
                     f"scale_a ({total},) or ({total}, 1), scale_b ({g}, {n}) or ({g}, 1, "
                     f"{n}))")
    return mode, got


def _offsets(frame, a, offs, m_splits, g: int, total: int):
    """The int32 ``(G,)`` array of cumulative group ends the kernels read."""
    if (offs is None) == (m_splits is None):
        raise _error("pass the groups as offs (int32 cumulative ends, (G,)) or m_splits "
                     "(the group sizes), one of them")
    if m_splits is not None:
        sizes = [int(s) for s in m_splits]
        if len(sizes) != g or min(sizes, default=0) < 0 or sum(sizes) > total:
            raise _error(f"m_splits must be {g} non-negative sizes (one per matrix of b) "
                         f"summing to at most a's {total} rows, got {list(m_splits)}")
        ends = np.cumsum(sizes, dtype=np.int64).astype(np.int32)
        if frame.kind == "torch":
            return frame.torch.tensor(ends, dtype=frame.torch.int32, device=a.device)
        return ends
    if kind_of(offs, "grouped_matmul") != frame.kind or str(offs.dtype).replace(
            "torch.", "") != "int32" or tuple(offs.shape) != (g,):
        raise _error(f"offs must be an int32 ({g},) array of the same kind as a (the "
                     f"groups' cumulative ends), got {type(offs).__name__} "
                     f"{getattr(offs, 'dtype', None)} of shape "
                     f"{tuple(getattr(offs, 'shape', ()))}")
    if frame.kind == "torch":
        if offs.device != a.device:
            raise _error(f"offs is on {offs.device}, a on {a.device}")
        if offs.stride(0) != 1:
            offs = offs.contiguous()
        host = offs.numpy() if offs.device.type == "cpu" else None
    else:
        offs = np.ascontiguousarray(offs)
        host = offs
    if host is not None and g and (np.any(np.diff(host) < 0) or host[0] < 0
                                   or host[-1] > total):
        raise _error(f"offs must be non-decreasing group ends from 0 to at most a's "
                     f"{total} rows, got {host.tolist()}")
    return offs


def _stacked(frame, b, g: int, k: int, n: int):
    """``(B2, b_t)``: the stacked 2-D view of ``b`` the kernels read, ``(G*N, K)``
    (``b_t``: each matrix given as its (N, K) transpose, K contiguous) or ``(G*K, N)``."""
    sg, sk, sn = strides(b)
    if sk == 1 and (sg == n * sn or g == 1) and sn >= k:
        bt = b.transpose(1, 2) if frame.kind == "torch" else b.transpose(0, 2, 1)
        return bt.reshape(g * n, k), True
    if sn == 1 and (sg == k * sk or g == 1) and sk >= n:
        return b.reshape(g * k, n), False
    return frame.contiguous(b).reshape(g * k, n), False


# N from which 128 x 256 tiles ran faster: bench/results/matmul_grouped_plans_h200.json
WIDE_N = 4096


def plan_for(dtype: PtxType, out_dtype: PtxType, n: int = 0) -> Plan:
    """The grouped Hopper kernel's plan: no cluster, the deepest ring that fits, 128 x 256
    tiles where N >= :data:`WIDE_N` (one H200 run: +1-11% at N = 4096 and 14336) and
    128 x 128 below (more tiles over ragged groups: -4 to -7% for 256 at N = 1408), rows
    inside their group stored by TMA (H200, ``matmul_grouped_plans2_h200.json``: +5-16% at
    all seven MoE shapes; clusters and ``tail_skip`` won at one shape and lost at others);
    ``uniform_cons`` (``matmul_uniform_grouped_h200.json``: 0.997, 1.059, 1.001 at three)."""
    return fitted(Plan(bn=256 if n >= WIDE_N else 128, cluster=1, bk=bk_for(dtype),
                       tma_store=True, uniform_cons=True), dtype, out_dtype)


def _hopper(frame, a_k, b2, b_t, out, dt, bt, odt, activation, mode, k, n):
    """``(kernel, B2)``: the Hopper kernel and the stacked B it reads where the device is
    sm_90 and TMA describes A and B (an 8-bit B copied K-major; an MN-major B needs K a
    multiple of 64, so that no group's tile reads the next group's rows), else ``(None,
    B2)``. Its stores write pairs of columns: N and C's row stride even."""
    info = frame.device(a_k)
    if getattr(info, "cc", None) != (9, 0) or n % 2 or strides(out)[0] % 2 \
            or data_ptr(out) % 8:
        return None, b2
    if dt.bytes == 1 and not b_t:        # 8-bit wgmma reads K-major operands only
        g = int(b2.shape[0]) // k
        b3 = b2.reshape(g, k, n)
        b2 = frame.contiguous(b3.transpose(1, 2) if frame.kind == "torch"
                              else b3.transpose(0, 2, 1)).reshape(g * n, k)
        b_t = True
    if not b_t and k % bk_for(dt):
        return None, b2
    if not (tma_ok(data_ptr(a_k), strides(a_k)[0], int(a_k.shape[0]), dt)
            and tma_ok(data_ptr(b2), strides(b2)[0], int(b2.shape[0]), bt)):
        return None, b2
    c_tma = tma_ok(data_ptr(out), strides(out)[0], int(out.shape[0]), odt)
    return hopper_kernel(dt, odt, "K" if b_t else "MN", activation, info.sm_count, bt,
                         mode or False, n, c_tma), b2


def hopper_kernel(dt, odt, b_major, activation, sms, bt=None, scaled=False, n=0,
                  c_tma=True):
    """The grouped Hopper kernel for N columns (cached); ``c_tma``: whether TMA can
    describe C (else a plan's ``tma_store`` is dropped)."""
    from .hopper import build_hopper
    p = plan_for(dt, odt, n)
    if p.tma_store and not c_tma:
        p = dataclasses.replace(p, tma_store=False)
    bt = bt or dt
    key = ("grouped_hopper", p, dt.name, bt.name, odt.name, activation, sms, scaled, b_major)
    return KERNELS.get(key, lambda: build_hopper(
        p, dt, odt, activation=activation, sms=sms, b_major=b_major, b_dtype=bt,
        scaled=scaled, grouped=True))


def kernel_for(dt, odt, b_t, activation, bt=None, scaled=False):
    """The grouped SIMT kernel (cached)."""
    from .simt import build_simt
    bt = bt or dt
    key = ("grouped_simt", dt.name, bt.name, odt.name, b_t, activation, scaled)
    return KERNELS.get(key, lambda: build_simt(fallback_plan(), dt, odt, b_t=b_t,
                                               activation=activation, b_dtype=bt,
                                               scaled=scaled, grouped=True))


__all__ = ["grouped_matmul", "plan_for", "hopper_kernel", "kernel_for"]
