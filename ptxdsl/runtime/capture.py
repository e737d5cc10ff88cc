"""What ptxdsl asks the driver about CUDA-graph stream capture.

* :func:`capture_id`: the id of the capture sequence a stream is in (unique over the
  process's lifetime, ``cuStreamGetCaptureInfo``), so that buffers can be kept per
  captured graph rather than per stream (torch captures every graph on one side
  stream unless told otherwise);
* :func:`relaxed`: a block in which this thread may make calls that a capture in
  *global* mode (torch's default) forbids, such as synchronizing a stream that is not
  being captured (``cuThreadExchangeStreamCaptureMode``); the thread's mode is
  restored on leaving.
"""
from __future__ import annotations

from contextlib import contextmanager

from . import driver

__all__ = ["capture_id", "relaxed"]


def capture_id(stream: int) -> int | None:
    """The capture sequence's id of raw stream handle ``stream``, or None when the stream
    is not being captured."""
    drv = driver.get()
    cu = drv.cu
    res = drv.check(cu.cuStreamGetCaptureInfo(drv.stream(stream)), "cuStreamGetCaptureInfo")
    status, ident = res[0], res[1]
    if status != cu.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_ACTIVE:
        return None
    return int(ident)


@contextmanager
def relaxed():
    """This thread in the relaxed capture mode for the block (then its mode before)."""
    drv = driver.get()
    cu = drv.cu
    old = drv.check(cu.cuThreadExchangeStreamCaptureMode(
        cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED), "cuThreadExchangeStreamCaptureMode")
    try:
        yield
    finally:
        drv.check(cu.cuThreadExchangeStreamCaptureMode(old), "cuThreadExchangeStreamCaptureMode")
