"""The one arch parser: ``sm_<NN>[a|f]`` target names and the PTX ISA each needs.

Tracing (the ``.target`` line and the instruction table's ``sm_`` checks), the
launcher (which ``-arch`` to assemble for a device) and the CLI all read a
target name through :func:`parse_arch`.
"""
from __future__ import annotations

from typing import NamedTuple

from .errors import ArchError

__all__ = ["ARCH_PTX", "Arch", "arch_ptx_floor", "parse_arch"]

# The PTX ISA version each target first appeared in: the floor for ``.version``.
ARCH_PTX: dict[int, tuple[int, int]] = {
    50: (4, 0), 52: (4, 1), 53: (4, 2), 60: (5, 0), 61: (5, 0), 62: (5, 0), 70: (6, 0),
    72: (6, 1), 75: (6, 3), 80: (7, 0), 86: (7, 1), 87: (7, 4), 89: (7, 8), 90: (7, 8),
    100: (8, 6), 101: (8, 6), 103: (8, 8), 110: (9, 0), 120: (8, 7), 121: (8, 8),
}


class Arch(NamedTuple):
    """A parsed target: ``sm_90a`` is ``Arch(90, "a")``."""

    sm: int
    suffix: str  # "" (portable), "a" (this exact chip) or "f" (this family)

    @property
    def name(self) -> str:
        return f"sm_{self.sm}{self.suffix}"


def parse_arch(arch: str) -> Arch:
    """``"sm_90a"`` -> ``Arch(90, "a")``; raises :class:`ArchError` for anything that is
    not ``sm_<NN>``, ``sm_<NN>a`` or ``sm_<NN>f`` with a known ``NN``."""
    text = arch.strip().lower() if isinstance(arch, str) else ""
    body = text[3:]
    suffix = body[-1:] if body[-1:] in ("a", "f") else ""
    digits = body[:len(body) - len(suffix)]
    if not text.startswith("sm_") or not digits.isdigit():
        raise ArchError(f"arch must look like 'sm_80' or 'sm_90a', got {arch!r}")
    num = int(digits)
    if num not in ARCH_PTX:
        raise ArchError(f"unknown arch {arch!r}; known: "
                        f"{', '.join('sm_%d' % k for k in sorted(ARCH_PTX))}")
    return Arch(num, suffix)


def arch_ptx_floor(arch: str) -> tuple[int, int]:
    """The lowest ``.version`` a module for ``arch`` may declare (sm_90a needs 8.0)."""
    num, suffix = parse_arch(arch)
    floor = ARCH_PTX[num]
    if suffix and num == 90:
        floor = max(floor, (8, 0))
    return floor
