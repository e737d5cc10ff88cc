"""Tensor-core helpers of kernel bodies: ``ptx.mma``, ``ptx.ldmatrix``, ``ptx.stmatrix``,
``ptx.movmatrix`` and the Ampere ``cp.async`` family under ``ptx.cp.async_``.

Each helper records exactly one instruction (checked against the table like any
``ptx.inst`` call):

=====================================  =====================================================
``ptx.mma(d, a, b, c)``                ``mma.sync.aligned.{shape}.{alayout}.{blayout}
                                       {.satfinite}.{dtype}.{atype}.{btype}.{ctype} d, a, b, c``
                                       (with :class:`~ptxdsl.dsl.fragments.Fragment` operands the
                                       shape, types and layouts come from their layouts)
``ptx.mma.sync(shape=(16, 8, 16),      the same instruction, pyptx's spelling (an alias)
dtype_d=, dtype_a=, ..., d=, a=, b=,
c=, a_layout=, b_layout=)``
``ptx.ldmatrix(dst, src, trans=)``     ``ldmatrix.sync.aligned.m8n8.x{len(dst)}{.trans}
                                       .shared.b16 dst, [src]`` (pyptx: ``layout="m8n8.x4"``)
``ptx.stmatrix(dst, src, trans=)``     ``stmatrix.sync.aligned.m8n8.x{len(src)}{.trans}
                                       .shared.b16 [dst], src``
``ptx.movmatrix(d, a)``                ``movmatrix.sync.aligned.m8n8.trans.b16 d, a``
``ptx.cp.async_.cg(dst, src, 16[, n])``  ``cp.async.cg.shared.global [dst], [src], 16[, n]``
                                       (``.ca`` likewise; ``n < 16`` zero-fills the rest)
``ptx.cp.async_.commit_group()``       ``cp.async.commit_group``
``ptx.cp.async_.wait_group(n)``        ``cp.async.wait_group n``
=====================================  =====================================================
"""
from __future__ import annotations

from ..core import ir
from ..core.errors import TraceError, user_location
from .fragments import Fragment
from ..core.trace import current

__all__ = ["mma", "ldmatrix", "stmatrix", "movmatrix", "async_copy"]


def _tname(t) -> str | None:
    if t is None:
        return None
    return getattr(t, "name", str(t)).lstrip(".")


def _shape(shape) -> str | None:
    if shape is None or isinstance(shape, str):
        return shape
    m, n, k = shape
    return f"m{m}n{n}k{k}"


def _regs(x):
    if isinstance(x, Fragment):
        return x
    if hasattr(x, "__ptx_regs__"):
        return list(x.__ptx_regs__())
    return list(x) if isinstance(x, (list, tuple)) else x


class _Mma:
    """``ptx.mma(d, a, b, c=None, ...)``: one warp-wide ``mma.sync``; ``ptx.mma.sync`` is
    pyptx's keyword spelling of the same call."""

    def __call__(self, d, a, b, c=None, *, shape=None, dtype=None, atype=None, btype=None,
                 ctype=None, alayout=None, blayout=None, satfinite: bool = False,
                 bitop: str | None = None, pred=None) -> None:
        """Record ``mma.sync.aligned...`` with ``c`` defaulting to ``d`` (accumulate in place).

        Anything not given is read from Fragment operands' layouts; with plain
        register lists give ``shape`` (``"m16n8k16"`` or ``(16, 8, 16)``) and the
        four types. Layouts default to ``.row.col``. ``.b1`` inputs take
        ``bitop="xor"`` or ``"and"`` (recorded as ``.xor.popc`` / ``.and.popc``).
        """
        c = d if c is None else c
        lay = {k: v.layout for k, v in (("a", a), ("b", b), ("c", c), ("d", d))
               if isinstance(v, Fragment)}
        shape = _shape(shape) or next((x.shape for x in lay.values()), None)
        types = {"d": _tname(dtype), "a": _tname(atype), "b": _tname(btype),
                 "c": _tname(ctype)}
        for k in types:
            if types[k] is None and k in lay:
                types[k] = lay[k].elem
        if types["c"] is None and types["d"] is not None and c is d:
            types["c"] = types["d"]
        if types["d"] is None and types["c"] is not None and c is d:
            types["d"] = types["c"]
        missing = [k for k, v in types.items() if v is None]
        if shape is None or missing:
            what = ", ".join(["shape"] * (shape is None) + [f"{k}type" for k in missing])
            raise TraceError(f"ptx.mma cannot tell the {what} of this mma from plain register "
                             f"lists: pass Fragments (ptxdsl.dsl.fragments.fragment) or shape= and "
                             f"dtype=/atype=/btype=/ctype=", user_location())
        alayout = alayout or (lay["a"].order if "a" in lay else "row")
        blayout = blayout or (lay["b"].order if "b" in lay else "col")
        chain = ["mma", "sync", "aligned", shape, alayout, blayout]
        if satfinite:
            chain.append("satfinite")
        chain += [types["d"], types["a"], types["b"], types["c"]]
        if bitop:
            chain += [bitop, "popc"]
        current("ptx.mma").inst(chain, (_regs(d), _regs(a), _regs(b), _regs(c)), guard=pred)

    @staticmethod
    def sync(*, shape, d, a, b, c=None, dtype_d=None, dtype_a=None, dtype_b=None,
             dtype_c=None, a_layout: str = "row", b_layout: str = "col",
             satfinite: bool = False, pred=None) -> None:
        """pyptx's spelling: ``ptx.mma.sync(shape=(16, 8, 16), dtype_d=f32, dtype_a=bf16,
        dtype_b=bf16, dtype_c=f32, d=acc, a=a, b=b, c=acc, a_layout="row",
        b_layout="col")``; records the same instruction as :meth:`__call__`."""
        mma(d, a, b, c, shape=shape, dtype=dtype_d, atype=dtype_a, btype=dtype_b,
            ctype=dtype_c, alayout=a_layout, blayout=b_layout, satfinite=satfinite, pred=pred)


mma = _Mma()


def _matrix_chain(op: str, n: int, layout: str | None, trans: bool, space: str) -> list[str]:
    parts = [p for p in (layout or "").split(".") if p]
    shape = next((p for p in parts if p.startswith("m")), "m8n8")
    num = next((p for p in parts if p.startswith("x")), f"x{n}")
    if num != f"x{n}":
        raise TraceError(f"{op} {num} moves {num[1:]} matrices, one register each, but "
                         f"{n} registers were given", user_location())
    chain = [op, "sync", "aligned", shape, num]
    if trans or "trans" in parts:
        chain.append("trans")
    return chain + [space, "b16"]


def ldmatrix(dst, src, *, layout: str | None = None, trans: bool = False,
             space: str = "shared", pred=None) -> None:
    """``ldmatrix.sync.aligned.m8n8.x{len(dst)}{.trans}.shared.b16 dst, [src]``.

    ``dst``: 1, 2 or 4 ``.b32`` registers (or a Fragment); ``src``: this lane's row
    address (lanes ``8i..8i+7`` name the rows of matrix ``i``). pyptx's
    ``layout="m8n8.x4"`` is accepted.
    """
    regs = _regs(dst)
    n = len(regs)
    current("ptx.ldmatrix").inst(_matrix_chain("ldmatrix", n, layout, trans, space),
                                 (regs, _address(src)), guard=pred)


def stmatrix(dst, src, *, layout: str | None = None, trans: bool = False,
             space: str = "shared", pred=None) -> None:
    """``stmatrix.sync.aligned.m8n8.x{len(src)}{.trans}.shared.b16 [dst], src`` (sm_90)."""
    regs = _regs(src)
    current("ptx.stmatrix").inst(_matrix_chain("stmatrix", len(regs), layout, trans, space),
                                 (_address(dst), regs), guard=pred)


def movmatrix(d, a, *, pred=None) -> None:
    """``movmatrix.sync.aligned.m8n8.trans.b16 d, a``: transpose an 8x8 fragment."""
    current("ptx.movmatrix").inst(["movmatrix", "sync", "aligned", "m8n8", "trans", "b16"],
                                  (d, a), guard=pred)


def _address(x):
    if isinstance(x, (ir.Addr, ir.Reg)) or hasattr(x, "__ptx_addr__"):
        return x
    raise TraceError(f"expected a shared-memory address (ptx.addr(...) or a register), got "
                     f"{type(x).__name__}", user_location())


class async_copy:
    """Ampere ``cp.async`` (global -> shared, 4/8/16 bytes), as ``ptx.cp.async_.*``."""

    @staticmethod
    def cg(dst, src, size: int = 16, src_size=None, *, pred=None) -> None:
        """``cp.async.cg.shared.global [dst], [src], size[, src_size]`` (16 bytes, L2 only)."""
        args = (dst, src, size) if src_size is None else (dst, src, size, src_size)
        current("ptx.cp.async_.cg").inst(["cp", "async", "cg", "shared", "global"], args,
                                         guard=pred)

    @staticmethod
    def ca(dst, src, size: int = 16, src_size=None, *, pred=None) -> None:
        """``cp.async.ca.shared.global [dst], [src], size[, src_size]`` (4, 8 or 16 bytes)."""
        args = (dst, src, size) if src_size is None else (dst, src, size, src_size)
        current("ptx.cp.async_.ca").inst(["cp", "async", "ca", "shared", "global"], args,
                                         guard=pred)

    @staticmethod
    def commit_group(*, pred=None) -> None:
        """``cp.async.commit_group``."""
        current("ptx.cp.async_.commit_group").inst(["cp", "async", "commit_group"], (),
                                                   guard=pred)

    @staticmethod
    def wait_group(n: int = 0, *, pred=None) -> None:
        """``cp.async.wait_group n``."""
        current("ptx.cp.async_.wait_group").inst(["cp", "async", "wait_group"], (n,),
                                                 guard=pred)

    @staticmethod
    def wait_all(*, pred=None) -> None:
        """``cp.async.wait_all``."""
        current("ptx.cp.async_.wait_all").inst(["cp", "async", "wait_all"], (), guard=pred)
