"""DeviceInfo stand-ins for an H100 SXM and an H200 (132 SMs; their DRAM and L2), for
tests of the plans that differ by device, without a GPU."""
from __future__ import annotations

from ptxdsl.runtime.driver import DeviceInfo


def device(cc=(9, 0), sms=132, clock=2_619_000, bus=5120, l2=50 << 20, name="H100"):
    return DeviceInfo(ordinal=0, name=name, cc=cc, total_mem=80 << 30,
                      max_threads_per_block=1024, max_block=(1024, 1024, 64),
                      max_grid=(2**31 - 1, 65535, 65535), max_smem_per_block=48 << 10,
                      max_smem_per_block_optin=227 << 10, sm_count=sms,
                      cluster_launch=cc >= (9, 0), l2_bytes=l2, mem_clock_khz=clock,
                      mem_bus_bits=bus)


H100 = device()
H200 = device(clock=3_201_000, bus=6144, l2=60 << 20, name="H200")
