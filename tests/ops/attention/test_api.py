"""ptxdsl.ops.attention: every bad argument is a LaunchError naming the caller's line; the
plan table; the kernel's PTX holds the pipeline its docstring draws and ptxas keeps it in
registers."""
from __future__ import annotations

import os
import re

import numpy as np
import pytest

from ptxdsl.core.errors import LaunchError
from ptxdsl.core.types import bf16, f16
from ptxdsl.ops import attention
from ptxdsl.ops.attention.config import Config, Mask
from ptxdsl.ops.attention.fwd import build_forward
from ptxdsl.ops.attention.plan import SMEM_PER_CTA, choose, rows
from ptxas_resources import resources_or_skip  # noqa: E402

HERE = os.path.basename(__file__)


def _qkv(sq=16, sk=16, h=2, hk=1, d=64, dtype=np.float16):
    return (np.zeros((1, sq, h, d), dtype), np.zeros((1, sk, hk, d), dtype),
            np.zeros((1, sk, hk, d), dtype))


@pytest.mark.parametrize("change,words", [
    (lambda q, k, v: (q[0], k, v), "must be 4-d"),
    (lambda q, k, v: (q.astype(np.float32), k, v), "float16 or bfloat16"),
    (lambda q, k, v: (q, k.astype(np.float32), v), "give all three one dtype"),
    (lambda q, k, v: (q, k, v[:, :8]), "must have one shape"),
    (lambda q, k, v: (q, np.zeros((1, 16, 3, 64), np.float16),
                      np.zeros((1, 16, 3, 64), np.float16)), "multiple of"),
    (lambda q, k, v: (q[..., :32], k[..., :32], v[..., :32]), "head dim 32"),
    (lambda q, k, v: (np.zeros((1, 16, 2, 128), np.float16)[..., ::2], k, v), "contiguous"),
    (lambda q, k, v: ([[1.0]], k, v), "numpy arrays, torch tensors"),
])
def test_bad_arrays_are_named_at_the_callers_line(change, words):
    q, k, v = change(*_qkv())
    with pytest.raises(LaunchError, match=words) as e:
        attention(q, k, v)
    assert f"{HERE}:" in str(e.value)


@pytest.mark.parametrize("kw,words", [
    (dict(softmax_scale=-1.0), "softmax_scale"), (dict(softmax_scale=float("nan")), "softmax_scale"),
    (dict(window_size=(-2, 0)), "window_size"), (dict(window_size=3), "window_size"),
    (dict(causal=1), "causal"), (dict(softcap=-1.0), "softcap"),
    (dict(out=np.zeros((1, 16, 2, 32), np.float16)), "out must be an array like q"),
])
def test_bad_options_are_named_at_the_callers_line(kw, words):
    with pytest.raises(LaunchError, match=words) as e:
        attention(*_qkv(), **kw)
    assert f"{HERE}:" in str(e.value)


def test_every_plan_row_fits_and_cites_its_source():
    for row in rows():
        assert row["source"] and row["reason"]
        for d in row["head_dims"]:
            assert Config(**row["config"]).smem_bytes(d) <= SMEM_PER_CTA
    for d in (64, 96, 128, 192, 256):
        for m in (Mask(), Mask(-1, 0), Mask(16, 0)):
            c = choose(d, "bf16", m)
            assert c.block_n % 16 == 0 and c.smem_bytes(d) <= SMEM_PER_CTA
    with pytest.raises(ValueError, match="head dim 80"):
        choose(80, "bf16", Mask())


def test_bounded_rows_hold_only_within_their_key_lengths():
    """hd256 causal: one CTA a tile in head sections at every length a dense call gives,
    not when the length is not given (varlen); the windowed mask keeps the general row.
    hd128 causal: the dynamic order in 32 MiB sections up to 1024 keys, in 48 MiB from
    1025, both with q_double; varlen's own; hd64 causal the dynamic order in 32 MiB
    sections, windows the general row."""
    causal = Mask(-1, 0)
    for n in (1024, 4096, 16384):
        assert choose(256, "bf16", causal, seqlen=n).head_sections
    assert not choose(256, "bf16", causal).head_sections
    assert not choose(256, "bf16", Mask(16, 0), seqlen=512).head_sections
    assert all(r.get("max_seqlen", 1) > 0 for r in rows())
    c1k, c4k = (choose(128, "bf16", causal, seqlen=n) for n in (1024, 1025))
    assert c1k.q_double and c1k.dynamic and c1k.head_sections and c1k.section_mb == 32
    assert c4k.q_double and c4k.dynamic and c4k.head_sections and c4k.section_mb == 48
    h64 = [choose(64, "bf16", m, seqlen=n) for m, n in ((causal, 1024), (causal, 1025),
                                                          (Mask(256, 0), 4096))]
    assert [(c.dynamic, c.section_mb) for c in h64] == [(True, 32), (True, 32), (False, 0)]
    # varlen: the unbounded row (q_double and the TMA store, no lazy rescale)
    unbounded = choose(128, "bf16", causal)
    assert unbounded.q_double and unbounded.tma_store and not unbounded.lazy_rescale


def test_ptx_has_the_pipeline():
    text = build_forward(Config(block_n=128, stages=2), bf16, 128, Mask(-1, 0),
                         scale=0.125).ptx()
    for needle in ("setmaxnreg.dec.sync.aligned.u32 24", "setmaxnreg.inc.sync.aligned.u32 240",
                   "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16",
                   "cp.async.bulk.tensor.4d.shared::cluster.global.tile", "ex2.approx.ftz.f32",
                   "shfl.sync.bfly.b32", "mbarrier.try_wait.parity", ".maxntid 384"):
        assert needle in text, needle
    # S: 8 k16 steps over D = 128; O: 8 k16 steps over 128 keys, A from registers; each
    # twice (the first block's S and the last block's P·V are peeled off the loop)
    mmas = [line for line in text.splitlines() if "wgmma.mma_async" in line]
    rs = [line for line in mmas if "}, {" in line]         # A from 4 registers
    assert len(mmas) == 32 and len(rs) == 16
    # in the loop, S(j) is issued before P(j-1)·V(j-1) and only S(j) is waited for
    waits = [i for i, line in enumerate(text.splitlines()) if "wgmma.wait_group" in line]
    lines = text.splitlines()
    one = [i for i in waits if lines[i].strip().endswith("1;")]
    assert len(one) == 1
    before = [line for line in lines[:one[0]] if "wgmma.mma_async" in line][-16:]
    assert [("}, {" in line) for line in before] == [False] * 8 + [True] * 8
    assert all("m64n128k16" in line for line in mmas)
    # one FMA per score: scale and max folded in
    assert len(re.findall(r"fma\.rn\.f32", text)) >= 64


def test_lazy_rescale_ptx():
    """Config.lazy_rescale: in the loop, after the softmax's ex2s, one bar.red.or over the
    warpgroup, then a uniform branch with a wgmma.wait_group 0 on either side, the O
    multiplies on one side only."""
    text = build_forward(Config(block_n=128, stages=2, lazy_rescale=True), bf16, 64, Mask(),
                         scale=0.125).ptx()
    lines = [x.strip() for x in text.splitlines()]
    one = next(i for i, x in enumerate(lines) if x.startswith("wgmma.wait_group.sync.aligned 1"))
    red = [i for i, x in enumerate(lines) if x.startswith("bar.red.or.pred")]
    assert len(red) == 1 and red[0] > max(i for i, x in enumerate(lines[:red[0]])
                                          if x.startswith("ex2.approx")) > one
    after = lines[red[0]:]
    zero = [i for i, x in enumerate(after) if x.startswith("wgmma.wait_group.sync.aligned 0")]
    assert any(x.endswith("bra.uni o_kept;") for x in after[:zero[0]])
    assert "o_kept:" in after[zero[0]:zero[1]]
    muls = [x for x in after[zero[0]:zero[1]] if x.startswith("mul.f32")]
    assert len(muls) == 32                  # D / 2 per thread: O's 64 columns x 2 rows / 4


def test_tma_store_epilogue_ptx():
    """Config.tma_store: O staged in shared memory and stored by TMA, one box per 64-column
    panel and consumer, no st.global of O."""
    text = build_forward(Config(block_n=128, stages=2, tma_store=True), bf16, 128, Mask(),
                         scale=0.125).ptx()
    stores = [x for x in text.splitlines()
              if "cp.async.bulk.tensor.4d.global.shared::cta.tile.bulk_group" in x]
    assert len(stores) == 2 and "fence.proxy.async.shared::cta" in text
    assert "st.global.b32" not in text and "cp.async.bulk.wait_group.read 0" in text


@pytest.mark.ptxas
@pytest.mark.parametrize("d,dtype,mask,layout", [
    (128, bf16, Mask(-1, 0), "dense"),
    pytest.param(256, bf16, Mask(32, 0), "dense", marks=pytest.mark.long),
    pytest.param(192, f16, Mask(), "dense", marks=pytest.mark.long),
    (128, bf16, Mask(-1, 0), "varlen")])
def test_ptxas_keeps_everything_in_registers(d, dtype, mask, layout):
    k = build_forward(choose(d, dtype.name, mask), dtype, d, mask, scale=d ** -0.5,
                      layout=layout, group=4)
    r = resources_or_skip(k)
    assert r.spill_stores == 0 and r.spill_loads == 0 and r.local == 0


class _Ptr:
    """A stand-in tensor: only its address matters to the recording."""

    def __init__(self, ptr):
        self.ptr = ptr

    def data_ptr(self):
        return self.ptr


def test_first_call_recording_maps_views_and_partials_by_address(monkeypatch):
    """What a repeat call replays: a reshaped view (packed GQA's q and LSE) is the tensor it
    views, the decode pass's partials are outputs allocated anew, and a call whose outputs
    share an address (empty tensors) is not recorded."""
    from ptxdsl.ops.attention import api
    seen = []

    class Memo:                                       # what _record hands its recording to
        def record(self, key, rec):
            seen.append(rec)
    monkeypatch.setattr(api, "FORWARD", Memo())
    q, k, v, out, lse = (_Ptr(p) for p in (100, 200, 300, 400, 500))
    q_view, lse_view = _Ptr(100), _Ptr(500)
    api._record((q, k, v, None), out, lse, [("fwd", (q_view, k, v, out, lse_view))], "key",
                True)
    (rec,) = seen
    assert rec.outputs == (out, lse) and rec.result == ("o0", "o1")
    assert rec.launches[0].order == ("t0", "t1", "t2", "o0", "o1")
    opart, lpart = _Ptr(600), _Ptr(700)
    api._record((q, k, v, out), out, lse, [("split", (q, k, v, opart, lpart)),
                                          ("combine", (opart, lpart, out, lse))], "key", False)
    rec = seen[-1]
    assert rec.outputs == (lse, opart, lpart) and rec.result == "t3"
    assert [la.order for la in rec.launches] == [("t0", "t1", "t2", "o1", "o2"),
                                                 ("o1", "o2", "t3", "o0")]
    empty_out, empty_lse = _Ptr(0), _Ptr(0)
    api._record((q, k, v, None), empty_out, empty_lse, [("fwd", (q, k, v, empty_out,
                                                                 empty_lse))], "key", True)
    assert len(seen) == 2


def test_register_budgets_fit_the_launch_pool():
    """setmaxnreg.inc only takes what setmaxnreg.dec gave back: three warpgroups launch with
    168 registers a thread, so producer + 2 consumers must fit 504 (32 + 2 x 240 would wait
    forever), four with 128 (512). The dynamic producer's 32 leave the consumers 232."""
    from ptxdsl.ops.attention.bwd_config import BwdConfig
    from ptxdsl.ops.attention.config import Config, register_pool
    assert (register_pool(2), register_pool(3)) == (504, 512)
    assert (Config().consumer_regs, Config(consumers=3).consumer_regs) == (240, 160)
    assert Config(persistent=True, dynamic=True).consumer_regs == 232
    assert Config(persistent=True, dynamic=True, consumers=3).consumer_regs == 160
    for bad in (lambda: Config(producer_regs=32, consumer_regs=240),
                lambda: BwdConfig(producer_regs=32)):
        with pytest.raises(ValueError, match="wait forever"):
            bad()


@pytest.mark.long
def test_windows_unbounded_on_one_side_run():
    """window_size=(left, -1) and (-1, right): the kernels' names were not PTX identifiers
    ('win16_-1'), so such a call failed to trace."""
    import ptxdsl.ops as ops
    from ptxdsl.ops.attention import attention_reference
    rng = np.random.default_rng(7)
    q, k, v = (rng.standard_normal((1, 24, 1, 64)).astype(np.float16) for _ in range(3))
    for win in ((16, -1), (-1, 5)):
        out = ops.attention(q, k, v, window_size=win)
        want, _ = attention_reference(q, k, v, window_size=win)
        np.testing.assert_allclose(np.asarray(out, np.float32), want, atol=2e-2, rtol=2e-2)
