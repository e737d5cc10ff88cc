"""The forward configs and tile orders that lab/attention_plans.py's named sets (``h96``,
``gqa``, ``h128c``) time on the GPU, on the CPU interpreter at small ragged shapes
against the float64 reference first: three consumers at head dim 96, GQA causal
sections counted in K/V heads (dense and packed layouts), the packed layout past
short sequences."""
from __future__ import annotations

import numpy as np
import pytest

from ptxdsl.core.types import f16
from ptxdsl.ops.attention import attention_reference, tiles
from ptxdsl.ops.attention.config import Config, Mask
from ptxdsl.ops.attention.fwd import build_forward


def _inputs(b, sq, sk, h, hk, d, seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(np.float16)
            for s in ((b, sq, h, d), (b, sk, hk, d), (b, sk, hk, d))]


def _agrees(out, lse, q, k, v, causal, scale):
    ref, rlse = attention_reference(q, k, v, causal=causal, softmax_scale=scale)
    assert np.abs(out.astype(np.float64) - ref).max() <= 4e-3 * np.abs(ref).max()
    np.testing.assert_array_equal(np.isneginf(lse), np.isinf(rlse))
    fin = ~np.isinf(rlse)
    assert (np.abs(lse[fin] - rlse[fin]) / np.maximum(np.abs(rlse[fin]), 1.0)).max() <= 1e-3


def _launch(kern, q, k, v, group=1, dynamic=False):
    """Out and LSE start as NaN (a tile never taken stays NaN); packed: q and out as (B, SQ,
    HK, G, D) views; dynamic: the counter word, which must end at zero."""
    b, sq, h, d = q.shape
    out = np.full(q.shape, np.nan, np.float16)
    lse = np.full((b, h // group, group, sq), np.nan, np.float32)
    word = (np.zeros(1, np.uint32),) if dynamic else ()
    view = (lambda a: a.reshape(b, sq, h // group, group, d)) if group > 1 else (lambda a: a)
    kern.interpret(view(q), k, v, view(out), lse if group > 1 else lse.reshape(b, h, sq), *word)
    assert not word or int(word[0][0]) == 0
    return out, lse.reshape(b, h, sq)


@pytest.mark.long
@pytest.mark.parametrize("causal", [True])
def test_gqa_sections_count_kv_heads(monkeypatch, causal):
    """Config.head_sections under GQA (4 query heads on 2 K/V heads, a group of 2): L2 set
    to one K/V head's K/V makes sections of one group (2 query heads), longest-first in
    each. Persistent on 2 CTAs, every tile once."""
    q, k, v = _inputs(1, 130, 140, 4, 2, 64, 11)
    monkeypatch.setattr(tiles, "L2_KV_BYTES", 140 * 2 * 64 * 2)
    kern = build_forward(Config(block_n=64, persistent=True, head_sections=True), f16, 64,
                         Mask(-1, 0) if causal else Mask(), scale=0.125, sms=2)
    _agrees(*_launch(kern, q, k, v), q, k, v, causal, 0.125)


@pytest.mark.long
@pytest.mark.parametrize("dynamic,persistent,pingpong", [(False, False, True)])
def test_packed_sections_past_one_tile(monkeypatch, dynamic, persistent, pingpong):
    """The packed layout (a group of 2) at Sq = 100 (two tiles per K/V head) with causal
    head sections of two K/V heads over three (a full section and one of one head), one
    CTA a tile with ping-pong (the hd256 causal row's grid). (The persistent snake over
    sections: test_gqa_sections_count_kv_heads, dense.)"""
    q, k, v = _inputs(1, 100, 110, 6, 3, 64, 12)
    monkeypatch.setattr(tiles, "L2_KV_BYTES", 2 * 110 * 2 * 64 * 2)
    c = Config(block_n=64, persistent=persistent, head_sections=True, dynamic=dynamic,
               lazy_rescale=True, pingpong=pingpong)
    kern = build_forward(c, f16, 64, Mask(-1, 0), scale=0.125, sms=2, layout="packed",
                         group=2)
    assert kern.name.endswith("_packed2") and "_l2" in kern.name
    out, lse = _launch(kern, q, k, v, group=2, dynamic=dynamic)
    _agrees(out, lse, q, k, v, True, 0.125)


@pytest.mark.long
@pytest.mark.parametrize("block_n,causal,pingpong,persistent", [(112, True, False, True)])
def test_three_consumers_head_dim_96(block_n, causal, pingpong, persistent):
    """Head dim 96 on 192-row tiles (the h96 set's m192 configs; no spills at 112 keys a
    block, ptxas -v): ragged Sq and Sk across two K/V blocks, causal, lazy rescale,
    persistent on 2 CTAs."""
    q, k, v = _inputs(1, 200, 150, 1, 1, 96, 13)
    c = Config(block_n=block_n, persistent=persistent, consumers=3, lazy_rescale=True,
               pingpong=pingpong)
    kern = build_forward(c, f16, 96, Mask(-1, 0) if causal else Mask(), scale=0.1, sms=2)
    _agrees(*_launch(kern, q, k, v), q, k, v, causal, 0.1)


def test_section_mb_sizes_sections():
    """Config.section_mb: the sections' K/V budget in MiB (FA4's sm90 causal order uses
    about 50 MB), a constant of the kernel; only with head_sections, below 4096 MiB."""
    c = Config(block_n=64, head_sections=True, section_mb=48)
    kern = build_forward(c, f16, 64, Mask(-1, 0), scale=0.125)
    assert "_l2x48" in kern.name and hex(48 << 20) in kern.ptx()
    for bad in (dict(section_mb=48), dict(head_sections=True, section_mb=4096),
                dict(head_sections=True, section_mb=-1)):
        with pytest.raises(ValueError, match="section_mb"):
            Config(**bad)


@pytest.mark.long
def test_one_cta_per_tile_in_gqa_sections(monkeypatch):
    """The non-persistent grid (one CTA per tile, FA4's sm90 causal scheduler) with GQA
    head sections of one group, two query heads per K/V head."""
    q, k, v = _inputs(1, 200, 150, 4, 2, 64, 14)
    monkeypatch.setattr(tiles, "L2_KV_BYTES", 150 * 2 * 64 * 2)
    kern = build_forward(Config(block_n=64, head_sections=True, lazy_rescale=True), f16, 64,
                         Mask(-1, 0), scale=0.125)
    assert kern.grid_for({"B": 1, "SQ": 200, "H": 4}) == (8, 1, 1)
    _agrees(*_launch(kern, q, k, v), q, k, v, True, 0.125)


LAB_SETS = ["h96", "gqa", "h128c", "h128f", "causal", "diag", "gqa_full", "h256c", "s16k2",
            "fwdc", "fwdu", "fwdq", "fwd1k", "fwdts", "fwdts16", "fwdts1k", "fwdts16b",
            "gqa32", "sus", "gqasus", "kahead", "gqaka", "gqa32ka"]


def _lab_cover(lab):
    """lab/attention_plans.py's candidates of the sets ``LAB_SETS`` (each at its masks,
    layout and GQA group; a ``plan`` candidate as the plans row of each of its key
    lengths), deduplicated, then a greedy cover, heaviest (most options) first: every set,
    every option a candidate turns on, every (head dim, mask) and every layout in at least
    one compiled candidate (12 ptxas runs, not the sets' 125 distinct candidates)."""
    every = {}
    for name in LAB_SETS:
        st = lab.SETS[name]
        h, hk = st.get("heads", (16, 16))
        for d, cands in st["candidates"].items():
            for causal in st.get("masks", (False, True)):
                planned = [lab._planned(c, d, s, causal) for s in st.get("seqs", [1024])
                           for c in cands]
                for cand in {repr(sorted(c.items())): c for c in planned}.values():
                    if cand.get("causal", causal) != causal:
                        continue
                    kw = tuple(sorted((x, y) for x, y in cand.items()
                                      if x not in ("layout", "causal", "plan")))
                    key = (d, causal, cand.get("layout", "dense"), h // hk, kw)
                    every.setdefault(key, set()).add(name)

    def covers(key):
        d, causal, layout, _, kw = key
        return ({("set", n) for n in every[key]} | {(o,) for o, on in kw if on}
                | {("mask", d, causal), ("layout", layout)})
    need = set().union(*map(covers, every))
    picked = []
    while need:
        key = max(every, key=lambda k: (len(covers(k) & need), len(k[4])))
        picked.append(key)
        need -= covers(key)
    return picked


@pytest.mark.long
def test_lab_sets_compile_without_spills():
    """Candidates of lab/attention_plans.py's sets (:func:`_lab_cover`: every set, option,
    head dim and mask, and layout at least once) fit shared memory and compile without
    spills (ptxas -v) and without ptxas serializing their wgmmas (any reason:
    C7510-C7520), bf16."""
    import importlib.util
    from pathlib import Path
    from ptxas_resources import resources_or_skip
    from ptxdsl.core.types import bf16
    from ptxdsl.ops.attention.plan import SMEM_PER_CTA
    path = Path(__file__).parents[3] / "lab" / "attention_plans.py"
    spec = importlib.util.spec_from_file_location("attention_plans_lab", path)
    lab = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lab)
    picked = _lab_cover(lab)
    assert len(picked) <= 16, len(picked)
    for d, causal, layout, group, kw in picked:
        c = Config(**dict(kw))
        assert c.smem_bytes(d) <= SMEM_PER_CTA, kw
        kern = build_forward(c, bf16, d, Mask(-1, 0) if causal else Mask(), scale=0.1,
                             layout=layout, group=group)
        res = resources_or_skip(kern)
        assert (res.spill_stores, res.spill_loads) == (0, 0), (kw, causal, res)
        # ptxas's C7510-C7520: every wgmma serialized (a wait after each)
        log = kern.check().log
        assert "wgmma.mma_async instructions are serialized" not in log, (kw, causal)
