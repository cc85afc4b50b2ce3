"""Synchronous driver calls made while a CUDA graph is being captured on this thread.

A capture in the default (global) or thread-local mode refuses "potentially unsafe" calls from the
capturing thread, an allocation (cuMemAlloc) or a synchronous copy (cuMemcpyHtoD) among them, because
they are not recorded in the graph (CUDA Driver API, cuThreadExchangeStreamCaptureMode and
cuStreamBeginCapture). The runtime's one driver call a launch may make after the module is loaded is
the encoding of a TMA kernel's tensor maps for one set of buffers (Kernel._tensor_maps,
cuTensorMapEncodeTiled), whose bytes every replay of the graph passes by value (the kernels take their
maps as a parameter; nothing is allocated or copied). Relaxing the thread's mode for that call is the
documented way to make driver calls during a capture (PyTorch's caching allocator does the same for its
own allocations).
"""
from __future__ import annotations

from contextlib import contextmanager

from .errors import DeviceError


@contextmanager
def relaxed_capture_mode():
    """Within: this thread's stream-capture interaction mode is CU_STREAM_CAPTURE_MODE_RELAXED; the
    previous mode is restored on the way out. Outside any capture this changes nothing observable."""
    from cuda.bindings import driver

    relaxed = driver.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED
    err, previous = driver.cuThreadExchangeStreamCaptureMode(relaxed)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise DeviceError(f"cannot relax this thread's stream-capture mode ({err})")
    try:
        yield
    finally:
        driver.cuThreadExchangeStreamCaptureMode(previous)
