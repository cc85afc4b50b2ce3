"""What the runtime needs of a caller's array: device pointer, shape, byte strides, element type, device,
read-only flag, and the library it came from (to allocate D alike). Read without copying from a torch
tensor (its own attributes: torch's `__cuda_array_interface__` refuses bfloat16), from
`__cuda_array_interface__` (cupy, numba, jax and any object that speaks it), or from DLPack
(`__dlpack__`, through cuda.core's StridedMemoryView)."""
from __future__ import annotations

import sys

from .errors import ArgumentError

# element names of torch dtypes (str(dtype) without 'torch.')
_TORCH = {"float16": "f16", "bfloat16": "bf16", "float32": "f32", "int32": "s32", "uint32": "u32",
          "int8": "s8", "uint8": "u8", "float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2", "int16": "s16",
          "uint16": "u16", "float64": "f64", "int64": "s64"}
# element names of array-interface type strings (byte order stripped); V2 is how ml_dtypes' bfloat16 shows
_TYPESTR = {"f2": "f16", "f4": "f32", "f8": "f64", "i4": "s32", "u4": "u32", "i1": "s8", "u1": "u8",
            "i2": "s16", "u2": "u16", "i8": "s64", "u8": "u64", "V2": "bf16"}
# numpy dtype names (DLPack views) -> element names
_NUMPY = {"float16": "f16", "bfloat16": "bf16", "float32": "f32", "int32": "s32", "uint32": "u32",
          "int8": "s8", "uint8": "u8", "float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2", "float64": "f64"}


class ArrayView:
    """A device array as the runtime sees it. `strides` are in bytes."""
    __slots__ = ("obj", "ptr", "shape", "strides", "element", "itemsize", "device", "readonly", "library")

    def __init__(self, obj, ptr: int, shape: tuple, strides: tuple, element: str, itemsize: int,
                 device: int | None, readonly: bool, library: str) -> None:
        self.obj, self.ptr, self.shape, self.strides = obj, ptr, shape, strides
        self.element, self.itemsize, self.device = element, itemsize, device
        self.readonly, self.library = readonly, library


_TORCH_DTYPES: dict = {}      # torch dtype -> (element name, itemsize), filled as dtypes are met
_NUMPY_DTYPES: dict = {}      # numpy dtype (cupy arrays) -> (element name, itemsize)


def _torch_view(x, name: str) -> ArrayView:
    # the cheapest attributes torch has (is_cuda, get_device; dtype objects as dict keys): a launch reads
    # half a dozen arrays, and this is most of its host cost
    if not x.is_cuda:
        raise ArgumentError(name, "device", "a CUDA tensor", f"a torch tensor on {x.device}")
    dt = x.dtype
    known = _TORCH_DTYPES.get(dt)
    if known is None:
        short = str(dt)[6:]
        known = _TORCH_DTYPES[dt] = (_TORCH.get(short, short), x.element_size())
    element, size = known
    return ArrayView(x, x.data_ptr(), tuple(x.shape), tuple([s * size for s in x.stride()]), element, size,
                     x.get_device(), False, "torch")


def _cupy_view(x) -> ArrayView:
    dt = x.dtype
    known = _NUMPY_DTYPES.get(dt)
    if known is None:
        known = _NUMPY_DTYPES[dt] = (_NUMPY.get(dt.name, dt.name), dt.itemsize)
    return ArrayView(x, x.data.ptr, x.shape, x.strides, known[0], known[1], x.device.id, False, "cupy")


def _cai_view(x, cai: dict, name: str) -> ArrayView:
    typestr = cai["typestr"]
    if typestr[:1] == ">" and typestr[2:] != "1":      # the GPU reads little-endian elements
        raise ArgumentError(name, "dtype", "little-endian elements", f"big-endian ({typestr})")
    code = typestr[1:]
    size = int(code[1:]) if code[1:].isdigit() else 0
    shape = tuple(int(s) for s in cai["shape"])
    strides = cai.get("strides")
    if strides is None:                 # C-contiguous
        strides, acc = [], size
        for s in reversed(shape):
            strides.append(acc)
            acc *= s
        strides = tuple(reversed(strides))
    ptr, readonly = cai["data"]
    mod = type(x).__module__.split(".")[0]
    device = None
    dev = getattr(x, "device", None)
    if mod == "cupy" and dev is not None:
        device = int(dev.id)
    return ArrayView(x, int(ptr), shape, tuple(int(s) for s in strides), _TYPESTR.get(code, typestr), size,
                     device, bool(readonly), mod)


def _dlpack_view(x, name: str) -> ArrayView:
    kind, dev_id = x.__dlpack_device__()
    if int(kind) not in (2, 13):          # kDLCUDA, kDLCUDAManaged (DLPack DLDeviceType)
        where = "in host memory" if int(kind) in (1, 3) else f"on DLPack device type {int(kind)}"
        raise ArgumentError(name, "device", "a CUDA device array", f"{type(x).__module__}.{type(x).__name__} {where}")
    from cuda.core.utils import StridedMemoryView

    v = StridedMemoryView(x, stream_ptr=-1)       # -1: no stream synchronisation (the caller orders it)
    dt = v.dtype
    size = dt.itemsize
    strides = v.strides
    if strides is None:
        strides, acc = [], 1
        for s in reversed(v.shape):
            strides.append(acc)
            acc *= s
        strides = tuple(reversed(strides))
    return ArrayView(x, int(v.ptr), tuple(v.shape), tuple(s * size for s in strides), _NUMPY.get(dt.name, dt.name),
                     size, int(dev_id), bool(v.readonly), type(x).__module__.split(".")[0])


def view(x, name: str) -> ArrayView:
    """The ArrayView of argument `name`; ArgumentError for something that is not a device array."""
    if isinstance(x, ArrayView):
        return x
    mod = type(x).__module__
    if mod.startswith("torch") and hasattr(x, "data_ptr"):
        return _torch_view(x, name)
    if mod.startswith("cupy") and hasattr(x, "data") and hasattr(x.data, "ptr"):
        return _cupy_view(x)
    cai = getattr(x, "__cuda_array_interface__", None)
    if cai is not None:
        return _cai_view(x, cai, name)
    if hasattr(x, "__dlpack_device__"):
        return _dlpack_view(x, name)
    if hasattr(x, "__array_interface__") or hasattr(x, "__array__"):
        raise ArgumentError(name, "device", "a GPU array (torch, cupy, or anything with __cuda_array_interface__ "
                            "or DLPack)", f"{type(x).__module__}.{type(x).__name__} in host memory")
    raise ArgumentError(name, "type", "a GPU array (torch, cupy, or anything with __cuda_array_interface__ "
                        "or DLPack)", f"{type(x).__module__}.{type(x).__name__}")


def row_major_strides(shape: tuple, itemsize: int) -> tuple:
    out, acc = [], itemsize
    for s in reversed(shape):
        out.append(acc)
        acc *= s
    return tuple(reversed(out))


def extent(v: ArrayView) -> tuple[int, int]:
    """The bytes [first, end) that view `v` may touch: from its lowest to past its highest element."""
    lo = hi = v.ptr
    for size, stride in zip(v.shape, v.strides):
        if size == 0:
            return v.ptr, v.ptr
        step = (size - 1) * stride
        if step < 0:
            lo += step
        else:
            hi += step
    return lo, hi + v.itemsize


def allocate_like(v: ArrayView, shape: tuple, element: str, fill_zero: bool = False, name: str = "out"):
    """A new device array of `shape` and `element` from the library of `v` (torch or cupy), on its device,
    allocated on that library's current stream (asynchronous). `name`: the argument that was not given (for
    the error where the library cannot allocate)."""
    if v.library == "torch":
        torch = sys.modules["torch"]
        rev = {e: k for k, e in _TORCH.items()}
        dt = getattr(torch, rev[element] if element in rev else {"tf32": "float32"}[element])
        make = torch.zeros if fill_zero else torch.empty
        return make(shape, dtype=dt, device=v.obj.device)
    if v.library == "cupy":
        cupy = sys.modules["cupy"]
        rev = {e: k for k, e in _NUMPY.items() if k in ("float16", "float32", "int32", "uint32", "int8", "uint8")}
        if element not in rev and element != "tf32":
            raise ArgumentError(name, "dtype", f"an array of {element} (cupy has no such dtype)",
                                f"nothing: pass {name} as a torch or DLPack array")
        with cupy.cuda.Device(v.device if v.device is not None else cupy.cuda.runtime.getDevice()):
            make = cupy.zeros if fill_zero else cupy.empty
            return make(shape, dtype=rev.get(element, "float32"))
    if name == "scratch":            # no argument of the caller's: the inputs' library is what is wrong
        raise ArgumentError("A", "library", "torch or cupy arrays: the split-K / stream-K workspace is allocated "
                            "with the inputs' library", f"{v.library} arrays")
    what = {"out": "an output array", "C": "an M x N array C"}.get(name, "an array")
    raise ArgumentError(name, "value", f"{what}: the runtime allocates {name} only for torch and cupy inputs",
                        f"None with {v.library} inputs")
