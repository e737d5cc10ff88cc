"""CPU semantics of the warp tensor-core instructions (mma.sync, ldmatrix, stmatrix, movmatrix)."""
from __future__ import annotations
