"""What the RMSNorm plans read of the device a call runs on.

:class:`Device` is the part of a :class:`~ptxdsl.runtime.driver.DeviceInfo` a schedule
may depend on (SMs, DRAM bandwidth, L2 size, whether clusters launch), or the CPU
interpreter's stand-in (two SMs; clusters where the interpreter runs them).
"""
from __future__ import annotations

from dataclasses import dataclass

# Nanoseconds of DRAM latency an SM's loads in flight must cover (Hopper, order of).
DRAM_LATENCY_NS = 1000
# Bytes in flight per SM that split the plan table's device classes: an H100 needs
# about 25 KB ("low"), an H200 about 36 KB ("high").
IN_FLIGHT_SPLIT = 30_000


@dataclass(frozen=True)
class Device:
    name: str
    sms: int
    bandwidth: float   # peak DRAM bytes per second (0: unknown)
    l2_bytes: int      # 0: unknown
    clusters: bool     # thread-block clusters launch (sm_90+) / the interpreter runs them

    @classmethod
    def of(cls, info) -> "Device":
        """The device of a :class:`~ptxdsl.runtime.driver.DeviceInfo`, or (None) the
        interpreter."""
        if info is None:
            return cls("interpreter", 2, 0.0, 0, interpreter_runs_clusters())
        return cls(info.name, info.sm_count, float(getattr(info, "bandwidth", 0.0) or 0.0),
                   int(getattr(info, "l2_bytes", 0) or 0),
                   bool(info.cluster_launch) and tuple(info.cc) >= (9, 0))

    @property
    def in_flight_bytes(self) -> int:
        """Bytes one SM must have in flight to keep DRAM busy (bandwidth x latency /
        SMs; 0 where the bandwidth is unknown)."""
        return int(self.bandwidth * DRAM_LATENCY_NS * 1e-9 / max(1, self.sms))

    def plan_class(self, arch: str) -> str:
        """The device's class in the plan table (plans.json): whether the cluster
        kernels run (sm_90a with clusters), and whether an SM needs more than
        IN_FLIGHT_SPLIT bytes in flight."""
        kind = "clusters" if arch == "sm_90a" and self.clusters else "one-cta"
        return f"{kind}/{'high' if self.in_flight_bytes > IN_FLIGHT_SPLIT else 'low'}"


def interpreter_runs_clusters() -> bool:
    """Whether the CPU interpreter runs what the cluster kernels use: cluster barriers,
    ``mapa`` and stores to a peer's shared memory (its instruction table says)."""
    from ...isa import lookup
    try:
        return all(lookup(op).interp for op in ("barrier.cluster", "mapa"))
    except Exception:  # noqa: BLE001 - an older table: no
        return False
