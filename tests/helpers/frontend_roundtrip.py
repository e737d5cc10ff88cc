"""Every interpreted run, again from its PTX parsed back: a pytest plugin and a fixture.

``run_program`` of :mod:`ptxdsl.interp` is wrapped: after the traced program runs, its
emitted PTX is parsed by ``ptxdsl.parse_ptx`` and the parsed program runs on the same
tensors, parameters and launch; the two must leave every tensor bit-identical. Load it
for a whole pytest run with ``-p frontend_roundtrip`` (``tests/helpers`` on ``PYTHONPATH``).
"""
from __future__ import annotations

import dataclasses
import os

import numpy as np

import ptxdsl
import ptxdsl.interp as interp
from ptxdsl.core.emit import emit

ORIGINAL = interp.run_program
SEEN: list[str] = []


def parsed_back(prog):
    """``prog`` printed as PTX and parsed back: the program the interpreter runs instead."""
    text = emit(prog).text
    kernel = ptxdsl.parse_ptx(text, filename=f"{prog.name}.ptx").kernels[prog.name]
    back = kernel.program()
    names = [p.name for p in back.params]
    assert names == [p.name for p in prog.params], (names, prog.params)
    static = {s.name: s.nbytes for s in back.shared if not s.dynamic}
    assert static == {s.name: s.nbytes for s in prog.shared if not s.dynamic}
    # The parsed parameters have PTX types only: the traced ones say which is a tensor.
    return dataclasses.replace(back, params=list(prog.params), shared=list(prog.shared),
                               cluster=prog.cluster)


def run_program(prog, block, grid, tensors, dims, **kw):
    before = {k: np.array(v, copy=True) for k, v in tensors.items()}
    out = ORIGINAL(prog, block, grid, tensors, dims, **kw)
    again = ORIGINAL(parsed_back(prog), block, grid, before, dims, **kw)
    for name, a in out.items():
        b = again[name]
        assert a.shape == b.shape and a.tobytes() == b.tobytes(), (
            f"{prog.name}: tensor {name} differs when the PTX is parsed back")
    SEEN.append(prog.name)
    return out


def install(monkeypatch=None) -> None:
    if monkeypatch is not None:
        monkeypatch.setattr(interp, "run_program", run_program)
    else:
        interp.run_program = run_program


def pytest_configure(config):  # loaded with -p frontend_roundtrip: the whole run
    install()


def pytest_unconfigure(config):
    """Each process (an xdist worker too) appends how many programs it parsed back to the
    file ``FRONTEND_ROUNDTRIP_LOG`` names, so the caller can tell the sweep really ran."""
    log = os.environ.get("FRONTEND_ROUNDTRIP_LOG")
    if log and SEEN:
        with open(log, "a") as f:
            f.write(f"{len(SEEN)}\n")
