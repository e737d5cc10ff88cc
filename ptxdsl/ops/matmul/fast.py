"""Repeated torch calls of ``matmul``: closures that only allocate and launch.

The first call of a signature (shapes, strides, dtypes, device, out dtype, bias,
activation, 16-byte alignment of the pointers) takes :func:`.api.forward`, which checks
everything, chooses and builds the kernel; for plain 2-D torch calls it then records
here a closure that redoes only the output allocation and the launch: the launch bound
to the signature (:func:`ptxdsl.runtime.fastpath.bind`) takes the operands' pointers
(no views are rebuilt), and re-points the kernel's tensor maps by writing the address
straight into its parameter buffer where the driver keeps it as a plain 64-bit field
(``cuTensorMapReplaceAddress`` otherwise). Calls with ``out=``, batched operands, or an
operand or bias that needed a copy always take the general path.
``bench/matmul_host.py`` times the pieces (``--fake``: without a GPU).
"""
from __future__ import annotations

from ...runtime import torch_private
from ...runtime.fastpath import Signatures


class Hot:
    """The last plain call's launch (no bias, no ``out=``), found by torch's C++ tensor
    guard of ``a`` and ``b`` (type, dtype, device, sizes, strides, ``requires_grad``)
    rather than by building the signature key: ``launch(a, b)`` returns None where the
    pointers' alignment differs from the recorded call's (then the key decides)."""

    __slots__ = ("guard", "out_dtype", "activation", "launch")

    def __init__(self, guard, out_dtype, activation, launch):
        self.guard, self.out_dtype, self.activation, self.launch = \
            guard, out_dtype, activation, launch


NO_HOT = Hot(torch_private.never, None, None, None)
# Signature key -> closure (bounded, oldest dropped; clear() forgets them all); FAST.hot
# is the last plain call's Hot (replaced whole, never mutated).
FAST = Signatures(hot=NO_HOT, limit=512)


def clear() -> None:
    """Forget every recorded call (the next call of each signature takes the general path)."""
    FAST.clear(hot=NO_HOT)


def key(a, b, bias, out_dtype, activation) -> tuple:
    """The signature key (raises AttributeError/TypeError for arrays that are not torch's)."""
    ptrs = a.data_ptr() | b.data_ptr()
    bkey = None
    if bias is not None:
        ptrs |= bias.data_ptr()
        bkey = (bias.shape, bias.stride(), bias.dtype, bias.device)
    return (a.shape, a.stride(), b.shape, b.stride(), a.dtype, b.dtype, a.device,
            out_dtype, activation, bkey, ptrs & 15)


def record(k, a_t: bool, b_t: bool, shape, dtype, device, with_bias: bool, args=None,
           user=None, scales=None):
    """The closure for one signature: ``run(a, b, bias, scale_a=None, scale_b=None)``
    allocates C and launches ``k``. ``scales``: a float8 call's two scale arrays, as the
    general path passed them; a later call's None scale takes the recorded one (the
    general path's 1.0: the signature key tells None from a tensor, and calls with a
    Python number are never recorded).

    With ``args`` (what the general path launched ``k`` with: the operand views, bias, C)
    the launch is bound to their signature (:func:`ptxdsl.runtime.fastpath.bind`): the
    closure passes the operands' pointers (a view's pointer is its base's, so ``x.t()``
    is not rebuilt), C comes from the launcher's allocator, and the kernel's tensor maps
    are re-pointed by the bound launch; ``user`` = (a, b, out_dtype, activation) of a
    plain call also gives the closure a :class:`Hot` (``run.hot``). Otherwise (or where
    binding is refused) it calls ``k`` on the same views the general path passed."""
    import torch
    empty = torch.empty
    if args is not None:
        run = _bound(torch, k, args, shape, dtype, device, with_bias, user, scales)
        if run is not None:
            return run

    sa0, sb0 = scales if scales is not None else (None, None)

    def run(a, b, bias, sa=None, sb=None):     # where binding was refused: the kernel call
        c = empty(shape, dtype=dtype, device=device)
        extra = [bias] if with_bias else []
        if scales is not None:
            extra += [sa0 if sa is None else sa, sb0 if sb is None else sb]
        k(a.t() if a_t else a, b.t() if b_t else b, *extra, c)
        return c
    return run


def _bound(torch, k, args, shape, dtype, device, with_bias: bool, user=None, scales=None):
    from ...runtime import prepare, torch_private
    bound = prepare(k).bind(*args)
    if bound is None:
        return None
    empty = torch.empty
    out = args[-1]
    hooks, dev = torch_private.hooks(torch), out.get_device()
    alloc = hooks.allocator(shape, out.stride(), dtype, dev)
    cur_dev = hooks.current_device

    if scales is not None:          # float8: the scale pointers before C's; no Hot
        sa0, sb0 = scales

        def run(a, b, bias, sa=None, sb=None):
            c = alloc() if cur_dev() == dev else empty(shape, dtype=dtype, device=device)
            ps = ((sa0 if sa is None else sa).data_ptr(), (sb0 if sb is None else sb).data_ptr())
            if with_bias:
                bound(a.data_ptr(), b.data_ptr(), bias.data_ptr(), *ps, c.data_ptr())
            else:
                bound(a.data_ptr(), b.data_ptr(), *ps, c.data_ptr())
            return c
        run.hot = None
        return run
    if with_bias:
        def run(a, b, bias, sa=None, sb=None):
            c = alloc() if cur_dev() == dev else empty(shape, dtype=dtype, device=device)
            bound(a.data_ptr(), b.data_ptr(), bias.data_ptr(), c.data_ptr())
            return c
    else:
        def run(a, b, bias, sa=None, sb=None):
            c = alloc() if cur_dev() == dev else empty(shape, dtype=dtype, device=device)
            bound(a.data_ptr(), b.data_ptr(), c.data_ptr())
            return c
    run.hot = None
    if user is not None and not with_bias:
        a0, b0, out_dtype, activation = user
        if not (a0.requires_grad or b0.requires_grad):
            guard = hooks.guard((a0, b0))
            align = (a0.data_ptr() | b0.data_ptr()) & 15
            if guard is not torch_private.never:
                def plain(a, b):
                    pa, pb = a.data_ptr(), b.data_ptr()
                    if (pa | pb) & 15 != align:
                        return None
                    c = alloc() if cur_dev() == dev else empty(shape, dtype=dtype,
                                                               device=device)
                    bound(pa, pb, c.data_ptr())
                    return c
                run.hot = Hot(guard, out_dtype, activation, plain)
    return run


def remember(sig: tuple, run) -> None:
    FAST.add(sig, run)


__all__ = ["FAST", "Hot", "NO_HOT", "clear", "key", "record", "remember"]
