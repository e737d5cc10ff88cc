"""bench/rmsnorm_long.py without a GPU: its ``ptxdsl:1cta`` contender switches the cluster
plans off while it runs (the row-per-CTA kernels) and back on after."""
from __future__ import annotations

from bench import rmsnorm_long
from ptxdsl.ops.rmsnorm import plan
from ptxdsl.runtime.driver import DeviceInfo
from ptxdsl.types import bf16

H200 = DeviceInfo(ordinal=0, name="H200", cc=(9, 0), total_mem=141 << 30,
                  max_threads_per_block=1024, max_block=(1024, 1024, 64),
                  max_grid=(2**31 - 1, 65535, 65535), max_smem_per_block=48 << 10,
                  max_smem_per_block_optin=227 << 10, sm_count=132, cluster_launch=True,
                  l2_bytes=60 << 20, mem_clock_khz=3_201_000, mem_bus_bits=6144)


def test_one_cta_contender_switches_the_cluster_plans_off_and_back():
    on = plan.long_rows(262144, bf16, 8, "sm_90a", H200)
    assert on.forward is not None and on.backward is not None
    with rmsnorm_long._OneCta(lambda: None):
        off = plan.long_rows(262144, bf16, 8, "sm_90a", H200)
        assert off.forward is None and off.backward is None
    assert plan.long_rows(262144, bf16, 8, "sm_90a", H200) == on
