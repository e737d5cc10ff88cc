"""Which of dK's, dV's and dQ's columns a consumer warpgroup of the column-split backward
(``BwdConfig.col_split``) owns, as wgmma pieces: each piece lies inside one 64-column
panel of the 128-byte swizzled tiles (an MN-major B operand's extent), so a piece is
n64 at best.

``panel_split`` (head dim 192): warpgroup ``w`` owns panel ``w`` whole and half ``w`` of
panel 2, an n64 and an n32 piece, where the even split (columns ``96w .. 96w + 95``)
needs three n32 pieces, one starting mid-panel. Sᵀ and dPᵀ are not affected."""
from __future__ import annotations

from .bwd_config import BwdConfig


def col_pieces(c: BwdConfig, d: int) -> tuple[tuple[int, int, int], ...]:
    """Per piece ``(width, first column of warpgroup 0, columns added per warpgroup)``:
    warpgroup ``w``'s piece starts at column ``first + w · step``."""
    if c.panel_split:
        if d != 192:
            raise ValueError(f"panel_split splits head dim 192's three 64-column panels "
                             f"between two warpgroups: got head dim {d}")
        return ((64, 0, 64), (32, 128, 32))
    pw = 64 if d % 256 == 0 else 32
    return tuple((pw, j * pw, d // 2) for j in range(d // 2 // pw))


def stage_panels(c: BwdConfig, d: int) -> tuple[tuple[int, int], ...]:
    """dQ's 32-column stage panels of a warpgroup, in stage order (its pieces one after
    the other): ``(first column of warpgroup 0, columns added per warpgroup)`` of each."""
    return tuple((first + o, step) for width, first, step in col_pieces(c, d)
                 for o in range(0, width, 32))


__all__ = ["col_pieces", "stage_panels"]
