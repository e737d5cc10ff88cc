"""What a kernel's ``.entry`` declares beyond its body: clusters, performance directives,
extern shared memory, raw parameters; validated once, at ``@kernel``.

=====================  ==============================================================
``cluster=(x, y, z)``  launches use ``cuLaunchKernelEx`` with these cluster dims (fast
                       path too); needs sm_90+, at most 16 CTAs (8 portable)
``raw_directives=``    ``[("maxntid", (384, 1, 1)), ("explicitcluster", ()),
                       ("reqnctapercluster", (2, 1, 1))]``: printed after the parameter
                       list as ``.maxntid 384, 1, 1`` etc.; names and value counts checked
                       (table below), and checked against ``block=`` and ``cluster=``
``extern_smem=``       ``"name"`` (``True``: ``"global_smem"``): declares
                       ``.extern .shared .align 128 .b8 name[];`` at module scope; the
                       body addresses it by that name (``ptx.inst.mov.u32(r, "name")``)
``smem=BYTES``         dynamic shared memory each launch provides (the size of the
                       extern array, or at least that of ``smem.alloc(dynamic=True)``)
``raw_params=``        ``[("u32", "M"), ...]``: pyptx's parameters. One naming a dim of the
                       specs (32-bit) is that dim's parameter (``ptx.param(u32, "M")``
                       reads it; the launcher fills it from the shapes); any other is
                       declared as given, after the specs' parameters: a scalar
                       (``.param .u32 K``) or an array, ``"b8.align64.array128"``
                       (``.param .align 64 .b8 tma_A[128]``, whose address
                       ``ptx.param(b64, "tma_A")`` reads). The caller passes their
                       values by keyword (``k.interpret(A, K=64)``; :func:`raw_values`)
=====================  ==============================================================
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import SourceLoc, TraceError
from .trace import parse_arch

__all__ = ["EntryOptions", "DIRECTIVES", "entry_options", "raw_values"]

# name -> (how many values: (min, max), needs sm_90 / PTX 7.8)
DIRECTIVES: dict[str, tuple[tuple[int, int], bool]] = {
    "maxntid": ((1, 3), False),
    "reqntid": ((1, 3), False),
    "minnctapersm": ((1, 1), False),
    "maxnreg": ((1, 1), False),
    "maxnctapersm": ((1, 1), False),
    "explicitcluster": ((0, 0), True),
    "reqnctapercluster": ((1, 3), True),
    "maxclusterrank": ((1, 1), True),
}

_RAW_TYPES = ("u32", "s32", "b32")
# pyptx's raw parameter types: a scalar type, then optionally .alignN and .arrayN
_RAW_DECL = re.compile(r"^([bsuf](?:8|16|32|64))(?:\.align(\d+))?(?:\.array(\d+))?$")


@dataclass(frozen=True)
class EntryOptions:
    cluster: tuple[int, int, int] | None = None
    directives: tuple[tuple[str, tuple[int, ...]], ...] = ()
    extern_smem: str | None = None
    smem: int | None = None
    raw_params: tuple[tuple[str, str], ...] = ()
    # raw params naming no dim: (name, type name, count, align), declared as given
    extra_params: tuple[tuple[str, str, int, int], ...] = ()

    def directive_lines(self) -> list[str]:
        """``.maxntid 384, 1, 1`` and friends, in the order given."""
        return [f".{n} {', '.join(map(str, v))}".rstrip() for n, v in self.directives]

    def has(self, name: str) -> bool:
        return any(n == name for n, _ in self.directives)

    @property
    def cluster_shape(self) -> tuple[int, int, int] | None:
        """CTAs per cluster of every launch: ``cluster=``, else ``.reqnctapercluster``
        (the driver launches clusters of a compile-time shape by itself), else None."""
        if self.cluster is not None:
            return tuple(self.cluster)
        for n, v in self.directives:
            if n == "reqnctapercluster":
                return tuple(v) + (1,) * (3 - len(v))
        return None

    @property
    def needs_ptx(self) -> tuple[int, int]:
        return (7, 8) if any(DIRECTIVES[n][1] for n, _ in self.directives) else (1, 0)


def _ints(v, what: str, loc, lo: int = 1) -> tuple[int, ...]:
    if isinstance(v, int) and not isinstance(v, bool):
        v = (v,)
    try:
        t = tuple(v)
    except TypeError:
        raise TraceError(f"{what} must be an int or a tuple of ints, got {v!r}", loc) from None
    if any(isinstance(x, bool) or not isinstance(x, int) or x < lo for x in t):
        raise TraceError(f"{what} must hold ints >= {lo}, got {v!r}", loc)
    return t


def entry_options(*, cluster, raw_directives, extern_smem, smem, raw_params, block, arch: str,
                  dim_names, maxntid: bool, min_ctas_per_sm, loc: SourceLoc) -> EntryOptions:
    """Check the options (see the module table) and return them normalised."""
    sm, _ = parse_arch(arch)
    nthreads = block[0] * block[1] * block[2]
    if cluster is not None:
        c = _ints(cluster, "cluster", loc)
        if not 1 <= len(c) <= 3:
            raise TraceError(f"cluster takes one to three ints, got {cluster!r}", loc)
        cluster = c + (1,) * (3 - len(c))
        if sm < 90:
            raise TraceError(f"cluster={cluster} needs sm_90 or newer; the kernel targets "
                             f"{arch}", loc)
        if cluster[0] * cluster[1] * cluster[2] > 16:
            raise TraceError(f"cluster {cluster} has {cluster[0] * cluster[1] * cluster[2]} "
                             f"CTAs; at most 16 (8 is portable)", loc)
    directives = []
    for item in raw_directives or ():
        try:
            name, values = item
        except (TypeError, ValueError):
            raise TraceError(f"raw_directives holds (name, values) pairs such as "
                             f"('maxntid', (384, 1, 1)), got {item!r}", loc) from None
        name = str(name).lstrip(".")
        if name not in DIRECTIVES:
            raise TraceError(f"raw directive {name!r} is not a PTX entry directive ptxdsl "
                             f"knows; use one of {', '.join(DIRECTIVES)}", loc)
        (lo, hi), cluster_only = DIRECTIVES[name]
        vals = _ints(values, f"raw directive .{name}", loc, lo=0 if name == "maxnreg" else 1)
        if not lo <= len(vals) <= hi:
            want = "no values" if hi == 0 else f"{lo} to {hi} values" if lo != hi else \
                f"{lo} value"
            raise TraceError(f"raw directive .{name} takes {want}, got {values!r}", loc)
        if cluster_only and sm < 90:
            raise TraceError(f".{name} needs sm_90 or newer; the kernel targets {arch}", loc)
        if any(n == name for n, _ in directives):
            raise TraceError(f"raw directive .{name} given twice", loc)
        dims = vals + (1,) * (3 - len(vals)) if hi == 3 else vals
        if name == "reqntid" and dims != tuple(block):
            raise TraceError(f".reqntid {dims} differs from block={tuple(block)}", loc)
        if name == "maxntid" and dims[0] * dims[1] * dims[2] < nthreads:
            raise TraceError(f".maxntid {dims} allows fewer threads than block="
                             f"{tuple(block)} launches", loc)
        if name == "reqnctapercluster" and cluster is not None and dims != cluster:
            raise TraceError(f".reqnctapercluster {dims} differs from cluster={cluster}", loc)
        if name == "explicitcluster" and cluster is None:
            raise TraceError(".explicitcluster: the kernel must be launched as clusters; give "
                             "cluster=(x, y, z) too", loc)
        directives.append((name, vals))
    names = {n for n, _ in directives}
    if (maxntid or min_ctas_per_sm is not None) and names & {"maxntid", "minnctapersm"}:
        raise TraceError("maxntid=/min_ctas_per_sm= and raw_directives both declare "
                         ".maxntid/.minnctapersm; give them one way", loc)
    if extern_smem is True:
        extern_smem = "global_smem"
    elif extern_smem is False or extern_smem is None:
        extern_smem = None
    elif not (isinstance(extern_smem, str) and extern_smem.isidentifier()):
        raise TraceError(f"extern_smem takes True or a PTX identifier, got {extern_smem!r}", loc)
    if smem is not None:
        if isinstance(smem, bool) or not isinstance(smem, int) or smem < 0:
            raise TraceError(f"smem= takes the bytes of dynamic shared memory per launch (an "
                             f"int >= 0), got {smem!r}", loc)
        if smem > 227 * 1024:
            raise TraceError(f"smem={smem} bytes: a CTA has at most 227 KiB (232448 bytes) of "
                             f"shared memory", loc)
    if extern_smem is not None and not smem:
        raise TraceError(f"extern_smem={extern_smem!r} needs smem=BYTES: the size each launch "
                         f"provides", loc)
    raw, extra = [], []
    for item in raw_params or ():
        try:
            t, name = item
        except (TypeError, ValueError):
            raise TraceError(f"raw_params holds (type, name) pairs such as ('u32', 'M'), got "
                             f"{item!r}", loc) from None
        if name in dim_names:
            if t not in _RAW_TYPES:
                raise TraceError(f"raw param {name!r}: type {t!r}; {name} is a named dim, "
                                 f"whose parameter is 32-bit ({', '.join(_RAW_TYPES)})", loc)
            raw.append((t, name))
            continue
        m = _RAW_DECL.match(t) if isinstance(t, str) else None
        if m is None or m.group(1) == "f8" or (m.group(2) and m.group(3) is None):
            raise TraceError(f"raw param {name!r}: type {t!r} is not a scalar type (u32, s64, "
                             f"f32, ...) or an array such as 'b8.align64.array128'", loc)
        if not (isinstance(name, str) and re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name)) or \
                any(name == x[0] for x in extra):
            raise TraceError(f"raw param name {name!r} is not a PTX identifier or is given "
                             f"twice", loc)
        count, align = int(m.group(3) or 1), int(m.group(2) or 0)
        if count < 1 or align & (align - 1) or (count > 1) != bool(m.group(3)):
            raise TraceError(f"raw param {name!r}: {t!r} needs a positive array length and a "
                             f"power-of-two alignment", loc)
        extra.append((name, m.group(1), count, align))
    return EntryOptions(cluster, tuple(directives), extern_smem, smem, tuple(raw), tuple(extra))


def raw_values(kernel: str, params, given: dict, loc) -> dict:
    """The bytes of each raw parameter naming no dim (``params``: the program's, kind
    ``"raw"``), from the call's keywords ``given``: a scalar's value as a numpy scalar of
    its type (an int in range for ``u``/``s``/``b`` types, a number for ``f`` types), an
    array's as bytes-like of exactly its size. Raises a LaunchError naming what is missing
    or wrong."""
    import numpy as np
    from .errors import LaunchError
    out = {}
    for p in params:
        want = f".{p.dtype.name}" + (f" [{p.count}]" if p.count > 1 else "")
        if p.name not in given:
            raise LaunchError(f"kernel {kernel}: raw parameter {p.name} ({want}) names no dim, "
                              f"so no tensor gives its value: pass it by keyword, "
                              f"{kernel}(..., {p.name}=...)", loc)
        v = given[p.name]
        if p.count > 1:
            try:
                b = np.frombuffer(memoryview(v).cast("B"), np.uint8)
            except TypeError:
                b = None
            if b is None or b.size != p.nbytes:
                raise LaunchError(f"kernel {kernel}: raw parameter {p.name} ({want}, "
                                  f"{p.nbytes} bytes) takes a bytes-like value of exactly "
                                  f"{p.nbytes} bytes, got {type(v).__name__}"
                                  f"{'' if b is None else f' of {b.size} bytes'}", loc)
            out[p.name] = b.copy()
            continue
        kind, bits = p.dtype.name[0], p.dtype.bits
        if kind == "f":
            ok = isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)
            lo = hi = None
        else:
            ok = isinstance(v, (int, np.integer)) and not isinstance(v, bool)
            lo = -(1 << (bits - 1)) if kind in "sb" else 0
            hi = (1 << bits) - 1 if kind in "ub" else (1 << (bits - 1)) - 1
            ok = ok and lo <= int(v) <= hi
        if not ok:
            rng = "a number" if lo is None else f"an int in [{lo}, {hi}]"
            raise LaunchError(f"kernel {kernel}: raw parameter {p.name} ({want}) takes {rng}, "
                              f"got {v!r}", loc)
        if kind == "f":
            out[p.name] = np.array(v, {16: np.float16, 32: np.float32, 64: np.float64}[bits])
        else:
            out[p.name] = np.array(int(v) & ((1 << bits) - 1), f"u{bits // 8}")
    return out
