"""bench/rmsnorm_long_ab.py's variants, without a GPU: what a variant string means, the
plans the documented measurements used, and typos refused before any GPU work."""
from __future__ import annotations

import numpy as np
import pytest

from bench import rmsnorm_long_ab as ab
from ptxdsl.ops.rmsnorm.fwd_cluster import build_forward_cluster, plan_cluster
from ptxdsl.core.types import bf16, f32

TWO_PASS = "stages=0;prefetch_w=0;grid=0;two_pass=1;min_ctas=2"


def test_variant_strings():
    assert ab.parse_variant("") == {}
    assert ab.parse_variant("split=4:1024:4; stages=0;min_ctas=2;l2=evict_last") == {
        "split": (4, 1024, 4), "stages": 0, "min_ctas": 2, "l2": "evict_last"}
    assert ab.parse_variant("y_hints=cs;x_hints=") == {"y_hints": ("cs",), "x_hints": ()}
    assert ab.parse_variant("x_hints=L1::evict_last+L2::256B")["x_hints"] == (
        "L1::evict_last", "L2::256B")
    for bad, match in (("split=4:1024", "C:T:K"), ("two_pass", "field=value"),
                       ("=3", "field=value")):
        with pytest.raises(ValueError, match=match):
            ab.parse_variant(bad)


@pytest.mark.parametrize("n,dt,split,c,t,k", [(131072, bf16, "4:1024:4", 4, 1024, 4),
                                              (262144, bf16, "8:1024:4", 8, 1024, 4),
                                              (65536, f32, "4:1024:4", 4, 1024, 4)])
def test_the_documented_two_pass_variants(n, dt, split, c, t, k):
    """The variants of docs/rmsnorm.md's two-pass tables give the plan the API takes."""
    base = ab.ring_plan(n, dt)
    p, own_grid = ab.variant_plan(n, dt, f"split={split};{TWO_PASS}", base)
    assert own_grid and p.grid == 0
    assert (p.cluster, p.threads, p.per_thread, p.two_pass, p.min_ctas, p.stages) == (
        c, t, k, True, 2, 0)
    api = plan_cluster(n, dt, two_pass=True, cluster=c, per_thread=4)
    assert dataclasses_equal(p, api)


def dataclasses_equal(a, b) -> bool:
    import dataclasses
    return dataclasses.asdict(a) == dataclasses.asdict(b)


def test_base_fields_replaced_and_bad_fields_refused():
    base = ab.ring_plan(131072, bf16)
    assert (base.cluster, base.threads, base.per_thread, base.stages) == (2, 1024, 8, 1)
    p, own_grid = ab.variant_plan(131072, bf16, "min_ctas=1", base)
    assert not own_grid and p.min_ctas == 1 and p.stages == 1
    with pytest.raises(TypeError):
        ab.variant_plan(131072, bf16, "no_such_field=1", base)
    with pytest.raises(ValueError, match="no plan"):
        ab.variant_plan(131072, bf16, "split=32:1024:8", base)


def test_a_variant_runs_on_the_interpreter():
    """A two-pass variant's kernel, as the tool builds it, on a ragged row on the CPU."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    base = plan_cluster(4000, bf16, cluster=2, threads=128, per_thread=2)
    p, _ = ab.variant_plan(4000, bf16, "split=2:128:2;" + TWO_PASS, base)
    k = build_forward_cluster(p, bf16, bf16, eps=1e-6)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 4000)).astype(ml_dtypes.bfloat16)
    w = np.ones(4000, ml_dtypes.bfloat16)
    y = k.interpret(x, w, np.zeros_like(x))
    x64 = x.astype(np.float64)
    ref = x64 / np.sqrt((x64 ** 2).mean(-1, keepdims=True) + 1e-6)
    assert np.abs(y.astype(np.float64) - ref).max() < 2e-2


def test_typos_fail_before_any_gpu_work():
    with pytest.raises(ValueError, match="C:T:K"):
        ab.main(["--variant", "split=4"])
