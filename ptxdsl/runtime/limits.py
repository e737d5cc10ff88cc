"""The device limits a launch must respect, checked before it is made.

Grid and block sizes, threads per block for the kernel's registers, static plus
dynamic shared memory (raising a function's dynamic limit past 48 KiB, which the
driver wants asked for), cooperative grids that must be resident all at once (from
the driver's occupancy calculator), and cluster shapes. A mixin of
:class:`~ptxdsl.runtime.launcher.Launcher`, which provides ``sig``, ``drv``,
``kernel``, ``cooperative`` and ``function(device)``.
"""
from __future__ import annotations

import sys

from ..core.errors import LaunchError, user_location
from .compile import KernelFunction
from .driver import CudaError


class LaunchLimits:
    """Limit checks and occupancy queries of a launcher (see the module docstring)."""

    def _check_limits(self, kf: KernelFunction, info, grid, block, smem: int, cluster) -> None:
        name = self.sig.describe_call()
        for axis, (g, m) in enumerate(zip(grid, info.max_grid)):
            if g > m:
                raise LaunchError(f"{name}: grid {grid} exceeds the device's limit {info.max_grid} "
                                  f"on axis {'xyz'[axis]}", user_location())
        for axis, (b, m) in enumerate(zip(block, info.max_block)):
            if b > m:
                raise LaunchError(f"{name}: block {block} exceeds the device's limit "
                                  f"{info.max_block} on axis {'xyz'[axis]}", user_location())
        threads = block[0] * block[1] * block[2]
        if threads > kf.max_threads:
            raise LaunchError(f"{name}: block {block} has {threads} threads but this kernel fits "
                              f"at most {kf.max_threads} per block on {info.name} (it uses "
                              f"{kf.num_regs} registers per thread); use a smaller block",
                              user_location())
        total = kf.static_smem + smem
        if total > info.max_smem_per_block_optin:
            raise LaunchError(f"{name}: needs {kf.static_smem} bytes of static + {smem} bytes of "
                              f"dynamic shared memory = {total} bytes per block, over the "
                              f"{info.max_smem_per_block_optin} bytes {info.name} allows",
                              user_location())
        self._allow_dynamic_smem(kf, smem)
        if self.cooperative:
            self._check_resident(kf, info, grid, threads, smem)
        elif getattr(self.kernel, "resident", None):
            self._check_resident(kf, info, grid, threads, smem, self.kernel.resident)
        if cluster is not None:
            if not info.cluster_launch:
                raise LaunchError(f"{name}: cluster={cluster} but {info.name} ({info.arch}) "
                                  f"cannot launch clusters (sm_90 or newer needed)",
                                  user_location())
            for axis, (g, c) in enumerate(zip(grid, cluster)):
                if g % c:
                    raise LaunchError(f"{name}: grid {grid} is not a multiple of cluster "
                                      f"{cluster} on axis {'xyz'[axis]}", user_location())
            size = cluster[0] * cluster[1] * cluster[2]
            if size > 16:
                raise LaunchError(f"{name}: cluster {cluster} has {size} CTAs; at most 16 "
                                  f"(8 portable)", user_location())
            if size > 8 and not getattr(kf, "non_portable", False):
                self._in_context(kf.device, self.drv.set_func_attribute, kf.func,
                                 "CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED", 1)
                kf.non_portable = True

    def _check_resident(self, kf: KernelFunction, info, grid, threads: int, smem: int,
                        need: int | None = None) -> None:
        """A cooperative grid must fit on the device all at once (else the driver would
        refuse it, or CTAs waiting for each other would never all run); a kernel's
        ``resident=n``, ``n`` of its CTAs (its late arrivals wait for CTAs that must still
        find an SM)."""
        per_sm = self._per_sm(kf, threads, smem)
        ctas = grid[0] * grid[1] * grid[2]
        if need is None:
            need, what, fix = ctas, f"a cooperative grid of {ctas} CTAs", "use a smaller grid"
        else:
            what = f"{min(need, ctas)} of its {ctas} CTAs (resident={need})"
            need, fix = min(need, ctas), "make fewer CTAs wait"
        if need > per_sm * info.sm_count:
            raise LaunchError(f"{self.sig.describe_call()}: {what} "
                              f"must be resident at once, but {info.name} holds {per_sm} CTA(s) "
                              f"of this kernel per SM x {info.sm_count} SMs = "
                              f"{per_sm * info.sm_count} (it uses {kf.num_regs} registers per "
                              f"thread, {kf.static_smem + smem} bytes of shared memory); {fix}",
                              user_location())

    def resident_ctas(self, device: int, smem: int | None = None) -> int:
        """How many CTAs of this kernel the device holds at once (occupancy x SMs), each
        with ``smem`` bytes of dynamic shared memory (default: the kernel's own,
        ``kernel.dynamic_shared``)."""
        if smem is None:
            smem = int(getattr(self.kernel, "dynamic_shared", 0) or 0)
        kf = self.function(device)
        self._allow_dynamic_smem(kf, smem)  # the occupancy calculator honours the limit
        block = self.kernel.block
        per_sm = self._per_sm(kf, block[0] * block[1] * block[2], smem)
        return per_sm * self.drv.device(device).sm_count

    def resident_clusters(self, device: int, smem: int | None = None) -> int:
        """How many clusters (the kernel's ``cluster=`` shape) of this kernel the device
        runs at once, each CTA with ``smem`` bytes of dynamic shared memory (default: the
        kernel's own)."""
        if smem is None:
            smem = int(getattr(self.kernel, "dynamic_shared", 0) or 0)
        cluster = self.cluster or (1, 1, 1)
        kf = self.function(device)
        self._allow_dynamic_smem(kf, smem)
        if cluster[0] * cluster[1] * cluster[2] > 8 and not getattr(kf, "non_portable", False):
            self._in_context(kf.device, self.drv.set_func_attribute, kf.func,
                             "CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED", 1)
            kf.non_portable = True
        block = self.kernel.block
        return self._in_context(kf.device, self.drv.max_active_clusters, kf.func,
                                block[0] * block[1] * block[2], smem, cluster)

    def _allow_dynamic_smem(self, kf: KernelFunction, smem: int) -> None:
        """Over 48 KiB of dynamic shared memory needs an explicit opt-in per function."""
        if smem > kf.dyn_smem_limit:
            with kf.lock:
                if smem > kf.dyn_smem_limit:
                    self._in_context(kf.device, self.drv.set_func_attribute, kf.func,
                                     "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES", smem)
                    kf.dyn_smem_limit = smem

    def _per_sm(self, kf: KernelFunction, threads: int, smem: int) -> int:
        """CTAs per SM from the driver's occupancy calculator, asked once per shape."""
        per_sm = kf.resident.get((threads, smem))
        if per_sm is None:
            per_sm = self._in_context(kf.device, self.drv.max_active_ctas, kf.func, threads,
                                      smem)
            kf.resident[(threads, smem)] = per_sm
        return per_sm

    def _in_context(self, device: int, fn, *a):
        pushed = self.drv.enter(device)
        try:
            return fn(*a)
        finally:
            if pushed:
                _leave_quietly(self.drv)


def _leave_quietly(drv) -> None:
    """Pop our context; after a sticky error the pop fails too, and that second error
    must not hide the first (which is already propagating)."""
    propagating = sys.exc_info()[0] is not None  # set inside a finally that is unwinding
    try:
        drv.leave()
    except CudaError:
        if not propagating:
            raise
