"""Repeated torch calls of the RMSNorm ops: closures that only allocate and launch.

Torch calls repeat the same signature (shapes, strides, dtypes, device, pointer
alignment) over and over. The first call of a signature takes the general path of
:mod:`.api`, which checks everything, plans, builds and binds the kernel (through
the kernel launcher's own fast-path entry, ``Launcher.bind``); it then records here
a closure that redoes only the output allocation and the launch, keyed by
everything the general path's decisions depended on, in :data:`FORWARD` and
:data:`BACKWARD` (:class:`~ptxdsl.runtime.fastpath.Signatures`, the structure the
launcher finds its entries with too). A call tries the guard of the last plain
forward first (:class:`Hot`), then the signature key: two lookups at most.
"""
from __future__ import annotations

from ...runtime import prepare, torch_private
from ...runtime.fastpath import Signatures
from .._common.workspace import HEADER, WORKSPACE


def fwd_key(x, weight, eps, residual, want_rstd, out, offset=0.0) -> tuple:
    """The forward's signature key (raises AttributeError/TypeError for non-torch arrays)."""
    ptrs = x.data_ptr() | weight.data_ptr()
    if residual is not None:
        ptrs |= residual.data_ptr()
    if out is not None:
        ptrs |= out.data_ptr()
    return (x.shape, x.stride(), x.dtype, weight.dtype, weight.stride(), x.get_device(), eps,
            None if residual is None else residual.stride(), want_rstd,
            None if out is None else out.stride(), ptrs & 15, offset)


class Hot:
    """The last plain torch call's launch, found by a guard rather than a key.

    Inference calls the same norm with tensors of one signature over and over; building
    ``fwd_key`` (eleven attribute reads) and checking grad mode took ~1 µs of Python per
    call. torch's C++ tensor guard (what the launcher finds its entries with, see
    ``runtime/fastpath.py``) checks both tensors' type, dtype, device, sizes, strides
    and ``requires_grad`` in one call; what it does not see, the pointers' alignment
    and the grad mode, ``launch`` checks (it returns None where they differ; see
    :func:`fwd_fast`).
    """

    __slots__ = ("guard", "eps", "launch", "offset")

    def __init__(self, guard, eps, launch, offset=0.0):
        self.guard, self.eps, self.launch, self.offset = guard, eps, launch, offset


NO_HOT = Hot(torch_private.never, None, None)
# Signature key -> closure; FORWARD.hot is the last plain call's Hot, BACKWARD.hot the
# last fused backward's (guarding dy, x, weight, rstd; eps unused). Replaced whole, an
# entry is never mutated, so a reader sees an old or a new one.
FORWARD = Signatures(hot=NO_HOT)
BACKWARD = Signatures(hot=NO_HOT)


def clear() -> None:
    """Forget every recorded call (the next call of each signature takes the general path)."""
    FORWARD.clear(hot=NO_HOT)
    BACKWARD.clear(hot=NO_HOT)


def fwd_fast(torch, k, args, x, weight, eps, m, want_rstd, offset=0.0):
    """The per-signature closure: allocate the outputs and launch, nothing else.

    Pointers of views equal those of their bases, so the (M, N) views the kernel was
    bound with need not be rebuilt per call. Its ``plain(x, weight)`` serves the plain
    form (no residual, out or rstd) for callers that checked everything but the
    pointers' alignment and the grad mode (``Hot``): it returns None where those
    differ from this call's.
    """
    bound = prepare(k).bind(*args)
    if bound is None:
        return None
    shape, dtype, device = x.shape, x.dtype, x.device
    empty, f32t = torch.empty, torch.float32
    # Y is contiguous. It comes from the launcher's allocator (no argument parsing or
    # dispatch), which allocates on torch's current device: used only when that is x's.
    hooks, dev = torch_private.hooks(torch), x.get_device()
    alloc = hooks.allocator(shape, torch.empty(shape, device="meta").stride(), dtype, dev)
    cur_dev = hooks.current_device

    def new_y():
        return alloc() if cur_dev() == dev else empty(shape, dtype=dtype, device=device)

    def run(x, weight, residual, out):
        y = out if out is not None else new_y()
        rstd = empty((m,), dtype=f32t, device=device) if want_rstd else None
        xp, wp, yp = x.data_ptr(), weight.data_ptr(), y.data_ptr()
        if residual is None:
            if rstd is None:
                bound(xp, wp, yp)
            else:
                bound(xp, wp, yp, rstd.data_ptr())
        else:
            rp = residual.data_ptr()
            if rstd is None:
                bound(xp, rp, wp, yp, rp)
            else:
                bound(xp, rp, wp, yp, rp, rstd.data_ptr())
        return y, rstd

    align = (x.data_ptr() | weight.data_ptr()) & 15
    # A tensor that requires grad reached here under no_grad: later calls must be too.
    grad_mode = torch.is_grad_enabled if (x.requires_grad or weight.requires_grad) else None

    def plain(x, weight):
        xp, wp = x.data_ptr(), weight.data_ptr()
        if (xp | wp) & 15 != align or (grad_mode is not None and grad_mode()):
            return None
        y = new_y()
        bound(xp, wp, y.data_ptr())
        return y

    run.hot = None
    if not want_rstd and len(args) == 3:
        guard = hooks.guard((x, weight))
        if guard is not torch_private.never:
            run.hot = Hot(guard, eps, plain, offset)
    return run


def fast_ok(frame, x, x2, dy, dy2) -> bool:
    """A per-signature closure launches on the caller's pointers: only where the (M, N)
    views the kernel saw are views of them, not copies."""
    return frame.cuda_torch and (x2 is x or x.is_contiguous()) and (
        dy2 is dy or dy.is_contiguous())


def bwd_fast_unfused(torch, kb, kr, bargs, rargs, x, n, grid):
    lb, lr = prepare(kb).bind(*bargs), prepare(kr).bind(*rargs)
    if lb is None or lr is None:
        return None
    empty, empty_like, f32t = torch.empty, torch.empty_like, torch.float32
    device = x.device

    def run(dy, x, weight, rstd):
        dx = empty_like(x)
        dw = empty_like(weight)
        part = empty((grid, n), dtype=f32t, device=device)
        pp = part.data_ptr()
        lb(dy.data_ptr(), x.data_ptr(), weight.data_ptr(), rstd.data_ptr(), dx.data_ptr(), pp)
        lr(pp, dw.data_ptr())
        return dx, dw
    return run


def bwd_fast(torch, kb, bargs, x, elems, dy=None, weight=None, rstd=None, offset=0.0,
             device=None):
    """The fused backward's per-signature closure: the stream's scratch, dx and dw from
    the launcher's allocator, the bound launch. With the call's ``dy``,
    ``weight`` and ``rstd`` it also gets a :class:`Hot` (``run.hot``): a later call with
    tensors like these is found by one C++ guard instead of :func:`bwd_key` (eleven
    attribute reads and three pointers: about 4 us of an H100 host's 24); its launch
    returns None where the pointers' alignment differs from this call's. ``device``: the
    ordinal the general path launched on (x's). ``elems`` 0: the kernel uses no
    workspace (its WS and DWP get null pointers, the stream's scratch is not looked up)."""
    lb = prepare(kb).bind(*bargs)
    if lb is None:
        return None
    hooks = torch_private.hooks(torch)
    empty_like, raw_stream = torch.empty_like, hooks.raw_stream
    dev = x.get_device() if device is None else device
    scratch, header = WORKSPACE.torch_buffer, 4 * HEADER
    cur_dev = hooks.current_device
    # dx like x (contiguous here: fast_ok), dw like weight: no argument parsing, no
    # dispatch (the allocator allocates on torch's current device: used when it is x's).
    new_dx = hooks.allocator(x.shape, torch.empty(x.shape, device="meta").stride(), x.dtype,
                             dev)
    wt = bargs[2]
    new_dw = hooks.allocator(wt.shape, (1,), wt.dtype, dev)

    def launch(x, weight, rstd, pdy, px, pw):
        if elems:
            buf, base = scratch(hooks, dev, raw_stream(dev), elems)
            parts = base + header
        else:
            base = parts = 0
        if cur_dev() == dev:
            dx, dw = new_dx(), new_dw()
        else:
            dx, dw = empty_like(x), empty_like(weight)
        lb(pdy, px, pw, rstd.data_ptr(), base, dx.data_ptr(), dw.data_ptr(), parts)
        return dx, dw

    def run(dy, x, weight, rstd):
        return launch(x, weight, rstd, dy.data_ptr(), x.data_ptr(), weight.data_ptr())

    run.hot = None
    if dy is not None and x.is_contiguous() and dy.is_contiguous() and wt.stride() == (1,):
        guard = hooks.guard((dy, x, weight, rstd))
        align = (dy.data_ptr() | x.data_ptr() | weight.data_ptr()) & 15
        if guard is not torch_private.never:
            def hot(dy, x, weight, rstd):
                # each pointer read once (0.1 us apiece on an H100 host): the alignment
                # check and the launch share them
                pdy, px, pw = dy.data_ptr(), x.data_ptr(), weight.data_ptr()
                if (pdy | px | pw) & 15 != align:
                    return None
                return launch(x, weight, rstd, pdy, px, pw)
            run.hot = Hot(guard, None, hot, offset)
    return run


def bwd_key(dy, x, weight, rstd, offset=0.0) -> tuple:
    """The backward's signature key (raises AttributeError/TypeError for non-torch arrays)."""
    return (x.shape, x.stride(), dy.shape, dy.stride(), x.dtype, dy.dtype, weight.dtype,
            weight.stride(), rstd.shape, rstd.stride(), rstd.dtype, x.get_device(),
            (x.data_ptr() | dy.data_ptr() | weight.data_ptr()) & 15, offset)

