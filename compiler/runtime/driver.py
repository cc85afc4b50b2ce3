"""The runtime's one door to the CUDA driver: every call a Kernel makes to load, configure and launch its
module goes through a `Driver` (compiler/runtime/kernel.py never imports cuda-core itself).

`CudaDriver` is NVIDIA's cuda-core / cuda-bindings (the GPU). Tests install another object with the same
methods (`use(driver)`) to see the launch plan a Kernel makes without a GPU: which device properties it
reads, the dynamic shared memory it opts in to, the tensor maps it encodes (cuTensorMapEncodeTiled's
arguments and the buffer addresses), the launch configuration (grid in clusters, cluster, block, dynamic
shared bytes) and the packed parameters. The same path runs for every kernel family (mma.sp, the TMA +
wgmma.sp kernels, the warp-specialised tcgen05 kernel): only the ABI differs.
"""
from __future__ import annotations

from dataclasses import dataclass

from .errors import DeviceError


@dataclass(frozen=True)
class DeviceInfo:
    """What the runtime reads of a device: its ordinal, name, compute capability and SM count."""
    ordinal: int
    name: str
    compute_capability: tuple[int, int]
    multiprocessors: int

    @property
    def sm(self) -> int:
        return self.compute_capability[0] * 10 + self.compute_capability[1]


@dataclass(frozen=True)
class LaunchPlan:
    """One launch's configuration: the grid in clusters (cuda.core's LaunchConfig counts clusters when a
    cluster is given; cuLaunchKernelEx's gridDim would be the blocks), the cluster, the block and the
    dynamic shared bytes; `programmatic`: launched with programmatic stream serialization (the ABI's
    programmatic_launch: the grid may overlap the one before it in the stream, compiler/isa/griddepcontrol.py)."""
    grid: tuple[int, int, int]
    cluster: tuple[int, int, int]
    block: tuple[int, int, int]
    smem: int
    programmatic: bool = False


class CudaDriver:
    """The CUDA driver through cuda-core and cuda-bindings (`pip install 'tilec[gpu]'`)."""

    def __init__(self) -> None:
        try:
            from cuda.bindings import driver
            from cuda.core import Device, LaunchConfig, ObjectCode, launch
        except ImportError as e:
            raise DeviceError(f"the runtime needs NVIDIA's cuda-core and cuda-bindings (pip install 'tilec[gpu]'): "
                              f"{e}") from None
        self._cu, self._Device, self._ObjectCode = driver, Device, ObjectCode
        self._LaunchConfig, self._launch = LaunchConfig, launch
        self._streams: dict[int, object] = {}

    def open(self, ordinal: int | None) -> DeviceInfo:
        """Make device `ordinal` (None: the current one) current; DeviceError without a usable GPU."""
        try:
            dev = self._Device(ordinal) if ordinal is not None else self._Device()
            dev.set_current()
        except Exception as e:          # no driver, no GPU
            raise DeviceError(f"no usable CUDA GPU ({type(e).__name__}: {e}); "
                              "`tilec run --emulate` runs a tile on the CPU emulator") from None
        major, minor = dev.compute_capability
        return DeviceInfo(dev.device_id, dev.name, (major, minor), dev.properties.multiprocessor_count)

    def pointer_device(self, ptr: int) -> int | None:
        """The ordinal of the device whose memory `ptr` points into (cuPointerGetAttribute,
        CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL), or None where the driver does not know the address."""
        cu = self._cu
        err, ordinal = cu.cuPointerGetAttribute(cu.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr)
        return int(ordinal) if err == cu.CUresult.CUDA_SUCCESS else None

    def load(self, entry: str, ptx: str | None, cubin: bytes | None, arch: str):
        """(kernel handle, cubin loaded or None where the driver JIT-compiled the PTX) of `entry`: the cubin
        given, else the PTX assembled by ptxas for `arch` through the kernel cache, else the driver's JIT."""
        image = cubin
        if cubin is not None:
            code = self._ObjectCode.from_cubin(cubin)
        else:
            from ..ptxas import find_ptxas

            exe = find_ptxas()
            if exe is None:            # the driver's JIT (it keeps its own cache)
                code = self._ObjectCode.from_ptx(ptx)
            else:
                from .cache import cubin as cached_cubin

                err, drv = self._cu.cuDriverGetVersion()
                image, _ = cached_cubin(ptx, arch, int(drv), exe)
                code = self._ObjectCode.from_cubin(image)
        return code.get_kernel(entry), image

    def set_max_dynamic_smem(self, fn, nbytes: int, device: DeviceInfo) -> None:
        """Opt `fn` in to `nbytes` of dynamic shared memory (beyond 48 KiB a kernel must:
        CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)."""
        cu = self._cu
        attr = cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        (err,) = cu.cuKernelSetAttribute(attr, nbytes, fn.handle, cu.CUdevice(device.ordinal))
        if err != cu.CUresult.CUDA_SUCCESS:
            raise DeviceError(f"cannot opt in to {nbytes} bytes of dynamic shared memory ({err})")

    def tensor_map_bytes(self, maps: list[dict], addresses: dict[str, int]) -> bytes:
        """The CUtensorMaps of `maps` encoded by the driver, 128 bytes each in order: the value of a kernel
        parameter that takes them by value (no device memory, nothing to copy; allowed during a capture)."""
        from ..ptx.sparse_wgmma_kernel import encode_tiled_maps
        from .capture import relaxed_capture_mode

        with relaxed_capture_mode():      # the encoding is a driver call (compiler/runtime/capture.py)
            try:
                return encode_tiled_maps(maps, addresses)
            except RuntimeError as e:
                raise DeviceError(str(e)) from None

    def stream(self, stream, library: str):
        """A cuda.core Stream for `stream`: a cuda.core Stream, a torch or cupy stream, an object with
        __cuda_stream__, an int handle, or None (the current stream of `library`, torch or cupy; else the
        legacy default stream)."""
        import sys

        from cuda.core import LEGACY_DEFAULT_STREAM, Stream

        from .errors import ArgumentError

        if isinstance(stream, Stream):
            return stream
        if stream is None:
            if library == "torch":
                handle = sys.modules["torch"].cuda.current_stream().cuda_stream
            elif library == "cupy":
                handle = sys.modules["cupy"].cuda.get_current_stream().ptr
            else:
                handle = 0
        elif isinstance(stream, int):
            handle = stream
        elif hasattr(stream, "cuda_stream"):            # torch.cuda.Stream
            handle = stream.cuda_stream
        elif hasattr(stream, "__cuda_stream__"):
            handle = stream.__cuda_stream__()[1]
        elif hasattr(stream, "ptr"):                    # cupy.cuda.Stream
            handle = stream.ptr
        else:
            raise ArgumentError("stream", "type", "a cuda.core Stream, a torch or cupy stream or an int handle",
                                type(stream).__name__)
        s = self._streams.get(handle)
        if s is None:
            s = LEGACY_DEFAULT_STREAM if handle == 0 else Stream.from_handle(handle)
            self._streams[handle] = s
        return s

    def config(self, plan: LaunchPlan):
        """(cuda.core's LaunchConfig of `plan` (a cluster launch, cuLaunchKernelEx with the cluster dimension
        attribute, where the cluster is not (1, 1, 1)), the plan)."""
        kw = {"cluster": plan.cluster} if plan.cluster != (1, 1, 1) else {}
        return self._LaunchConfig(grid=plan.grid, block=plan.block, shmem_size=plan.smem, **kw), plan

    def launch(self, stream, config, fn, args: list) -> None:
        """Launch `fn` with `args` (ctypes values). cuda.core's launch packs scalars only, so a launch with a
        by-value bytes parameter (a ctypes array: the sparse wgmma kernel's tensor maps) goes to the
        driver's cuLaunchKernel with the kernelParams array itself: one pointer to each argument's bytes
        (CUDA Driver API, cuLaunchKernel), and so does a programmatic launch (cuLaunchKernelEx with its
        attribute). Its grid counts blocks; the cluster of such a kernel is its own `.reqnctapercluster`
        (tilec's CTA pairs declare it), which a launch without a cluster attribute takes."""
        import ctypes

        core, plan = config
        if not plan.programmatic and not any(isinstance(a, ctypes.Array) for a in args):
            self._launch(stream, core, fn, *args)
            return
        cu = self._cu
        pointers = (ctypes.c_void_p * len(args))(*(ctypes.addressof(a) for a in args))
        grid = [g * c for g, c in zip(plan.grid, plan.cluster)]
        if plan.programmatic:
            (err,) = cu.cuLaunchKernelEx(self.programmatic_config(grid, plan, int(stream.handle)), fn.handle,
                                         ctypes.addressof(pointers), 0)
        else:
            (err,) = cu.cuLaunchKernel(fn.handle, *grid, *plan.block, plan.smem, int(stream.handle),
                                       ctypes.addressof(pointers), 0)
        if err != cu.CUresult.CUDA_SUCCESS:
            raise DeviceError(f"cannot launch the kernel ({err})")

    def programmatic_config(self, grid: list[int], plan: LaunchPlan, stream: int):
        """cuLaunchKernelEx's CUlaunchConfig for a launch in blocks with one attribute, programmatic stream
        serialization (CUDA Driver API: the grid may start before the previous one in the stream completes,
        once that one's CTAs have all executed griddepcontrol.launch_dependents or exited; the kernel's
        griddepcontrol.wait orders its global accesses after that grid). The kernel's cluster is its own
        `.reqnctapercluster`, as for cuLaunchKernel."""
        cu = self._cu
        config = cu.CUlaunchConfig()
        config.gridDimX, config.gridDimY, config.gridDimZ = grid
        config.blockDimX, config.blockDimY, config.blockDimZ = plan.block
        config.sharedMemBytes = plan.smem
        config.hStream = stream
        attr = cu.CUlaunchAttribute()
        attr.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        attr.value.programmaticStreamSerializationAllowed = 1
        config.attrs = [attr]
        config.numAttrs = 1
        return config


_CURRENT: list = []          # the installed driver (at most one), made on first use


def current():
    """The driver Kernels use: the one `use` installed, else a CudaDriver (DeviceError without cuda-core)."""
    if not _CURRENT:
        _CURRENT.append(CudaDriver())
    return _CURRENT[0]


def use(driver) -> object | None:
    """Install `driver` (an object with CudaDriver's methods; None: back to CudaDriver on next use) for
    Kernels loaded from now on; returns the one it replaces (None if none was made yet)."""
    previous = _CURRENT[0] if _CURRENT else None
    _CURRENT[:] = [driver] if driver is not None else []
    return previous
