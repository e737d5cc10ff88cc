"""``BwdConfig.uniform_cons`` (:mod:`ptxdsl.ops._common.warpgroup`): the backward
consumers' warpgroup index read from lane 0 through ``shfl.sync.idx``, so ptxas keeps the
wgmma descriptors derived from it in uniform registers. What it emits and refuses; each
plan row with it on the CPU interpreter (race and proxy detectors) against float64
(dq_swap at head dim 128 and col_split at 256, causal; wg3's full and window row at
192; ragged, GQA; head dim 64's rows do not take it; varlen with it: head
dim 192's causal row in test_bwd_h192_sched.py's test_varlen_matches_float64; no
deterministic row takes it); ptxas -v and the SASS of the main loop of the rows that
take it: no ``R2UR`` left, no spills, no new notices."""
from __future__ import annotations

import re
from dataclasses import replace

import pytest

from ptxdsl import toolchain
from ptxdsl.core.types import bf16
from ptxdsl.ops.attention import bwd_api
from ptxdsl.ops.attention.bwd import build_backward
from ptxdsl.ops.attention.bwd_config import BwdConfig
from ptxdsl.ops.attention.config import Mask
from attention_bwd_checks import gqa_grads_match
from ptxas_resources import resources_or_skip  # noqa: E402

pytest.importorskip("ml_dtypes")
SHFL = "shfl.sync.idx.b32"


def test_emits_one_shuffle():
    """One ``shfl.sync.idx`` from lane 0 (the kernel without the option has none), the
    ``_uc`` tag."""
    base = BwdConfig(stages=2, dq_tma=True, dq_swizzle=True)
    text = build_backward(replace(base, uniform_cons=True), bf16, 64, Mask(),
                          scale=0.125).ptx()
    assert text.count(SHFL) == 1 and re.search(rf"{SHFL} %r\d+, %r\d+, 0, 31, 0xffffffff;", text)
    assert replace(base, uniform_cons=True).tag == base.tag + "_uc"


def _over_plan(monkeypatch, **extra):
    """Each call's plan row with uniform_cons (and ``extra``)."""
    shipped = bwd_api.choose_bwd
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *a, **k: replace(
        shipped(*a, **k), uniform_cons=True, **extra))


@pytest.mark.long
@pytest.mark.parametrize("d,sq,sk,kw", [
    (128, 90, 70, dict(causal=True)), (192, 100, 90, {}),
    (192, 100, 90, dict(window_size=(40, 3))), (256, 70, 64, dict(causal=True))],
    ids=["d128", "d192-full", "d192-window", "d256"])
def test_plan_rows_match_float64(monkeypatch, d, sq, sk, kw):
    """Causal and ragged: both consumer warpgroups' masks, several steps a CTA (the ring's
    wrap, both heads of the GQA group), a key block's last keys past Sk; head dim 192's
    full/window row (the step options with the writer warp) at its full and window masks
    (its causal row, with uniform_cons: test_bwd_h192_sched.py's
    test_causal_row_options_match_float64)."""
    _over_plan(monkeypatch)
    gqa_grads_match(d, sq, sk, d + sq, **kw)


def _main_loop(sass: str) -> list[str]:
    """The instructions of the innermost loop holding the most wgmmas: the consumers'
    step (a backward branch's target up to it; the wait loops past the last EXIT and
    ptxas's own ``BRA.U.ANY`` loops left out)."""
    ins = [(int(a, 16), body.split()[1] if body.startswith("@") else body.split()[0], body)
           for a, body in re.findall(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);", sass)]
    end = max(a for a, op, _ in ins if op == "EXIT")
    best = None
    for a, op, body in ins:
        m = re.search(r"BRA\s+0x([0-9a-f]+)", body)
        if m and op == "BRA" and a <= end and int(m.group(1), 16) < a:
            loop = [b for x, _, b in ins if int(m.group(1), 16) <= x <= a]
            key = (sum(_wgmma(b) for b in loop), -len(loop))
            best = max(best or (key, loop), (key, loop))
    return best[1]


def _wgmma(body: str) -> bool:
    """A wgmma of the kernel's (not the empty one ptxas puts before a branch)."""
    return "HGMMA" in body and "gdesc[URZ]" not in body


@pytest.mark.ptxas
@pytest.mark.long
@pytest.mark.parametrize("d", [128, 192, 256])
def test_sass_has_no_r2ur_in_the_step(d, causal=True):
    """The causal plan rows' main kernels that ship the option (head dims 128, 192, 256;
    the full rows: the same in the report of the commit that added the option): without
    the option ``R2UR``s in the consumers' step (at least one a wgmma), with it none (head
    dim 256: one, the lane-0 reduce-add's coordinate), fewer instructions in all; no
    spills, the same ptxas notices. (Head dim 64's rows do not take the option.)"""
    kernels = []
    for uc in (False, True):
        shipped = bwd_api.choose_bwd
        bwd_api.choose_bwd = lambda *a, _u=uc, **k: replace(
            shipped(*a, **k), uniform_cons=_u, kv_pair=False, dkv_stage=False, pair_max=0)
        try:
            kernels.append(bwd_api.backward_kernels(d, causal=causal)[1])
        finally:
            bwd_api.choose_bwd = shipped
    loops, notices = [], []
    for k in kernels:
        r = resources_or_skip(k)
        assert r.spill_stores == 0 and r.spill_loads == 0 and r.local == 0, k.name
        if not (toolchain.find_tool("cuobjdump") or toolchain.find_tool("nvdisasm")):
            pytest.skip("no SASS disassembler (cuobjdump, nvdisasm)")
        loops.append(_main_loop(k.sass()))
        notices.append(sorted(set(re.findall(r"\(C75\d\d\)", k.check().log))))
    r2ur = [sum(b.startswith("R2UR") for b in loop) for loop in loops]
    assert r2ur[0] >= sum(map(_wgmma, loops[1])) > 0, (d, causal, r2ur)
    assert r2ur[1] <= (1 if d == 256 else 0) and len(loops[1]) < len(loops[0]), r2ur
    assert notices[0] == notices[1]
