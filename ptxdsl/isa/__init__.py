"""The instruction table and the lookups every other module uses."""
from __future__ import annotations

import difflib

from ..core.errors import IsaError
from .spec import Group, Match, Mod, Operand, OpSpec, check_arch, match
from . import blackwell, hopper, imported, table, tensorcore

# The whole table: the core (scalar, memory, warp, sync) in table.py, the
# tensor-core family (mma.sync, ldmatrix, ...) in tensorcore.py, Hopper's
# asynchronous machinery (wgmma, TMA, clusters, ...) in hopper.py, what only imported
# PTX uses (wmma, tensormap.replace, ...) in imported.py, Blackwell's tcgen05 family
# and tensor memory in blackwell.py.
TABLE: tuple[OpSpec, ...] = (table.TABLE + tensorcore.TABLE + hopper.TABLE + imported.TABLE
                             + blackwell.TABLE)
INSTRUCTIONS: dict[str, OpSpec] = {spec.opcode: spec for spec in TABLE}
if len(INSTRUCTIONS) != len(TABLE):  # pragma: no cover - a table edit mistake
    raise RuntimeError("two instruction-table entries share an opcode")

__all__ = ["INSTRUCTIONS", "TABLE", "Group", "Match", "Mod", "Operand", "OpSpec",
           "check_arch", "lookup", "match", "resolve"]


def lookup(opcode: str) -> OpSpec:
    """The table entry for a dotted opcode family such as ``"shfl.sync"``."""
    try:
        return INSTRUCTIONS[opcode]
    except KeyError:
        near = difflib.get_close_matches(opcode, INSTRUCTIONS, n=3, cutoff=0.6)
        hint = f" (did you mean {' or '.join(near)}?)" if near else ""
        raise IsaError(f"unknown PTX instruction {opcode!r}{hint}") from None


def resolve(chain: list[str]) -> Match:
    """Match a whole written chain, e.g. ``["cp", "async", "cg", "shared", "global"]``.

    The opcode is the longest dotted prefix that names a table entry, so
    ``cp.async.commit_group`` and ``cp.async`` are told apart.
    """
    for k in range(len(chain), 0, -1):
        spec = INSTRUCTIONS.get(".".join(chain[:k]))
        if spec is not None:
            return match(spec, list(chain[k:]))
    lookup(chain[0] if chain else "")
    raise IsaError(f"unknown PTX instruction {'.'.join(chain)!r}")  # pragma: no cover
