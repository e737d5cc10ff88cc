"""The one arch parser: ``sm_<NN>[a|f]`` target names and the PTX ISA each needs.

Tracing (the ``.target`` line and the instruction table's ``sm_`` checks), the
launcher (which ``-arch`` to assemble for a device) and the CLI all read a
target name through :func:`parse_arch`.
"""
from __future__ import annotations

from typing import NamedTuple

from .errors import ArchError

__all__ = ["ARCH_PTX", "Arch", "arch_ptx_floor", "parse_arch"]

# The targets ptxas 13 assembles, and the PTX ISA version each first appeared in: the
# floor for ``.version`` (measured with ptxas 13.0: sm_70/72 and older are gone, and
# sm_101 became sm_110).
ARCH_PTX: dict[int, tuple[int, int]] = {
    75: (6, 3), 80: (7, 0), 86: (7, 1), 87: (7, 4), 88: (7, 3), 89: (7, 8), 90: (7, 8),
    100: (8, 6), 103: (8, 8), 110: (9, 0), 120: (8, 7), 121: (8, 8),
}
# Suffixed targets ptxas 13 knows, with their floors: architecture-specific "a" from
# sm_90, family-specific "f" from sm_100 (sm_100f/sm_120f need PTX 8.8, not 8.6/8.7).
ARCH_SUFFIX_PTX: dict[str, dict[int, tuple[int, int]]] = {
    "a": {90: (8, 0), 100: (8, 6), 103: (8, 8), 110: (9, 0), 120: (8, 7), 121: (8, 8)},
    "f": {100: (8, 8), 103: (8, 8), 110: (9, 0), 120: (8, 8), 121: (8, 8)},
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
        raise ArchError(f"unknown arch {arch!r}: ptxas 13 targets "
                        f"{', '.join('sm_%d' % k for k in sorted(ARCH_PTX))}")
    if suffix and num not in ARCH_SUFFIX_PTX[suffix]:
        have = ", ".join(f"sm_{k}{suffix}" for k in sorted(ARCH_SUFFIX_PTX[suffix]))
        raise ArchError(f"unknown arch {arch!r}: ptxas 13 has the '{suffix}' suffix for "
                        f"{have}; write 'sm_{num}'")
    return Arch(num, suffix)


def arch_ptx_floor(arch: str) -> tuple[int, int]:
    """The lowest ``.version`` a module for ``arch`` may declare (sm_90a needs 8.0)."""
    num, suffix = parse_arch(arch)
    floor = ARCH_PTX[num]
    if suffix:
        floor = max(floor, ARCH_SUFFIX_PTX[suffix][num])
    return floor
