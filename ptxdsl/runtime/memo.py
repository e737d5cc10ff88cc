"""Repeat calls of an op: its call -> a guard -> its bound launches, for every op.

An op of ``ptxdsl.ops`` is a function of a few tensors and a few plain values (eps, a
flag, a dtype). Its first call of a signature takes the op's general path, which
checks everything, plans, builds and launches its kernels; with CUDA torch tensors it
then hands back a :class:`Recording` of what it did: each kernel with the arguments it
was launched with and, for each pointer argument, where a repeat call's pointer comes
from (:func:`tensor`, :func:`output`, :func:`scratch` or a constant), the outputs it
allocated, and what the call returns. :meth:`Memo.record` turns that into an *entry*:
each launch bound to its signature (``Launcher.bind``), an allocator per output, and
two functions generated for this entry (a few lines of Python with the slots, the
sources and the constants written out):

* ``hot(*tensors, *values)``: the entry's guard (torch's C++ ``TensorGuards`` over the
  present tensors: type, dtype, device, sizes, strides, ``requires_grad``; the absent
  ones None; every plain value equal), then ``run``;
* ``run``: one ``data_ptr()`` per tensor, the 16-byte alignment of the pointers (which
  the guard does not see, and the kernel's vector accesses were chosen for), grad mode
  (only where the recorded tensors required grad: the call was made under
  ``no_grad``), the outputs from the launcher's allocator on torch's current device
  (``torch.empty_strided`` on the tensors' device when that is another), the scratch,
  and the bound launches. It returns None (a miss) where the alignment or grad mode
  differ.

A call of an op tries its memo's :attr:`Memo.hot` (the entry used last) first, then
:meth:`Memo.lookup` (the signature key: shape, strides, dtype, device and
``requires_grad`` of each tensor, their alignment, the plain values), then its general
path: at most two lookups before a launch.

Entries are replaced whole and never mutated, so a thread reads an old or a new one.
"""
from __future__ import annotations

import sys
import threading
from dataclasses import dataclass, field
from functools import partial
from typing import Callable

from . import torch_private
from .launcher import prepare

__all__ = ["Launch", "Memo", "Recording", "output", "scratch", "tensor", "value"]


def tensor(i: int) -> str:
    """The call's tensor in slot ``i``: its pointer (a launch argument) or itself (a result)."""
    return f"t{i}"


def output(j: int) -> str:
    """The ``j``-th output the entry allocates: its pointer, or itself (a result)."""
    return f"o{j}"


def value(k: int) -> str:
    """The call's plain value in slot ``k`` (a result, e.g. the static scale given back)."""
    return f"s{k}"


def scratch(offset: int = 0) -> str:
    """The recording's scratch buffer (:attr:`Recording.scratch`), ``offset`` bytes in."""
    return f"(w + {int(offset)})" if offset else "w"


@dataclass(frozen=True)
class Launch:
    """One kernel launch of a recording."""

    kernel: object     # the Kernel
    args: tuple        # what the general path launched it with (binds the launcher's entry)
    order: tuple       # per pointer argument: tensor(i) / output(j) / scratch(..) / an int


@dataclass(frozen=True)
class Recording:
    """What an op's general path did, for its memo to redo (see the module docstring)."""

    launches: tuple                 # Launch, in order
    outputs: tuple = ()             # the tensors it allocated (each gives shape, strides, dtype)
    result: object = None           # tensor(i) / output(j) / value(k), or a tuple of them
    scratch: Callable | None = None  # () -> (holder, base address): the stream's scratch
    keep: tuple = ()                # what constant pointers point into (lives with the entry)


@dataclass(frozen=True)
class Entry:
    """One recorded signature: its generated functions, their source (for tests and the
    curious), and what they point into (constants, the bound launches)."""

    hot: Callable
    run: Callable
    source: str
    keep: tuple = field(default=(), repr=False)


def _miss(*args):
    return None


class Memo:
    """The recorded calls of one op: ``n_tensors`` tensor slots (None where an optional
    tensor is absent) then ``n_values`` plain values, in the order the op passes them to
    :attr:`hot` and :meth:`lookup`. Bounded (past ``limit`` entries the oldest is
    dropped) and clearable."""

    __slots__ = ("name", "n_tensors", "n_values", "hot", "entries", "limit", "_lock")

    def __init__(self, name: str, n_tensors: int, n_values: int, *, limit: int = 4096):
        self.name, self.n_tensors, self.n_values = name, n_tensors, n_values
        self.hot: Callable = _miss   # the entry used last: hot(*tensors, *values)
        self.entries: dict = {}
        self.limit = limit
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.entries)

    def clear(self) -> None:
        """Forget every entry (the next call of each signature takes the general path)."""
        with self._lock:
            self.entries.clear()
            self.hot = _miss

    def key(self, args: tuple):
        """The signature key of a call (raises AttributeError/TypeError where a tensor
        slot holds something that is not a torch tensor)."""
        n = self.n_tensors
        parts, ptrs = [], 0
        for t in args[:n]:
            if t is None:
                parts.append(None)
            else:
                parts.append((t.shape, t.stride(), t.dtype, t.device, t.requires_grad))
                ptrs |= t.data_ptr()
        return (tuple(parts), ptrs & 15, args[n:])

    def lookup(self, *args):
        """The call's result through the entry of its signature, or None (no entry, not
        torch tensors, or a miss); the entry found becomes :attr:`hot`."""
        try:
            e = self.entries.get(self.key(args))
        except (AttributeError, TypeError):
            return None
        if e is None:
            return None
        self.hot = e.hot
        return e.run(*args)

    def record(self, args: tuple, rec: Recording) -> Entry | None:
        """Make the entry for the call ``args`` from what its general path did, keep it
        and make it :attr:`hot`. None (nothing kept) where a launch cannot be bound (not
        torch tensors, a kernel without fast-path entries)."""
        try:
            key = self.key(args)
        except (AttributeError, TypeError):
            return None
        bound = []
        for launch in rec.launches:
            run = prepare(launch.kernel).bind(*launch.args)
            if run is None:
                return None
            bound.append(run)
        entry = _build(self, args, rec, bound)
        with self._lock:
            if key not in self.entries and len(self.entries) >= self.limit:
                self.entries.pop(next(iter(self.entries)))
            entry = self.entries.setdefault(key, entry)
        self.hot = entry.hot
        return entry


def _build(memo: Memo, args: tuple, rec: Recording, bound: list) -> Entry:
    """Generate the entry's ``hot`` and ``run`` (see the module docstring)."""
    torch = sys.modules["torch"]
    nt = memo.n_tensors
    tensors, values = args[:nt], args[nt:]
    present = [i for i, t in enumerate(tensors) if t is not None]
    absent = [i for i, t in enumerate(tensors) if t is None]
    hooks = torch_private.hooks(torch)
    dev = bound[0].device  # outputs come from the allocator when it is torch's current one
    g = {"__name__": f"ptxdsl.memo.{memo.name}", "GUARD": hooks.guard(
        tuple(tensors[i] for i in present)), "CUR_DEV": hooks.current_device, "DEV": dev,
         "GRAD": torch.is_grad_enabled, "SCRATCH": rec.scratch}
    align = 0
    for i in present:
        align |= tensors[i].data_ptr()
    g["ALIGN"] = align & 15
    params = ", ".join([f"t{i}" for i in range(nt)] + [f"s{k}" for k in range(len(values))])
    body = [f"    p{i} = t{i}.data_ptr()" for i in present]
    if present:
        body.append(f"    if ({' | '.join(f'p{i}' for i in present)}) & 15 != ALIGN:")
        body.append("        return None")
    if any(tensors[i].requires_grad for i in present):
        body += ["    if GRAD():", "        return None"]  # recorded under no_grad
    if rec.outputs:
        body.append("    if CUR_DEV() == DEV:")
        for j, o in enumerate(rec.outputs):
            g[f"A{j}"] = hooks.allocator(o.shape, o.stride(), o.dtype, dev)
            g[f"E{j}"] = partial(torch.empty_strided, tuple(o.shape), tuple(o.stride()),
                                 dtype=o.dtype, device=o.device)
            body.append(f"        o{j} = A{j}()")
        body.append("    else:")
        body += [f"        o{j} = E{j}()" for j in range(len(rec.outputs))]
    if rec.scratch is not None:
        body.append("    h, w = SCRATCH()")

    def ptr(src) -> str:
        if isinstance(src, int):
            return str(src)
        if src.startswith("t"):
            return "p" + src[1:]
        if src.startswith("o"):
            return f"{src}.data_ptr()"
        return src  # the scratch
    for k, (launch, run) in enumerate(zip(rec.launches, bound)):
        g[f"L{k}"] = run
        body.append(f"    L{k}({', '.join(ptr(s) for s in launch.order)})")
    res = rec.result
    body.append("    return " + (", ".join(res) if isinstance(res, tuple) else res))
    checks = [f"t{i} is not None" for i in absent]
    for k, v in enumerate(values):
        g[f"S{k}"] = v
        checks.append(f"s{k} != S{k}")
    hot = [f"def hot({params}):"]
    if checks:
        hot += [f"    if {' or '.join(checks)}:", "        return None"]
    hot += [f"    if not GUARD({', '.join(f't{i}' for i in present)}):", "        return None"]
    src = "\n".join(hot + body + ["", f"def run({params}):"] + body) + "\n"
    exec(compile(src, f"<ptxdsl memo for {memo.name}>", "exec"), g)  # noqa: S102
    return Entry(g["hot"], g["run"], src, (rec.keep, bound))
