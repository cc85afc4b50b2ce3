"""compiler/runtime/capture.py without a GPU: relaxed_capture_mode swaps this thread's stream-capture mode
to CU_STREAM_CAPTURE_MODE_RELAXED for its body and gives the previous mode back, also when the body
raises, against a stand-in for cuda.bindings.driver that records the calls (cuThreadExchangeStreamCaptureMode:
CUDA Driver API, Stream Management)."""
from __future__ import annotations

import enum
import sys
import types

import pytest

from compiler.runtime import DeviceError
from compiler.runtime.capture import relaxed_capture_mode
from compiler.runtime.driver import CudaDriver


class Mode(enum.IntEnum):           # CUstreamCaptureMode's values (cuda.h)
    CU_STREAM_CAPTURE_MODE_GLOBAL = 0
    CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1
    CU_STREAM_CAPTURE_MODE_RELAXED = 2


class Result(enum.IntEnum):
    CUDA_SUCCESS = 0
    CUDA_ERROR_NOT_SUPPORTED = 801


@pytest.fixture
def driver(monkeypatch):
    """A cuda.bindings.driver whose thread starts in the global mode (the default) and that logs each mode set."""
    drv = types.SimpleNamespace(CUstreamCaptureMode=Mode, CUresult=Result, mode=Mode.CU_STREAM_CAPTURE_MODE_GLOBAL,
                                log=[], fail=False)

    def exchange(mode):
        if drv.fail:
            return Result.CUDA_ERROR_NOT_SUPPORTED, None
        previous, drv.mode = drv.mode, Mode(mode)
        drv.log.append(drv.mode)
        return Result.CUDA_SUCCESS, previous

    drv.cuThreadExchangeStreamCaptureMode = exchange
    cuda, bindings = types.ModuleType("cuda"), types.ModuleType("cuda.bindings")
    cuda.bindings, bindings.driver = bindings, drv
    monkeypatch.setitem(sys.modules, "cuda", cuda)
    monkeypatch.setitem(sys.modules, "cuda.bindings", bindings)
    monkeypatch.setitem(sys.modules, "cuda.bindings.driver", drv)
    return drv


def test_relaxed_inside_and_restored_after(driver):
    with relaxed_capture_mode():
        assert driver.mode == Mode.CU_STREAM_CAPTURE_MODE_RELAXED
    assert driver.mode == Mode.CU_STREAM_CAPTURE_MODE_GLOBAL
    assert driver.log == [Mode.CU_STREAM_CAPTURE_MODE_RELAXED, Mode.CU_STREAM_CAPTURE_MODE_GLOBAL]


def test_restored_when_the_body_raises(driver):
    driver.mode = Mode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
    with pytest.raises(KeyError):
        with relaxed_capture_mode():
            raise KeyError("inside")
    assert driver.mode == Mode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL


def test_a_refused_exchange_is_a_device_error(driver):
    driver.fail = True
    with pytest.raises(DeviceError, match="stream-capture mode"):
        with relaxed_capture_mode():
            pytest.fail("the body must not run")


def _kernel_on_stand_in_driver(driver, monkeypatch, example: str, seen: list):
    """The runtime Kernel of `example` whose driver is CudaDriver on the stand-in cuda.bindings.driver,
    the encoder, allocation and copy recording the capture mode they run in."""
    import os

    from compiler.ptx import sparse_wgmma_kernel
    from compiler.runtime import load

    def encode(maps, addresses):
        seen.append(("encode", driver.mode))
        return bytes(128 * len(maps))      # one 128-byte CUtensorMap per map

    def mem_alloc(size):
        seen.append(("alloc", driver.mode))
        return Result.CUDA_SUCCESS, 0x7000_0000

    def memcpy_htod(dst, data, size):
        seen.append(("copy", driver.mode))
        return (Result.CUDA_SUCCESS,)

    monkeypatch.setattr(sparse_wgmma_kernel, "encode_tiled_maps", encode)
    driver.cuMemAlloc, driver.cuMemcpyHtoD = mem_alloc, memcpy_htod
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    kernel = load(os.path.join(root, "examples", example))
    cuda_driver = object.__new__(CudaDriver)
    cuda_driver._cu = driver
    kernel._driver = cuda_driver
    return kernel


@pytest.mark.parametrize("example, nbytes", [
    ("sparse_wgmma_f16.tile", 384),           # A values, B, metadata
    ("tcgen05_gemm_ws_f16.tile", 384),        # A, B, D
])
def test_tensor_maps_by_value_are_encoded_without_device_memory(driver, monkeypatch, example, nbytes):
    """The sparse wgmma and tcgen05 ws kernels take their maps by value (one 128-byte CUtensorMap each, in
    one parameter): Kernel._tensor_maps encodes them (in relaxed mode, as every driver call a launch makes
    during a capture) into the bytes the launch passes, and allocates and copies nothing; cached per set
    of buffers."""
    import ctypes

    seen = []
    kernel = _kernel_on_stand_in_driver(driver, monkeypatch, example, seen)
    assert "tensor_maps" not in kernel.abi["buffers"]
    assert [(p["type"], p["bytes"], p["align"]) for p in kernel.abi["params"] if p["name"] == "tensor_maps"] == \
        [("bytes", nbytes, 64)]
    ptrs = {name: 0x1000_0000 * (i + 1) for i, name in enumerate(kernel._map_operands)}
    maps = kernel._tensor_maps(512, 512, 256, ptrs)
    assert isinstance(maps, ctypes.Array) and bytes(maps) == bytes(nbytes)
    assert seen == [("encode", Mode.CU_STREAM_CAPTURE_MODE_RELAXED)]
    assert driver.mode == Mode.CU_STREAM_CAPTURE_MODE_GLOBAL
    assert kernel._tensor_maps(512, 512, 256, ptrs) is maps and len(seen) == 1           # cached
