"""The launch plan a Kernel makes, without a GPU: compiler/runtime/driver.py's door is given a recording
driver (`FakeDriver`), and a launch on fake device arrays (tests/test_runtime.py's `Fake`) shows what the
real one would be told: the device properties read, the dynamic-shared-memory opt-in, the tensor maps
encoded (cuTensorMapEncodeTiled's arguments and the buffers' addresses), the launch configuration (grid
in clusters, cluster, block, dynamic shared bytes) and the packed parameters. The warp-specialised tcgen05
kernel (issue 18) and the TMA + wgmma.sp kernel go through the same path; a tcgen05 tile on a Hopper
device is refused with a message, and `tilec run` says so (exit 1)."""
from __future__ import annotations

import ctypes
import os
from dataclasses import replace

import numpy as np
import pytest

import compiler
from compiler.runtime import DeviceError, SparseA, TilecRuntimeError, driver, load
from compiler.runtime import abi as rabi
from compiler.runtime.driver import DeviceInfo, LaunchPlan

from test_runtime import Fake
from tests.gpu.harness import ws_batch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EX = os.path.join(ROOT, "examples")
B200 = DeviceInfo(0, "NVIDIA B200 (fake)", (10, 0), 148)
H100 = DeviceInfo(0, "NVIDIA H100 (fake)", (9, 0), 132)


class FakeDriver:
    """compiler.runtime.driver.CudaDriver's methods, recording each call instead of making it."""

    def __init__(self, info: DeviceInfo):
        self.info, self.calls, self.maps, self.launches = info, [], [], []

    def open(self, ordinal):
        self.calls.append(("open", ordinal))
        return self.info

    def load(self, entry, ptx, cubin, arch):
        self.calls.append(("load", entry, arch))
        return f"fn:{entry}", None

    def set_max_dynamic_smem(self, fn, nbytes, device):
        self.calls.append(("smem", fn, nbytes))

    def tensor_map_bytes(self, maps, addresses):
        """The maps, by value (the sparse wgmma and tcgen05 ws kernels): recorded (their encoder arguments
        and addresses); the bytes a stand-in, `map_bytes`."""
        self.maps.append(([dict(m) for m in maps], {m["operand"]: addresses[m["operand"]] for m in maps}))
        return self.map_bytes(len(self.maps) - 1)

    def map_bytes(self, index: int) -> bytes:
        """The stand-in bytes of the `index`-th maps encoded: each map's 128 bytes start with `index` and
        the map's position."""
        return b"".join(bytes([index, i]) + bytes(126) for i in range(len(self.maps[index][0])))

    def last_maps(self) -> bytes:
        """What a launch passes for the last maps encoded (the `tensor_maps` parameter's value)."""
        return self.map_bytes(len(self.maps) - 1)

    def stream(self, stream, library):
        return ("stream", stream, library)

    def config(self, plan: LaunchPlan):
        return plan

    def launch(self, stream, config, fn, args):
        # ctypes scalars by value; a by-value bytes parameter (ctypes array) as its bytes
        self.launches.append((config, fn, [a.value if hasattr(a, "value") else bytes(a) for a in args],
                              [type(a) for a in args]))


@pytest.fixture
def b200():
    fake = FakeDriver(B200)
    previous = driver.use(fake)
    yield fake
    driver.use(previous)


@pytest.fixture
def h100():
    fake = FakeDriver(H100)
    previous = driver.use(fake)
    yield fake
    driver.use(previous)


def ws_args(abi: dict, m: int, n: int, k: int, **extra):
    """Fake arrays for every buffer of a warp-specialised kernel's ABI: A as stored, B as the K x N view
    of an N x K array, D, and the extras (keyword names of Kernel.__call__)."""
    want = rabi.buffers(abi, m, n, k)
    code = {"f16": "<f2", "bf16": "<V2", "f32": "<f4", "u32": "<u4"}

    def fake(name):
        w = want[name]
        return Fake(w.shape, code.get(w.element, "|u1"))

    kw = {kw: fake(name) for kw, name in (("scale_a", "SFA"), ("scale_b", "SFB"), ("metadata", "META"))
          if name in want}
    return fake("A"), fake("B").T, fake("D"), {**kw, **extra}


def ptr(x) -> int:
    return x.__cuda_array_interface__["data"][0]


def test_ws_kernel_launch_plan_on_a_b200(b200):
    """examples/tcgen05_gemm_f16.tile (128 x 128 CTA tile, K block 64): for M = 1024, N = 2048 there are
    8 * 16 = 128 tiles, fewer than the B200's 148 SMs, so the persistent grid is 128 CTAs; for M = N = 4096,
    32 * 32 = 1024 tiles, so 148 (one CTA per SM, ABI grid min(tiles, multiprocessors)). No cluster; 192
    threads (warps 0-3 epilogue, 4 MMA, 5 TMA); the ring's and the D staging's 164964 bytes of dynamic shared
    memory, opted in (above 48 KiB)."""
    kernel = load(os.path.join(EX, "tcgen05_gemm_f16.tile"))
    smem = kernel.abi["dynamic_smem_bytes"]
    assert smem > 48 * 1024
    for (m, n, k), ctas in (((1024, 2048, 512), 128), ((4096, 4096, 256), 148)):
        a, b, d, kw = ws_args(kernel.abi, m, n, k)
        assert kernel(a, b, out=d, **kw) is d
        plan, fn, values, types = b200.launches[-1]
        assert plan == LaunchPlan((ctas, 1, 1), (1, 1, 1), (192, 1, 1), smem)
        maps, addresses = b200.maps[-1]
        assert addresses == {"A": ptr(a), "B": ptr(b), "D": ptr(d)}
        # the driver's encoder gets A [M][K] and B [N][K] f16 (data type 1 = UINT16), rows of K * 2 bytes,
        # boxes of one 128-byte swizzle atom (64 elements) by the tile's 128 rows; D [M][N] f32 (UINT32), rows
        # of N * 4 bytes, boxes of one epilogue warp's 32 rows x 32 columns (128B swizzle); rank 3 (a batch of 1)
        assert [(t["operand"], t["dims"], t["strides"], t["box"], t["data_type"], t["swizzle"]) for t in maps] == \
            [("A", (k, m, 1), (2 * k, 2 * k * m), (64, 128, 1), 1, 3),
             ("B", (k, n, 1), (2 * k, 2 * k * n), (64, 128, 1), 1, 3),
             ("D", (n, m, 1), (4 * n, 4 * n * m), (32, 32, 1), 2, 3)]
        # parameters: tensor_maps (3 x 128 bytes by value), M, N, K, batch (u32); D is reached through its map
        assert values == [b200.last_maps(), m, n, k, 1]
        assert types == [ctypes.c_uint8 * 384] + [ctypes.c_uint32] * 4
    assert b200.calls == [("open", None), ("load", "tcgen05_gemm_f16", "sm_100a"),
                          ("smem", "fn:tcgen05_gemm_f16", smem)]
    # the same buffers again: the maps are not encoded twice
    kernel(a, b, out=d, **kw)
    assert len(b200.maps) == 2




def test_ws_pair_launches_clusters_of_two(b200):
    """A CTA pair (cta_group::2, cluster=2; tile 256 x 128): M = N = 2048 has 8 * 16 = 128 pair tiles, more
    than the 148 / 2 = 74 pairs of SMs, so 74 clusters of (2, 1, 1) = 148 CTAs (ABI grid 2 * min(tiles,
    multiprocessors // 2)); each CTA's TMA loads its 128 rows of A and its 64 rows of B."""
    kernel = load(compiler.compile_source(ws_batch.PAIR))
    a, b, d, kw = ws_args(kernel.abi, 2048, 2048, 128)
    kernel(a, b, out=d, **kw)
    plan = b200.launches[-1][0]
    assert plan.grid == (74, 1, 1) and plan.cluster == (2, 1, 1) and plan.block == (192, 1, 1)
    assert [t["box"] for t in b200.maps[-1][0]] == [(64, 128, 1), (64, 64, 1), (32, 32, 1)]
    a, b, d, kw = ws_args(kernel.abi, 256, 512, 128)          # 4 pair tiles: 4 clusters
    kernel(a, b, out=d, **kw)
    assert b200.launches[-1][0].grid == (4, 1, 1)


def test_ws_clc_launches_a_cta_per_tile(b200):
    """persistent=clc (examples/tcgen05_gemm_f16_clc.tile): the grid is every tile, not the SM count (M = N =
    4096: 32 * 32 = 1024 CTAs on the 148-SM B200, most of them canceled and taken by running CTAs); 224
    threads (the scheduler warp); the same maps and parameters as the static kernel's."""
    kernel = load(os.path.join(EX, "tcgen05_gemm_f16_clc.tile"))
    a, b, d, kw = ws_args(kernel.abi, 4096, 4096, 256)
    kernel(a, b, out=d, **kw)
    plan, _, values, _ = b200.launches[-1]
    assert plan == LaunchPlan((1024, 1, 1), (1, 1, 1), (224, 1, 1), kernel.abi["dynamic_smem_bytes"])
    assert values == [b200.last_maps(), 4096, 4096, 256, 1]


@pytest.mark.parametrize("name, extras", [("tcgen05_gemm_sparse_f16.tile", ["META"]),
                                          ("tcgen05_gemm_mxf8f6f4.tile", ["SFA", "SFB"]),
                                          ("tcgen05_gemm_mxf4nvf4.tile", ["SFA", "SFB"]),
                                          ("tcgen05_gemm_sparse_mxf4nvf4.tile", ["META", "SFA", "SFB"])])
def test_ws_extras_reach_their_parameters(b200, name, extras):
    """The sparse kernel's META and the block-scaled kernels' SFA / SFB are passed after the tensor maps, in
    the ABI's order, and read through tensor maps of their own (after A's and B's); the stored A of the sparse kernel
    is the kept half ([M][K / 2]) and the fp4 operands of mxf4nvf4 are two to a byte ([M][K / 2] bytes):
    the tensor maps' rows say so; the sparse NVFP4 kernel takes all three, its A [M][K / 4] bytes. K = two K
    blocks less 32 (sparse NVFP4: 64, keeping A's rows whole 16 bytes) (a K tail: the images still count 2
    blocks)."""
    kernel = load(os.path.join(EX, name))
    m, n, k = 256, 256, 2 * kernel.abi["tile_k"] - (64 if name == "tcgen05_gemm_sparse_mxf4nvf4.tile" else 32)
    a, b, d, kw = ws_args(kernel.abi, m, n, k)
    kernel(a, b, out=d, **kw)
    values = b200.launches[-1][2]
    by_name = {"META": "metadata", "SFA": "scale_a", "SFB": "scale_b"}
    assert values[:1 + len(extras)] == [b200.last_maps()] + [ptr(kw[by_name[x]]) for x in extras]
    assert values[-4:] == [m, n, k, 1]
    maps, addresses = b200.maps[-1]
    row_bytes = {"tcgen05_gemm_sparse_f16.tile": (k, 2 * k), "tcgen05_gemm_mxf8f6f4.tile": (k, k),
                 "tcgen05_gemm_mxf4nvf4.tile": (k // 2, k // 2),
                 "tcgen05_gemm_sparse_mxf4nvf4.tile": (k // 4, k // 2)}[name]
    assert tuple(t["strides"][0] for t in maps[:2]) == row_bytes
    # then one map per image, rows of 16 bytes: (M / 128 or N / 128) * (K / tile_k) images of image_rows rows
    for t, x in zip(maps[2:], extras):
        image_rows = next(u["image_rows"] for u in kernel.abi["tensor_maps"] if u["operand"] == x)
        assert (t["operand"], t["dims"], t["strides"]) == (x, (16, 2 * 2 * image_rows), (16,))
        assert addresses[x] == ptr(kw[by_name[x]])


def test_ws_argument_errors(b200):
    from compiler.runtime import ArgumentError

    kernel = load(os.path.join(EX, "tcgen05_gemm_f16.tile"))
    a, b, d, kw = ws_args(kernel.abi, 256, 256, 128)
    with pytest.raises(ArgumentError) as e:                     # K rows of 100 f16 = 200 bytes: not a TMA stride
        kernel(Fake((256, 100), "<f2"), Fake((256, 100), "<f2").T, out=d)
    assert e.value.what == "problem size" and "multiple of 16 bytes" in e.value.expected
    sparse = load(os.path.join(EX, "tcgen05_gemm_sparse_f16.tile"))
    with pytest.raises(ArgumentError) as e:                     # the sparse kernel: K whole 2:4 chunks
        sparse(Fake((256, 49), "<f2"), Fake((256, 98), "<f2").T, out=d, metadata=Fake((256, 4), "<u4"))
    assert e.value.what == "problem size" and "K % 4 == 0" in e.value.expected
    with pytest.raises(ArgumentError) as e:                     # B row-major K x N, not Bt.T
        kernel(a, Fake((128, 256), "<f2"), out=d)
    assert (e.value.argument, e.value.what) == ("B", "stride")
    with pytest.raises(ArgumentError) as e:
        kernel(SparseA(a, a, "f16", 256, 128), b, out=d)
    assert (e.value.argument, e.value.what) == ("A", "type")
    with pytest.raises(ArgumentError) as e:
        kernel(a, b, out=d, metadata=Fake((256, 4), "<u4"))
    assert e.value.argument == "metadata"
    with pytest.raises(compiler.runtime.TilecRuntimeError, match="takes a dense A"):
        kernel.pack_a(np.zeros((256, 128), np.float16))
    assert not b200.launches


def test_wgmma_kernel_takes_the_same_path(b200):
    """The TMA + wgmma.sp kernel (examples/sparse_wgmma_f16.tile, clusters of 2 along M) on the same
    fake driver (a B200 runs sm_90a code? no: an `a` target runs on its own capability only, so this
    fakes an H100): the same open / load / opt-in / encode / configure / launch calls."""
    b200.info = H100
    kernel = load(os.path.join(EX, "sparse_wgmma_f16.tile"))
    m, n, k = 512, 512, 256
    a = SparseA(Fake(rabi.buffer_shape(kernel.abi, "a_values", m, k), "<f2"),
                Fake(rabi.buffer_shape(kernel.abi, "a_metadata", m, k), "<u4"), "f16", m, k)
    b, c, d = Fake((n, k), "<f2").T, Fake((m, n), "<f4"), Fake((m, n), "<f4")
    kernel(a, b, c, out=d)
    plan = b200.launches[-1][0]
    assert plan == LaunchPlan(*kernel.launch_dims(m, n, k, 132), programmatic=True) and plan.cluster == (2, 1, 1)
    assert [x[0] for x in b200.calls] == ["open", "load", "smem"]
    assert set(b200.maps[-1][1]) == {"a_values", "b", "a_metadata"}
    # plain launches on request (the kernel waits for the grid before it either way)
    kernel.programmatic = False
    kernel(a, b, c, out=d)
    assert b200.launches[-1][0] == replace(plan, programmatic=False)


def test_programmatic_launch_follows_the_abi(b200):
    """The sparse wgmma kernel's ABI says programmatic_launch (it waits for the grid before it before any
    global access), and its launches ask for programmatic stream serialization by default; a kernel whose
    ABI does not say so (the tcgen05 ws kernel) launches plainly and refuses to be switched."""
    wg = load(os.path.join(EX, "sparse_wgmma_f16_out_f16.tile"))
    ws = load(os.path.join(EX, "tcgen05_gemm_f16.tile"))
    assert wg.abi["programmatic_launch"] is True and wg.programmatic
    assert "programmatic_launch" not in ws.abi and not ws.programmatic
    with pytest.raises(TilecRuntimeError, match="does not wait for the grid before it"):
        ws.programmatic = True
    ws.programmatic = False                    # already so: allowed


def test_driver_asks_cuLaunchKernelEx_for_programmatic_serialization():
    """CudaDriver.launch with a programmatic plan: cuLaunchKernelEx with one attribute,
    CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION allowed, the grid in blocks (clusters x cluster),
    the block, shared bytes and stream; a plain plan of the same kernel: cuLaunchKernel."""
    import ctypes
    from types import SimpleNamespace

    calls = []

    class Obj(SimpleNamespace):
        pass

    cu = SimpleNamespace(
        CUlaunchConfig=Obj, CUlaunchAttribute=lambda: Obj(value=Obj()),
        CUlaunchAttributeID=SimpleNamespace(CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION="PSS"),
        CUresult=SimpleNamespace(CUDA_SUCCESS=0),
        cuLaunchKernelEx=lambda config, fn, params, extra: calls.append(("ex", config, fn)) or (0,),
        cuLaunchKernel=lambda fn, *rest: calls.append(("plain", rest[:8], fn)) or (0,))
    drv = driver.CudaDriver.__new__(driver.CudaDriver)
    drv._cu = cu
    fn, stream = SimpleNamespace(handle="fn"), SimpleNamespace(handle=7)
    args = [ctypes.c_uint32(3), (ctypes.c_uint8 * 4)()]
    plan = LaunchPlan((66, 1, 1), (2, 1, 1), (384, 1, 1), 200000, programmatic=True)
    drv.launch(stream, (None, plan), fn, args)
    drv.launch(stream, (None, replace(plan, programmatic=False)), fn, args)
    (kind, config, handle), plain = calls
    assert kind == "ex" and handle == "fn" and plain[0] == "plain"
    assert (config.gridDimX, config.gridDimY, config.gridDimZ) == (132, 1, 1)
    assert (config.blockDimX, config.sharedMemBytes, config.hStream, config.numAttrs) == (384, 200000, 7, 1)
    (attr,) = config.attrs
    assert attr.id == "PSS" and attr.value.programmaticStreamSerializationAllowed == 1
    assert plain[1] == (132, 1, 1, 384, 1, 1, 200000, 7)


def test_tcgen05_tile_on_a_hopper_device_is_refused(h100):
    kernel = load(os.path.join(EX, "tcgen05_gemm_f16.tile"))
    with pytest.raises(DeviceError, match=r"compiled for sm_100a; this GPU \(NVIDIA H100 \(fake\), sm_90\) cannot "
                                          r"run it.*--emulate"):
        kernel.load()
    assert [c[0] for c in h100.calls] == ["open"]


def test_tilec_run_of_a_tcgen05_tile_on_hopper_says_it_cannot(h100, capsys):
    from compiler.cli import main

    assert main(["run", "--check", os.path.join(EX, "tcgen05_gemm_f16.tile")]) == 1
    err = capsys.readouterr().err
    assert "tilec: error: tcgen05_gemm_f16: tcgen05_gemm_f16 is compiled for sm_100a" in err
    assert "--emulate" in err and "Traceback" not in err and "internal error" not in err


@pytest.mark.parametrize("name", ["tcgen05_gemm_f16.tile", "tcgen05_gemm_sparse_f16.tile",
                                  "tcgen05_gemm_mxf8f6f4.tile", "tcgen05_gemm_mxf4nvf4.tile",
                                  "tcgen05_gemm_sparse_mxf4nvf4.tile", "tcgen05_gemm_ws_f16.tile",
                                  "tcgen05_gemm_a_tmem_f16.tile"])
def test_tilec_run_host_problem_fills_every_buffer(name):
    """`tilec run --check` uploads the emulator's host problem (compiler/emulator/tcgen05.py ws_host) as the
    ABI types each buffer: every buffer's bytes are the host image's (element bits x shape), so the upload
    reshapes without padding or truncation."""
    from compiler.emulator.tcgen05 import ws_host
    from compiler.isa.types import TYPES
    from compiler.run import default_shape

    result = compiler.compile_file(os.path.join(EX, name))
    tile = next(iter(result.tiles))
    abi = result.to_json()["tiles"][tile]["kernel"]
    m, n, k = default_shape(abi, result.tiles[tile].payload.total_k)
    assert not rabi.unmet(abi, m, n, k)
    host = ws_host(result, tile, abi, m, n, k, seed=1)
    want = rabi.buffers(abi, m, n, k)
    for buf in want.values():
        if buf.name in host.args and buf.name != "D":
            bits = 8 if buf.packed else 32 if buf.element == "u32" else TYPES[buf.element].bits
            assert host.args[buf.name].nbytes * 8 == bits * int(np.prod(buf.shape)), buf
    assert host.ref.shape == (m, n)


@pytest.mark.parametrize("name", ["tcgen05_gemm_sparse_f16.tile", "tcgen05_gemm_mxf8f6f4.tile",
                                  "tcgen05_gemm_mxf4nvf4.tile", "tcgen05_gemm_sparse_mxf4nvf4.tile"])
def test_host_image_is_the_emulators(name):
    """Kernel.host_image packs META / SFA / SFB from the ABI alone (its `tmem_images`) into the buffers the
    kernel reads, byte for byte what the emulator's host problem gives the kernel (checked there against
    numpy), from the natural layouts of compiler/emulator/tcgen05.py host_problem. K = one K block and one
    K unit more (the ABI's `requires`): a partial last K block, padded past K (tcgen05_ws_kernel.tmem_image);
    the natural META words of that K hold chunks past it (nibble 0: host_problem), so META needs `k`."""
    from compiler.emulator.tcgen05 import host_problem, ws_host

    result = compiler.compile_file(os.path.join(EX, name))
    tile = next(iter(result.tiles))
    kernel = load(result)
    abi = kernel.abi
    m, n, k = 256, 256, abi["tile_k"] + rabi.size_units(abi)["K"]
    natural = host_problem(result, tile, m_tiles=2, n_tiles=2, seed=4, k=k).args
    packed = ws_host(result, tile, abi, m, n, k, seed=4).args
    for buf in abi["tmem_images"]:
        image = kernel.host_image(buf, natural[buf], k)
        assert image.shape == rabi.buffers(abi, m, n, k)[buf].shape and image.shape[1] == 2
        assert np.array_equal(image.reshape(-1), packed[buf]), buf
        if buf != "META":                # scale factors: one column per vector, K is what they cover
            assert np.array_equal(kernel.host_image(buf, natural[buf]), image)
    # a batch (3-D natural layouts): each problem's image in turn, as the emulator's batched host problem lays
    # them out (ws_host draws problem i with seed + 7919 i)
    batch = [natural] + [host_problem(result, tile, m_tiles=2, n_tiles=2, seed=4 + 7919, k=k).args]
    packed = ws_host(result, tile, abi, m, n, k, seed=4, batch=2).args
    for buf in abi["tmem_images"]:
        image = kernel.host_image(buf, np.stack([np.asarray(p[buf]) for p in batch]), k)
        assert image.shape == (2,) + rabi.buffers(abi, m, n, k)[buf].shape
        assert np.array_equal(image.reshape(-1), packed[buf]), buf
    first = next(iter(abi["tmem_images"]))
    with pytest.raises(compiler.runtime.ArgumentError):      # too few columns for K
        kernel.host_image(first, natural[first][:, :-1], k)
    with pytest.raises(compiler.runtime.ArgumentError):      # K off the unit
        kernel.host_image(first, natural[first], k - 1)
    with pytest.raises(compiler.runtime.TilecRuntimeError, match="no D image"):
        kernel.host_image("D", natural["D"])


# ------------------------------------------------------------------ a batch through Kernel.__call__ (issue 18)

_ITEMSIZE = {"<f2": 2, "<V2": 2, "<f4": 4, "<u4": 4, "|u1": 1}


def ws_batch_args(abi: dict, m: int, n: int, k: int, batch: int, gap: int = 16):
    """Fake batch-first arrays for a warp-specialised kernel: A [batch][M][K], B the K x N views of
    [batch][N][K], D [batch][M][N], each batch `gap` bytes after the previous one's end (strided batches,
    which the tensor maps' third stride carries), and the META / SFA / SFB images contiguous
    [batch][row tiles][K blocks][bytes or words] (one rank-2 map reads them all). Returns (A, B, D, extras,
    the batch strides in bytes of A, B, D)."""
    want = rabi.buffers(abi, m, n, k)
    code = {"f16": "<f2", "bf16": "<V2", "f32": "<f4", "u32": "<u4"}

    def batched(name, transposed=False):
        w = want[name]
        typestr = code.get(w.element, "|u1")
        size = _ITEMSIZE[typestr]
        rows, cols = w.shape
        between = rows * cols * size + gap
        if transposed:                    # Bt.T of each batch: K x N, K contiguous
            return Fake((batch, cols, rows), typestr, (between, size, cols * size)), between
        return Fake((batch, rows, cols), typestr, (between, cols * size, size)), between

    (a, sa), (b, sb), (d, sd) = batched("A"), batched("B", True), batched("D")
    images = {}
    for kw, name in (("scale_a", "SFA"), ("scale_b", "SFB"), ("metadata", "META")):
        if name in want:
            images[kw] = Fake((batch,) + want[name].shape, code.get(want[name].element, "|u1"))
    return a, b, d, images, {"A": sa, "B": sb, "D": sd}


# every kind of ws kernel but the fused epilogue reading C (its launch: test_ws_batch_c_is_per_problem_or_shared)
WS_KERNELS = [key for key in ws_batch.KINDS if key != "epilogue C"]


@pytest.fixture(scope="module")
def ws_kernels():
    return {key: load(ws_batch.compile_kind(key)[0]) for key in WS_KERNELS}


@pytest.mark.parametrize("key", list(WS_KERNELS))
def test_ws_batch_launch(b200, ws_kernels, key):
    """A batch of 3 problems of 200 x 136 x (2 K blocks) (partial tiles in M and N) through Kernel.__call__ on
    every kind of warp-specialised kernel: A, B and D batch-first with batches 16 bytes apart beyond their
    size, so the tensor maps' third stride is not rows x row bytes. The maps the driver encodes are what the
    emulator reads through (tcgen05_ws_kernel.tensor_map_args: compiler/emulator/tcgen05.py run_ws_problem
    gives its Machine those arguments): A [M][K], B [N][K], D [M][N] as rank 3 (row, rows, batch) with the
    batch strides of the arrays; each image as rank 2, its rows every problem's in turn (3 x (row tiles x
    K blocks x image_rows)). The parameters: the maps, the images' addresses, M, N, K and the batch (3),
    as the emulator's Machine takes them (the ABI's params in order); the grid counts the batch's tiles."""
    from compiler.ptx.tcgen05_ws_kernel import IMAGE_ROW_BYTES

    kernel = ws_kernels[key]
    abi = kernel.abi
    m, n, k, batch = 200 if key != "pair" else 300, 136, 2 * abi["tile_k"], 3
    a, b, d, images, strides = ws_batch_args(abi, m, n, k, batch)
    assert kernel(a, b, out=d, **images) is d
    plan, _, values, types = b200.launches[-1]
    assert plan == LaunchPlan(*kernel.launch_dims(m, n, k, B200.multiprocessors, batch))
    tiles = -(-m // abi["tile_m"]) * -(-n // abi["tile_n"]) * batch
    ctas = tiles if abi.get("persistent") == "clc" else min(tiles, B200.multiprocessors // (2 if key == "pair" else 1))
    assert plan.grid == (ctas, 1, 1)
    maps, addresses = b200.maps[-1]
    by_operand = {t["operand"]: t for t in maps}
    for name, arr in (("A", a), ("B", b), ("D", d)):
        t = by_operand[name]
        assert addresses[name] == ptr(arr)
        assert t["dims"][2] == batch and t["strides"][1] == strides[name], (name, t)
        rows = n if name == "B" else m
        assert t["dims"][1] == rows
    # B's map rows hold its stored K bytes (fp4 two a byte), the same row stride as the unbatched launch
    for name, t in by_operand.items():
        if "image_rows" in next(u for u in abi["tensor_maps"] if u["operand"] == name):
            spec = abi["tmem_images"][name]
            extent = n if name == "SFB" else m
            row_tiles = -(-extent // spec["tile_rows"]) * spec["tile_rows"] // spec["row_tile"]
            image_rows = next(u["image_rows"] for u in abi["tensor_maps"] if u["operand"] == name)
            assert t["dims"] == (IMAGE_ROW_BYTES, batch * row_tiles * (k // abi["tile_k"]) * image_rows)
    kws = {"META": "metadata", "SFA": "scale_a", "SFB": "scale_b"}
    extras = [ptr(images[kws[p["name"]]]) for p in abi["params"] if p["name"] in kws]
    assert values == [b200.last_maps()] + extras + [m, n, k, batch]
    # the unbatched launch of the same buffers' first problems: rank 3 with a batch of 1
    first = {kw: Fake(v.__cuda_array_interface__["shape"][1:], v.__cuda_array_interface__["typestr"])
             for kw, v in images.items()}
    want = rabi.buffers(abi, m, n, k)
    one_b = Fake((n, want["B"].shape[1]), a.__cuda_array_interface__["typestr"] if key != "mxf4nvf4" else "|u1").T
    kernel(Fake(want["A"].shape, a.__cuda_array_interface__["typestr"]), one_b,
           out=Fake((m, n), d.__cuda_array_interface__["typestr"]), **first)
    single = {t["operand"]: t for t in b200.maps[-1][0]}
    for name in ("A", "B", "D"):
        assert single[name]["dims"] == by_operand[name]["dims"][:2] + (1,)
        assert single[name]["strides"][0] == by_operand[name]["strides"][0]
    assert b200.launches[-1][2][-1] == 1


def test_ws_batch_argument_errors(b200, ws_kernels):
    """Wrong batch counts and strides are ArgumentErrors naming the argument, never a launch."""
    from compiler.runtime import ArgumentError

    dense, sparse = ws_kernels["dense"], ws_kernels["sparse"]
    m, n, k, batch = 256, 128, 128, 2
    a, b, d, _, s = ws_batch_args(dense.abi, m, n, k, batch)

    def err(kernel, *args, **kw):
        with pytest.raises(ArgumentError) as e:
            kernel(*args, **kw)
        return e.value

    e = err(dense, a, Fake((n, k), "<f2").T, out=d)                          # B without the batch
    assert (e.argument, e.what) == ("B", "shape") and "batch of 2" in e.expected
    e = err(dense, a, b, out=Fake((m, n), "<f4"))                           # D without the batch
    assert (e.argument, e.what) == ("out", "shape")
    e = err(dense, a, b, out=Fake((3, m, n), "<f4"))                        # three D for two problems
    assert (e.argument, e.what) == ("out", "shape") and "batch of 2" in e.expected
    odd = Fake((batch, m, k), "<f2", (m * k * 2 + 8, k * 2, 2))             # A's batches 8 bytes apart beyond
    e = err(dense, odd, b, out=d)
    assert (e.argument, e.what) == ("A", "stride") and "multiple of 16" in e.expected
    e = err(dense, a, b, out=Fake((batch, m, n), "<f4", (m * n * 4 - 16, n * 4, 4)))     # D's batches overlap
    assert (e.argument, e.what) == ("out", "stride") and "do not overlap" in e.expected
    e = err(dense, a, b, out=Fake((batch, m, n), "<f4", (m * n * 4 + 4, n * 4, 4)))      # not a TMA stride
    assert (e.argument, e.what) == ("out", "stride")
    e = err(dense, Fake((batch, m, k), "<f2", (0, k * 2, 2)), b, out=d)     # stride 0: not a TMA stride
    assert (e.argument, e.what) == ("A", "stride")
    e = err(dense, Fake((batch, 1, m, k), "<f2"), b, out=d)                # 4-D A
    assert (e.argument, e.what) == ("A", "shape")
    e = err(dense, Fake((70000, 128, k), "<f2"), Fake((70000, n, k), "<f2", (n * k * 2, 2, k * 2)),
            out=Fake((70000, 128, n), "<f4"))                             # more problems than the grid takes
    assert (e.argument, e.what) == ("A", "batch") and "batch <= 65535" in e.expected
    # META of the sparse kernel: one image per problem, the problems' images one after another
    a, b, d, images, _ = ws_batch_args(sparse.abi, m, n, k, batch)
    meta = images["metadata"].__cuda_array_interface__["shape"]
    e = err(sparse, a, b, out=d, metadata=Fake(meta[1:], "<u4"))            # one problem's images
    assert (e.argument, e.what) == ("metadata", "shape") and "batch of 2" in e.expected
    per = int(np.prod(meta[1:])) * 4
    gapped = Fake(meta, "<u4", (per + 16,) + tuple(4 * int(np.prod(meta[i + 1:])) for i in range(1, 3)) + (4,))
    e = err(sparse, a, b, out=d, metadata=gapped)
    assert (e.argument, e.what) == ("metadata", "stride") and f"{per} bytes" in e.expected
    assert not b200.launches


def test_ws_batch_c_is_per_problem_or_shared(b200):
    """C of a fused epilogue (tests/lit/tcgen05_ws/epilogue_tma_store.tile: beta * C + row bias, silu, bf16 D):
    a batch of C (batch_stride_c = M * N elements, or the array's own batch stride) or one M x N C for every
    problem (batch_stride_c = 0: the kernel adds z * batch_stride_c to C's row address); the bias is one for
    all; beta at launch."""
    from compiler.runtime import ArgumentError

    kernel = load(os.path.join(ROOT, "tests", "lit", "tcgen05_ws", "epilogue_tma_store.tile"))
    assert [p["name"] for p in kernel.abi["params"]][-2:] == ["batch", "batch_stride_c"]
    m, n, k, batch = 192, 160, 128, 2
    a, b, d, _, _ = ws_batch_args(kernel.abi, m, n, k, batch)
    bias = Fake((m,), "<f4")
    for c, stride in ((Fake((batch, m, n), "<f4"), m * n), (Fake((m, n), "<f4"), 0),
                      (Fake((batch, m, n), "<f4", (m * n * 4 + 64, n * 4, 4)), m * n + 16)):
        kernel(a, b, c, out=d, bias=bias, beta=0.5)
        values = b200.launches[-1][2]
        assert values == [b200.last_maps(), ptr(c), ptr(bias), pytest.approx(0.5), m, n, k, batch, stride]
    with pytest.raises(ArgumentError) as e:                  # three C for two problems
        kernel(a, b, Fake((3, m, n), "<f4"), out=d, bias=bias, beta=0.5)
    assert (e.value.argument, e.value.what) == ("C", "shape")
