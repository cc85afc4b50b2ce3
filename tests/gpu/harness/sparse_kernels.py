"""Host half of the sparse GEMM GPU checks (tests/gpu/test_sparse_gemm_gpu.py, test_sparse_wgmma_gpu.py,
test_dsl_examples_gpu.py) and the code the timing benchmarks (benchmarks/sparse_gemm.py, sparse_gemm_sync.py,
sparse_wgmma.py) share with them:

* the schedules the benchmarks time (SPARSE_GEMM_SCHEDULES, SPARSE_WGMMA_SCHEDULES): the GPU tests run
  every one of them for correctness, so a schedule is never timed without being checked;
* exact problems: random 2:4 A and B with 3 significant bits (compiler.sparse.random_values), so every
  sum is exact in f32 / s32 and D must equal numpy bit for bit (f16 / bf16 D: rounded once, as numpy
  rounds); D is poisoned first, so an unwritten element fails;
* launches from a kernel's ABI (the JSON `tilec compile --abi` and CompileResult.to_json() give): the
  parameter list, the grid expressions and `requires` evaluated for a problem size;
* the GPU 2:4 packer of the benchmarks (sparse_operands, torch), which must give exactly
  compiler.sparse.compress's bytes (check_packer), the relative error the benchmarks guard with, and the
  clocks they print (gpu_state, NVML).

numpy and the compiler's host modules are imported here; cupy and torch are passed in by the caller
(nothing here needs a GPU until a launch).
"""
from __future__ import annotations

import os
import sys
import tempfile
from dataclasses import dataclass

import numpy as np

from compiler import sparse
from compiler.runtime import abi as runtime_abi
from compiler.runtime.kernel import target_runs_on  # noqa: F401  (the harness's name for it)

# --------------------------------------------------------------------------------------------------
# The schedules the benchmarks time
# --------------------------------------------------------------------------------------------------


def _gemm(cm, cn, ck, wm, wn, st, **kw) -> dict:
    return dict(cta_m=cm, cta_n=cn, cta_k=ck, warps_m=wm, warps_n=wn, stages=st, **kw)


# compiler/ptx/sparse_gemm_kernel.py SparseGemmConfig fields per schedule name (p = persistent CTAs)
SPARSE_GEMM_SCHEDULES: dict[str, dict] = {
    "128x256x64_s3": _gemm(128, 256, 64, 2, 4, 3),
    "128x256x64_s4": _gemm(128, 256, 64, 2, 4, 4),
    "128x256x64_s3_directD": _gemm(128, 256, 64, 2, 4, 3, stage_d=False),
    "128x256x64_s3_r16": _gemm(128, 256, 64, 2, 4, 3, raster_group=16),
    "256x128x64_s3": _gemm(256, 128, 64, 4, 2, 3),
    "128x256x128_s2": _gemm(128, 256, 128, 2, 4, 2),
    "128x256x64_s3_p": _gemm(128, 256, 64, 2, 4, 3, persistent=True),
    "256x128x128_s2_p": _gemm(256, 128, 128, 4, 2, 2, persistent=True),
}
# benchmarks/sparse_gemm_sync.py's other forms at 4096^3: name -> (mma.sp shape, A/B type, D type, schedule, with C)
SPARSE_GEMM_OTHER_SCHEDULES: dict[str, dict] = {
    "s8_128x256x128_s3": _gemm(128, 256, 128, 2, 4, 3),
    "tf32_128x256x32_s3": _gemm(128, 256, 32, 2, 4, 3),
}
SPARSE_GEMM_OTHER_FORMS: dict[str, tuple[str, str, str, str, bool]] = {
    "bf16": ("m16n8k32", "bf16", "bf16", "128x256x64_s3", False),
    "s8": ("m16n8k64", "s8", "s32", "s8_128x256x128_s3", False),
    "tf32": ("m16n8k16", "tf32", "f32", "tf32_128x256x32_s3", False),
    "f16+C": ("m16n8k32", "f16", "f32", "128x256x64_s3", True),
}
# compiler/ptx/sparse_wgmma_kernel.py SparseWgmmaConfig fields per schedule name (c2: CTA pairs along M
# sharing B through TMA multicast)
SPARSE_WGMMA_SCHEDULES: dict[str, dict] = {
    "128x256x64_s4": dict(cta_m=128, cta_n=256, cta_k=64, stages=4),
    "128x256x64_s3": dict(cta_m=128, cta_n=256, cta_k=64, stages=3),
    "128x256x64_s5": dict(cta_m=128, cta_n=256, cta_k=64, stages=5),
    "256x128x64_s4": dict(cta_m=256, cta_n=128, cta_k=64, stages=4),
    "256x128x64_s5": dict(cta_m=256, cta_n=128, cta_k=64, stages=5),
    "128x256x64_s4_r16": dict(cta_m=128, cta_n=256, cta_k=64, stages=4, raster_group=16),
    "128x256x64_s4_c2": dict(cta_m=128, cta_n=256, cta_k=64, stages=4, cluster_m=2),
    "128x256x64_s3_c2": dict(cta_m=128, cta_n=256, cta_k=64, stages=3, cluster_m=2),
    "256x128x64_s4_c2": dict(cta_m=256, cta_n=128, cta_k=64, stages=4, cluster_m=2),
    # the consumers' registers from the producer (setmaxnreg): 2 x 128 rows x 192 (240 each), 3 x 64 x 192 (160)
    "256x192x64_s4": dict(cta_m=256, cta_n=192, cta_k=64, stages=4),
    "256x192x64_s4_c2": dict(cta_m=256, cta_n=192, cta_k=64, stages=4, cluster_m=2),
    "256x192x64_s5_c2": dict(cta_m=256, cta_n=192, cta_k=64, stages=5, cluster_m=2),
    "192x192x64_s4_c2": dict(cta_m=192, cta_n=192, cta_k=64, consumers=3, stages=4, cluster_m=2),
}


# --------------------------------------------------------------------------------------------------
# Exact problems and their reference
# --------------------------------------------------------------------------------------------------

def np_out(dtype: str):
    """The host dtype of a D element type."""
    if dtype == "bf16":
        import ml_dtypes
        return ml_dtypes.bfloat16
    return {"f32": np.float32, "s32": np.int32, "f16": np.float16}[dtype]


@dataclass
class Problem:
    """D = A*B (+ C): dense 2:4 A (M x K), B (K x N), compiled operands in compiler/sparse.py's layouts."""
    a: np.ndarray
    b: np.ndarray
    values: np.ndarray            # compressed A (sparse.compress)
    meta: np.ndarray              # metadata words (sparse.compress)
    bt: np.ndarray                # B^T in element storage (sparse.pack_b)
    c: np.ndarray | None          # f32 / s32 C, or None for D = A*B

    @property
    def mnk(self) -> tuple[int, int, int]:
        return self.a.shape[0], self.b.shape[1], self.a.shape[1]


def make_problem(rng: np.random.Generator, a_t: str, b_t: str, cd: str, shape: str, m: int, n: int, k: int,
                 with_c: bool) -> Problem:
    """Random exact operands (3 significant bits: compiler.sparse.random_values); C in the accumulator
    type cd (f16-representable f32 values, or integers in -1000..999)."""
    a = sparse.random_sparse(rng, m, k, a_t, shape)
    b = sparse.random_values(rng, (k, n), b_t)
    values, meta = sparse.compress(a, a_t, shape)
    bt = sparse.pack_b(b, b_t, shape)
    c = None
    if with_c:
        c = (sparse.random_values(rng, (m, n), "f16").astype(np.float32) if cd == "f32"
             else rng.integers(-1000, 1000, (m, n)).astype(np.int32))
    return Problem(a, b, values, meta, bt, c)


def reference(p: Problem, cd: str, out: str) -> np.ndarray:
    """numpy's D in the host dtype of `out`: integer sums wrap to s32; float sums (exact in float64 for
    these operands) go to f32 and are rounded once to `out`."""
    c = p.c if p.c is not None else 0
    if cd == "s32":
        ref = p.a.astype(np.int64) @ p.b.astype(np.int64) + c
        return ((ref + 2**31) % 2**32 - 2**31).astype(np.int32)
    return (p.a.astype(np.float64) @ p.b.astype(np.float64) + c).astype(np.float32).astype(np_out(out))


def differing_bytes(d: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """(row, byte) of every byte where D differs from the reference (bitwise: NaN poison fails)."""
    m = d.shape[0]
    return np.argwhere(d.view(np.uint8).reshape(m, -1) != ref.view(np.uint8).reshape(m, -1))


def save_failure(tag: str, p: Problem, d: np.ndarray, ref: np.ndarray) -> str | None:
    """Under $OUT (the device tool brings it back), the operands and both D's of a mismatching case, to be
    analysed offline; returns the path, or None without $OUT."""
    out = os.environ.get("OUT")
    if not out:
        return None
    path = os.path.join(out, f"fail_{tag}.npz")
    np.savez_compressed(path, a=p.a, b=p.b, values=p.values, meta=p.meta, d=d, ref=ref,
                        **({"c": p.c} if p.c is not None else {}))
    return path


def raw(cp, x: np.ndarray):
    """A host array's C-order bytes on the device (cupy has no bf16 / fp8 dtypes)."""
    return cp.asarray(np.ascontiguousarray(x).view(np.uint8).reshape(-1))


def load_function(cp, text: str, entry: str, smem_bytes: int = 0):
    """The kernel `entry` of PTX `text` (driver JIT), its dynamic shared memory opted in."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, f"{entry}.ptx")
        with open(path, "w") as fh:
            fh.write(text)
        fn = cp.RawModule(path=path).get_function(entry)
    if smem_bytes:
        fn.max_dynamic_shared_size_bytes = smem_bytes
    return fn


# --------------------------------------------------------------------------------------------------
# Launches from a kernel's ABI
# --------------------------------------------------------------------------------------------------

# The ABI reading itself is the runtime's (compiler/runtime/abi.py); these names keep the harness's API.
eval_abi = runtime_abi.eval_expr


def abi_names(abi: dict, m: int, n: int, k: int, multiprocessors: int | None = None) -> dict[str, int]:
    """The names an ABI's expressions use, for problem M x N x K (and, for persistent kernels, the
    device's multiprocessor count)."""
    return runtime_abi.names(abi, m, n, k, multiprocessors)


def abi_unmet(abi: dict, m: int, n: int, k: int) -> list[str]:
    """The ABI's `requires` conditions that M x N x K breaks."""
    return runtime_abi.unmet(abi, m, n, k)


def abi_grid(abi: dict, m: int, n: int, k: int, multiprocessors: int | None = None) -> tuple[int, int, int]:
    """The grid in CTAs (ValueError naming the broken `requires`)."""
    return runtime_abi.grid_blocks(abi, m, n, k, multiprocessors)


def abi_problem_size(abi: dict, scale: tuple[int, int, int] = (2, 2, 4)) -> tuple[int, int, int]:
    """A problem of `scale` CTA tiles (CTA pairs along M count as one tile) that meets `requires`."""
    cluster_m = abi.get("cluster", [1])[0]
    m, n, k = (s * t for s, t in zip(scale, (abi["tile_m"] * cluster_m, abi["tile_n"], abi["tile_k"])))
    unmet = abi_unmet(abi, m, n, k)
    if unmet:
        raise ValueError(f"{m} x {n} x {k} breaks {unmet}")
    return m, n, k


def abi_entry(abi: dict) -> str:
    """The kernel's entry name (CompileResult.to_json() says `entry`; an emitter's own ABI `kernel`)."""
    return abi.get("entry") or abi["kernel"]


def abi_types(abi: dict) -> tuple[str, str, str, str, str]:
    """(mma.sp shape, A, B, C/accumulator, D) element types of a sparse kernel's ABI."""
    buf = abi["buffers"]
    d = buf["d"]["element"]
    acc = buf["c"]["element"] if "c" in buf else ("s32" if d == "s32" else "f32")
    return abi["form"].split(".")[0], buf["a_values"]["element"], buf["b"]["element"], acc, d


def abi_arguments(abi: dict, device_buffers: dict, m: int, n: int, k: int) -> tuple:
    """The kernel's arguments in ABI order: u64 parameters from `device_buffers` by name (device
    pointers as ints, or device arrays), u32 parameters M, N, K, the sizes the ABI derives from them
    (`sizes`: the pipelined kernel's Kp), the row strides ldb, ldc, ldd (contiguous B, C and D: K, N, N
    elements) and batch strides (u64; one problem: any value serves)."""
    sizes = {"M": m, "N": n, "K": k, "ldb": k, "ldc": n, "ldd": n, **runtime_abi.derived_sizes(abi, m, n, k)}
    strides = {"batch_stride_a_values": 0, "batch_stride_a_metadata": 0, "batch_stride_b": 0,
               "batch_stride_c": m * n, "batch_stride_d": m * n}
    args = []
    for p in abi["params"]:
        if p["type"] == "bytes":         # the tensor maps by value: their bytes, from device_buffers
            args.append(device_buffers[p["name"]])
        elif p["type"] == "u64" and p["name"] in strides:
            args.append(np.uint64(strides[p["name"]]))
        elif p["type"] == "u64":
            x = device_buffers[p["name"]]
            args.append(np.uint64(x) if isinstance(x, int) else x)
        elif p["type"] == "u32":
            args.append(np.uint32(sizes[p["name"]]))
        else:
            raise ValueError(f"parameter {p['name']} of type {p['type']} is not a sparse kernel's")
    return tuple(args)


def abi_metadata(abi: dict, meta):
    """32-lane metadata `meta` ([..][32] words: sparse.compress's, or sparse_operands' torch tensor) in the
    layout the kernel's ABI a_metadata takes: its `lanes` (compiler/sparse.py, compact metadata: the sparse
    wgmma kernel's for 16- and 32-bit A), else `meta` itself. numpy goes through sparse.compact_metadata
    (which checks the dropped words); torch is one gather on the device (do it once, outside any timing)."""
    lanes = abi["buffers"]["a_metadata"].get("lanes")
    if lanes is None:
        return meta
    if isinstance(meta, np.ndarray):
        shape, a_type = abi_types(abi)[:2]
        return sparse.compact_metadata(meta, a_type, shape)
    return meta[..., lanes].contiguous()


def launch_by_value(cp, fn, grid, block, args, smem: int) -> None:
    """Launch cupy function `fn` with a by-value bytes argument among `args` (the sparse wgmma kernel's
    tensor maps), which cupy's own call does not pack: the driver's cuLaunchKernel with a kernelParams array
    of one pointer per argument's bytes (CUDA Driver API; a clustered kernel's .reqnctapercluster applies).
    cupy's RawKernel holds the driver function as `.kernel` (its `.ptr`, the CUfunction)."""
    import ctypes

    held = []
    for a in args:
        if isinstance(a, bytes):
            held.append((ctypes.c_uint8 * len(a)).from_buffer_copy(a))
        elif isinstance(a, np.uint32):
            held.append(ctypes.c_uint32(int(a)))
        elif isinstance(a, (np.uint64, int)):
            held.append(ctypes.c_uint64(int(a)))
        else:                                        # a device array: its pointer
            held.append(ctypes.c_uint64(int(a.data.ptr)))
    pointers = (ctypes.c_void_p * len(held))(*(ctypes.addressof(h) for h in held))
    cp.cuda.driver.launchKernel(getattr(fn, "kernel", fn).ptr, *grid, *block, smem, cp.cuda.get_current_stream().ptr,
                                ctypes.addressof(pointers), 0)


def launch_from_abi(cp, text: str, abi: dict, p: Problem, multiprocessors: int | None = None) -> np.ndarray:
    """Run the kernel described by `abi` (PTX module `text`) on problem `p`; return D (host, D type).
    Every parameter and the grid come from the ABI; a wgmma kernel gets its tensor maps encoded by the
    driver. A persistent kernel runs `multiprocessors` x max_ctas_per_sm CTAs (default: the device's)."""
    m, n, k = p.mnk
    unmet = abi_unmet(abi, m, n, k)
    if unmet:
        raise ValueError(f"{m} x {n} x {k} breaks {unmet}")
    entry = abi_entry(abi)
    if any(q["name"] == "c" for q in abi["params"]) and p.c is None:
        raise ValueError(f"{entry} computes D = A*B + C: the problem needs a C")
    out_np = np_out(abi_types(abi)[4])
    dev = {"a_values": raw(cp, p.values), "a_metadata": raw(cp, abi_metadata(abi, p.meta)), "b": raw(cp, p.bt)}
    if p.c is not None:
        dev["c"] = cp.asarray(np.ascontiguousarray(p.c))
    dev["d"] = cp.full(m * n * np.dtype(out_np).itemsize, 0xFF, dtype=cp.uint8)      # poison (NaN / -1)
    if any(q["name"] == "tensor_maps" for q in abi["params"]):
        from compiler.ptx.sparse_wgmma_kernel import encode_tensor_maps

        maps = encode_tensor_maps(abi, m, n, k, {name: int(dev[name].data.ptr)
                                                 for name in ("a_values", "a_metadata", "b")})
        dev["tensor_maps"] = maps            # bytes: the kernel takes them by value (launch_by_value)
    if multiprocessors is None:
        multiprocessors = cp.cuda.Device().attributes["MultiProcessorCount"]
    # stream-K's workspace has two partial slots per CTA of the grid, which counts the multiprocessors
    env = runtime_abi.names(abi, m, n, k, multiprocessors)
    for name, spec in abi.get("scratch", {}).items():       # split-K, stream-K: workspace and (zeroed) semaphores
        count = int(np.prod([runtime_abi.eval_expr(x, env) for x in spec["shape"]]))
        dev[name] = (cp.zeros if spec["zeroed"] else cp.empty)(count, dtype=cp.uint32)
    smem = abi.get("dynamic_smem_bytes", 0)
    fn = load_function(cp, text, entry, smem)
    grid = abi_grid(abi, m, n, k, multiprocessors)
    args = abi_arguments(abi, dev, m, n, k)
    if any(isinstance(a, bytes) for a in args):
        launch_by_value(cp, fn, grid, tuple(abi["block"]), args, smem)
    else:
        fn(grid, tuple(abi["block"]), args, shared_mem=smem)
    cp.cuda.runtime.deviceSynchronize()
    return cp.asnumpy(dev["d"]).view(out_np).reshape(m, n)


# --------------------------------------------------------------------------------------------------
# The benchmarks' GPU 2:4 packer (torch), checked against compiler.sparse.compress
# --------------------------------------------------------------------------------------------------

PAIRS = [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]   # the six ordered 2:4 index pairs (9.7.14.6.1)


# torch dtypes the packer builds, by their element names (compiler/sparse.py), with their mma.sp shape
PACKED_TYPES = {"f16": ("float16", "m16n8k32"), "bf16": ("bfloat16", "m16n8k32"),
                "e4m3": ("float8_e4m3fn", "m16n8k64"), "s8": ("int8", "m16n8k64")}


def sparse_operands(torch, m: int, k: int, dtype, seed: int, device: str = "cuda"):
    """(dense 2:4 A, compressed values M x K/2, metadata int32 [M/16][K/shape_k][32]) on `device`, in
    compiler/sparse.py's layouts: kept elements of each chunk in K order; nibble = i0 | i1 << 2;
    metadata word of (tile, k-step, lane) = OR of nibble(row, chunk) << 4n over fragments.metadata_slot.
    `dtype`: torch.float16 / bfloat16 (mma.sp shape m16n8k32), float8_e4m3fn / int8 (m16n8k64, 64
    elements per k-step). Kept values are never zero: floats of magnitude 0.25..1.25 (rounded to the
    type), integers -8..8 (then every s32 sum of K <= 2^18 products is below 2^24: exact in f32 too).
    Built with torch on the device, so that the benchmarks' large operands cost no host time."""
    from compiler.isa.mma_sp.forms import layout_for
    from compiler.isa.mma_sp.fragments import metadata_slot

    name = next(e for e, (t, _) in PACKED_TYPES.items() if getattr(torch, t) == dtype)
    lay = layout_for(name, PACKED_TYPES[name][1])
    g = torch.Generator(device=device).manual_seed(seed)
    pairs = torch.tensor(PAIRS, device=device)
    pick = pairs[torch.randint(0, 6, (m, k // 4), device=device, generator=g)]          # [M, K/4, 2]
    if dtype.is_floating_point:
        mag = torch.rand((m, k // 4, 2), device=device, generator=g) + 0.25
    else:
        mag = torch.randint(1, 9, (m, k // 4, 2), device=device, generator=g).float()
    sign = torch.randint(0, 2, (m, k // 4, 2), device=device, generator=g) * 2 - 1
    vals = (mag * sign).to(dtype)                                                       # never zero
    # scattered in f32 (torch has no scatter for 8-bit floats); every value is exact in `dtype`
    dense = torch.zeros((m, k // 4, 4), device=device, dtype=torch.float32)
    dense.scatter_(-1, pick, vals.float())
    dense = dense.to(dtype)
    nib = (pick[..., 0] | (pick[..., 1] << 2)).to(torch.int64)                          # [M, K/4]
    del pick
    rows = torch.tensor([[metadata_slot(lay, ln, n)[0] for n in range(8)] for ln in range(32)], device=device)
    chunks = torch.tensor([[metadata_slot(lay, ln, n)[1] for n in range(8)] for ln in range(32)], device=device)
    cpk = lay.chunks_per_row                                                            # chunks per k-step
    tiles = nib.view(m // 16, 16, k // lay.k, cpk).permute(0, 2, 1, 3)                 # [MT, KS, 16, cpk]
    words = torch.zeros((m // 16, k // lay.k, 32), device=device, dtype=torch.int64)
    for n in range(8):                     # nibble n of every lane word (one gather each: less memory)
        words |= tiles[:, :, rows[:, n], chunks[:, n]] << (4 * n)
    words = torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)
    return dense.view(m, k), vals.view(m, k // 2).contiguous(), words.contiguous()


def check_packer(torch, device: str = "cuda", types=("f16", "bf16")) -> None:
    """The packer above produces exactly compiler.sparse.compress's bytes (for each element type of
    `types`: f16, bf16, e4m3, s8); AssertionError naming the part that differs otherwise."""
    for name in types:
        dtype, shape = getattr(torch, PACKED_TYPES[name][0]), PACKED_TYPES[name][1]
        dense, vals, meta = sparse_operands(torch, 64, 256, dtype, seed=7, device=device)
        host = dense.float().cpu().numpy()
        ref_vals, ref_meta = sparse.compress(host, name, shape)
        got_vals = vals.contiguous().view(torch.uint8).cpu().numpy()
        assert np.array_equal(got_vals.reshape(-1), np.ascontiguousarray(ref_vals).view(np.uint8).reshape(-1)), \
            f"{name} values"
        assert np.array_equal(meta.cpu().numpy().view(np.uint32), ref_meta), f"{name} metadata"
        if sparse.compact_metadata_exact_for(name, shape):       # the compact layout's torch gather too
            from compiler.isa.mma_sp.fragments import COMPACT_METADATA_LANES

            got = meta[..., list(COMPACT_METADATA_LANES)].contiguous().cpu().numpy().view(np.uint32)
            assert np.array_equal(got, sparse.compress(host, name, shape, compact=True)[1]), f"{name} compact"


def _nvml_handle():
    """NVML's handle of the GPU that CUDA calls device 0 in this process (torch's current device where torch
    is loaded): NVML counts every GPU of the host whatever CUDA_VISIBLE_DEVICES says, so it is found by PCI
    bus id, not by index."""
    import pynvml

    pynvml.nvmlInit()
    torch = sys.modules.get("torch")
    try:
        p = torch.cuda.get_device_properties(torch.cuda.current_device())
        return pynvml.nvmlDeviceGetHandleByPciBusId(f"{p.pci_domain_id:08x}:{p.pci_bus_id:02x}:{p.pci_device_id:02x}.0")
    except Exception:                     # no torch (cupy callers), an older torch without the PCI ids: by index
        return pynvml.nvmlDeviceGetHandleByIndex(0)


def gpu_state() -> str:
    """SM clock, power and temperature of the GPU the timings ran on (NVML), to read next to them; the
    reason where NVML cannot be read."""
    try:
        import pynvml
        h = _nvml_handle()
        return (f"SM {pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)} MHz, "
                f"{pynvml.nvmlDeviceGetPowerUsage(h) / 1000:.0f} W, "
                f"{pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)} C")
    except Exception as e:                                                  # report, keep going
        return f"no NVML: {type(e).__name__}"


def sm_clock_mhz() -> int | None:
    """The SM clock now, MHz, of the GPU the timings run on (NVML); None where NVML cannot be read."""
    try:
        import pynvml
        return int(pynvml.nvmlDeviceGetClockInfo(_nvml_handle(), pynvml.NVML_CLOCK_SM))
    except Exception:                                                       # no NVML: no clock column
        return None


def rel_err(torch, out, ref) -> float:
    """Relative Frobenius error of a kernel's D against an fp32 reference (inf if D holds a non-finite
    value: the benchmarks poison D with NaN, so an unwritten element shows)."""
    o = out.float()
    if not torch.isfinite(o).all():
        return float("inf")
    return float(torch.linalg.vector_norm(o - ref) / torch.linalg.vector_norm(ref))
