"""Device memory ptxdsl owns: output buffers for frameworks it cannot allocate in,
and the staging of numpy arrays through the GPU.

Outputs are allocated "in the same framework" as the inputs
(:func:`ptxdsl.runtime.adapter.allocate`). For ``__cuda_array_interface__``/DLPack
producers other than torch and cupy (jax, numba, ...) that is a :class:`DeviceArray`,
which any CAI consumer (cupy, numba, torch.as_tensor) reads zero-copy and
``.copy_to_host()`` brings back as numpy.
"""
from __future__ import annotations

import weakref

import numpy as np

from . import driver as _driver

__all__ = ["DeviceArray", "Staging"]


def _free(drv, device: int, ptr: int) -> None:
    try:
        pushed = drv.enter(device)
        try:
            drv.mem_free(ptr)
        finally:
            if pushed:
                drv.leave()
    except Exception:  # noqa: BLE001 - at exit, or after a sticky error, there is nothing to do
        pass


class DeviceArray:
    """A C-contiguous array in device memory, freed when the object is collected."""

    def __init__(self, shape, dtype, device: int = 0, *, stream: int = 0, drv=None):
        self._drv = drv or _driver.get()
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)
        self.device = int(device)
        self.stream = stream  # the stream whose work produces the contents
        n = 1
        for d in self.shape:
            n *= d
        self.nbytes = n * self.dtype.itemsize
        pushed = self._drv.enter(self.device)
        try:
            self.ptr = self._drv.mem_alloc(self.nbytes)
        finally:
            if pushed:
                self._drv.leave()
        self._finalizer = weakref.finalize(self, _free, self._drv, self.device, self.ptr)

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, False),
                "strides": None, "version": 3,
                # v3: consumers synchronise with this stream (1 = the legacy default stream).
                "stream": self.stream if self.stream else 1}

    def copy_to_host(self) -> np.ndarray:
        out = np.empty(self.shape, self.dtype)
        pushed = self._drv.enter(self.device)
        try:
            self._drv.memcpy_dtoh(out.ctypes.data, self.ptr, self.nbytes, self.stream)
            self._drv.stream_sync(self.stream)
        finally:
            if pushed:
                self._drv.leave()
        return out

    numpy = copy_to_host

    def __array__(self, dtype=None, copy=None):
        a = self.copy_to_host()
        return a if dtype is None else a.astype(dtype)

    def free(self) -> None:
        """Release the memory now (the object is unusable afterwards)."""
        self._finalizer()

    def __repr__(self) -> str:
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype}, device=cuda:{self.device})"


class Staging:
    """Device copies of host (numpy) arrays for one launch, freed by :meth:`close`."""

    def __init__(self, drv, stream: int):
        self.drv = drv
        self.stream = stream
        self._ptrs: list[int] = []
        self._hold: list = []  # host buffers that must live until the copies finish

    def upload(self, arr: np.ndarray, *, copy: bool = True) -> int:
        host = np.ascontiguousarray(arr)
        ptr = self.drv.mem_alloc(host.nbytes)
        self._ptrs.append(ptr)
        if copy and host.nbytes:
            self.drv.memcpy_htod(ptr, host.ctypes.data, host.nbytes, self.stream)
            self._hold.append(host)
        return ptr

    def download(self, ptr: int, out: np.ndarray) -> None:
        """Copy the device buffer at ``ptr`` into ``out`` (any layout) after the launch."""
        if out.flags.c_contiguous:
            if out.nbytes:
                self.drv.memcpy_dtoh(out.ctypes.data, ptr, out.nbytes, self.stream)
            return
        tmp = np.empty(out.shape, out.dtype)
        if tmp.nbytes:
            self.drv.memcpy_dtoh(tmp.ctypes.data, ptr, tmp.nbytes, self.stream)
        self._hold.append((tmp, out))

    def finish(self) -> None:
        """Wait for the copies, then fill non-contiguous outputs."""
        self.drv.stream_sync(self.stream)
        for item in self._hold:
            if isinstance(item, tuple):
                tmp, out = item
                out[...] = tmp

    def close(self) -> None:
        for ptr in self._ptrs:
            try:
                self.drv.mem_free(ptr)
            except Exception:  # noqa: BLE001 - after a sticky error frees fail too
                pass
        self._ptrs.clear()
        self._hold.clear()
