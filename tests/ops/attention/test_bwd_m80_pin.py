"""``BwdConfig.dp_pin``, ``dv_first`` (and ``dq_batch``, ``ds_fence1``) in the 80-query
tile (:mod:`ptxdsl.ops.attention.bwd_m80`): where Pᵀ's exponentials run. ptxas hoists the
plain step's dPᵀ ``wait_group 0`` above nearly all of them; ``dp_pin`` keeps it below
with a branch, ``dv_first`` queues dV behind dPᵀ once Pᵀ is packed (dSᵀ from the packed
Pᵀ); ``dq_batch``'s writer issues both warpgroups' adds before waiting for reads;
``ds_fence1`` drops the exchange readers' proxy fence. What they accept and emit, the
CPU interpreter's dq, dk, dv against float64 (ragged, GQA, masks, f16's unpacking), and
ptxas -v with the SASS of the step: every ``MUFU.EX2`` ahead of the wait (or of dV)."""
from __future__ import annotations

import re

import numpy as np
import pytest

from ptxdsl import toolchain
from ptxdsl.core.types import bf16
from ptxdsl.ops import attention_backward
from ptxdsl.ops.attention import attention_backward_reference, attention_reference, bwd_api
from ptxdsl.ops.attention.bwd_config import BwdConfig
from ptxdsl.ops.attention.bwd_m80 import build_backward_m80
from ptxdsl.ops.attention.config import Mask
from ptxas_resources import resources_or_skip  # noqa: E402

ml_dtypes = pytest.importorskip("ml_dtypes")
from attention_bwd_checks import check_grads  # noqa: E402

M80 = dict(stages=2, dq_tma=True, overlap=1, dq_swizzle=True, block_m=80, ds_double=True,
           dq_warp=True, dk_last=True, dq_swap=True)
FIXED = dict(prep_wide=True, dkv_tma=True, dq_exit_read=True)
WAIT0 = "wgmma.wait_group.sync.aligned 0;"


def test_options_tag_and_refuse():
    """The tags (with s_ahead too); all four need dq_swap."""
    assert BwdConfig(**M80, dp_pin=True).tag.endswith("_pin")
    assert BwdConfig(**M80, dv_first=True).tag.endswith("_dvf")
    assert BwdConfig(**M80, dq_batch=True).tag.endswith("_dqb")
    assert BwdConfig(**M80, ds_fence1=True).tag.endswith("_xf1")
    for extra in (dict(dp_pin=True), dict(dv_first=True), dict(dq_batch=True),
                  dict(ds_fence1=True)):
        assert "_sa2" in BwdConfig(**M80, **extra, s_ahead=2, ahead_k=True).tag
        with pytest.raises(ValueError, match="need dq_swap"):
            BwdConfig(stages=2, dq_tma=True, **extra)


@pytest.mark.long
def test_emits_the_pinned_wait_and_dv_ahead_of_the_stores():
    """dp_pin: the step's dPᵀ wait twice, one each arm of a ``bra.uni``, after the last
    ``ex2`` and before the first ``cvt`` packing Pᵀ; dv_first: dV's five wgmmas before
    dSᵀ's 20 ``st.shared.b32`` (after them without it) and ``and``/``shl`` unpacking Pᵀ;
    ds_fence1: one proxy fence around the exchange barrier, not two; dq_batch: the
    writer waits for its first group's reads, then the second's."""
    text = lambda **x: [ln.strip() for ln in build_backward_m80(
        BwdConfig(**M80, **x), bf16, 128, scale=0.1).ptx().splitlines()]
    pin = text(dp_pin=True)
    waits = [i for i, ln in enumerate(pin) if ln == WAIT0]
    assert pin[waits[0] - 1].startswith("@") and "bra.uni" in pin[waits[0] - 1]
    assert pin[waits[0] + 1].startswith("bra.uni") and pin[waits[1] - 1].endswith(":")
    last_ex2 = max(i for i, ln in enumerate(pin) if ln.startswith("ex2."))
    first_cvt = min(i for i, ln in enumerate(pin) if ln.startswith("cvt.rn.bf16x2"))
    assert last_ex2 < waits[0] < waits[1] < first_cvt
    for x, before in ((dict(dv_first=True), True), ({}, False)):
        ln = text(**x)
        dv = [i for i, s in enumerate(ln) if "m64n128k16" in s][0]
        st = [i for i, s in enumerate(ln) if s.startswith("st.shared.b32")][0]
        assert (dv < st) == before
    assert sum(s.startswith(("and.b32", "shl.b32")) for s in text(dv_first=True)) >= 40
    # ds_fence1: the exchange barrier's readers do not fence again (the writers did)
    for x, after in (({}, True), (dict(ds_fence1=True), False)):
        ln = text(**x)
        bar = ln.index("bar.sync 3, 256;")
        last_st = max(i for i in range(bar) if ln[i].startswith("st.shared.b32"))
        assert any(s.startswith("fence.proxy.async") for s in ln[last_st:bar])
        assert ln[bar + 1].startswith("fence.proxy.async") == after
    # dq_batch: the writer's two adds, then the reads of the first, then of the second
    reads = [s for s in text(dq_batch=True) if s.startswith("cp.async.bulk.wait_group")]
    assert reads[:2] == ["cp.async.bulk.wait_group.read 1;",
                         "cp.async.bulk.wait_group.read 0;"], reads


def _case(monkeypatch, c, b, hk, sq, sk, dtype=ml_dtypes.bfloat16, **kw):
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *_a, **_k: c)
    rng = np.random.default_rng(sq + sk + b)
    q, k, v, do = (rng.standard_normal((b, s, h, 128)).astype(dtype)
                   for s, h in ((sq, 2 * hk), (sk, hk), (sk, hk), (sq, 2 * hk)))
    out, lse = attention_reference(q, k, v, **kw)
    got = attention_backward(do, q, k, v, out.astype(dtype), lse.astype(np.float32), **kw)
    check_grads(got, attention_backward_reference(do, q, k, v, **kw))


@pytest.mark.long
@pytest.mark.parametrize("extra,b,hk,sq,sk,kw", [
    (dict(dp_pin=True, dv_first=True, dq_batch=True, ds_fence1=True, uniform_cons=True,
          s_ahead=2, ahead_k=True, lpt_units=8, **FIXED), 1, 1, 100, 150, dict(causal=True))],
    ids=["pin-dvf-dqb-xf1-sa2-causal"])
def test_matches_float64(monkeypatch, extra, b, hk, sq, sk, kw):
    """Sq not a multiple of 80, two query heads a K/V head, the ring wrapping, causal; the
    causal row's options (s_ahead 2: the carried Sᵀ) with all four lab options at once:
    dp_pin's branch, dv_first, dq_batch's writer (the interpreter fails a stage rewritten
    before its add has read it) and ds_fence1 (each in no row: this is its one case; the
    f16 unpacking below is dv_first's other code path). (A window leaving a key block
    without a step: test_bwd_m80_ahead.py.)"""
    _case(monkeypatch, BwdConfig(**M80, **extra), b, hk, sq, sk, **kw)


@pytest.mark.long
def test_dv_first_f16_matches_float64(monkeypatch):
    """f16: Pᵀ read back from its packed halves by ``cvt.f32.f16`` (bf16: by shifts)."""
    _case(monkeypatch, BwdConfig(**M80, dv_first=True), 1, 1, 90, 100, dtype=np.float16,
          causal=True)


def _step(sass: str) -> list[str]:
    """The consumers' loop (the shortest backward branch's body holding the most
    HGMMAs, so not the heads' loop around it; the wait loops past the last EXIT left
    out): its instructions, predicates dropped."""
    ins = [(int(a, 16), re.sub(r"^@!?U?P\w+\s+", "", body).strip()) for a, body in
           re.findall(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);", sass)]
    end = max(a for a, b in ins if b == "EXIT")
    best = []
    for a, body in ins:
        m = re.search(r"BRA\s+0x([0-9a-f]+)", body)
        if m and body.startswith("BRA") and a <= end and int(m.group(1), 16) < a:
            loop = [b for x, b in ins if int(m.group(1), 16) <= x <= a]
            key = lambda x: (sum("HGMMA" in b for b in x), -len(x))
            if not best or key(loop) > key(best):
                best = loop
    return best


@pytest.mark.ptxas
@pytest.mark.long
def test_sass_runs_the_exponentials_under_dp():
    """The causal row (s_ahead 2, lpt_units 8, uniform_cons), alone, with dp_pin and with
    dv_first (one ptxas case each, lab options): no spills, no wgmma notice (C75xx); in
    the step, without them ptxas puts dPᵀ's ``DEPBAR.LE gsb0, 0x0`` (the first after
    Sᵀ's ``0x1``) before most of the 40 ``MUFU.EX2`` (the finding); dp_pin puts all 40
    before it, dv_first all 40 before dV's first ``HGMMA.64x128``."""
    if not (toolchain.find_tool("cuobjdump") or toolchain.find_tool("nvdisasm")):
        pytest.skip("no SASS disassembler (cuobjdump, nvdisasm)")
    mask = Mask(-1, 0)
    row = dict(M80, **FIXED, uniform_cons=True, s_ahead=2, ahead_k=True, lpt_units=8)
    cases = [(row, "wait", False), (dict(row, dp_pin=True), "wait", True),
             (dict(row, dv_first=True), "dv", True)]
    for cfg, mark, all_before in cases:
        k = build_backward_m80(BwdConfig(**cfg), bf16, 128, mask, scale=0.088)
        r = resources_or_skip(k)
        assert r.spill_stores == 0 and r.spill_loads == 0 and r.local == 0, k.name
        assert "(C75" not in k.check().log, k.name
        step = _step(k.sass())
        s_wait = step.index("WARPGROUP.DEPBAR.LE gsb0, 0x1")
        at = next(i for i in range(s_wait, len(step)) if (
            step[i] == "WARPGROUP.DEPBAR.LE gsb0, 0x0" if mark == "wait"
            else step[i].startswith("HGMMA.64x128")))
        ex2 = sum(b.startswith("MUFU.EX2") for b in step[:at])
        assert sum(b.startswith("MUFU.EX2") for b in step) == 40, k.name
        assert (ex2 == 40) if all_before else (ex2 < 20), (k.name, ex2)
