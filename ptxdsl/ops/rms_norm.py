"""``ptxdsl.ops.rms_norm`` / ``rms_norm_backward`` / ``RMSNorm``: the user-facing API.

Arrays may be numpy (run on the GPU when one is present, else on the CPU
interpreter), torch CUDA tensors or any ``__cuda_array_interface__`` /
``__dlpack__`` device array (run on the GPU, zero-copy). Torch tensors that
need gradients go through a ``torch.autograd.Function`` whose backward is
:func:`rms_norm_backward`.
"""
from __future__ import annotations

import dataclasses

import threading

import numpy as np

from ..errors import LaunchError, ToolchainError
from ..types import PtxType, bf16, f16, f32
from . import _torch_fast as _tf
from . import _workspace
from .rms_norm_bwd import MAX_FUSED_ROWS, build_backward, build_dw_reduce, plan_backward
from .rms_norm_fwd import build_forward, max_vec, plan
from .rms_norm_fwd_loop import build_forward_loop, loop_ctas_per_sm

_DTYPES = {"float32": f32, "float16": f16, "bfloat16": bf16}


class KernelCache:
    """Built kernels keyed by everything that changes their PTX.

    Key: (kind, N, dtype, weight dtype, vec, variant flags, eps, arch, grid).
    Each Kernel keeps its own trace and compiled-module caches.
    """

    def __init__(self):
        self._kernels: dict[tuple, object] = {}
        self._lock = threading.Lock()

    def get(self, key: tuple, build):
        k = self._kernels.get(key)
        if k is None:
            with self._lock:
                k = self._kernels.get(key)
                if k is None:
                    k = self._kernels[key] = build()
        return k

    def __len__(self) -> int:
        return len(self._kernels)


KERNELS = KernelCache()


# ---------------------------------------------------------------- array plumbing
class _Frame:
    """What one call runs on: numpy (GPU or interpreter), torch or another device array."""

    def __init__(self, x):
        self.kind = _kind(x)
        self.torch = None
        if self.kind == "torch":
            import torch
            self.torch = torch

    def dtype(self, a) -> PtxType:
        name = str(a.dtype).replace("torch.", "")
        try:
            return _DTYPES[name]
        except KeyError:
            raise LaunchError(f"rms_norm supports float32, float16 and bfloat16 arrays, "
                              f"got {a.dtype}") from None

    def empty(self, shape, like, dtype=None):
        if self.kind == "torch":
            t = self.torch
            dt = like.dtype if dtype is None else {f32: t.float32, f16: t.float16,
                                                     bf16: t.bfloat16}[dtype]
            return t.empty(shape, dtype=dt, device=like.device)
        if self.kind == "numpy":
            dt = like.dtype if dtype is None else dtype.np_dtype
            return np.empty(shape, dtype=dt)
        import cupy  # device arrays other than torch: cupy is the common one
        dt = like.dtype if dtype is None else dtype.np_dtype
        return cupy.empty(shape, dtype=dt)

    def zeros_u32(self, n, like):
        if self.kind == "numpy":
            return np.zeros(n, np.uint32)
        import cupy
        return cupy.zeros(n, dtype=cupy.uint32)

    def rows(self, a, n):
        """A 2-D (M, N) view with unit inner stride; copies only if no such view exists."""
        if a.ndim == 2 and _strides(a)[1] == 1:
            return a
        if self.kind == "torch":
            v = a.reshape(-1, n)
            return v if v.stride(1) == 1 else v.contiguous()
        v = a.reshape(-1, n)
        return v if _strides(v)[1] == 1 else v.copy()

    def run(self, k, *args):
        if self.kind == "numpy":
            from .. import gpu_available
            return k(*args) if gpu_available() else k.interpret(*args)
        return k(*args)

    def _device(self, a):
        """The GPU the call runs on (None: the CPU interpreter)."""
        if self.kind == "numpy":
            from .. import gpu_available
            if not gpu_available():
                return None
            ordinal = 0
        elif self.kind == "torch":
            ordinal = a.device.index if a.device.index is not None else 0
        else:
            ordinal = getattr(getattr(a, "device", None), "id", 0) or 0
        from ..runtime import driver
        return driver.get().device(ordinal)

    def arch(self, a) -> str:
        """The target for the device of ``a``: Hopper gets sm_90a, others their sm_XY."""
        info = self._device(a)
        if info is None:
            return "sm_90a"
        return "sm_90a" if info.cc == (9, 0) else info.arch

    def sms(self, a) -> int:
        """Multiprocessors to size the persistent backward grid for (fixed per device,
        so dweight's summation order, and so its bits, are too)."""
        info = self._device(a)
        return 2 if info is None else info.sm_count  # the interpreter runs every CTA


def _kind(a) -> str:
    mod = type(a).__module__
    if mod.startswith("torch"):
        return "torch"
    if isinstance(a, np.ndarray):
        return "numpy"
    if hasattr(a, "__cuda_array_interface__") or hasattr(a, "__dlpack__"):
        return "device"
    raise LaunchError(f"rms_norm takes numpy arrays, torch tensors or device arrays, "
                      f"got {type(a).__name__}")


def _strides(a) -> tuple[int, ...]:
    if hasattr(a, "stride") and callable(a.stride):
        return tuple(a.stride())
    return tuple(s // a.itemsize for s in a.strides)


def _ptr(a) -> int:
    if hasattr(a, "data_ptr"):
        return a.data_ptr()
    if isinstance(a, np.ndarray):
        return a.ctypes.data
    return a.__cuda_array_interface__["data"][0]


def _vec_for(n, dtype, weight, wdtype, *arrays) -> int:
    """Widest access every row of every array, and the weight, allow."""
    vec = max_vec(n, dtype)
    for a in arrays:
        if a is None:
            continue
        while vec > 1 and (_strides(a)[0] % vec or _ptr(a) % (vec * dtype.bytes)):
            vec //= 2
    while vec > 1 and _ptr(weight) % (vec * wdtype.bytes):
        vec //= 2
    return vec


# ---------------------------------------------------------------- forward
def rms_norm(x, weight, eps: float = 1e-6, *, residual=None, return_rstd: bool = False,
             out=None):
    """``x / sqrt(mean(x^2, -1) + eps) * weight`` over the last dim.

    With ``residual``: ``h = x + residual`` is written into ``residual`` and
    normalised. Returns ``y`` (and ``rstd``, f32 per row, with ``return_rstd``).
    Torch tensors requiring grad are differentiable.
    """
    if residual is None and out is None and not return_rstd:
        # The plain form, called again like last time: one C++ guard of both tensors
        # instead of the signature key (see _tf.Hot).
        hot = _tf.HOT[0]
        if hot.guard(x, weight) and eps == hot.eps:
            y = hot.launch(x, weight)
            if y is not None:
                return y
    try:  # torch tensors whose signature was seen before: straight to the launch
        key = _tf.fwd_key(x, weight, eps, residual, return_rstd, out)
        fast = _tf.FAST.get(key)
        if fast is not None and (x.requires_grad or weight.requires_grad) and _grad_enabled():
            fast = None  # a differentiable call goes through autograd
    except (AttributeError, TypeError):  # numpy, cupy, ...: no .stride()/.data_ptr()
        fast = None
    if fast is not None:
        if fast.hot is not None:
            _tf.HOT[0] = fast.hot  # this signature is the one to guard for now
        y, rstd = fast(x, weight, residual, out)
        return (y, rstd) if return_rstd else y
    frame = _Frame(x)
    needs_grad = frame.kind == "torch" and _grad_enabled() and (
        x.requires_grad or weight.requires_grad)
    if needs_grad and (residual is not None or out is not None):
        raise LaunchError("rms_norm(residual=..., out=...) writes into caller tensors and is "
                          "not differentiable; call it under torch.no_grad() (inference), or "
                          "add the residual first and call rms_norm(x, weight) for training")
    if needs_grad:
        from .torch_autograd import rms_norm_autograd
        y, rstd = rms_norm_autograd(x, weight, eps)
        return (y, rstd) if return_rstd else y
    y, rstd = _forward(frame, x, weight, eps, residual, return_rstd, out)
    return (y, rstd) if return_rstd else y


def _grad_enabled() -> bool:
    import torch
    return torch.is_grad_enabled()


def _check(x, weight, n, frame):
    if x.ndim < 1 or n < 1:
        raise LaunchError(f"rms_norm needs x with a last dim of at least 1, got shape "
                          f"{tuple(x.shape)}")
    if tuple(weight.shape) != (n,):
        raise LaunchError(f"weight must have shape ({n},) to match x's last dim, got "
                          f"{tuple(weight.shape)}")
    dt, wdt = frame.dtype(x), frame.dtype(weight)
    if wdt not in (dt, f32):
        raise LaunchError(f"weight dtype must be x's ({dt.name}) or float32, got {wdt.name}")
    return dt, wdt


def _forward(frame, x, weight, eps, residual, want_rstd, out):
    if frame.kind == "torch":
        key = _tf.fwd_key(x, weight, eps, residual, want_rstd, out)
        fast = _tf.FAST.get(key)
        if fast is not None:
            return fast(x, weight, residual, out)
    y, rstd, fast = _forward_general(frame, x, weight, eps, residual, want_rstd, out)
    if fast is not None:
        _tf.FAST[key] = fast
        if fast.hot is not None:
            _tf.HOT[0] = fast.hot
    return y, rstd


def _forward_general(frame, x, weight, eps, residual, want_rstd, out):
    n = int(x.shape[-1])
    dt, wdt = _check(x, weight, n, frame)
    lead = tuple(x.shape[:-1])
    x2 = frame.rows(x, n)
    m = int(x2.shape[0])
    r2 = None
    if residual is not None:
        if tuple(residual.shape) != tuple(x.shape) or frame.dtype(residual) != dt:
            raise LaunchError("residual must have x's shape and dtype")
        r2 = frame.rows(residual, n)
        if _ptr(r2) != _ptr(residual) and frame.kind != "numpy":
            raise LaunchError("residual is updated in place, so it needs unit inner stride")
    y = out if out is not None else frame.empty(tuple(x.shape), x)
    y2 = frame.rows(y, n)
    if not (y2.ndim == 2 and _strides(y2) == (n, 1)):
        raise LaunchError("out must be a contiguous array of x's shape and dtype")
    rstd = frame.empty((m,), x, f32) if want_rstd else None
    if m == 0:
        return y, rstd, None
    vec = _vec_for(n, dt, weight, wdt, x2, y2, r2)
    arch = frame.arch(x)
    k = _forward_kernel(n, dt, wdt, vec, r2 is not None, want_rstd, float(eps), arch,
                        frame.sms(x))
    args = [x2] + ([r2] if r2 is not None else []) + [weight, y2] + \
        ([r2] if r2 is not None else []) + ([rstd] if want_rstd else [])
    frame.run(k, *args)
    if r2 is not None and frame.kind == "numpy" and r2 is not residual:
        residual[...] = r2.reshape(residual.shape)
    if out is None:
        y = y2.reshape(lead + (n,))
    fast = None
    # The closure launches on the caller's own pointers: only where the (M, N) views
    # the kernel saw are views of them, not copies.
    if frame.kind == "torch" and (x2 is x or x.is_contiguous()) and (
            residual is None or r2 is residual):
        fast = _tf.fwd_fast(frame.torch, k, args, x, weight, eps, m, want_rstd)
    return y, rstd, fast


def _forward_kernel(n, dt, wdt, vec, residual, want_rstd, eps, arch, sms):
    """The persistent kernel when a CTA's rows fit in registers, else one CTA per row."""
    p = plan(n, dt, vec)
    cps = loop_ctas_per_sm(p)
    if cps:
        key = ("fwd_loop", n, dt.name, wdt.name, vec, residual, want_rstd, eps, arch, sms * cps)
        k = KERNELS.get(key, lambda: build_forward_loop(p, dt, wdt, sms * cps, eps=eps,
                                                        residual=residual,
                                                        with_rstd=want_rstd, arch=arch))
        if _fits(k, p.block):
            return k
    key = ("fwd", n, dt.name, wdt.name, vec, residual, want_rstd, eps, arch)
    return KERNELS.get(key, lambda: _build_forward_best(p, dt, wdt, eps, residual, want_rstd,
                                                        arch))


def _build_forward_best(p, dt, wdt, eps, residual, want_rstd, arch):
    """The one-CTA-per-row kernel for plan ``p``; for a two-pass plan of at most two
    chunks per thread, w is loaded after the reduction instead when ptxas says that buys
    more CTAs per SM. At 8192 f16/bf16 (512 threads) keeping w took 34 registers, 3 CTAs
    per SM, against 32 and 4 without: 68.2 against 67.2 µs for 8192x8192 f16 on an H200
    (bench/rmsnorm_tune.py, three rounds; torch.compile 67.2). With more chunks per
    thread the late w loads cost more than the occupancy gives back (1024x16384 bf16:
    21.2 against 20.4 µs), and where the registers tie nothing changes.

    Rows of 512 threads then keep x in registers instead of reading it again, when
    ptxas, asked for the four CTAs per SM the threads allow (``.minnctapersm``), fits
    that row in the late two-pass kernel's registers without spilling: at 8192x8192
    on an H200 it was ahead of the two-pass kernel in each of six comparisons (three
    runs of bench/rmsnorm_tune.py --mode regs, bf16 and f16), by 0.1-0.2 µs of 67.3
    (the copy of the same bytes: 67.1-67.2). Left to itself ptxas gives that row 40
    registers and three CTAs per SM (68.2-68.4 µs)."""
    def build(q):
        return build_forward(q, dt, wdt, eps=eps, residual=residual, with_rstd=want_rstd,
                             arch=arch)
    k = build(p)
    if not (p.two_pass and p.preload_w and p.per_thread <= 2):
        return k
    lp = dataclasses.replace(p, preload_w=False, w_hints=("L1::evict_last",),
                             w_policy="evict_last")
    late = build(lp)
    try:
        late_ctas = _ctas_per_sm(late, p.block)
        if late_ctas <= _ctas_per_sm(k, p.block):
            return k
        if p.block == 512:
            one = build(dataclasses.replace(lp, two_pass=False, min_ctas=2048 // p.block))
            if not one.resources().spill_stores and _ctas_per_sm(one, p.block) >= late_ctas:
                return one
        return late
    except ToolchainError:  # no ptxas to ask: keep the plan as it is
        return k


def _ctas_per_sm(k, block: int) -> int:
    """CTAs of ``block`` threads one SM holds by registers (allocated 8 per thread at a
    time) and threads (2048): Hopper's limits, from ptxas' register count."""
    regs = -(-max(1, k.resources().registers) // 8) * 8
    return min(2048 // block, 65536 // (block * regs))


def _fits(k, block) -> bool:
    """Whether ptxas gave the kernel few enough registers for one CTA per SM (True when
    there is no ptxas to ask: the estimate that chose the kernel stands)."""
    try:
        return _ctas_per_sm(k, block) >= 1
    except ToolchainError:
        return True


# ---------------------------------------------------------------- backward
def rms_norm_backward(dy, x, weight, rstd):
    """``(dx, dweight)`` for ``y = rms_norm(x, weight)`` given the saved ``rstd``.

    dweight is reduced deterministically (fixed-order partial sums, no atomics).
    """
    try:
        key = _tf.bwd_key(dy, x, weight, rstd)
        fast = _tf.FAST.get(key)
    except (AttributeError, TypeError):
        key = fast = None
    if fast is not None:
        return fast(dy, x, weight, rstd)
    frame = _Frame(x)
    dx, dw, fast = _backward_general(frame, dy, x, weight, rstd)
    if fast is not None:
        _tf.FAST[key] = fast
    return dx, dw


def _backward_general(frame, dy, x, weight, rstd):
    n = int(x.shape[-1])
    dt, wdt = _check(x, weight, n, frame)
    if tuple(dy.shape) != tuple(x.shape) or frame.dtype(dy) != dt:
        raise LaunchError(f"dy must match x: shape {tuple(x.shape)} and dtype {dt.name}")
    x2, dy2 = frame.rows(x, n), frame.rows(dy, n)
    m = int(x2.shape[0])
    if tuple(rstd.shape) not in ((m,), tuple(x.shape[:-1])) or frame.dtype(rstd) != f32:
        raise LaunchError(f"rstd must be float32 with one value per row ({m}), got "
                          f"{tuple(rstd.shape)} {rstd.dtype}")
    rstd = rstd.reshape(m) if tuple(rstd.shape) != (m,) else rstd
    dx = frame.empty(tuple(x.shape), x)
    dw = frame.empty((n,), weight)
    if m == 0:
        dw[...] = 0
        return dx, dw, None
    dx2 = frame.rows(dx, n)
    vec = _vec_for(n, dt, weight, wdt, x2, dy2, dx2)
    info = frame._device(x)
    p, kb = _backward_kernel(n, dt, wdt, vec, frame.arch(x), frame.sms(x), info)
    if not p.fused:
        return _backward_unfused(frame, p, kb, dy, x, weight, rstd, dy2, x2, dx2, dw, n, wdt)
    elems = p.grid * n
    if frame.kind == "torch":
        buf, _ = _workspace.torch_buffer(frame.torch, info.ordinal,
                                         frame.torch._C._cuda_getCurrentRawStream(info.ordinal),
                                         elems)
        ws = buf[:2]
        partial = buf[_workspace.HEADER:_workspace.HEADER + elems].view(
            frame.torch.float32).view(p.grid, n)
    else:  # numpy (GPU or interpreter) and other device arrays: scratch per call
        ws = frame.zeros_u32(2, x)
        partial = frame.empty((p.grid, n), x, f32)
    frame.run(kb, dy2, x2, weight, rstd, ws, dx2, dw, partial)
    fast = None
    if _tf.fast_ok(frame, x, x2, dy, dy2):
        fast = _tf.bwd_fast(frame.torch, kb, (dy2, x2, weight, rstd, ws, dx2, dw, partial),
                            x, elems)
    return dx2.reshape(tuple(x.shape)), dw, fast


def _backward_unfused(frame, p, kb, dy, x, weight, rstd, dy2, x2, dx2, dw, n, wdt):
    """Small rows: partials from the row kernel, summed by a second launch."""
    arch = kb.arch
    kr = KERNELS.get(("dw", n, wdt.name, p.grid, arch),
                     lambda: build_dw_reduce(n, p.grid, wdt, arch=arch))
    partial = frame.empty((p.grid, n), x, f32)
    frame.run(kb, dy2, x2, weight, rstd, dx2, partial)
    frame.run(kr, partial, dw)
    fast = None
    if _tf.fast_ok(frame, x, x2, dy, dy2):
        fast = _tf.bwd_fast_unfused(frame.torch, kb, kr,
                                    (dy2, x2, weight, rstd, dx2, partial), (partial, dw), x,
                                    n, p.grid)
    return dx2.reshape(tuple(x.shape)), dw, fast


# CTAs per SM of the backward kernel for half-precision rows of 256 threads or fewer
# (see _backward_kernel).
SHORT_HALF_CTAS = 3


def _backward_kernel(n, dt, wdt, vec, arch, sms, info):
    """The backward kernel and its plan, with as many CTAs as the device holds at once.

    The launch is cooperative, so the grid must be resident; the plan's register
    estimate sizes it first, then the driver's occupancy for the compiled kernel
    corrects it: down when the estimate was too hopeful, up when ptxas needed fewer
    registers (two CTAs per SM instead of one: 34.9 vs 38.6 µs for 4096x4096 bf16,
    105 vs 128 µs for 16384x4096 bf16 on an H200, bench/rmsnorm_tune.py).

    Half-precision rows left at one CTA per SM also prefetch into L2 the row after the
    one held in registers (``BwdPlan.l2_ahead``): one 512-thread CTA per SM has too
    few bytes in flight to cover DRAM's latency with 16 KiB rows. On an H200
    (bench/rmsnorm_tune.py, 4-6 interleaved rounds) this took 8192x8192 bf16 from
    106.7 to 103.3 µs, 4096x7168 bf16 from 54.3 to 51.3, 4096x5120 f16 from 44.1 to
    41.0 and 2048x8192 bf16 from 33.9 to 33.1 (copy-equivalent 27.2); f32 rows, twice
    as long, were slower with it (2048x8192: 57.3 against 55.0), so they go without.

    Short half-precision rows (256 threads or fewer, N >= 1000) run at most three CTAs
    per SM, with the same L2 prefetch: three CTAs with it beat the six or seven that fit
    without it (H200, bench/rmsnorm_tune.py, four rounds: 32768x1024 bf16 66.1 against
    68.5 µs, f16 66.3 against 69.0, 16384x1024 bf16 41.7 against 44.3, 8192x2048 bf16
    34.3 against 35.6, 4096x1000 f16 25.5 against 28.3; copy-equivalent 51.0, 50.9,
    34.8, 27.3, 16.0).
    """
    def get(p):
        return KERNELS.get(("bwd", n, dt.name, wdt.name, vec, p.grid, p.l2_ahead, arch),
                           lambda: build_backward(p, dt, wdt, arch=arch))
    p = plan_backward(n, dt, sms, vec=vec)
    halves = p.prefetch and dt.bytes == 2 and vec * dt.bytes == 16
    short = halves and p.threads <= 256 and n >= 1000  # 1000: the shortest measured
    if short and p.grid > SHORT_HALF_CTAS * sms:
        p = plan_backward(n, dt, sms, vec=vec, ctas_per_sm=SHORT_HALF_CTAS)
    k = get(p)
    if info is None or not p.fused:
        return p, k
    from ..runtime import prepare
    per_sm = min(prepare(k).resident_ctas(info.ordinal, 0) // sms, 2048 // p.threads, 32)
    if short:
        per_sm = min(per_sm, p.grid // sms)  # only ever fewer CTAs than chosen above
    if per_sm * sms != p.grid:
        q = plan_backward(n, dt, sms, vec=vec, ctas_per_sm=max(1, per_sm), fused=True)
        kq = get(q)
        if prepare(kq).resident_ctas(info.ordinal, 0) >= q.grid and (
                q.grid < p.grid or -(-q.grid // q.slices) <= 2 * MAX_FUSED_ROWS):
            p, k = q, kq
        elif q.grid < p.grid:  # cannot happen unless occupancy changed between the builds
            raise LaunchError(f"rms_norm_backward: no cooperative grid fits for N={n}")
    if halves and (p.grid == sms or short):
        r = dataclasses.replace(p, l2_ahead=True)
        kr = get(r)
        if prepare(kr).resident_ctas(info.ordinal, 0) >= r.grid:
            return r, kr
    return p, k


def RMSNorm(*args, **kwargs):
    """``torch.nn.Module`` running ptxdsl's RMSNorm kernels (forward and backward)."""
    from .torch_autograd import RMSNorm as _RMSNorm
    return _RMSNorm(*args, **kwargs)
