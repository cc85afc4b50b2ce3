"""Kernel: one compiled tile, launched from Python on device arrays (see compiler/runtime/__init__.py)."""
from __future__ import annotations

import ctypes
import re
import sys

from . import abi as abi_mod
from .arrays import ArrayView, allocate_like, extent, row_major_strides, view
from .errors import ArgumentError, DeviceError, TilecRuntimeError

# element types a buffer accepts beyond its own name: metadata words are bit patterns (s32 or u32 arrays);
# tf32 is stored as f32; 4-bit and scale-factor types are bytes to every array library
_ACCEPTS = {"u32": ("u32", "s32"), "tf32": ("f32", "tf32"), "e2m1": ("u8", "s8"), "e2m3": ("u8", "s8"),
            "e3m2": ("u8", "s8"), "e4m3": ("e4m3", "u8"), "e5m2": ("e5m2", "u8"), "s4": ("u8", "s8"), "u4": ("u8", "s8"), "ue4m3": ("u8", "e4m3"), "ue8m0": ("u8",)}
ALIGN = 16          # bytes: the kernels' widest global access (16-byte cp.async / vector ld/st, TMA base)
_BIG_SMEM = 48 * 1024   # beyond this a kernel must opt in (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)


def aligned_row_elements(cols: int, itemsize: int) -> int:
    """The least row pitch, in elements, of rows of `cols` elements that keeps every row ALIGN-byte aligned
    (the row stride the kernels' pitched buffers take)."""
    return -(-cols * itemsize // ALIGN) * ALIGN // itemsize


def target_runs_on(target: str, sm: int) -> bool:
    """Can code for `target` (sm_NN, sm_NNa, sm_NNf) run on a device of compute capability `sm`? Plain
    targets run on that capability and later ones, arch-specific `a` targets on exactly that capability,
    family-specific `f` targets on later capabilities of the same family (PTX ISA, `.target` directive)."""
    match = re.fullmatch(r"sm_(\d+)([af]?)", target)
    if not match:
        raise ValueError(f"{target!r} is not an sm_ target")
    want, suffix = int(match.group(1)), match.group(2)
    if suffix == "a":
        return sm == want
    if suffix == "f":
        return sm // 10 == want // 10 and sm >= want
    return sm >= want


class SparseA:
    """A structured-sparse A packed for a kernel (Kernel.pack_a): compressed values (M x K/2 elements;
    4-bit types of the m16n8k128 forms two to a byte, M x K/4 bytes) and metadata words, as device arrays,
    for an M x K dense A."""

    def __init__(self, values, metadata, element: str, m: int, k: int, batch: int | None = None) -> None:
        self.values, self.metadata, self.element, self.m, self.k = values, metadata, element, m, k
        self.batch = batch              # None: one M x K A; else the count of a batch (arrays batch-first)
        self.checked: object = None     # the kernel plan these arrays were last checked against
        self._batch_bytes: dict = {}    # a batch's byte strides of values and metadata (checked with them)
        self._checked_arrays: tuple = (None, None, None)  # (values, metadata, values' address) as checked
        self._spans: list = []          # (argument, the bytes it spans) of values and metadata, as checked

    def __repr__(self) -> str:
        lead = f"{self.batch} x " if self.batch is not None else ""
        return f"SparseA({self.element}, {lead}{self.m} x {self.k})"


def _host(x):
    """A host (numpy) copy of an array: torch, cupy, numpy or anything numpy can read. Synchronising."""
    import numpy as np

    mod = type(x).__module__
    if mod.startswith("torch"):
        t = x.detach()
        if str(t.dtype) == "torch.bfloat16":
            import ml_dtypes

            return t.view(sys.modules["torch"].int16).cpu().numpy().view(ml_dtypes.bfloat16)
        return t.cpu().numpy()
    if mod.startswith("cupy"):
        return x.get()
    return np.asarray(x)


_ITEM = {"f16": 2, "bf16": 2, "f32": 4, "tf32": 4, "u32": 4, "s32": 4}


def library_of(x) -> str:
    """'torch' or 'cupy' for a device array of that library, else the library a host array goes to:
    torch where it is imported, else cupy."""
    mod = type(x).__module__
    if mod.startswith(("torch", "cupy")):
        return mod.split(".")[0]
    if "torch" in sys.modules:
        return "torch"
    if "cupy" in sys.modules:
        return "cupy"
    raise TilecRuntimeError("packing needs torch or cupy to hold the packed arrays on the GPU")


def upload(host, library: str, element: str, shape: tuple | None = None, device=None):
    """A host array's bytes as a device array of `library` (torch or cupy) with the element type
    `element` where the library has it (else raw unsigned integers of its size), reshaped to `shape`
    (default: the host array's). Synchronous (a host-to-device copy)."""
    import numpy as np

    raw = np.ascontiguousarray(host).view(np.uint8).reshape(-1)
    size = _ITEM.get(element, 1)
    shape = tuple(host.shape) if shape is None else tuple(shape)
    if library == "torch":
        torch = sys.modules.get("torch") or __import__("torch")
        t = torch.from_numpy(raw.copy()).to(device if device is not None else "cuda")
        dt = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32, "tf32": torch.float32,
              "u32": torch.int32, "s32": torch.int32, "s8": torch.int8, "e4m3": torch.float8_e4m3fn,
              "e5m2": torch.float8_e5m2}.get(element, torch.uint8)
        return t.view(dt).reshape(shape)
    cupy = sys.modules.get("cupy") or __import__("cupy")
    dt = {"f16": "float16", "f32": "float32", "tf32": "float32", "u32": "uint32", "s32": "int32",
          "s8": "int8"}.get(element, f"u{size}")
    with cupy.cuda.Device(device if device is not None else cupy.cuda.runtime.getDevice()):
        return cupy.asarray(raw).view(dt).reshape(shape)


def _allocate(lead: ArrayView, want, fill_zero: bool = False, batch: int | None = None, name: str = "out"):
    """A new C or D (argument `name`) for buffer `want`: rows padded to a multiple of 16 bytes where the kernel
    takes a row stride (the array returned is the M x N slice of it), else contiguous; `batch` of them
    (batch-first)."""
    lead_dims = (batch,) if batch is not None else ()
    if want.pitch is None or len(want.shape) != 2:
        return allocate_like(lead, lead_dims + tuple(want.shape), want.element, fill_zero=fill_zero, name=name)
    from ..isa.types import TYPES

    rows, cols = want.shape
    size = TYPES[want.element].bits // 8
    padded = aligned_row_elements(cols, size)
    full = allocate_like(lead, lead_dims + (rows, padded), want.element, fill_zero=fill_zero, name=name)
    return full if padded == cols else full[..., :cols]


def _synchronize(lead: ArrayView) -> None:
    """Wait for the current stream of the inputs' library (torch / cupy) on their device."""
    if lead.library == "torch":
        sys.modules["torch"].cuda.current_stream(lead.obj.device).synchronize()
    elif lead.library == "cupy":
        sys.modules["cupy"].cuda.get_current_stream().synchronize()


def _unbatch(v: ArrayView, rank: int) -> tuple[ArrayView, int | None, int]:
    """(the first batch's view, batch count, batch stride in bytes) of a view with one more dimension
    than `rank`; (v, None, 0) for a view of `rank` dimensions."""
    if len(v.shape) != rank + 1:
        return v, None, 0
    first = ArrayView(v.obj, v.ptr, tuple(v.shape[1:]), tuple(v.strides[1:]), v.element, v.itemsize, v.device,
                      v.readonly, v.library)
    return first, v.shape[0], v.strides[0]


def _batched(v: ArrayView, rank: int, batch: int | None, arg: str, noun: str,
             tma: bool = True) -> tuple[ArrayView, int]:
    """(the first batch's view, the batch stride in bytes) of argument `arg`, a view of `rank` dimensions
    (`noun`: what one of them is) or of a batch of them, which must be `batch` of them (None: no batch).
    With `tma` the stride must be one a TMA tensor map or a 16-byte copy can take: positive, a multiple of
    16 bytes (cuTensorMapEncodeTiled globalStrides); a batch of one has no stride to check (0)."""
    first, count, stride = _unbatch(v, rank)
    if count != batch:
        want = f"a batch of {batch} {noun}s (as A)" if batch is not None else f"a {rank}-D {noun} (A has no batch)"
        raise ArgumentError(arg, "shape", want, f"shape {(count,) + first.shape if count is not None else first.shape}")
    if count is None or count == 1:
        return first, 0
    if tma and (stride <= 0 or stride % ALIGN):
        raise ArgumentError(arg, "stride", f"a positive batch stride, a multiple of {ALIGN} bytes (TMA strides, "
                            "the kernels' 16-byte accesses)", f"{stride} bytes")
    return first, stride


F32_MAX = 3.4028234663852886e38


def _f32_scalar(name: str, value) -> float:
    """The launch value of epilogue parameter `name` (alpha, beta, scale: an f32 kernel parameter): a real
    number that is finite in f32; ArgumentError otherwise (a string, an array, a complex, inf, 1e300)."""
    import math
    import numbers

    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ArgumentError(name, "value", "a real number (a Python or numpy scalar)",
                            f"{type(value).__name__} {value!r}")
    try:
        x = float(value)
    except OverflowError:             # an int past a double's range
        x = math.inf
    if not math.isfinite(x) or abs(x) > F32_MAX:
        raise ArgumentError(name, "value", "a number that is finite in f32", repr(value))
    return x


def _stream_key(stream):
    """A hashable identity of a launch stream: a cuda.core Stream's handle as an int (one stream, however
    the caller named it), else the driver's own stream object."""
    handle = getattr(stream, "handle", None)
    if handle is not None:
        try:
            return int(handle)
        except (TypeError, ValueError):
            pass
    return stream


class Kernel:
    """One compiled tile. `kernel(A, B, C=None, *, out=None, stream=None)` launches it and returns D.

    * A: an M x K array (tcgen05 kernels), or for the mma.sp-engine kernels a SparseA from
      `kernel.pack_a(A_dense)` (which checks the 2:4 pattern and compresses on the host).
    * B: K x N, stored transposed (N x K, K contiguous), i.e. `Bt.T` of a contiguous N x K array.
    * C: M x N row-major in the accumulator type, for kernels computing D = A*B + C (None: zeros).
    * out: D (M x N row-major), written in place; None allocates it with the inputs' library.
    * extras as keywords: scale_a / scale_b (tcgen05 SFA / SFB, block-scaled mma.sp sfa / sfb), metadata
      (tcgen05 META).
    * stream: a cuda.core Stream, a torch or cupy stream, an object with __cuda_stream__, or an int handle;
      None: the current stream of the inputs' library (torch / cupy), else the legacy default stream.
    * a batch (kernels whose ABI has `batch`: the sparse wgmma, pipelined mma.sp and warp-specialised
      tcgen05 kernels): A (or pack_a's SparseA), B and out lead with the batch count, batch strides positive
      multiples of 16 bytes where a tensor map or 16-byte copy reads them, D's problems not overlapping;
      C a batch or one M x N for all; the ws kernel's META / SFA / SFB images one problem's after another
      (host_image / pack_image of batch-first natural layouts).
    The launch is asynchronous and never synchronises (capturable in a CUDA graph); the first launch
    loads the module (ptxas through the kernel cache: do it before any capture), and a TMA kernel's first
    launch on a new set of buffers encodes and uploads their tensor maps synchronously, allowed inside a
    capture too (compiler/runtime/capture.py; later launches and captures reuse them).
    """

    def __init__(self, abi: dict, target: str, *, ptx: str | None = None, cubin: bytes | None = None,
                 tile: str | None = None) -> None:
        if ptx is None and cubin is None:
            raise TilecRuntimeError("a kernel needs its PTX text or a cubin")
        self.abi, self.target, self.ptx, self.cubin, self.tile = abi, target, ptx, cubin, tile
        self.entry = abi_mod.entry(abi)
        self.tcgen05 = abi_mod.is_tcgen05(abi)
        bufs = {} if self.tcgen05 else abi.get("buffers", {})
        # the names of B and D in the ABI (mma.sp kernels: b, d; tcgen05 kernels: B, D), and whether A is
        # passed as stored (tcgen05) rather than packed by pack_a (mma.sp: a_values, a_metadata)
        self._b = "b" if "b" in bufs else "B"
        self._d = "d" if "d" in bufs else "D"
        self._c = "c" if "c" in bufs else "C"
        self.dense_a = self.tcgen05 or "A" in bufs
        self.params = [(p["name"], p["type"]) for p in abi["params"]]
        # a "bytes" parameter is the kernel's tensor maps by value (the sparse wgmma and tcgen05 ws kernels); no
        # other is known
        unknown = [p["name"] for p in abi["params"] if p["type"] == "bytes" and p["name"] != "tensor_maps"]
        if unknown:
            raise TilecRuntimeError(f"{self.entry}: by-value parameter(s) {', '.join(unknown)} unknown to the runtime")
        self._maps_by_value = any(p["type"] == "bytes" for p in abi["params"])
        self._fn = None
        self._device = None
        self._sms = None
        self.device = None            # the DeviceInfo of the loaded module (compiler/runtime/driver.py)
        self._driver = None
        self._maps: dict[tuple, object] = {}  # the tensor maps by value (ctypes arrays), per _tensor_maps key
        # the buffers the tensor maps read (their addresses key the encoded maps): the ws kernel lists its maps
        # in the ABI; the wgmma kernel's are a_values, b, a_metadata
        self._map_operands = tuple(t["operand"] for t in abi["tensor_maps"]) \
            if isinstance(abi.get("tensor_maps"), list) else ("a_values", "b", "a_metadata")
        self._plans: dict[tuple, dict] = {}      # (M, N, K) -> the buffers' expected shapes, types, strides
        self._derived: dict[tuple, dict] = {}    # (M, N, K) -> the ABI's derived u32 sizes (abi.derived_sizes)
        self._configs: dict[tuple, object] = {}  # (M, N, K) -> LaunchConfig
        self._programmatic = bool(abi.get("programmatic_launch"))
        self._scratch: dict[tuple, dict] = {}    # (M, N, K, batch, device) -> split-K workspace, semaphores

    def __repr__(self) -> str:
        return f"<tilec Kernel {self.entry} ({self.target})>"

    @property
    def programmatic(self) -> bool:
        """Launches use programmatic stream serialization (programmatic dependent launch): the default where
        the ABI says the kernel waits for the grid before it (`programmatic_launch`), so that it may start
        while that grid's last CTAs run and after another such kernel take the SMs its CTAs leave. False:
        plain launches (the same D either way)."""
        return self._programmatic

    @programmatic.setter
    def programmatic(self, on: bool) -> None:
        if on and not self.abi.get("programmatic_launch"):
            raise TilecRuntimeError(f"{self.entry} does not wait for the grid before it (no programmatic_launch "
                                    "in its ABI): it cannot be launched to overlap it")
        if bool(on) != self._programmatic:
            self._programmatic = bool(on)
            self._configs.clear()

    # ------------------------------------------------------------------ launch geometry
    def unmet(self, m: int, n: int, k: int) -> list[str]:
        return abi_mod.unmet(self.abi, m, n, k)

    def launch_dims(self, m: int, n: int, k: int, multiprocessors: int | None = None, batch: int = 1):
        """(grid in clusters, cluster, block, dynamic shared bytes) for problem M x N x K (`batch` of them)."""
        if multiprocessors is None and "multiprocessors" in str(self.abi.get("grid")):
            multiprocessors = self._sms
        return abi_mod.launch_dims(self.abi, m, n, k, multiprocessors, batch)

    # ------------------------------------------------------------------ operands
    def pack_a(self, a, library: str | None = None) -> SparseA:
        """A dense M x K structured-sparse A (torch, cupy or numpy) as this kernel reads it: the pattern is
        checked (ArgumentError naming the first row and chunk that breaks it) and compressed on the host
        (compiler.sparse.compress: synchronising), the result uploaded with A's library (a host A: `library`,
        'torch' or 'cupy', default torch where it is imported)."""
        if self.dense_a or "a_values" not in self.abi.get("buffers", {}):
            raise TilecRuntimeError(f"{self.entry} takes a dense A (it has no packed 2:4 operand)")
        from .. import sparse
        from ..diagnostics import SpecError

        element = self.abi["buffers"]["a_values"]["element"]
        host = _host(a)
        batched = host.ndim == 3 and "batch" in self.abi
        if host.ndim != 2 and not batched:
            want = "a 2-D M x K array or a 3-D batch x M x K one" if "batch" in self.abi else "a 2-D M x K array"
            raise ArgumentError("A", "shape", want, f"shape {tuple(host.shape)}")
        m, k = host.shape[-2:]
        shape = self.abi["form"].split(".")[0]
        compact = abi_mod.compact_metadata(self.abi)     # the metadata layout the ABI's a_metadata names
        try:
            pad = self._padding(m, k)
            packed = []
            for one in (host if batched else [host]):
                if pad is None:
                    packed.append(sparse.compress(one, element, shape, self.abi.get("selector", 0), compact=compact))
                else:                 # any M x K: padded where the layouts need a granularity
                    packed.append(sparse.compress_padded(one, element, shape, *pad[:3], self.abi.get("selector", 0),
                                                         value_rows=pad[3], compact=compact))
        except SpecError as e:
            what = "values" if e.field == "A.dtype" else "sparsity pattern" if "sparse" in str(e) else "shape"
            raise ArgumentError("A", what, f"a {element} M x K matrix the kernel's sparsity allows", str(e)) from None
        import numpy as np

        values, meta = (np.stack([v for v, _ in packed]), np.stack([e for _, e in packed])) if batched else packed[0]
        library = library or library_of(a)
        device = a.device if library == "torch" and type(a).__module__.startswith("torch") else None
        return SparseA(upload(values, library, element, device=device), upload(meta, library, "u32", device=device),
                       element, m, k, host.shape[0] if batched else None)

    def pack_scales(self, values, operand: str = "a", library: str | None = None):
        """Scale factors of a block-scaled mma.sp kernel as it reads them (its ABI's `sfa` / `sfb`: rows
        M / N of K / blk scales each): exact .ue8m0 / .ue4m3 values (e.g. the scales that
        compiler.sparse.quantize_block_scaled chose, decoded) encoded to bytes on the host
        (compiler.sparse.encode_scales: synchronising) and uploaded with the values' library. Pass the
        result as scale_a / scale_b."""
        key = {"a": "sfa", "b": "sfb"}.get(operand)
        if key is None:
            raise ArgumentError("operand", "value", "'a' or 'b'", repr(operand))
        buf = self.abi.get("buffers", {}).get(key)
        if self.tcgen05 or buf is None:
            raise TilecRuntimeError(f"{self.entry} takes no {key} (it is not a block-scaled mma.sp kernel)")
        import numpy as np

        from .. import sparse
        from ..diagnostics import SpecError

        host = np.asarray(_host(values), np.float64)
        if host.ndim != 2:
            raise ArgumentError("values", "shape", f"a 2-D {buf['shape'][0]} x {buf['shape'][1]} array",
                                f"shape {tuple(host.shape)}")
        try:
            codes = sparse.encode_scales(host, buf["element"])
        except SpecError as e:
            raise ArgumentError("values", "value", f".{buf['element']} scale factors", str(e)) from None
        return upload(codes, library or library_of(values), buf["element"])

    def host_image(self, name: str, natural, k: int | None = None):
        """META / SFA / SFB of the warp-specialised tcgen05 kernel as it reads them (its ABI buffer `name`:
        per row tile and K block the TMEM image its tcgen05.cp copies), built on the host
        (tcgen05_ws_kernel.tmem_image, from the ABI's `tmem_images`) from the natural layout: META rows of
        u32 words (word w = the 4-bit codes of chunks 8w..8w+7), SFA / SFB rows of scale-factor bytes, each
        MMA's factors in K order; any number of rows (M, or N for SFB: the image pads them to whole tiles). A numpy array shaped as the buffer (synchronising for a device input).
        `k`: the problem's K, any multiple of the kernel's K unit (the ABI's `requires`; the image pads the
        last K block past it), the natural layout having ceil(K / (K per value)) columns; default what its
        columns cover (META: 8 chunks a word, so give `k` when K is not whole words).
        A 3-D natural array is a batch (batch-first): each problem's image in turn, batch-first, as a batched
        launch takes them (the kernel reads the problems' images one after another)."""
        import numpy as np

        from ..ptx.tcgen05_ws_kernel import tmem_image

        spec = self.abi.get("tmem_images", {}).get(name)
        if spec is None:
            raise TilecRuntimeError(f"{self.entry} takes no {name} image (tmem_images: "
                                    f"{', '.join(self.abi.get('tmem_images', {})) or 'none'})")
        host = np.asarray(_host(natural))
        if host.ndim == 3 and "batch" in self.abi and len(host):
            return np.stack([self.host_image(name, one, k) for one in host])
        if host.ndim != 2:
            raise ArgumentError(name, "shape", "a 2-D array (rows of the natural layout) or a 3-D batch of them",
                                f"shape {host.shape}")
        rows, cols = host.shape
        per_value = 8 * spec["chunk"] if "format" in spec else spec["vector"]     # K elements of a column
        k = cols * per_value if k is None else k
        unit = abi_mod.size_units(self.abi)["K"]
        if rows == 0 or k <= 0 or k % unit or cols != -(-k // per_value):
            raise ArgumentError(name, "shape", f"rows >= 1 and ceil(K / {per_value}) columns, K a multiple of "
                                f"{unit}", f"shape {host.shape}" + (f", K = {k}" if k else ""))
        image = tmem_image(spec, host.tolist(), rows, k)      # rows and K padded (legal values)
        shape = (-(-rows // spec["tile_rows"]) * spec["tile_rows"] // spec["row_tile"], -(-k // spec["k_block"]), -1)
        return np.array(image, np.uint32 if "format" in spec else np.uint8).reshape(shape)

    def pack_image(self, name: str, natural, library: str | None = None, k: int | None = None):
        """`host_image` uploaded with the natural array's library (a host array: `library`, 'torch' or
        'cupy'); pass the result as metadata= (META), scale_a= (SFA) or scale_b= (SFB)."""
        element = "u32" if name == "META" else self.abi["buffers"][name]["element"]
        return upload(self.host_image(name, natural, k), library or library_of(natural), element)

    def _padding(self, m: int, k: int) -> tuple[int, int, int, int] | None:
        """(k_values, meta_rows, meta_k, value_rows) for sparse.compress_padded where the kernel's ABI
        shapes of a_values / a_metadata round M and K up (the wgmma and pipelined mma.sp kernels:
        compiler/ptx/sparse_wgmma_kernel.padded_sizes, sparse_gemm_kernel.padded_sizes), None for the
        kernels that take whole units only (compress checks them)."""
        bufs = self.abi.get("buffers", {})
        if "a_metadata" not in bufs or "form_k" not in self.abi:
            return None
        try:
            rows, steps, _ = abi_mod.buffer_shape(self.abi, "a_metadata", m, k)
            value_rows, cols = abi_mod.buffer_shape(self.abi, "a_values", m, k)
        except ValueError:            # M or K off a unit the kernel requires: compress_padded names it
            return None
        form_k = self.abi["form_k"]
        return 2 * cols, 16 * rows, steps * form_k, value_rows

    def _sizes(self, a, b: ArrayView) -> tuple[int, int, int]:
        if len(b.shape) != 2:
            raise ArgumentError("B", "shape", "a 2-D K x N array", f"shape {b.shape}")
        kb, n = b.shape
        if self.tcgen05:
            if isinstance(a, SparseA):
                raise ArgumentError("A", "type", "an array (tcgen05 kernels take A as stored, META separately)",
                                    "a SparseA")
            if len(a.shape) != 2:
                raise ArgumentError("A", "shape", "a 2-D M x K array", f"shape {a.shape}")
            k = self.abi["k"]
            packed = any(p["name"] == "B" and " packed" in p.get("layout", "") for p in self.abi["params"])
            if kb != (k // 2 if packed else k):
                stored = f"{k // 2} bytes (two 4-bit elements a byte)" if packed else str(k)
                raise ArgumentError("B", "shape", f"K x N with K = {stored} (the tile's loop K, fixed when compiled)",
                                    f"shape {b.shape}")
            return a.shape[0], n, k
        if self.dense_a:              # the warp-specialised tcgen05 kernel: A as stored, K from B's rows
            if isinstance(a, SparseA):
                raise ArgumentError("A", "type", "an array (this kernel takes A as stored, META separately)",
                                    "a SparseA")
            if len(a.shape) != 2:
                raise ArgumentError("A", "shape", "a 2-D array", f"shape {a.shape}")
            return a.shape[0], n, kb * (2 if self.abi["buffers"]["B"].get("packed") else 1)
        if not isinstance(a, SparseA):
            raise ArgumentError("A", "type", "a packed structured-sparse A: kernel.pack_a(A)",
                                f"{type(a).__module__}.{type(a).__name__}",
                                hint="pack_a checks the sparsity pattern and compresses A once; reuse it")
        packed = bool(self.abi["buffers"].get("b", {}).get("packed"))
        if kb != (a.k // 2 if packed else a.k):
            stored = f"{a.k // 2} bytes (two 4-bit elements a byte)" if packed else str(a.k)
            raise ArgumentError("B", "shape", f"K x N with K = {stored} (A is {a.m} x {a.k})", f"shape {b.shape}")
        return a.m, n, a.k

    @staticmethod
    def _image_batch(key: str, arg: str, v: ArrayView, want, batch: int | None) -> ArrayView:
        """The first problem's view of a ws tcgen05 kernel's META / SFA / SFB images for `batch` problems
        (Kernel.host_image of a batch of natural layouts): the kernel reads every problem's images through
        one rank-2 tensor map, rows (problem, row tile, K block) in that order (tcgen05_ws_kernel
        tensor_map_args), so a batch's images must lie one after another: a contiguous batch-first array."""
        first, stride = _batched(v, len(want.shape), batch, arg, f"{key} image")
        one = v.itemsize
        for d in want.shape:
            one *= d
        if batch is not None and batch > 1 and stride != one:
            raise ArgumentError(arg, "stride", f"the problems' {key} images one after another: a batch stride of "
                                f"{one} bytes (one rank-2 tensor map reads them all)", f"{stride} bytes",
                                hint="pass Kernel.pack_image of the batch's natural layouts (batch-first)")
        return first

    def _check(self, name: str, arg: str, v: ArrayView, want, device: int | None,
               transposed: bool = False) -> int | None:
        """ArgumentError unless `v` is what buffer `want` needs; returns the row stride in elements of a
        buffer whose rows may be pitched (want.pitch), else None."""
        shape = tuple(reversed(want.shape)) if transposed else want.shape
        accepts = _ACCEPTS.get(want.element, (want.element,))
        if v.element not in accepts:
            raise ArgumentError(arg, "dtype", f"{want.element} elements", f"{v.element}")
        if v.shape != shape:
            hint = abi_mod.metadata_layout_hint(self.abi, shape, v.shape) if name == "a_metadata" else None
            raise ArgumentError(arg, "shape", f"{shape}", f"{v.shape}", hint=hint)
        pitch = None
        if want.pitch is not None:
            pitch = self._pitch(arg, v, want, transposed)
        else:
            self._check_strides(arg, v, want, shape, transposed)
        if v.ptr % ALIGN:
            raise ArgumentError(arg, "alignment", f"a {ALIGN}-byte aligned address", hex(v.ptr))
        if device is not None and (v.device if v.device is not None else self._device_of(v)) not in (None, device):
            raise ArgumentError(arg, "device", f"cuda:{device} (where A is)",
                                f"cuda:{v.device}")
        if want.written and v.readonly:
            raise ArgumentError(arg, "writability", "a writable array", "a read-only one")
        return pitch

    def _derived_sizes(self, m: int, n: int, k: int) -> dict[str, int]:
        """The ABI's `sizes` for this problem, evaluated once per problem size: a launch on a known size
        does not compile the ABI's expressions again."""
        key = (m, n, k)
        sizes = self._derived.get(key)
        if sizes is None:
            sizes = self._derived[key] = abi_mod.derived_sizes(self.abi, m, n, k)
        return sizes

    def _device_of(self, v: ArrayView) -> int | None:
        """The device of `v`'s memory: what its library says, else (a bare __cuda_array_interface__, which
        names none) what the driver says of its address, else None (nothing to compare)."""
        if v.device is None and v.ptr:
            from . import driver as driver_mod

            try:
                find = getattr(self._driver or driver_mod.current(), "pointer_device", None)
            except DeviceError:           # no driver: the launch itself will say so
                find = None
            if find is not None:
                v.device = find(v.ptr)
        return v.device

    @staticmethod
    def _check_no_overlap(d: ArrayView, spans: list, c: ArrayView | None) -> None:
        """ArgumentError where D's bytes overlap an input's: the CTAs would read what others have written. C
        itself (the same view: D = ... + beta*C in place) is allowed, each element read before it is written
        by the thread that writes it."""
        lo, hi = extent(d)
        for arg, span in spans:           # a view, or the bytes of one (a SparseA's, kept from its check)
            first, end = span if isinstance(span, tuple) else extent(span)
            if first < hi and lo < end:
                raise ArgumentError("out", "memory", "an array that shares no bytes with the inputs",
                                    f"one that overlaps {arg}")
        if c is not None and (c.ptr, c.shape, c.strides) != (d.ptr, d.shape, d.strides):
            first, end = extent(c)
            if first < hi and lo < end:
                raise ArgumentError("out", "memory", "C itself (in place) or an array that shares no bytes with C",
                                    "another view of C's bytes")

    @staticmethod
    def _pitch(arg: str, v: ArrayView, want, transposed: bool) -> int:
        """The row stride (elements) of a 2-D buffer whose rows may lie further apart than their length:
        elements contiguous within a row, rows a multiple of 16 bytes apart (TMA global strides and the
        kernels' 16-byte vector accesses need it) and not overlapping."""
        rows, cols = want.shape
        row_s, col_s = (reversed(v.strides) if transposed else v.strides)
        size = v.itemsize
        order = "K x N with K contiguous (B stored transposed: Bt.T of an N x K Bt)" if transposed else \
            "rows with contiguous elements"
        if col_s != size and cols > 1:
            raise ArgumentError(arg, "stride", f"{order}: an element stride of {size} bytes", f"{v.strides} bytes")
        if rows == 1:
            return aligned_row_elements(cols, size)
        if row_s % ALIGN or row_s < cols * size or row_s // size >= 1 << 32:
            raise ArgumentError(arg, "stride", f"{order} {ALIGN * 1}-byte-multiple row strides of at least "
                                f"{cols * size} bytes", f"{v.strides} bytes",
                                hint=f"allocate rows of a multiple of {ALIGN} bytes and pass the "
                                     f"{'[:K]' if transposed else '[:, :N]'} slice" if row_s % ALIGN else None)
        return row_s // size

    @staticmethod
    def _check_strides(arg: str, v: ArrayView, want, shape, transposed: bool) -> None:
        strides = want.strides.get((v.itemsize, transposed))
        if strides is None:
            strides = row_major_strides(want.shape, v.itemsize)
            if transposed:
                strides = tuple(reversed(strides))
            want.strides[(v.itemsize, transposed)] = strides
        if any(s != t and d > 1 for s, t, d in zip(v.strides, strides, shape)):
            how = ("column-major K x N strides (B stored transposed: pass Bt.T of a contiguous N x K Bt)"
                   if transposed else "C-contiguous strides")
            raise ArgumentError(arg, "stride", f"{how} {strides} bytes", f"{v.strides} bytes")

    # ------------------------------------------------------------------ loading
    def _load(self, device_id: int | None) -> None:
        from . import driver as driver_mod

        drv = driver_mod.current()
        info = drv.open(device_id)
        if not target_runs_on(self.target, info.sm):
            raise DeviceError(f"{self.entry} is compiled for {self.target}; this GPU ({info.name}, sm_{info.sm}) "
                              "cannot run it (`tilec run --emulate` runs it on the CPU emulator)")
        arch = self.target if self.target[-1] in "af" else f"sm_{info.sm}"
        fn, self.image = drv.load(self.entry, self.ptx, self.cubin, arch)   # image: the cubin loaded (None: JIT)
        smem = int(self.abi.get("dynamic_smem_bytes", 0))
        if smem > _BIG_SMEM:
            try:
                drv.set_max_dynamic_smem(fn, smem, info)
            except DeviceError as e:
                raise DeviceError(f"{self.entry}: {e}") from None
        self._driver, self._fn, self.device = drv, fn, info
        self._device = info.ordinal
        self._sms = info.multiprocessors

    def load(self, device: int | None = None) -> Kernel:
        """Load the module now (otherwise the first launch does); returns self."""
        if self._fn is None:
            self._load(device)
        return self

    # ------------------------------------------------------------------ scratch (split-K)
    def _scratch_pointers(self, lead: ArrayView, m: int, n: int, k: int, count: int, stream) -> dict[str, int]:
        """Device pointers of the ABI's `scratch` buffers (the split-K wgmma kernel's partial workspace and
        per-tile semaphores) for this problem size and launch stream, allocated with the inputs' library on
        first use and kept: the semaphores are zeroed once (the kernel leaves them zero), that first
        allocation is synchronised so the zeros are in place whatever stream launches. One set per stream:
        launches on one stream run in order, so they may share it; launches on two streams may overlap,
        and sharing the semaphores would let one launch's CTAs count another's slices (a wrong D). A CUDA
        graph captured on a stream keeps that stream's set: replaying it concurrently with launches on the
        same stream is the caller's race, as for any buffer the graph reads."""
        key = (m, n, k, count, lead.device, _stream_key(stream))
        held = self._scratch.get(key)
        if held is None:
            # stream-K's workspace has two partial slots per CTA of the grid, which counts the device's SMs
            env = abi_mod.names(self.abi, m, n, k, self._sms, batch=count)
            held = {}
            for name, spec in self.abi["scratch"].items():
                shape = tuple(int(abi_mod.eval_expr(d, env)) for d in spec["shape"])
                element = {"u32": "s32"}.get(spec["element"], spec["element"])      # same bits; torch lacks u32 ops
                held[name] = allocate_like(lead, shape, element, fill_zero=bool(spec.get("zeroed")), name="scratch")
            _synchronize(lead)
            self._scratch[key] = held
        return {name: view(arr, name).ptr for name, arr in held.items()}

    # ------------------------------------------------------------------ streams
    def _stream(self, stream, library: str):
        return self._driver.stream(stream, library)

    def _tensor_maps(self, m: int, n: int, k: int, ptrs: dict[str, int], b_row_bytes: int | None = None,
                     batch: int = 1, batch_bytes: dict | None = None):
        """The kernel's TMA tensor maps for these buffers, encoded by the driver (cuTensorMapEncodeTiled): the
        bytes of the parameter that passes them by value (a ctypes array), cached per (problem, the mapped
        buffers' addresses, B's row stride, batch and its strides). The kernel's module gives the encoder's arguments
        (sparse_wgmma_kernel.tensor_map_args, tcgen05_ws_kernel.tensor_map_args)."""
        # the key first (a launch on known buffers costs a dict lookup): the buffers every map reads
        key = (m, n, k, tuple(ptrs.get(name) for name in self._map_operands), b_row_bytes, batch,
               tuple(sorted((batch_bytes or {}).items())))
        hit = self._maps.get(key)
        if hit is not None:
            return hit
        if self.abi.get("kernel_kind") == "tcgen05_ws":
            from ..ptx.tcgen05_ws_kernel import tensor_map_args

            try:                  # contiguous A, B, D: each row its own bytes, which TMA needs a multiple of 16
                maps = tensor_map_args(self.abi, m, n, k, batch, packed_rows=True, batch_bytes=batch_bytes or None)
            except ValueError as e:
                raise ArgumentError("A, B", "problem size", "rows of A, B and D a multiple of 16 bytes "
                                    "(TMA global strides)", str(e)) from None
        else:
            from ..ptx.sparse_wgmma_kernel import tensor_map_args

            maps = tensor_map_args(self.abi, m, n, k, {"b": b_row_bytes} if b_row_bytes else None, batch,
                                   batch_bytes or None)
        import ctypes

        data = self._driver.tensor_map_bytes(maps, ptrs)     # ctypes: what the launch packs by value
        self._maps[key] = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
        return self._maps[key]

    # ------------------------------------------------------------------ the launch
    def __call__(self, A, B, C=None, *, out=None, stream=None, scale_a=None, scale_b=None, metadata=None,
                 bias=None, alpha=None, beta=None, scale=None):
        sparse_a = isinstance(A, SparseA)
        a = A if sparse_a or not self.dense_a else view(A, "A")      # _sizes refuses an unpacked sparse A
        b = view(B, "B")
        spans = [("B", b)]                  # (argument, view or its bytes) of every input: D may overlap none
        if isinstance(a, ArrayView):
            spans.append(("A", a))
        # the sparse wgmma, pipelined mma.sp and warp-specialised tcgen05 kernels: operands may lead with a batch
        batched = "batch" in self.abi
        batch, bb = (a.batch if sparse_a else None), {}    # bb: batch strides in bytes, by ABI buffer name
        if batched and not sparse_a and self.dense_a:     # A as stored (ws tcgen05): a batch leads its shape
            if len(a.shape) not in (2, 3):
                raise ArgumentError("A", "shape", "a 2-D M x K array or a 3-D batch x M x K one", f"shape {a.shape}")
            batch = _unbatch(a, 2)[1]
            a, bb["A"] = _batched(a, 2, batch, "A", "M x K array")
        if batched:
            b, bb[self._b] = _batched(b, 2, batch, "B", "K x N array")
        m, n, k = self._sizes(a, b)
        want = self._plans.get((m, n, k))
        if want is None:              # the ABI's expressions, evaluated once per problem size
            bad = abi_mod.unmet(self.abi, m, n, k)
            if bad:
                raise ArgumentError("A, B", "problem size", f"M x N x K meeting {', '.join(bad)}",
                                    f"{m} x {n} x {k}")
            want = self._plans[(m, n, k)] = abi_mod.buffers(self.abi, m, n, k)
        if batch is not None and abi_mod.unmet(self.abi, m, n, k, batch):
            raise ArgumentError("A", "batch", " and ".join(abi_mod.unmet(self.abi, m, n, k, batch)), str(batch))
        lead = view(a.values, "A.values") if sparse_a else a
        if batch is not None:
            lead = _unbatch(lead, 2)[0]
        dev = lead.device if lead.device is not None else self._device_of(lead)
        ptrs: dict[str, int] = {}
        held = a._checked_arrays if sparse_a else ()
        if sparse_a and a.checked is want and held[0] is a.values and held[1] is a.metadata and held[2] == lead.ptr:
            # checked against this kernel and size already, and neither array replaced since
            ptrs["a_values"] = lead.ptr
            bb.update(a._batch_bytes)
            spans += a._spans
            if "a_metadata" in want:
                ptrs["a_metadata"] = a._metadata_ptr
        elif sparse_a:
            if a.element != want["a_values"].element:
                raise ArgumentError("A", "dtype", f"A packed for {want['a_values'].element}",
                                    f"A packed for {a.element}")
            a.checked, a_spans = None, []
            for key, arr, arg in (("a_values", a.values, "A.values"), ("a_metadata", a.metadata, "A.metadata")):
                if key not in want:           # static metadata: embedded in the kernel
                    continue
                v = view(arr, arg)
                a_spans.append((arg, extent(v)))
                w = want[key]
                if batch is not None:
                    v, bb[key] = _batched(v, len(w.shape), batch, arg, "packed array")
                if v.element in ("u16", "s16") and w.element in ("f16", "bf16"):
                    v.element = w.element       # pack_a's raw 16-bit storage (cupy has no bfloat16)
                self._check(key, arg, v, w, dev)
                ptrs[key] = v.ptr
            a._metadata_ptr = ptrs.get("a_metadata")
            a._batch_bytes = {key: bb[key] for key in ("a_values", "a_metadata") if key in bb}
            a._spans, a._checked_arrays = a_spans, (a.values, a.metadata, lead.ptr)
            spans += a_spans
            a.checked = want
        else:
            self._check("A", "A", a, want["A"], dev)
            ptrs["A"] = a.ptr
        bname = self._b
        pitches: dict[str, int] = {}
        ldb = self._check(bname, "B", b, want[bname], dev, transposed=True)
        if ldb is not None and want[bname].pitch == "tensor map":
            pitches["b"] = ldb * b.itemsize          # the tensor map's row stride (bytes)
        elif ldb is not None:
            # a kernel parameter (ldb, elements): a packed 4-bit B's rows are bytes of two elements each
            pitches[want[bname].pitch] = ldb * (2 if want[bname].packed else 1)
        ptrs[bname] = b.ptr
        # scale factors: SFA / SFB of tcgen05 kernels, sfa / sfb of block-scaled mma.sp kernels
        for keys, arr, arg in ((("SFA", "sfa"), scale_a, "scale_a"), (("SFB", "sfb"), scale_b, "scale_b"),
                               (("META",), metadata, "metadata")):
            key = next((x for x in keys if x in want), keys[0])
            if key in want:
                if arr is None:
                    raise ArgumentError(arg, "value", f"an array ({key} of {self.entry})", "None")
                v = view(arr, arg)
                spans.append((arg, v))
                if batched and key in self.abi.get("tmem_images", {}):
                    v = self._image_batch(key, arg, v, want[key], batch)
                self._check(key, arg, v, want[key], dev)
                ptrs[key] = v.ptr
            elif arr is not None:
                raise ArgumentError(arg, "value", f"None ({self.entry} has no {key} parameter)", "an array")
        cname = self._c
        c_full = None                     # the C the caller gave (D may be that very array: in place)
        if cname in want:
            if C is None:
                C = _allocate(lead, want[cname], fill_zero=True, name="C")
            else:
                c_full = view(C, "C")
            v = c_full if c_full is not None else view(C, "C")
            if batched:                   # a 2-D C is every batch's (batch stride 0)
                v, count, bb[cname] = _unbatch(v, 2)
                if count not in (None, batch):
                    raise ArgumentError("C", "shape", f"an M x N array or a batch of {batch or 1} of them",
                                        f"shape {(count,) + v.shape}")
                bb[cname] = bb[cname] if count else 0
                if count is not None and count > 1 and bb[cname] and (bb[cname] < 0 or bb[cname] % ALIGN):
                    raise ArgumentError("C", "stride", f"a batch stride of 0 (one C for every batch) or a positive "
                                        f"multiple of {ALIGN} bytes (the kernels' 16-byte accesses)",
                                        f"{bb[cname]} bytes")
            ldc = self._check(cname, "C", v, want[cname], dev)
            c_size = v.itemsize
            if ldc is not None:
                pitches[want[cname].pitch] = ldc
            ptrs[cname] = v.ptr
        elif C is not None:
            raise ArgumentError("C", "value", f"None ({self.entry} computes D = A*B, without C)", "an array")
        if "bias" in want:               # the fused epilogue's bias (its bias_type), one per column (N) or row (M) of D
            if bias is None:
                raise ArgumentError("bias", "value", f"an array ({self.entry}'s epilogue adds a bias)", "None")
            v = view(bias, "bias")
            spans.append(("bias", v))
            self._check("bias", "bias", v, want["bias"], dev)
            ptrs["bias"] = v.ptr
        elif bias is not None:
            raise ArgumentError("bias", "value", f"None ({self.entry}'s epilogue adds no bias)", "an array")
        scalars = {"alpha": alpha, "beta": beta, "scale": scale}
        for key, value in scalars.items():
            if value is not None and not any(p == (key, "f32") for p in self.params):
                raise ArgumentError(key, "value", f"None ({self.entry} takes no {key} parameter: its value, if "
                                    "any, is compiled in)", repr(value))
            if value is not None:
                scalars[key] = _f32_scalar(key, value)
        dname = self._d
        given = out is not None
        if out is None:
            out = _allocate(lead, want[dname], batch=batch)
        v = d_full = view(out, "out")
        if batched:                   # 16-byte batch strides: a TMA map's (ws tcgen05), the others' vector stores
            v, bb[dname] = _batched(v, 2, batch, "out", "M x N array")
        ldd = self._check(dname, "out", v, want[dname], dev)
        if ldd is not None:
            pitches[want[dname].pitch] = ldd
        span = ((m - 1) * (n if ldd is None else ldd) + n) * v.itemsize     # the bytes of one batch's D
        if batch is not None and batch > 1 and bb[dname] < span:
            raise ArgumentError("out", "stride", f"batches that do not overlap: a batch stride of at least "
                                f"{span} bytes", f"{bb[dname]} bytes")
        ptrs[dname] = v.ptr
        if given:
            self._check_no_overlap(d_full, spans, c_full)
        if self._fn is None:
            self._load(dev)
        if dev is not None and dev != self._device:
            raise ArgumentError("A", "device", f"cuda:{self._device} (where this kernel was loaded)", f"cuda:{dev}")
        count = batch or 1
        launch_stream = self._stream(stream, lead.library)
        if "scratch" in self.abi:
            ptrs.update(self._scratch_pointers(lead, m, n, k, count, launch_stream))
        if self._maps_by_value:
            # the sparse wgmma and tcgen05 ws kernels take their maps by value (a bytes parameter: their module
            # docstrings, "Tensor maps")
            maps = self._tensor_maps(m, n, k, ptrs, pitches.get("b"), count,
                                     {x: bb[x] for x in self._map_operands if bb.get(x)})
        sizes = {"M": m, "N": n, "K": k, "m_total": m, "n_total": n, "batch": count, **pitches,
                 **self._derived_sizes(m, n, k)}
        if batched:                   # C's and D's batch strides in elements; the packed A's and B's in bytes
            sizes["batch_stride_c"] = bb.get(cname, 0) // c_size if cname in want else 0
            sizes["batch_stride_d"] = bb.get(dname, 0) // v.itemsize
            sizes.update({f"batch_stride_{x}": bb.get(x, 0) for x in ("a_values", "a_metadata", "b")})
        args = []
        for name, typ in self.params:
            if typ == "bytes":           # the tensor maps, by value
                args.append(maps)
            elif typ == "u64":
                args.append(ctypes.c_uint64(ptrs[name] if name in ptrs else sizes[name]))
            elif typ == "u32":
                args.append(ctypes.c_uint32(sizes[name]))
            elif typ == "f32":           # the epilogue's alpha / beta / scale (epilogue alpha=param ...)
                if scalars.get(name) is None:
                    raise ArgumentError(name, "value", f"a number ({self.entry}'s epilogue takes {name} at launch)",
                                        "None")
                args.append(ctypes.c_float(scalars[name]))
            else:
                raise TilecRuntimeError(f"{self.entry}: parameter {name} of type {typ} is unknown to the runtime")
        config = self._configs.get((m, n, k, count))
        if config is None:
            from .driver import LaunchPlan

            config = self._configs[(m, n, k, count)] = self._driver.config(
                LaunchPlan(*self.launch_dims(m, n, k, self._sms, count), programmatic=self.programmatic))
        self._driver.launch(launch_stream, config, self._fn, args)
        return out
