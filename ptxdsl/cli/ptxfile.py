"""``ptxdsl translate|check|interpret FILE.ptx``: the command line of the PTX front end."""
from __future__ import annotations

import argparse
import json
import os

import numpy as np

from ..core.errors import LaunchError
from ..frontend.module import PtxModule, parse_ptx


def _module(path: str, keep_unknown: bool) -> PtxModule:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise LaunchError(f"cannot read {path}: {e.strerror}") from None
    return parse_ptx(text, filename=path, keep_unknown=keep_unknown)


def _kernels(mod: PtxModule, entry: str | None):
    if entry is None:
        return list(mod.kernels.values())
    if entry not in mod.kernels:
        raise LaunchError(f"{mod.filename} has no kernel {entry!r} (it has "
                          f"{', '.join(mod.kernels) or 'none'})")
    return [mod.kernels[entry]]


def cmd_translate(args) -> int:
    mod = _module(args.file, args.keep_unknown)
    if args.canonical:
        print(mod.emit(), end="")
        return 0
    for k in _kernels(mod, args.entry):
        print(k.to_python())
    return 0


def cmd_check(args) -> int:
    """``ptxdsl check FILE.ptx``: parse (every instruction against the table), then ptxas."""
    mod = _module(args.target, False)
    rows = []
    for k in mod.kernels.values():
        res = k.resources(args.arch)
        rows.append({"kernel": k.name, "arch": args.arch or k.arch, "registers": res.registers,
                     "spill_stores": res.spill_stores, "spill_loads": res.spill_loads,
                     "shared": res.shared, "local": res.local, "constant": res.constant})
    if getattr(args, "json", False):
        print(json.dumps(rows, indent=2))
    else:
        for r in rows:
            print(f"{r['kernel']}  {r['arch']}  registers {r['registers']}  spills "
                  f"{r['spill_stores']}/{r['spill_loads']}  shared {r['shared']}  local "
                  f"{r['local']}  constant {r['constant']}")
    return 0


def _dims(text: str, what: str):
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise LaunchError(f"--{what} takes comma-separated ints such as 4,1,1, got {text!r}") \
            from None


def _arg(text: str):
    """``--arg``: ``x.npy`` (an array, written back), ``null``, an int or a float
    (``1.5`` or ``1.5:f32``)."""
    if text.endswith(".npy"):
        return np.load(text)
    if text in ("null", "None", "0x0"):
        return None
    value, _, kind = text.partition(":")
    try:
        if kind:
            return np.dtype({"f32": "float32", "f64": "float64"}.get(kind, kind)).type(value)
        return int(value, 0)
    except (TypeError, ValueError):
        try:
            return float(value)
        except ValueError:
            raise LaunchError(f"--arg {text!r}: give a .npy file, null, an int or a "
                              f"float") from None


def cmd_interpret(args) -> int:
    mod = _module(args.file, False)
    (k,) = _kernels(mod, args.entry) if args.entry or len(mod.kernels) == 1 else (None,)
    if k is None:
        raise LaunchError(f"{args.file} has several kernels ({', '.join(mod.kernels)}): "
                          f"name one with --entry")
    values = [_arg(a) for a in args.arg]
    k.interpret(*values, grid=_dims(args.grid, "grid"), block=_dims(args.block, "block"),
                shared=args.shared)
    for text, v in zip(args.arg, values):
        if isinstance(v, np.ndarray):
            np.save(text, v)
    print(f"{k.name}: ran on the CPU interpreter with no error detected; "
          f"{sum(isinstance(v, np.ndarray) for v in values)} array(s) written back")
    return 0


def register(sub) -> None:
    """Add ``translate`` and ``interpret`` (``check`` takes FILE.ptx through its own
    parser, which routes here)."""
    sp = sub.add_parser("translate", help="translate a PTX file to ptxdsl Python source",
                        description="Parse FILE.ptx (every instruction checked against the "
                                    "instruction table) and print DSL source per kernel.")
    sp.add_argument("file", metavar="FILE.ptx")
    sp.add_argument("--entry", default=None, help="only this kernel")
    sp.add_argument("--canonical", action="store_true",
                    help="print the canonical PTX instead of Python")
    sp.add_argument("--keep-unknown", action="store_true",
                    help="keep lines the table cannot check as unchecked raw PTX")
    sp.set_defaults(func=cmd_translate)

    sp = sub.add_parser("interpret", help="run a PTX kernel on the CPU interpreter",
                        description="Run a kernel of FILE.ptx on the CPU interpreter with "
                                    "its detectors; --arg per parameter: a .npy file (a "
                                    "pointer; written back), null, an int or a float.",
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    sp.add_argument("file", metavar="FILE.ptx")
    sp.add_argument("--entry", default=None)
    sp.add_argument("--grid", default="1", help="e.g. 4,1,1")
    sp.add_argument("--block", default="1", help="e.g. 128")
    sp.add_argument("--shared", type=int, default=0, help="bytes of dynamic shared memory")
    sp.add_argument("--arg", action="append", default=[], metavar="VALUE")
    sp.set_defaults(func=cmd_interpret)


def is_ptx(target: str) -> bool:
    return os.path.splitext(target.split(":")[0])[1] == ".ptx"
