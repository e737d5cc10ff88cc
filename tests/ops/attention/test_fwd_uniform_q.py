"""Config.uniform_q (with q_double: the tile's Q buffer offset from lane 0, so ptxas keeps
Q's wgmma descriptors in uniform registers) on the CPU interpreter, every detector on: the
output and LSE bitwise those of the same config without it, and right against float64;
and in the SASS of head dim 64's causal row, fewer R2UR in the tile loop."""
from __future__ import annotations

import dataclasses
import re

import pytest

import ptxdsl.interp  # noqa: F401  (the package's own interpreter: a broken one fails here)
from attention_fwd_checks import inputs, same_and_right
from ptxdsl import toolchain
from ptxdsl.core.types import bf16, f16
from ptxdsl.ops.attention.config import Config, Mask
from ptxdsl.ops.attention.fwd import build_forward
from ptxdsl.ops.attention.plan import choose
from ptxas_resources import resources_or_skip


def test_uniform_q_ragged_causal_tiles():
    """One CTA, three tiles of one head in turn through the two Q buffers (Sq 300 > Sk 70,
    causal, 32-key blocks), the consumer index from lane 0 as the option goes with."""
    q, k, v = inputs(1, 300, 70, 1, 1, 64, 23)
    same_and_right(Config(block_n=32, persistent=True, q_double=True, uniform_cons=True),
                   q, k, v, Mask(-1, 0), sms=1, uniform_q=True)


def test_uniform_q_names_its_kernel_and_needs_q_double():
    c = Config(block_n=64, persistent=True, q_double=True, uniform_q=True)
    assert build_forward(c, f16, 64, Mask(), scale=0.1).name.endswith("_uq")
    with pytest.raises(ValueError, match="q_double=True"):
        Config(block_n=64, uniform_q=True)


@pytest.mark.ptxas
@pytest.mark.long
def test_uniform_q_takes_r2ur_out_of_the_hd64_causal_loop():
    """Head dim 64's causal row at 4k keys (q_double, dynamic tiles): with uniform_cons
    and uniform_q fewer R2UR lie between its first and last wgmma than in the row (15 -> 4
    with ptxas 13; either option alone: 15), no spills either way."""
    mask = Mask(-1, 0)
    row = choose(64, "bf16", mask, 1, 4096)
    assert row.q_double and not row.uniform_q
    counts = []
    for kw in ({}, dict(uniform_cons=True, uniform_q=True)):
        k = build_forward(dataclasses.replace(row, **kw), bf16, 64, mask, scale=0.125)
        r = resources_or_skip(k)
        assert r.spill_stores == 0 and r.spill_loads == 0 and r.local == 0, k.name
        if not (toolchain.find_tool("cuobjdump") or toolchain.find_tool("nvdisasm")):
            pytest.skip("no SASS disassembler (cuobjdump, nvdisasm)")
        ops = re.findall(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?(\S+)", k.sass())
        first = next(i for i, o in enumerate(ops) if o.startswith("HGMMA"))
        last = max(i for i, o in enumerate(ops) if o.startswith("HGMMA"))
        counts.append(sum(o.startswith("R2UR") for o in ops[first:last + 1]))
    assert counts[1] + 8 <= counts[0], counts
