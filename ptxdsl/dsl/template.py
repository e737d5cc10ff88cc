"""Template parameters of ``@kernel`` bodies and ``arch="auto"`` (pyptx's spellings).

A keyword-only parameter with a default (``def gemm(A, B, C, *, BM=128, BN=256)``) is a
template parameter: its value is a Python value while tracing (``reg.array(f32, BM //
32)``, ``for i in range(UNROLL)``), so each set of values is its own PTX, traced once and
cached on the kernel. ``k.ptx(BM=64)``, ``k.compile(BM=64)`` and ``k.module(BM=64)``
pick one; values not given take their defaults.

Keywords that name a dim of the kernel's Tiles (``k.ptx(M=4096)``, pyptx's shape
keywords) are accepted and checked (positive ints), but they do not change the PTX:
ptxdsl passes named dims to the kernel as ``.param .u32`` values at launch, so one PTX
serves every size. Any other keyword is a ``TypeError`` naming the kernel's template
parameters and dims.
"""
from __future__ import annotations

import inspect

from ..core.errors import TraceError, TraceTypeError, user_location

__all__ = ["template_params", "bind_template", "auto_arch", "pyptx_version"]


def template_params(fn, loc) -> dict:
    """``{name: default}`` of ``fn``'s keyword-only parameters; one without a default
    is refused (a template value must be known at trace time)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return {}
    out = {}
    for name, p in params.items():
        if p.kind is p.KEYWORD_ONLY:
            if p.default is p.empty:
                raise TraceError(f"keyword-only parameter {name!r} of kernel {fn.__name__} "
                                 f"needs a default: keyword-only parameters are template "
                                 f"values baked in at trace time (def k(..., *, {name}=128))",
                                 loc)
            out[name] = p.default
        elif p.kind is p.VAR_KEYWORD:
            raise TraceError(f"kernel {fn.__name__} takes **{name}: name each template "
                             f"parameter as a keyword-only parameter with a default", loc)
    return out


def bind_template(k, given: dict) -> dict:
    """The template values of one trace: ``given`` over the defaults, after dropping the
    named dims (checked). Unknown names raise ``TypeError``."""
    values = dict(k._template)
    for name, v in given.items():
        if name in values:
            values[name] = v
        elif name in k.dim_names:
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise TraceError(f"dim {name} of kernel {k.name} is a positive int, got "
                                 f"{v!r}", user_location())
        else:
            have = ", ".join(sorted(values)) or "none"
            dims = ", ".join(k.dim_names) or "none"
            raise TraceTypeError(f"kernel {k.name} has no template parameter or dim named "
                                 f"{name!r} (its template parameters: {have}; its named "
                                 f"dims: {dims})", user_location())
    for name, v in values.items():
        try:
            hash(v)
        except TypeError:
            raise TraceTypeError(f"template value {name}={v!r} of kernel {k.name} must be "
                                 f"hashable (it keys the kernel's cache of traced forms)",
                                 user_location()) from None
    return values


def auto_arch() -> str:
    """The target of GPU 0: ``sm_90a`` / ``sm_100a`` on the parts whose features need the
    ``a`` target (Hopper, datacenter Blackwell), ``sm_XY`` otherwise."""
    try:
        from ..runtime import driver
        info = driver.get().device(0) if driver.gpu_available() else None
    except ImportError:
        info = None
    if info is None:
        raise TraceError("arch='auto' reads the arch of GPU 0, and no GPU is available to "
                         "this process; name the target, e.g. @kernel(arch='sm_90a')",
                         user_location())
    cap = info.cc[0] * 10 + info.cc[1]
    return f"sm_{cap}a" if cap in (90, 100, 101) else f"sm_{cap}"


def pyptx_version(arch: str) -> tuple[int, int]:
    """The PTX ISA version pyptx 0.1.1 prints for ``arch`` (``style="pyptx"`` kernels
    print at least this): 8.8 for sm_100/sm_101, 8.7 for sm_12x, else 8.5."""
    if arch.startswith(("sm_100", "sm_101")):
        return (8, 8)
    return (8, 7) if arch.startswith("sm_12") else (8, 5)
