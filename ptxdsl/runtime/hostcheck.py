"""Is this call's host input valid? Checks that need no GPU and no driver.

The launcher's general path runs :func:`check_options` and :func:`check_output` on
every call it sees (the fast path only ever serves signatures the general path
accepted). :func:`precheck` runs every argument check there is without a driver, so
that on a machine with no usable GPU a bad argument is reported as what it is, not
as "no usable CUDA driver".
"""
from __future__ import annotations

import operator

from ..core.entry import raw_values
from ..core.errors import LaunchError, user_location
from .adapter import ArgProblem, classify, view_of
from .args import OPTIONS, KernelSignature, bind


def _int(value, what: str, sig: KernelSignature, *, minimum: int = 0) -> int:
    """``value`` as an int (numpy integers too) >= ``minimum``; strings, floats and bools
    are refused."""
    try:
        if isinstance(value, bool):
            raise TypeError
        v = operator.index(value)
    except TypeError:
        raise LaunchError(f"{sig.describe_call()}: {what} must be an int, got "
                          f"{type(value).__name__} {value!r}", user_location()) from None
    if v < minimum:
        raise LaunchError(f"{sig.describe_call()}: {what} must be >= {minimum}, got {v}",
                          user_location())
    return v


def check_options(sig: KernelSignature, kernel, kw: dict) -> dict:
    """The call's keyword options, checked: ``{"sync", "shared_mem", "cluster", "device",
    "raw"}``; ``raw``: the value of each raw parameter naming no dim, from its keyword,
    as :func:`ptxdsl.core.entry.raw_values` checks them for the interpreter."""
    raw_names = sig.raw_names
    bad = [k for k in kw if k not in OPTIONS and k not in raw_names]
    if bad:
        raw = (f", and its raw parameters by keyword ({', '.join(raw_names)})"
               if raw_names else "")
        raise LaunchError(f"{sig.describe_call()}: unknown keyword argument(s) "
                          f"{', '.join(bad)}; a launch takes the arrays positionally "
                          f"(inputs, then optionally outputs), the options "
                          f"{', '.join(OPTIONS)}{raw}", user_location())
    opts = {"raw": raw_values(sig.name, sig.raw, {k: kw[k] for k in raw_names if k in kw},
                              user_location()) if raw_names else {},
            "sync": bool(kw.get("sync", False)), "shared_mem": kw.get("shared_mem"),
            "cluster": kw.get("cluster"), "device": kw.get("device")}
    if opts["shared_mem"] is None:
        opts["shared_mem"] = int(getattr(kernel, "dynamic_shared", 0) or 0)
    else:
        opts["shared_mem"] = _int(opts["shared_mem"], "shared_mem= (dynamic shared memory "
                                  "bytes)", sig)
    if opts["device"] is not None:
        opts["device"] = _int(opts["device"], "device= (a CUDA device ordinal)", sig)
    if opts["cluster"] is None:
        opts["cluster"] = getattr(kernel, "cluster", None)
    if opts["cluster"] is not None:
        c = opts["cluster"]
        c = (c,) if not isinstance(c, (tuple, list)) else tuple(c)
        if not 1 <= len(c) <= 3:
            raise LaunchError(f"cluster= takes up to three positive ints, got "
                              f"{opts['cluster']!r}", user_location())
        c = tuple(_int(x, "cluster= (each dimension)", sig, minimum=1) for x in c)
        opts["cluster"] = c + (1,) * (3 - len(c))
        if opts["cluster"] == (1, 1, 1) and getattr(kernel, "cluster", None) is None:
            opts["cluster"] = None
    return opts


def check_output(sig: KernelSignature, i: int, obj, kind: str) -> None:
    """An output the caller passed must be writable (a read-only numpy array, such as a
    view of immutable ``bytes``, would be written through its pointer)."""
    if kind == "numpy" and not obj.flags.writeable:
        raise LaunchError(f"{sig.describe_call()}: output {sig.arg_names[i]} (argument "
                          f"{i + 1}) is a read-only numpy array; pass a writable array "
                          f"(e.g. np.empty_like(x), or x.copy())", user_location())


def precheck(kernel, args, kw) -> None:
    """Every check of a call that needs no driver: options, the number and kind of the
    arguments, host arrays against their Tiles (dtype, shape, named dims), writable
    outputs and the grid. Raises the first problem as a :class:`LaunchError`."""
    compiled = kernel.compile()
    sig = KernelSignature.of(kernel, compiled.program)
    kw = dict(kw)
    kw.pop("stream", None)
    check_options(sig, kernel, kw)
    n = len(args)
    if n not in (sig.n_in, sig.n_all):
        raise LaunchError(f"{sig.describe_call()}: takes {sig.n_in} input(s)"
                          + (f" and optionally {sig.n_out} output(s)" if sig.n_out else "")
                          + f", got {n} argument(s)", user_location())
    views = [None] * sig.n_all
    complete = True
    for i, obj in enumerate(list(args) + [None] * (sig.n_all - n)):
        role = "input" if i < sig.n_in else "output"
        where = f"{sig.describe_call()}: {role} {sig.arg_names[i]} (argument {i + 1})"
        if obj is None:
            if i < sig.n_in:
                raise LaunchError(f"{where} is None", user_location())
            continue
        kind = classify(obj)
        if not kind:
            raise LaunchError(f"{where} is a {type(obj).__name__}, not an array (pass a numpy "
                              f"array, a torch/cupy/jax array, or an object with "
                              f"__cuda_array_interface__ or __dlpack__)", user_location())
        if i >= sig.n_in:
            check_output(sig, i, obj, kind)
        if kind != "numpy":
            complete = False  # device arrays are read through the driver
            continue
        try:
            views[i] = view_of(obj, kind)
        except ArgProblem as exc:
            raise LaunchError(f"{where} {exc}", user_location()) from None
    if not complete:
        return
    binding = bind(sig, views)
    if 0 not in binding.dims.values():
        kernel.grid_for(binding.dims)  # a grid function must give ints
