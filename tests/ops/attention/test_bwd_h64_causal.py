"""Head dim 64's backward under the causal and window masks (issue #51): ``BwdConfig.
mask_peel`` (:mod:`ptxdsl.ops.attention.bwd_peel`: the row blocks whose steps cross the
mask walked in loops of their own, the others in a loop without the mask code) and
``m_desc`` (a key block's row blocks last to first), on head dim 64's plan row: what they
emit, what ptxas makes of them, and the CPU interpreter's dq, dk, dv against float64
(several 128-row steps a CTA, so masked and unmasked loops meet the carried Sᵀ of
``s_ahead``, two heads of a GQA group, the ring's wrap; a window with masked steps at both
ends, a key block with no step, varlen's 64-row steps, the deterministic mode)."""
from __future__ import annotations

from dataclasses import replace

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
from attention_bwd_checks import check_grads, check_varlen_causal  # noqa: E402

# head dim 64's plan row (bwd_plans.json), without its pre/postprocess-only option
ROW = dict(stages=2, dq_tma=True, dq_swizzle=True, block_m=128, overlap=1, ds_double=True,
           dq_warp=True, dk_last=True, s_ahead=2, dkv_tma=True, dq_exit_read=True)
VARIANTS = {"peel": dict(mask_peel=True), "desc": dict(m_desc=True),
            "peel-desc": dict(mask_peel=True, m_desc=True)}


def _case(monkeypatch, c, sq, sk, seed, det=False, **kw):
    """q, dout (1, sq, 2, 64), k, v (1, sk, 1, 64): GQA, bf16, against float64."""
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *_a, **_k: c)
    rng = np.random.default_rng(seed)
    q, k, v, do = (rng.standard_normal((1, s, h, 64)).astype(BF16)
                   for s, h in ((sq, 2), (sk, 1), (sk, 1), (sq, 2)))
    out, lse = attention_reference(q, k, v, **kw)
    args = (do, q, k, v, out.astype(BF16), lse.astype(np.float32))
    got = attention_backward(*args, deterministic=det, **kw)
    check_grads(got, attention_backward_reference(do, q, k, v, **kw))
    return args, got


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

SHAPES = {"causal": (300, 300, dict(causal=True)), "causal-sk": (150, 260, dict(causal=True)),
          "causal-sq": (260, 150, dict(causal=True)), "win-left": (100, 300, dict(window_size=(10, 0))),
          "win": (300, 300, dict(window_size=(70, 20))), "full": (200, 200, {})}
# every shape for both options together; each alone where it differs (neither is a plan
# row: both ran within 1% of it on the H200, bench/results/attention_bwd_h64c_h200.json)
CASES = [("peel-desc", sh) for sh in SHAPES] + [("peel", "win"), ("desc", "causal-sq")]


@pytest.mark.long
@pytest.mark.parametrize("var,shape", CASES, ids=[f"{v}-{sh}" for v, sh in CASES])
def test_matches_float64(monkeypatch, var, shape):
    """Sq = 300: three 128-row steps a head, the first masked, the last ragged; Sk > Sq
    and Sq > Sk move the diagonal off the blocks' corners (bottom-right aligned); the
    (70, 20) window masks both ends of a walk; (10, 0) leaves the first key block
    without a step."""
    sq, sk, kw = SHAPES[shape]
    _case(monkeypatch, BwdConfig(**ROW, **VARIANTS[var]), sq, sk, 3, **kw)


@pytest.mark.long
@pytest.mark.parametrize("kw", [dict(window_size=(70, 20))], ids=["win"])
def test_deterministic_peel_repeats_bitwise(monkeypatch, kw):
    """mask_peel in the deterministic mode keeps its row order (last to first): float64
    and bitwise repeats."""
    c = BwdConfig(**dict(ROW, s_ahead=1), mask_peel=True)
    args, first = _case(monkeypatch, c, 300, 300, 5, det=True, **kw)
    again = attention_backward(*args, deterministic=True, **kw)
    assert all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(first, again))


@pytest.mark.long
def test_varlen_peel_matches_float64(monkeypatch):
    """varlen (64-row steps: bwd_api's varlen form of the row, without dkv_tma), three
    packed sequences, GQA, causal."""
    c = replace(BwdConfig(**ROW, mask_peel=True), block_m=64, ds_double=False,
                dkv_tma=False, s_ahead=0)
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *_a, **_k: c)
    cq, ck = np.cumsum([0, 150, 1, 100]), np.cumsum([0, 170, 129, 20])
    rng = np.random.default_rng(4)
    q, k, v, do = (rng.standard_normal((n, h, 64)).astype(BF16)
                   for n, h in ((cq[-1], 2), (ck[-1], 1), (ck[-1], 1), (cq[-1], 2)))
    check_varlen_causal(q, k, v, do, cq, ck)


@pytest.mark.ptxas
@pytest.mark.long
@pytest.mark.parametrize("var", list(VARIANTS))
@pytest.mark.parametrize("mask,det", [(Mask(), False), (Mask(-1, 0), False),
                                      (Mask(70, 20), False), (Mask(-1, 0), True)])
def test_ptxas_keeps_everything_in_registers_and_pipelined(var, mask, det):
    """No spills and no wgmma serialization notice (C7510-C7518)."""
    if det and "desc" in var:
        pytest.skip("m_desc is the default mode's order")
    k = build_backward(BwdConfig(**ROW, **VARIANTS[var]), bf16, 64, mask, scale=0.125,
                       deterministic=det)
    r = resources_or_skip(k)
    assert r.spill_stores == 0 and r.spill_loads == 0 and r.local == 0, k.name
    assert "Performance Loss" not in k.check().log, k.name
