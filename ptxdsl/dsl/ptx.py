"""The ``ptx`` namespace of kernel bodies: re-exports only, from the modules that define
each helper (their docstrings say what each call records).

=================================  ===================================================
``inst``, ``raw``                  :mod:`ptxdsl.dsl.inst` (``ptx.inst.<opcode>.<mods>(...)``)
``addr``, ``sink``,                :mod:`ptxdsl.dsl.operands`
``global_ptr(s)``, ``dim``,
``param``
``if_``, ``else_``, ``range_``,    :mod:`ptxdsl.dsl.control`
``label``, ``new_label``,
``place``, ``bra``, ``ret``,
``exit``
``cvt``, ``select``, ``fma``,      :mod:`ptxdsl.dsl.values`
``min``, ``max``, ``pack``,
``unpack``
``special``, ``sreg``,             :mod:`ptxdsl.dsl.special`
``ctaid_x``, ``ctaid_y``
``bar``, ``fence``, ``warp``,      :mod:`ptxdsl.dsl.sync`
``named_barrier``,
``NamedBarrier``, ``setmaxnreg``
``mma``, ``ldmatrix``,             :mod:`ptxdsl.dsl.tensorcore`
``stmatrix``, ``movmatrix``
``wgmma``, ``mbarrier``,           the modules of those names
``cluster``, ``tma``
``cp``                             :mod:`ptxdsl.dsl.tma`
``pipeline``, ``PipelineState``   :mod:`ptxdsl.dsl.pipeline`
``loop``, ``kloop``,               :mod:`ptxdsl.dsl.compat` (pyptx's spellings)
``stmatrix_x4_trans_f32_bf16``,
``pipe``, ``expr``, ``scope``
``mov``, ``add``, ``sub``, ``mul``  :mod:`ptxdsl.dsl.typed` (pyptx's typed wrappers;
``mad``, ``shl``, ``shr``, ``and_``  ``cvt`` also takes ptxdsl's two-argument form)
``or_``, ``xor_``, ``not_``,
``setp``, ``selp``, ``cvt``,
``ld``, ``st``, ``cvta``,
``elect_sync``,
``setmaxnreg_inc/dec``
``intrinsic``                      :mod:`ptxdsl.dsl.intrinsic`
``tcgen05``                        :mod:`ptxdsl.dsl.tcgen05` (Blackwell, sm_100a)
=================================  ===================================================
"""
from __future__ import annotations

from . import cluster, mbarrier, tma, wgmma
from .compat import expr, kloop, loop, pipe, scope, stmatrix_x4_trans_f32_bf16
from .control import bra, else_, exit, if_, label, new_label, place, range_, ret
from .inst import inst, raw
from .operands import addr, dim, global_ptr, global_ptrs, param, sink
from .pipeline import PipelineState, pipeline
from .special import ctaid_x, ctaid_y, special, sreg
from .sync import NamedBarrier, bar, fence, named_barrier, setmaxnreg, warp
from .tensorcore import ldmatrix, mma, movmatrix, stmatrix
from .tma import cp
from .typed import (
    add, and_, cvt, cvta, elect_sync, ld, mad, mov, mul, not_, or_, selp, setmaxnreg_dec,
    setmaxnreg_inc, setp, shl, shr, st, sub, xor_)
from .values import fma, max, min, pack, select, unpack
from .intrinsic import intrinsic
from . import tcgen05

__all__ = ["inst", "special", "warp", "bar", "addr", "sink", "global_ptrs", "global_ptr", "if_",
           "else_", "range_", "label", "new_label", "place", "bra", "ret", "exit", "cvt",
           "dim", "select", "fma", "min", "max", "pack", "unpack", "sreg", "param",
           "mbarrier", "cluster", "tma", "fence", "cp", "pipeline", "loop", "kloop",
           "mma", "ldmatrix", "stmatrix", "movmatrix", "wgmma",
           "setmaxnreg", "named_barrier", "stmatrix_x4_trans_f32_bf16", "raw",
           "mov", "add", "sub", "mul", "mad", "shl", "shr", "and_", "or_", "xor_", "not_",
           "setp", "selp", "ld", "st", "cvta", "elect_sync", "setmaxnreg_inc",
           "setmaxnreg_dec", "intrinsic", "pipe", "expr", "scope", "PipelineState",
           "NamedBarrier", "ctaid_x", "ctaid_y"]
__all__ += ["tcgen05"]
