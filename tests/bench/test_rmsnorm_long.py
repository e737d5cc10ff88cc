"""bench/rmsnorm_long.py without a GPU: its ``ptxdsl:1cta`` contender switches the cluster
plans off while it runs (the row-per-CTA kernels) and back on after."""
from __future__ import annotations

from bench import rmsnorm_long
from ptxdsl.ops.rmsnorm import plan
from ptxdsl.core.types import bf16

from hopper_devices import H200


def test_one_cta_contender_switches_the_cluster_plans_off_and_back():
    on = plan.long_rows(262144, bf16, 8, "sm_90a", H200)
    assert on.forward is not None and on.backward is not None
    with rmsnorm_long._OneCta(lambda: None):
        off = plan.long_rows(262144, bf16, 8, "sm_90a", H200)
        assert off.forward is None and off.backward is None
    assert plan.long_rows(262144, bf16, 8, "sm_90a", H200) == on
