"""What a launch may ask of any CUDA device, and of a target arch: grid and block sizes and
shared memory per CTA. The launcher checks the device it has against the driver's own
numbers (:mod:`ptxdsl.runtime.limits`); a kernel's fixed sizes are checked where it is
defined, and the interpreter checks a run against its arch, so that a launch no GPU would
start is refused before anything runs instead of being simulated for hours.
"""
from __future__ import annotations

from .arch import parse_arch
from .errors import LaunchError, SourceLoc

__all__ = ["MAX_BLOCK", "MAX_GRID", "check_run", "smem_limits", "static_smem"]

# Every device since compute capability 3.0 (CUDA programming guide, technical
# specifications): grid x < 2^31, y and z < 2^16; block x, y <= 1024, z <= 64.
MAX_GRID = (2**31 - 1, 65535, 65535)
MAX_BLOCK = (1024, 1024, 64)

# Static + dynamic shared memory one CTA may use (the device's opt-in limit, CUDA
# programming guide), by sm_ number.
_PER_BLOCK = {75: 65536, 80: 166912, 86: 101376, 87: 166912, 88: 101376, 89: 101376,
              90: 232448, 100: 232448, 103: 232448, 110: 232448, 120: 101376, 121: 101376}
# Static (.shared declared in the module) bytes ptxas 13 accepts: 48 KiB, but the
# architecture-specific "a" targets of sm_90 to sm_110 take 227 KiB and sm_120a 99 KiB
# (measured: ptxas's "uses too much shared data (..., max)" for each target).
_STATIC_A = {90: 232448, 100: 232448, 103: 232448, 110: 232448, 120: 101376, 121: 101376}


def smem_limits(arch: str) -> tuple[int, int]:
    """``(static, per_block)``: the bytes of static shared memory ptxas accepts for
    ``arch`` and the static + dynamic bytes one CTA may use."""
    a = parse_arch(arch)
    static = _STATIC_A.get(a.sm, 49152) if a.suffix == "a" else 49152
    return static, _PER_BLOCK[a.sm]


def static_smem(prog) -> int:
    """Bytes of the program's static shared arrays (each at its alignment)."""
    total = 0
    for s in prog.shared:
        if not s.dynamic:
            total = -(-total // s.align) * s.align + s.nbytes
    return total


def check_dims(grid, block, what: str, loc: SourceLoc | None) -> None:
    """``grid`` / ``block`` (3-tuples, either may be None) within any device's limits."""
    for name, dims, most in (("grid", grid, MAX_GRID), ("block", block, MAX_BLOCK)):
        if dims is None:
            continue
        for axis, (d, m) in enumerate(zip(dims, most)):
            if d > m:
                raise LaunchError(f"{what}: {name} {tuple(dims)} has {d} on axis "
                                  f"{'xyz'[axis]}; no CUDA device launches more than {m} "
                                  f"(limits {most})", loc)
    if block is not None and block[0] * block[1] * block[2] > 1024:
        raise LaunchError(f"{what}: block {tuple(block)} has {block[0] * block[1] * block[2]} "
                          f"threads; no CUDA device launches more than 1024 per CTA", loc)


def check_run(prog, grid, block, name: str, loc: SourceLoc | None) -> None:
    """A run of ``prog`` over ``grid`` x ``block`` that a device of its arch could start:
    the dims, and its static and dynamic shared memory."""
    check_dims(grid, block, f"kernel {name}", loc)
    static, per_block = smem_limits(prog.arch)
    have = static_smem(prog)
    dyn = prog.dynamic_smem
    if have > static:
        raise LaunchError(f"kernel {name} declares {have} bytes of static shared memory; "
                          f"{prog.arch} takes at most {static} (ptxas refuses more): declare "
                          f"the larger arrays with smem.alloc(..., dynamic=True)", loc)
    if have + dyn > per_block:
        raise LaunchError(f"kernel {name} needs {have} bytes of static + {dyn} bytes of "
                          f"dynamic shared memory = {have + dyn} per CTA, over the "
                          f"{per_block} bytes a {prog.arch} device gives one CTA", loc)
