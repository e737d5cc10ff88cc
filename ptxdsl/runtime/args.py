"""Kernel arguments against the kernel: whether each array (read by
:mod:`ptxdsl.runtime.adapter`, the one framework adapter) fits the kernel's ``Tile``
specs, the named dims and strides the arguments imply, and the alignment the kernel's
vector accesses need of each tensor.

Everything here is pure Python and testable without a GPU; every refusal is a
:class:`LaunchError` that names the kernel, the argument and what would be right.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..core.errors import LaunchError, user_location
from ..core.types import PtxType
from .adapter import _ITEMSIZE, ArgView

# The keyword options of a launch (checked in :mod:`.hostcheck`); a raw parameter may not
# take one of these names, since its value comes by keyword too.
OPTIONS = ("stream", "sync", "shared_mem", "cluster", "device")

__all__ = ["Binding", "KernelSignature", "OPTIONS", "accepts_dtype", "bind",
           "dtype_name_for_tile", "vector_alignment"]

# ---------------------------------------------------------------------- dtypes
# Tile dtype -> the array dtypes that hold it. ``.b`` types take any dtype of
# their size. numpy has no bfloat16: bf16 tiles take uint16 bit patterns from
# numpy (the interpreter's convention) and bfloat16 from torch/ml_dtypes/jax.
_ACCEPT = {
    "f32": ("float32",), "tf32": ("float32",), "f64": ("float64",), "f16": ("float16",),
    "bf16": ("bfloat16",), "s8": ("int8",), "u8": ("uint8", "bool"), "s16": ("int16",),
    "u16": ("uint16",), "s32": ("int32",), "u32": ("uint32",), "s64": ("int64",),
    "u64": ("uint64",), "f16x2": ("uint32",), "bf16x2": ("uint32",),
    # 8-bit floats: torch's float8 dtypes and ml_dtypes' (numpy); raw bytes for numpy,
    # as bf16 takes uint16 there.
    "e4m3": ("float8_e4m3fn",), "e5m2": ("float8_e5m2",),
}


def accepts_dtype(tile: PtxType, name: str, kind: str) -> bool:
    """Whether an array of dtype ``name`` (from framework ``kind``) fits a Tile of ``tile``."""
    if tile.kind == "b":
        return _ITEMSIZE.get(name, 0) * 8 == tile.bits
    ok = _ACCEPT.get(tile.name, ())
    if name in ok:
        return True
    return kind == "numpy" and (tile.name == "bf16" and name == "uint16"
                                or tile.name in ("e4m3", "e5m2") and name == "uint8")


def single_dtype(tile: PtxType) -> bool:
    """Whether torch/cupy arrays of exactly one dtype fit a Tile of ``tile``."""
    return tile.kind != "b" and len(_ACCEPT.get(tile.name, ())) == 1


def dtype_name_for_tile(tile: PtxType) -> str:
    """The dtype ptxdsl allocates for an output of ``tile``."""
    if tile.kind == "b":
        return {8: "uint8", 16: "uint16", 32: "uint32", 64: "uint64"}[tile.bits]
    return _ACCEPT[tile.name][0]


def _hint_for(tile: PtxType, name: str) -> str:
    want = _ACCEPT.get(tile.name)
    if tile.kind == "b":
        return f"any {tile.bits}-bit dtype"
    hint = " or ".join(want or (tile.name,))
    if tile.kind in ("u", "s") and name in ("int8", "uint8", "int16", "uint16", "int32", "uint32",
                                            "int64", "uint64"):
        other = ("s" if tile.kind == "u" else "u") + str(tile.bits)
        if _ITEMSIZE.get(name, 0) * 8 == tile.bits:
            return (f"{hint} (signedness differs: declare the Tile as {other} or "
                    f"b{tile.bits}, or view the array as {hint})")
    return hint


# ---------------------------------------------------------------------- the kernel side
@dataclass
class KernelSignature:
    """What a kernel's arguments must look like, from its specs and traced program."""

    name: str
    arg_names: tuple[str, ...]        # inputs then outputs
    specs: tuple                      # Tile per argument
    n_in: int
    params: tuple                     # ir.Param, in PTX order
    align: tuple[int, ...]            # bytes each tensor's vector accesses need (1: none)
    align_why: tuple[str, ...]        # the widest vector instruction per tensor
    dim_names: tuple[str, ...]
    stride_names: tuple[str, ...]
    raw: tuple = ()                   # ir.Param of each raw parameter naming no dim

    @property
    def raw_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.raw)

    @property
    def n_all(self) -> int:
        return len(self.specs)

    @property
    def n_out(self) -> int:
        return self.n_all - self.n_in

    def describe_call(self) -> str:
        ins = ", ".join(self.arg_names[:self.n_in]) or "nothing"
        outs = ", ".join(self.arg_names[self.n_in:]) or "nothing"
        return f"{self.name}({ins}) -> {outs}"

    @classmethod
    def of(cls, kernel, program) -> "KernelSignature":
        ptrs = [p for p in program.params if p.kind == "ptr"]
        specs = tuple(kernel.in_specs) + tuple(kernel.out_specs)
        if len(ptrs) != len(specs):
            raise LaunchError(f"kernel {kernel.name}: the traced program has {len(ptrs)} pointer "
                              f"parameters for {len(specs)} Tile specs")
        names = tuple(p.tensor or p.name.removesuffix("_ptr") for p in ptrs)
        need = vector_alignment(program)
        align = tuple(need.get(n, (1, ""))[0] for n in names)
        why = tuple(need.get(n, (1, ""))[1] for n in names)
        for p in program.params:
            if p.kind == "raw" and p.name in OPTIONS:
                raise LaunchError(f"kernel {kernel.name}: raw parameter {p.name} has the name "
                                  f"of a launch option ({', '.join(OPTIONS)}), so a call "
                                  f"could not pass its value by keyword; rename it")
            if p.kind not in ("ptr", "dim", "stride", "tmap", "raw"):
                raise LaunchError(f"kernel {kernel.name}: parameter {p.name} is of kind "
                                  f"{p.kind!r}, which this runtime cannot fill")
        return cls(kernel.name, names, specs, len(kernel.in_specs), tuple(program.params),
                   align, why, tuple(kernel.dim_names),
                   tuple(getattr(kernel, "stride_names", ())),
                   tuple(p for p in program.params if p.kind == "raw"))


def vector_alignment(program) -> dict[str, tuple[int, str]]:
    """Per tensor argument, the byte alignment its global vector accesses need.

    A forward taint analysis over the IR: a register read from a tensor's
    pointer parameter, and every register computed from it, carries that
    tensor; a memory access (a table entry with ``access``: ld, st, atom, red) of
    ``.v2``/``.v4`` (or a 16-byte type) whose address register carries it needs the
    tensor's address to be a multiple of the access width, an entry with an ``extent``
    (discard's 128-byte line) a multiple of that. Over-approximate by design (a
    register mixing two pointers taints both), which can only ask for more alignment
    than needed.
    """
    from ..core import ir
    instrs = list(program.walk())
    taint: dict = {}
    for ins in instrs:
        if ins.match.spec.access == "read" and ins.match.chosen.get("space") == "param":
            for op in ins.operands:
                if isinstance(op, ir.Addr) and isinstance(op.base, ir.Symbol):
                    pname = op.base.name
                    for p in program.params:
                        if p.name == pname and p.kind == "ptr":
                            for d in ins.dests():
                                taint.setdefault(d, set()).add(p.tensor or pname)
    changed = True
    while changed:  # loops carry taint backwards in program order: iterate to a fixpoint
        changed = False
        for ins in instrs:
            srcs = set()
            for r in ins.sources():
                srcs |= taint.get(r, set())
            if not srcs:
                continue
            for d in ins.dests():
                cur = taint.setdefault(d, set())
                if not srcs <= cur:
                    cur |= srcs
                    changed = True
    need: dict[str, tuple[int, str]] = {}
    for ins in instrs:
        m = ins.match
        if m.spec.access is None and not m.spec.extent:
            continue
        space = m.chosen.get("space")
        if space not in (None, "global"):
            continue
        t = m.type
        width = m.spec.extent or m.vector * (t.bytes if t is not None else 1)
        if width <= 1:
            continue
        for op in ins.operands:
            if isinstance(op, ir.Addr) and isinstance(op.base, ir.Reg):
                for name in taint.get(op.base, ()):
                    if width > need.get(name, (1, ""))[0]:
                        need[name] = (width, m.text)
    return need


# ---------------------------------------------------------------------- binding
@dataclass
class Binding:
    """Named dims and strides fixed by the arguments, and the device they live on."""

    dims: dict[str, int]
    strides: dict[str, int]
    device: int                                   # -1: only host arrays
    out_shapes: list[tuple] = field(default_factory=list)


def _fail(sig: KernelSignature, i: int | None, text: str) -> LaunchError:
    if i is None:
        return LaunchError(f"{sig.describe_call()}: {text}", user_location())
    role = "input" if i < sig.n_in else "output"
    return LaunchError(f"{sig.describe_call()}: {role} {sig.arg_names[i]} (argument {i + 1}) "
                       f"{text}", user_location())


def _contiguous_expect(shape: tuple) -> list[int]:
    out, acc = [0] * len(shape), 1
    for i in range(len(shape) - 1, -1, -1):
        out[i] = acc
        acc *= shape[i]
    return out


def _check_layout(sig, i, view: ArgView, spec) -> int | None:
    """Contiguity (or inner contiguity with a named stride); returns the row stride."""
    shape = view.shape
    if view.size == 0:
        return _contiguous_expect(shape)[0] if shape else None
    strides = view.strides
    expect = _contiguous_expect(shape)
    named = getattr(spec, "stride", None)
    if strides is None:  # C-contiguous by declaration
        return expect[0] if named else None
    tma = getattr(spec, "tma", None)
    if tma is not None and tma.strided and strides[-1] == 1 and min(strides) >= 0:
        return None      # the tensor map encodes every stride (TMA(strided=True))
    first = 1 if named else 0
    bad = [ax for ax in range(first, len(shape)) if shape[ax] != 1 and strides[ax] != expect[ax]]
    if bad:
        if named:
            raise _fail(sig, i, f"has strides {strides} (elements) for shape {shape}: with "
                        f"Tile(..., stride={named!r}) the inner dims must be contiguous (last "
                        f"stride 1); pass a .contiguous() copy")
        raise _fail(sig, i, f"is not contiguous (strides {strides} in elements for shape "
                    f"{shape}; row-major needs {tuple(expect)}): pass .contiguous() / "
                    f"np.ascontiguousarray(...), or declare Tile(..., stride='name') to accept "
                    f"a row stride")
    if not named:
        return None
    row = strides[0] if shape[0] > 1 else expect[0]
    if row < 0:
        raise _fail(sig, i, f"has a negative row stride {row}")
    return row


def bind(sig: KernelSignature, views: list[ArgView | None], *, host_ok: bool = True) -> Binding:
    """Check every view against its Tile and infer the named dims and strides.

    ``views[i]`` is None for an output ptxdsl will allocate. Raises
    :class:`LaunchError` for the first problem found.
    """
    dims: dict[str, int] = {}
    first_seen: dict[str, str] = {}
    strides: dict[str, int] = {}
    stride_seen: dict[str, str] = {}
    devices: dict[int, str] = {}
    for i, (view, spec) in enumerate(zip(views, sig.specs)):
        if view is None:
            continue
        if view.kind == "torch" and view.device < 0:
            raise _fail(sig, i, f"is a torch tensor on {view.where}; the kernel runs on the GPU: "
                        f"move it with .cuda() (or run on the CPU interpreter with "
                        f"PTXDSL_INTERPRET=1)")
        if view.device < 0 and view.kind not in ("numpy",):
            raise _fail(sig, i, f"is in host memory ({view.kind}); pass a CUDA array")
        if not accepts_dtype(spec.dtype, view.dtype, view.kind):
            raise _fail(sig, i, f"has dtype {view.dtype} but {spec!r} needs "
                        f"{_hint_for(spec.dtype, view.dtype)}")
        if len(view.shape) != len(spec.dims):
            raise _fail(sig, i, f"has {len(view.shape)} dims (shape {view.shape}) but {spec!r} "
                        f"has {len(spec.dims)}")
        for axis, (want, got) in enumerate(zip(spec.dims, view.shape)):
            if isinstance(want, int):
                if got != want:
                    raise _fail(sig, i, f"has shape {view.shape} but {spec!r} fixes axis {axis} "
                                f"to {want} (the kernel was built for it); build the kernel for "
                                f"{got} or name the dim")
                continue
            if got > 0xFFFFFFFF:
                raise _fail(sig, i, f"sets dim {want}={got}, which does not fit the kernel's "
                            f".u32 parameter")
            if want in dims and dims[want] != got:
                raise _fail(sig, i, f"has shape {view.shape}, so {want}={got}, but "
                            f"{first_seen[want]} gave {want}={dims[want]}")
            if want not in dims:
                dims[want] = got
                first_seen[want] = f"{sig.arg_names[i]} (axis {axis})"
        named = getattr(spec, "stride", None)
        if view.kind == "numpy":
            # Host arrays are staged through a contiguous device copy, whatever their layout.
            row = _contiguous_expect(view.shape)[0] if named else None
        else:
            row = _check_layout(sig, i, view, spec)
        if named:
            if row > 0xFFFFFFFF:
                raise _fail(sig, i, f"has row stride {row}, which does not fit a .u32 parameter")
            if named in strides and strides[named] != row:
                raise _fail(sig, i, f"has row stride {row} but {stride_seen[named]} has "
                            f"{strides[named]}, and both use the stride {named!r}")
            strides.setdefault(named, row)
            stride_seen.setdefault(named, sig.arg_names[i])
        if view.device >= 0:
            devices.setdefault(view.device, sig.arg_names[i])
            need = sig.align[i]
            if need > view.itemsize and view.ptr % need:
                raise _fail(sig, i, f"starts at address {view.ptr:#x}, which is not {need}-byte "
                            f"aligned, but the kernel accesses it with {sig.align_why[i]} "
                            f"({need} bytes at a time); pass a tensor whose storage starts "
                            f"aligned (e.g. .clone() of the slice)")
            if named and need > view.itemsize and (row * view.itemsize) % need:
                raise _fail(sig, i, f"has row stride {row} elements ({row * view.itemsize} "
                            f"bytes), not a multiple of the {need} bytes of its "
                            f"{sig.align_why[i]} accesses")
        elif not host_ok:
            raise _fail(sig, i, "is a host array but host arrays are not allowed here")
    if len(devices) > 1:
        where = ", ".join(f"{name} on cuda:{d}" for d, name in devices.items())
        raise _fail(sig, None, f"arguments are on different GPUs ({where}); move them to one "
                    f"device")
    out_shapes = []
    for j in range(sig.n_in, sig.n_all):
        spec = sig.specs[j]
        missing = [d for d in spec.names if d not in dims]
        if missing and views[j] is None:
            raise _fail(sig, j, f"cannot be allocated: its dim(s) {', '.join(missing)} are not "
                        f"fixed by any input; pass the output explicitly")
        out_shapes.append(spec.shape_for(dims) if not missing else views[j].shape)
    for name in sig.dim_names:
        if name not in dims:
            raise _fail(sig, None, f"dim {name!r} is not fixed by any argument")
    return Binding(dims, strides, next(iter(devices), -1), out_shapes)
