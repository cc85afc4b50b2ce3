"""A device for compiler.runtime whose kernels run on the CPU emulator (compiler/emulator/tcgen05.py Machine), so
that a launch through `Kernel.__call__` is checked end to end without a GPU: the arguments the runtime builds
(the tensor maps' cuTensorMapEncodeTiled arguments, the buffers' addresses, the packed parameters, the launch
grid, cluster and dynamic shared memory) are all the emulated kernel gets, and it computes D from them.

`EmulatedDevice` plays compiler/runtime/driver.py's door (`driver.use(device)`); its "device memory" is host
numpy buffers (`device.array(host)` wraps one as a __cuda_array_interface__ array whose address is the numpy
buffer's). The tensor maps a kernel takes by value (one bytes parameter) are recorded, not encoded: their bytes
say which maps they are (`tensor_map_bytes`). At a launch every pointer parameter and tensor-map address is
resolved to the registered buffer that holds it (its bytes from that address on: a strided batch's later problems lie further in), the Machine
runs, and what it wrote to D goes back into D's buffer. Nothing here knows an ABI: the kernel's parameter list
is its PTX's, as on a GPU.
"""
from __future__ import annotations

import ctypes

import numpy as np

from compiler.runtime.driver import DeviceInfo, LaunchPlan

# a B200's capability with few multiprocessors, so that the persistent kernels' CTAs walk several tiles
EMULATED_B200 = DeviceInfo(0, "NVIDIA B200 (emulated, 4 SMs)", (10, 0), 4)
_TYPESTR = {np.dtype(np.float16): "<f2", np.dtype(np.float32): "<f4", np.dtype(np.uint32): "<u4",
            np.dtype(np.int32): "<i4", np.dtype(np.uint8): "|u1", np.dtype(np.int8): "|i1"}


class DeviceArray:
    """A host numpy array seen as a device array (__cuda_array_interface__ version 3), `element_typestr`
    overriding the numpy type where the runtime wants another name for the same bytes (bf16: '<V2')."""

    def __init__(self, host: np.ndarray, typestr: str | None = None):
        self.host = host
        self.__cuda_array_interface__ = {"shape": host.shape, "typestr": typestr or _TYPESTR[host.dtype],
                                         "data": (host.__array_interface__["data"][0], False),
                                         "strides": host.strides, "version": 3}

    @property
    def T(self):
        return DeviceArray(self.host.swapaxes(-1, -2), self.__cuda_array_interface__["typestr"])


class EmulatedDevice:
    """compiler.runtime.driver.CudaDriver's methods, on the CPU emulator."""

    def __init__(self, info: DeviceInfo = EMULATED_B200, policy: str | None = None, seed: int = 0):
        self.info, self.policy, self.seed = info, policy, seed
        self.buffers: list[np.ndarray] = []           # every registered buffer (flat bytes, kept alive)
        # the maps encoded (encoder arguments, the mapped operands' addresses), keyed by the first 8 bytes of
        # the parameter value `tensor_map_bytes` gave for them
        self.maps: dict[int, tuple[list[dict], dict[str, int]]] = {}
        self.launches: list = []
        self._next_map = 0x10_0000_0000

    # ---- memory
    def array(self, host: np.ndarray, typestr: str | None = None, base: np.ndarray | None = None) -> DeviceArray:
        """`host` (a view of `base`, default itself) as a device array; `base` is the allocation the kernel may
        reach through it."""
        whole = host if base is None else base
        self.buffers.append(whole)
        return DeviceArray(host, typestr)

    def _holds(self, ptr: int) -> bool:
        return any(0 <= ptr - b.__array_interface__["data"][0] < b.nbytes for b in self.buffers)

    def _bytes_at(self, ptr: int) -> tuple[np.ndarray, int]:
        """(the registered buffer's bytes from address `ptr` to its end, its offset in the buffer)."""
        for buf in self.buffers:
            start = buf.__array_interface__["data"][0]
            if start <= ptr < start + buf.nbytes:
                flat = buf.reshape(-1).view(np.uint8)
                return flat[ptr - start:], ptr - start
        raise AssertionError(f"address {ptr:#x} is in no buffer the test gave the device")

    # ---- the driver's door
    def open(self, ordinal):
        return self.info

    def load(self, entry, ptx, cubin, arch):
        from compiler.emulator.parse import parse_kernel

        return parse_kernel(ptx, entry), None

    def set_max_dynamic_smem(self, fn, nbytes, device):
        pass

    def tensor_map_bytes(self, maps, addresses):
        """The maps' 128 bytes each (a by-value parameter): a stand-in whose first 8 bytes key the recorded
        maps (the emulator reads the encoder's arguments, never a CUtensorMap's opaque bytes)."""
        self._next_map += 0x1000
        self.maps[self._next_map] = ([dict(m) for m in maps], {m["operand"]: addresses[m["operand"]] for m in maps})
        return self._next_map.to_bytes(8, "little") + bytes(128 * len(maps) - 8)

    def stream(self, stream, library):
        return stream

    def config(self, plan: LaunchPlan):
        return plan

    def launch(self, stream, config: LaunchPlan, kernel, args):
        from compiler.emulator.tcgen05 import Machine

        # ctypes scalars by their value; the by-value maps (a ctypes array) as their bytes
        self.launches.append((config, [bytes(a) if isinstance(a, ctypes.Array) else a.value for a in args]))
        if not any(ins.parts[0] == "tcgen05" for ins in kernel.code):
            return self._launch_warps(config, kernel, args)
        values: dict = {}
        maps = None
        for (full, ptype), arg in zip(kernel.params, args):
            name = kernel.param_short(full)
            if ptype == "f32":
                values[name] = int(np.float32(arg.value).view(np.uint32))
            elif ptype == "bytes":                                     # the tensor maps, by value
                maps, addresses = self.maps[int.from_bytes(bytes(arg)[:8], "little")]
                values[name] = np.frombuffer(bytes(arg), np.uint8).copy()
            elif ptype == "u64" and self._holds(arg.value):         # a buffer; else a u64 size (batch_stride_c)
                values[name] = self._bytes_at(arg.value)[0]
            else:
                values[name] = int(arg.value)
        for t in maps or ():
            values[t["operand"]] = self._bytes_at(addresses[t["operand"]])[0]
        gx, gy, gz = config.grid
        cx, cy, _ = config.cluster
        machine = Machine(kernel, values, (gx * cx, gy * cy), seed=self.seed, policy=self.policy,
                          dynamic_smem=config.smem, dynamic_at=16, tensor_maps=maps,
                          resident=max(1, gx // 2) if gx > 2 else None)
        machine.run()
        if maps is not None and "D" in values:                     # D: written by TMA stores only
            values["D"][:] = machine.gmem.array("D")
        self.machine = machine


    def _launch_warps(self, config: LaunchPlan, kernel, args):
        """A kernel without tcgen05 (the sparse wgmma kernel: TMA + mbarriers + wgmma.sp) on the warp machine
        (compiler/emulator/warp.py), in a flat memory holding a copy of every buffer an argument or tensor map
        points into (from that address to the buffer's end); the `d` buffer is written back after the run. A
        tensor map's operand copy may only be read through the map (TMA), as on the GPU; maps passed by value (a
        `bytes` parameter) need no proxy fence, maps in global memory do (PTX 9.7.9.25.5.1). The dynamic window
        is placed off 1024 bytes (the kernel rounds its base up)."""
        from compiler.emulator.memory import FlatMemory
        from compiler.emulator.warp import WarpMachine
        from compiler.ptx.sparse_wgmma_kernel import TMA_MAP_BYTES, TMA_SWIZZLE

        mem, params, written, maps, table, by_value = FlatMemory(), {}, [], None, 0, False
        for (full, ptype), arg in zip(kernel.params, args):
            if ptype == "f32":
                params[full] = int(np.float32(arg.value).view(np.uint32))
            elif ptype == "bytes" or (ptype == "u64" and arg.value in self.maps):
                # the maps by value (tensor_map_bytes: the key in the first 8 bytes) or in global memory
                key = int.from_bytes(bytes(arg)[:8], "little") if ptype == "bytes" else arg.value
                maps, addresses = self.maps[key]
                by_value = ptype == "bytes"
                table = params[full] = mem.add(full, np.zeros(TMA_MAP_BYTES * len(maps), np.uint8), loadable=False)
            elif ptype == "u64" and self._holds(arg.value):       # a buffer; else a u64 size (a batch stride)
                raw = self._bytes_at(arg.value)[0]
                out = full.endswith("_d") or full.endswith(("_workspace", "_semaphores"))
                params[full] = mem.add(full, raw, writable=out)
                if out:
                    written.append((raw, full))
            else:
                params[full] = int(arg.value)
        tmaps = {}
        for i, t in enumerate(maps or ()):
            addr = mem.add(t["operand"], self._bytes_at(addresses[t["operand"]])[0], loadable=False)
            tmaps[table + i * TMA_MAP_BYTES] = {
                **t, "address": addr, "elem_bytes": {0: 1, 1: 2, 2: 4}[t["data_type"]],
                "swizzle": {code: sw for sw, code in TMA_SWIZZLE.items()}[t["swizzle"]], "param": by_value}
        gx, gy, _ = config.grid
        cx, cy, _ = config.cluster
        machine = WarpMachine(kernel, mem, params, (gx * cx, gy * cy), config.block[0], rng=self.seed,
                              dynamic_smem=config.smem, dynamic_at=528, tensor_maps=tmaps, policy=self.policy)
        machine.run()
        for raw, full in written:
            raw[:] = mem.array(full)
        self.machine = machine


def fake_cupy(device: EmulatedDevice):
    """A module standing in for cupy whose arrays live in `device`'s host buffers: what compiler.runtime
    (upload, the array views, allocation, synchronisation) and `tilec run` (compiler/run.py) use of cupy,
    so that `tilec run --check` runs through the runtime on the emulator. Its arrays' type lives in a module
    named cupy._emulated (the runtime reads the library from the module name)."""
    import types

    mod = types.ModuleType("cupy")

    class ndarray:
        def __init__(self, host: np.ndarray, base: np.ndarray | None = None):
            self.host = host
            self.base_buf = host if base is None else base
            if base is None:
                device.buffers.append(host)
            self.data = types.SimpleNamespace(ptr=host.__array_interface__["data"][0])
            self.device = types.SimpleNamespace(id=0)

        dtype = property(lambda self: self.host.dtype)
        shape = property(lambda self: self.host.shape)
        strides = property(lambda self: self.host.strides)
        size = property(lambda self: self.host.size)

        def _derived(self, host):
            return ndarray(host, self.base_buf)

        def view(self, dtype):
            return self._derived(self.host.view(dtype))

        def reshape(self, shape):
            return self._derived(self.host.reshape(shape))

        def swapaxes(self, a, b):
            return self._derived(self.host.swapaxes(a, b))

        def __getitem__(self, key):
            return self._derived(self.host[key])

        @property
        def T(self):
            return self._derived(self.host.T)

    ndarray.__module__ = "cupy._emulated"
    mod.ndarray = ndarray
    mod.uint8 = np.uint8
    mod.asarray = lambda a: ndarray(np.array(a))
    mod.empty = lambda shape, dtype="float32": ndarray(np.full(shape, 0x7F, np.uint8).view(dtype)
                                                       if np.dtype(dtype).itemsize == 1 else
                                                       np.full(tuple(shape)[:-1] + (tuple(shape)[-1] * np.dtype(dtype).itemsize,),
                                                               0x7F, np.uint8).view(dtype))
    mod.zeros = lambda shape, dtype="float32": ndarray(np.zeros(shape, dtype))
    mod.asnumpy = lambda a: np.array(a.host)

    class _Device:
        def __init__(self, ordinal=0):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    sync = types.SimpleNamespace(synchronize=lambda: None)
    mod.cuda = types.SimpleNamespace(Device=_Device, get_current_stream=lambda: sync,
                                     runtime=types.SimpleNamespace(getDevice=lambda: 0, deviceSynchronize=lambda: None))
    mod.__name__ = "cupy"
    return mod

