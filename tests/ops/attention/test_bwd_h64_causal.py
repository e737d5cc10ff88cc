"""Head dim 64's backward under the causal and window masks (issue #51): ``BwdConfig.
mask_peel`` (:mod:`ptxdsl.ops.attention.bwd_peel`: the row blocks whose steps cross the
mask walked in loops of their own, the others in a loop without the mask code) and
``m_desc`` (a key block's row blocks last to first), on head dim 64's plan row: what they
emit, what ptxas makes of them (the deterministic mode), and the CPU interpreter's dq, dk,
dv against float64, one case for both lab options (several 128-row steps a CTA, so masked
and unmasked loops meet the carried Sᵀ of ``s_ahead`` and the ring's wrap; a window with
masked steps at both ends)."""
from __future__ import annotations

import numpy as np
import pytest

from ptxdsl.core.types import bf16
from ptxdsl.ops import attention_backward
from ptxdsl.ops.attention import attention_backward_reference, attention_reference, bwd_api
from ptxdsl.ops.attention.bwd import build_backward
from ptxdsl.ops.attention.bwd_config import BwdConfig
from ptxdsl.ops.attention.config import Mask
from ptxas_resources import resources_or_skip  # noqa: E402

ml_dtypes = pytest.importorskip("ml_dtypes")
BF16 = ml_dtypes.bfloat16
from attention_bwd_checks import check_grads  # noqa: E402

# head dim 64's plan row (bwd_plans.json), without its pre/postprocess-only option
ROW = dict(stages=2, dq_tma=True, dq_swizzle=True, block_m=128, overlap=1, ds_double=True,
           dq_warp=True, dk_last=True, s_ahead=2, dkv_tma=True, dq_exit_read=True)


def _case(monkeypatch, c, sq, sk, seed, h=2, **kw):
    """q, dout (1, sq, h, 64), k, v (1, sk, 1, 64) (h 2: GQA), bf16, against float64."""
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *_a, **_k: c)
    rng = np.random.default_rng(seed)
    q, k, v, do = (rng.standard_normal((1, s, h, 64)).astype(BF16)
                   for s, n in ((sq, h), (sk, 1), (sk, 1), (sq, h)))
    out, lse = attention_reference(q, k, v, **kw)
    got = attention_backward(do, q, k, v, out.astype(BF16), lse.astype(np.float32), **kw)
    check_grads(got, attention_backward_reference(do, q, k, v, **kw))


def _loops(text):
    """The consumer's row-block loops: (selp.f32 -inf lines, wgmma lines) between each
    loop's top and its back edge, in program order (the producer's and the writer's
    loops hold no wgmma and are left out)."""
    lines, out = text.splitlines(), []
    for i, ln in enumerate(lines):
        if ln.startswith("$L__loop") and ln.rstrip().endswith(":"):
            name = ln.strip()[:-1]
            end = next(j for j in range(i + 1, len(lines)) if f"bra.uni {name};" in lines[j])
            body = lines[i:end]
            mm = sum("wgmma.mma_async" in x for x in body)
            if mm and not any(x.startswith("$L__loop") for x in body[1:]):
                out.append((sum("selp.f32" in x and "0fFF800000" in x for x in body), mm))
    return out


def test_peel_keeps_the_mask_out_of_the_middle_loop():
    """Causal: a masked loop (64 selects: one per element of the 64 x 128 Sᵀ a thread's
    warpgroup holds) then one without any, each a step's 32 wgmmas; the options' checks."""
    causal = build_backward(BwdConfig(**ROW, mask_peel=True), bf16, 64, Mask(-1, 0),
                            scale=0.125).ptx()
    assert _loops(causal) == [(64, 32), (0, 32)] and "_mpl" in causal
    with pytest.raises(ValueError, match="m_desc"):
        build_backward(BwdConfig(**ROW, m_desc=True), bf16, 64, Mask(-1, 0), scale=0.1,
                       deterministic=True)
    with pytest.raises(ValueError, match="mask_peel and m_desc"):
        BwdConfig(stages=2, dq_tma=True, dq_swizzle=True, wg3=True, mask_peel=True)


@pytest.mark.long
def test_peel_window_and_full_loops():
    """A window (both sides): masked, unmasked, masked loops (two selects an element); at
    full mask one loop with none, as the plan's; m_desc walks down (a step of -1)."""
    win = build_backward(BwdConfig(**ROW, mask_peel=True), bf16, 64, Mask(20, 5),
                         scale=0.125).ptx()
    assert [s for s, _ in _loops(win)] == [128, 0, 128]
    full = build_backward(BwdConfig(**ROW, mask_peel=True, m_desc=True), bf16, 64, Mask(),
                          scale=0.125).ptx()
    assert _loops(full) == [(0, 32)] and "add.s32" in full and ", -1;" in full



@pytest.mark.long
def test_matches_float64(monkeypatch):
    """Both options together, the one interpreter case of these lab options (neither is a
    plan row: both ran within 1% of it on the H200,
    bench/results/attention_bwd_h64c_h200.json): Sq = 260, three 128-row steps (the last
    ragged); the (70, 20) window masks both ends of a walk."""
    c = BwdConfig(**ROW, mask_peel=True, m_desc=True)
    _case(monkeypatch, c, 260, 260, 3, h=1, window_size=(70, 20))


@pytest.mark.ptxas
@pytest.mark.long
def test_ptxas_keeps_everything_in_registers_and_pipelined():
    """No spills and no wgmma serialization notice (C7510-C7518): mask_peel in the
    deterministic mode (its row order, last to first), causal."""
    k = build_backward(BwdConfig(**ROW, mask_peel=True), bf16, 64, Mask(-1, 0), scale=0.125,
                       deterministic=True)
    r = resources_or_skip(k)
    assert r.spill_stores == 0 and r.spill_loads == 0 and r.local == 0, k.name
    assert "Performance Loss" not in k.check().log, k.name
