"""The CUDA driver, through cuda-python's ``cuda.bindings.driver``: devices, contexts, modules.

Every driver call of ptxdsl goes through one :class:`Driver` object, so that
tests can swap in a fake (:func:`set_driver`) and so that error handling lives in
one place: a failing call raises :class:`CudaError`, which names the CUDA error
(``CUDA_ERROR_ILLEGAL_ADDRESS``), the call, and what to do about it.

Contexts: ptxdsl uses each device's *primary* context, the one the CUDA runtime
(and so torch, cupy and jax) uses, so pointers and streams from those frameworks
are valid in our launches and theirs are valid in ours. We never create, destroy
or reset a context. On a thread with no current context we make the primary
context of the device current (what ``cudaSetDevice`` would do); when another
context is current we push ours around the launch and pop it afterwards, so a
torch user's current device is never changed behind their back.

Works with cuda-bindings 12.8+ and 13.x: only calls whose Python signatures are
the same in both are used, and results are unpacked as ``(CUresult, *values)``.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

from ..core.errors import PtxdslError

__all__ = ["CudaError", "Driver", "DeviceInfo", "get", "gpu_available", "set_driver",
           "driver_unavailable_reason", "STICKY_ERRORS"]

# Errors after which the context is unusable for the rest of the process: the
# driver marks the context as failed and every later call returns the same error.
STICKY_ERRORS = frozenset({
    "CUDA_ERROR_ILLEGAL_ADDRESS", "CUDA_ERROR_LAUNCH_FAILED", "CUDA_ERROR_ILLEGAL_INSTRUCTION",
    "CUDA_ERROR_MISALIGNED_ADDRESS", "CUDA_ERROR_INVALID_ADDRESS_SPACE", "CUDA_ERROR_INVALID_PC",
    "CUDA_ERROR_HARDWARE_STACK_ERROR", "CUDA_ERROR_ASSERT", "CUDA_ERROR_LAUNCH_TIMEOUT",
    "CUDA_ERROR_ECC_UNCORRECTABLE", "CUDA_ERROR_TENSOR_MEMORY_LEAK",
    "CUDA_ERROR_CONTEXT_IS_DESTROYED",
})

# Advice per error, said once here rather than at every call site.
_ADVICE = {
    "CUDA_ERROR_NO_DEVICE": "no CUDA device is visible (check CUDA_VISIBLE_DEVICES and nvidia-smi)",
    "CUDA_ERROR_INVALID_PTX": "the driver rejected the PTX; see the log above",
    "CUDA_ERROR_UNSUPPORTED_PTX_VERSION": (
        "the driver is older than the PTX ISA this kernel uses: update the NVIDIA driver, or "
        "build for an older PTX ISA (kernel(..., version=(8, 0)))"),
    "CUDA_ERROR_NO_BINARY_FOR_GPU": "the cubin was built for another GPU architecture",
    "CUDA_ERROR_OUT_OF_MEMORY": "the GPU is out of memory",
    "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES": (
        "too many registers or too much shared memory per block for this block size"),
}


class CudaError(PtxdslError):
    """A CUDA driver call failed. ``name`` is the CUDA error name (``CUDA_ERROR_...``)."""

    def __init__(self, name: str, call: str, detail: str = "", *, code: int | None = None,
                 kernel: str | None = None):
        self.name = name
        self.call = call
        self.code = code
        self.detail = detail
        self.kernel = kernel
        text = f"{call} failed: {name}"
        if kernel:
            text = f"kernel {kernel}: {text}"
        if detail:
            text += f" ({detail})"
        if name in _ADVICE:
            text += f"; {_ADVICE[name]}"
        if name in STICKY_ERRORS:
            text += (". This error is sticky: the CUDA context is now unusable for the rest of "
                     "the process (torch and every later launch will fail with it), so restart "
                     "the process. Asynchronous faults surface at a later call: run with "
                     "PTXDSL_SYNC=1 (or kernel(..., sync=True)) to attribute them to the kernel "
                     "that caused them, and PTXDSL_INTERPRET=1 to have the CPU interpreter name "
                     "the bad access and its Python line")
        super().__init__(text)

    def for_kernel(self, kernel: str, call: str | None = None) -> "CudaError":
        """The same error, said about ``kernel``."""
        return CudaError(self.name, call or self.call, self.detail, code=self.code, kernel=kernel)

    @property
    def sticky(self) -> bool:
        """True when the error has poisoned the context (restart the process to use the GPU)."""
        return self.name in STICKY_ERRORS


@dataclass
class DeviceInfo:
    """What ptxdsl needs to know about one device; read once, then cached."""

    ordinal: int
    name: str
    cc: tuple[int, int]
    total_mem: int
    max_threads_per_block: int
    max_block: tuple[int, int, int]
    max_grid: tuple[int, int, int]
    max_smem_per_block: int          # without opting in (48 KiB)
    max_smem_per_block_optin: int    # with cuFuncSetAttribute (227 KiB on H100)
    sm_count: int
    cluster_launch: bool
    extra: dict = field(default_factory=dict)
    l2_bytes: int = 0                # 0: not reported
    mem_clock_khz: int = 0           # peak memory clock (0: not reported)
    mem_bus_bits: int = 0            # global memory bus width

    @property
    def arch(self) -> str:
        return f"sm_{self.cc[0]}{self.cc[1]}"

    @property
    def bandwidth(self) -> float:
        """Peak DRAM bytes per second (double data rate x bus width; 0: not reported)."""
        return 2.0 * self.mem_clock_khz * 1e3 * self.mem_bus_bits / 8


class _ThreadState(threading.local):
    device = -1  # the device whose primary context we last saw current on this thread


class Driver:
    """cuda.bindings.driver, initialised, with checked calls. One per process (see :func:`get`)."""

    backend = "cuda.bindings"

    def __init__(self, cu=None):
        if cu is None:
            from cuda.bindings import driver as cu  # ImportError when cuda-python is missing
        self.cu = cu  # the bindings module (tests pass a fake with the same API)
        self.OK = cu.CUresult.CUDA_SUCCESS
        self.check(cu.cuInit(0), "cuInit")
        self._lock = threading.Lock()
        self._devices: dict[int, DeviceInfo] = {}
        self._primary: dict[int, object] = {}     # ordinal -> CUcontext
        self._primary_int: dict[int, int] = {}    # ordinal -> context handle as int
        self._streams: dict[int, object] = {}     # raw handle -> CUstream
        self.tls = _ThreadState()
        self._cshim: tuple | None = None            # (the launch shim or None,) once tried

    # ------------------------------------------------------------------ errors
    def error_name(self, code) -> str:
        name = getattr(code, "name", None)
        if name:
            return name
        try:
            return self.cu.CUresult(int(code)).name  # a plain int (the launch shim's)
        except Exception:  # noqa: BLE001
            pass
        try:
            err, text = self.cu.cuGetErrorName(code)
            if not err and text:
                return text.decode() if isinstance(text, bytes) else str(text)
        except Exception:  # noqa: BLE001 - a name is a nicety
            pass
        return f"CUDA error {int(code)}"

    def error_string(self, code) -> str:
        try:
            if not hasattr(code, "name"):
                code = self.cu.CUresult(int(code))
            err, text = self.cu.cuGetErrorString(code)
            if not err and text:
                return text.decode() if isinstance(text, bytes) else str(text)
        except Exception:  # noqa: BLE001
            pass
        return ""

    def check(self, result, call: str):
        """Unpack ``(CUresult, *values)``: raise :class:`CudaError` or return the value(s)."""
        err = result[0]
        if err:
            raise self.error(err, call)
        if len(result) == 1:
            return None
        return result[1] if len(result) == 2 else result[1:]

    def error(self, code, call: str, detail: str = "") -> CudaError:
        detail = detail or self.error_string(code)
        return CudaError(self.error_name(code), call, detail, code=int(code))

    # ------------------------------------------------------------------ devices
    def version(self) -> int:
        """Driver API version, e.g. 13000 for CUDA 13.0."""
        return int(self.check(self.cu.cuDriverGetVersion(), "cuDriverGetVersion"))

    def device_count(self) -> int:
        return int(self.check(self.cu.cuDeviceGetCount(), "cuDeviceGetCount"))

    def device(self, ordinal: int) -> DeviceInfo:
        info = self._devices.get(ordinal)
        if info is not None:
            return info
        cu = self.cu
        count = self.device_count()
        if not 0 <= ordinal < count:
            raise CudaError("CUDA_ERROR_INVALID_DEVICE", "cuDeviceGet",
                            f"device {ordinal} does not exist; {count} visible")
        dev = self.check(cu.cuDeviceGet(ordinal), "cuDeviceGet")
        A = cu.CUdevice_attribute

        def attr(name: str, default: int = 0) -> int:
            a = getattr(A, name, None)
            if a is None:
                return default
            err, value = cu.cuDeviceGetAttribute(a, dev)
            return int(value) if not err else default

        raw = self.check(cu.cuDeviceGetName(256, dev), "cuDeviceGetName")
        if isinstance(raw, bytes):
            name = raw.split(b"\0", 1)[0].decode(errors="replace")
        else:
            name = str(raw)
        info = DeviceInfo(
            ordinal=ordinal, name=name,
            cc=(attr("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR"),
                attr("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR")),
            total_mem=int(self.check(cu.cuDeviceTotalMem(dev), "cuDeviceTotalMem")),
            max_threads_per_block=attr("CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK", 1024),
            max_block=(attr("CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X", 1024),
                       attr("CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y", 1024),
                       attr("CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z", 64)),
            max_grid=(attr("CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X", 2**31 - 1),
                      attr("CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y", 65535),
                      attr("CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z", 65535)),
            max_smem_per_block=attr("CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK", 48 * 1024),
            max_smem_per_block_optin=attr("CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN",
                                          48 * 1024),
            sm_count=attr("CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT"),
            cluster_launch=bool(attr("CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH")),
            l2_bytes=attr("CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE"),
            mem_clock_khz=attr("CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE"),
            mem_bus_bits=attr("CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH"),
        )
        self._devices[ordinal] = info
        return info

    # ------------------------------------------------------------------ contexts
    def primary_context(self, ordinal: int):
        """The device's primary context (retained once, never released: it lives as
        long as the process, as the CUDA runtime's does)."""
        ctx = self._primary.get(ordinal)
        if ctx is None:
            with self._lock:
                ctx = self._primary.get(ordinal)
                if ctx is None:
                    self.device(ordinal)  # validates the ordinal with a clear message
                    dev = self.check(self.cu.cuDeviceGet(ordinal), "cuDeviceGet")
                    ctx = self.check(self.cu.cuDevicePrimaryCtxRetain(dev),
                                     "cuDevicePrimaryCtxRetain")
                    self._primary_int[ordinal] = int(ctx)
                    self._primary[ordinal] = ctx
        return ctx

    def current_context(self) -> int:
        ctx = self.check(self.cu.cuCtxGetCurrent(), "cuCtxGetCurrent")
        return int(ctx) if ctx is not None else 0

    def current_device(self) -> int:
        """The device of the thread's current context, -1 when there is none."""
        cur = self.current_context()
        if not cur:
            return -1
        for ordinal, handle in self._primary_int.items():
            if handle == cur:
                return ordinal
        try:
            return int(self.check(self.cu.cuCtxGetDevice(), "cuCtxGetDevice"))
        except CudaError:
            return -1

    def thread_device(self) -> int:
        """The device whose primary context we last saw current on this thread (-1: none).

        A cheap guess for the launch fast path; a launch that fails with an invalid
        context or handle falls back to :meth:`enter` and refreshes it."""
        return self.tls.device

    def forget_thread_device(self) -> None:
        self.tls.device = -1

    def enter(self, ordinal: int) -> bool:
        """Make ``ordinal``'s primary context current for a call.

        Returns True when a context was pushed (call :meth:`leave` afterwards), False
        when it was already current or nothing was current (then it is set, for good).
        """
        ctx = self.primary_context(ordinal)
        cur = self.current_context()
        if cur == self._primary_int[ordinal]:
            self.tls.device = ordinal
            return False
        if not cur:
            self.check(self.cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
            self.tls.device = ordinal
            return False
        self.check(self.cu.cuCtxPushCurrent(ctx), "cuCtxPushCurrent")
        self.tls.device = -1  # the pushed context is temporary
        return True

    def leave(self) -> None:
        self.check(self.cu.cuCtxPopCurrent(), "cuCtxPopCurrent")

    # ------------------------------------------------------------------ modules
    def load_module(self, image: bytes, *, jit: bool) -> tuple[object, str]:
        """Load a cubin (``jit=False``) or NUL-terminated PTX (``jit=True``) into the
        current context. Returns ``(module, info log)``; a failure raises
        :class:`CudaError` whose ``detail`` holds the JIT's error log."""
        cu = self.cu
        if not jit:
            return self.check(cu.cuModuleLoadData(image), "cuModuleLoadData"), ""
        jo = cu.CUjit_option
        size = 1 << 16
        err_log, info_log = bytearray(size), bytearray(size)
        opts = [jo.CU_JIT_ERROR_LOG_BUFFER, jo.CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                jo.CU_JIT_INFO_LOG_BUFFER, jo.CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
                jo.CU_JIT_LOG_VERBOSE]
        vals = [err_log, size, info_log, size, 1]
        try:
            result = cu.cuModuleLoadDataEx(image, len(opts), opts, vals)
        except (TypeError, ValueError):
            # A bindings version that will not take a bytearray as char*: load without logs.
            err_log = info_log = bytearray()
            result = cu.cuModuleLoadDataEx(image, 0, [], [])

        def text(buf: bytearray) -> str:
            return bytes(buf).split(b"\0", 1)[0].decode(errors="replace").strip()

        if result[0]:
            raise self.error(result[0], "cuModuleLoadDataEx (driver JIT of PTX)",
                             text(err_log) or self.error_string(result[0]))
        return result[1], text(info_log)

    def get_function(self, module, name: str):
        return self.check(self.cu.cuModuleGetFunction(module, name.encode()), "cuModuleGetFunction")

    def func_attribute(self, func, name: str) -> int:
        a = getattr(self.cu.CUfunction_attribute, name)
        return int(self.check(self.cu.cuFuncGetAttribute(a, func), "cuFuncGetAttribute"))

    def set_func_attribute(self, func, name: str, value: int) -> None:
        a = getattr(self.cu.CUfunction_attribute, name)
        self.check(self.cu.cuFuncSetAttribute(func, a, int(value)), f"cuFuncSetAttribute({name})")

    # ------------------------------------------------------------------ memory
    def mem_alloc(self, nbytes: int) -> int:
        return int(self.check(self.cu.cuMemAlloc(max(int(nbytes), 1)), "cuMemAlloc"))

    def mem_free(self, ptr: int) -> None:
        self.check(self.cu.cuMemFree(ptr), "cuMemFree")

    def memcpy_htod(self, dst: int, src_addr: int, nbytes: int, stream: int) -> None:
        self.check(self.cu.cuMemcpyHtoDAsync(dst, src_addr, nbytes, self.stream(stream)),
                   "cuMemcpyHtoDAsync")

    def memcpy_dtoh(self, dst_addr: int, src: int, nbytes: int, stream: int) -> None:
        self.check(self.cu.cuMemcpyDtoHAsync(dst_addr, src, nbytes, self.stream(stream)),
                   "cuMemcpyDtoHAsync")

    def pointer_device(self, ptr: int) -> int:
        """The device ordinal owning device pointer ``ptr`` (-1: not device memory)."""
        cu = self.cu
        attr = cu.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
        try:
            err, value = cu.cuPointerGetAttribute(attr, ptr)
        except Exception:  # noqa: BLE001 - an unknown pointer is not an error here
            return -1
        if err:
            return -1
        try:
            return int(value)
        except (TypeError, ValueError):
            return -1

    def mem_info(self) -> tuple[int, int]:
        """(free, total) bytes of the current context's device."""
        free, total = self.check(self.cu.cuMemGetInfo(), "cuMemGetInfo")
        return int(free), int(total)

    # ------------------------------------------------------------------ streams
    def stream(self, handle: int):
        """The CUstream object for a raw handle, cached: building one costs ~0.2 us and
        the bindings would build it on every launch from a plain int."""
        s = self._streams.get(handle)
        if s is None:
            s = self._streams[handle] = self.cu.CUstream(handle)
            if len(self._streams) > 4096:  # streams come and go; do not hold them all
                self._streams.clear()
                self._streams[handle] = s
        return s

    def stream_sync(self, handle: int) -> None:
        self.check(self.cu.cuStreamSynchronize(self.stream(handle)), "cuStreamSynchronize")

    def stream_wait_stream(self, waiter: int, producer: int) -> None:
        """Make ``waiter`` wait for the work queued so far on ``producer`` (an event)."""
        cu = self.cu
        ev = self.check(cu.cuEventCreate(cu.CUevent_flags.CU_EVENT_DISABLE_TIMING), "cuEventCreate")
        try:
            self.check(cu.cuEventRecord(ev, self.stream(producer)), "cuEventRecord")
            self.check(cu.cuStreamWaitEvent(self.stream(waiter), ev, 0), "cuStreamWaitEvent")
        finally:
            cu.cuEventDestroy(ev)

    # ------------------------------------------------------------------ launching
    def wrap_function(self, func):
        return func if isinstance(func, self.cu.CUfunction) else self.cu.CUfunction(int(func))

    def launch(self, func, grid, block, smem: int, stream: int, params_addr: int,
               cluster=None, cooperative: bool = False, pdl: bool = False) -> None:
        """A checked launch (the slow path; the fast path calls :attr:`launch_raw`).
        Cluster dimensions or a programmatic dependent launch (``pdl``) go through
        ``cuLaunchKernelEx``."""
        cu = self.cu
        if cluster is None and not pdl:
            if cooperative:
                r = cu.cuLaunchCooperativeKernel(func, grid[0], grid[1], grid[2], block[0],
                                                 block[1], block[2], smem, self.stream(stream),
                                                 params_addr)
                self.check(r, "cuLaunchCooperativeKernel")
                return
            r = cu.cuLaunchKernel(func, grid[0], grid[1], grid[2], block[0], block[1], block[2],
                                  smem, self.stream(stream), params_addr, 0)
            self.check(r, "cuLaunchKernel")
            return
        config = self._ex_config(grid, block, smem, stream, cluster, cooperative, pdl)
        self.check(cu.cuLaunchKernelEx(config, func, params_addr, 0), "cuLaunchKernelEx")

    def ex_launcher(self, cluster=None, cooperative: bool = False, pdl: bool = False):
        """A function with :attr:`launch_raw`'s arguments that launches with
        ``cuLaunchKernelEx`` and the launch attributes asked for: the cluster dimensions
        ``cluster`` (None: none), the cooperative attribute, programmatic stream
        serialization (``pdl``). The fast path's launch for such kernels. Launch configs
        are kept per (function, grid, block, shared memory, stream), so a repeated launch
        only calls ``cuLaunchKernelEx``."""
        cu = self.cu
        configs: dict = {}
        ex = cu.cuLaunchKernelEx
        cluster = None if cluster is None else tuple(int(c) for c in cluster)

        def launch(func, gx, gy, gz, bx, by, bz, smem, stream, params, extra=0):
            key = (int(func), gx, gy, gz, bx, by, bz, smem, int(stream) if stream else 0)
            config = configs.get(key)
            if config is None:
                if len(configs) > 256:
                    configs.clear()
                config = configs[key] = self._ex_config(
                    (gx, gy, gz), (bx, by, bz), smem, stream, cluster, cooperative, pdl)
            return ex(config, func, params, 0)
        return launch

    def _ex_config(self, grid, block, smem: int, stream, cluster, cooperative: bool,
                   pdl: bool = False):
        cu = self.cu
        config = cu.CUlaunchConfig()
        config.gridDimX, config.gridDimY, config.gridDimZ = grid
        config.blockDimX, config.blockDimY, config.blockDimZ = block
        config.sharedMemBytes = smem
        config.hStream = stream if isinstance(stream, cu.CUstream) else self.stream(stream)
        ids = cu.CUlaunchAttributeID
        attrs = []
        if cluster is not None:
            attr = cu.CUlaunchAttribute()
            attr.id = ids.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
            attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = cluster
            attrs.append(attr)
        if cooperative:
            coop = cu.CUlaunchAttribute()
            coop.id = ids.CU_LAUNCH_ATTRIBUTE_COOPERATIVE
            coop.value.cooperative = 1
            attrs.append(coop)
        if pdl:
            ser = cu.CUlaunchAttribute()
            ser.id = ids.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
            ser.value.programmaticStreamSerializationAllowed = 1
            attrs.append(ser)
        config.attrs = attrs
        config.numAttrs = len(attrs)
        return config

    @property
    def launch_raw(self):
        """``cuLaunchKernel`` itself, for generated fast paths: called with the
        CUfunction, 7 ints, a CUstream (:meth:`stream`) and the address of the
        kernelParams array; returns ``(CUresult,)``, whose first item is falsy on success."""
        return self.cu.cuLaunchKernel

    @property
    def launch_raw_cooperative(self):
        """``cuLaunchCooperativeKernel``: :attr:`launch_raw`'s arguments without the
        trailing ``extra``."""
        return self.cu.cuLaunchCooperativeKernel

    def c_launcher(self):
        """The launch shim (:mod:`.cshim`) given this process's libcuda entry points, or
        None where it cannot be built here or the bindings are not cuda.bindings' (a
        test's fake driver). Tried once per driver."""
        if self._cshim is None:
            with self._lock:
                if self._cshim is None:
                    from . import cshim
                    self._cshim = (cshim.for_driver(self.cu),)
        return self._cshim[0]

    def max_active_ctas(self, func, threads: int, smem: int) -> int:
        """CTAs of ``func`` one multiprocessor holds at once (the occupancy calculator)."""
        return int(self.check(self.cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(
            func, threads, smem), "cuOccupancyMaxActiveBlocksPerMultiprocessor"))

    def max_active_clusters(self, func, threads: int, smem: int, cluster) -> int:
        """Clusters of shape ``cluster`` of ``func`` the device runs at once, each CTA of
        ``threads`` threads and ``smem`` bytes of dynamic shared memory
        (``cuOccupancyMaxActiveClusters``: it knows how the SMs group into GPCs)."""
        cluster = tuple(int(c) for c in cluster)
        grid = (cluster[0], cluster[1], cluster[2])
        config = self._ex_config(grid, (threads, 1, 1), smem, 0, cluster, False)
        return int(self.check(self.cu.cuOccupancyMaxActiveClusters(func, config),
                              "cuOccupancyMaxActiveClusters"))

    def ctx_sync(self) -> None:
        self.check(self.cu.cuCtxSynchronize(), "cuCtxSynchronize")


# ---------------------------------------------------------------------- the process's driver
_driver: Driver | None = None
_driver_error: BaseException | None = None
_init_lock = threading.Lock()


def get() -> Driver:
    """The process's :class:`Driver` (created on first use). Raises :class:`PtxdslError`
    saying why when there is no usable driver."""
    global _driver, _driver_error
    if _driver is not None:
        return _driver
    with _init_lock:
        if _driver is None:
            if _driver_error is not None:
                raise _unavailable(_driver_error) from _driver_error
            try:
                _driver = Driver()
            except Exception as exc:  # noqa: BLE001 - ImportError, CudaError, loader errors
                _driver_error = exc
                raise _unavailable(exc) from exc
    return _driver


class DriverUnavailable(PtxdslError):
    """There is no usable CUDA driver in this process (no GPU, no cuda-python...)."""


def _unavailable(exc: BaseException) -> PtxdslError:
    return DriverUnavailable(f"no usable CUDA driver: {driver_unavailable_reason(exc)}; run with "
                       f"PTXDSL_INTERPRET=1 to use the CPU interpreter instead")


def driver_unavailable_reason(exc: BaseException | None = None) -> str:
    exc = exc if exc is not None else _driver_error
    if exc is None:
        return ""
    if isinstance(exc, ImportError):
        return ("cuda-python is not installed (pip install 'cuda-python>=12.8'); "
                f"import failed with: {exc}")
    if isinstance(exc, CudaError):
        return str(exc)
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if "libcuda" in text or "driver library" in text or "display driver" in text:
        return "the NVIDIA driver library (libcuda) was not found"
    return f"{type(exc).__name__}: {text}"


def set_driver(drv) -> object:
    """Install a driver object (tests use a fake); returns the previous one. ``None``
    resets, so the next :func:`get` initialises the real driver again."""
    global _driver, _driver_error
    with _init_lock:
        prev, _driver, _driver_error = _driver, drv, None
    return prev


def gpu_available() -> bool:
    """Whether a CUDA driver and at least one GPU can be used from this process. Never raises."""
    try:
        return get().device_count() > 0
    except Exception:  # noqa: BLE001
        return False
