"""compiler.runtime without a GPU: launch geometry from the ABI, argument checks on fake device arrays
(objects exposing __cuda_array_interface__), the compiled-kernel cache, and that the CLI never imports it."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from compiler.runtime import ArgumentError, DeviceError, SparseA, load, target_runs_on
from compiler.runtime import abi as rabi
from compiler.runtime import cache

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EX = os.path.join(ROOT, "examples")

_SIZES = {"f2": 2, "f4": 4, "i4": 4, "u4": 4, "i1": 1, "u1": 1, "V2": 2}


class Fake:
    """A device array as __cuda_array_interface__ (version 3) describes it; nothing is allocated."""
    _next = 1 << 32

    def __init__(self, shape, typestr="<f2", strides=None, ptr=None, readonly=False):
        if ptr is None:              # fake allocations apart by their size (rounded up to 16 MiB): no overlap
            ptr = Fake._next
            nbytes = _SIZES.get(typestr[1:], 8)
            for s in shape:
                nbytes *= s
            Fake._next += -(-max(nbytes, 1) // (1 << 24)) * (1 << 24)
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr, "data": (ptr, readonly),
                                         "strides": strides, "version": 3}

    @property
    def T(self):
        cai = self.__cuda_array_interface__
        size = _SIZES[cai["typestr"][1:]]
        shape = cai["shape"]
        strides = cai["strides"] or (shape[1] * size, size)
        return Fake(shape[::-1], cai["typestr"], tuple(strides[::-1]), cai["data"][0])


class FakeCupy(Fake):
    """A fake whose library is cupy, so the runtime reads its device (x.device.id)."""
    __module__ = "cupy._fake"

    def __init__(self, *a, device=0, **kw):
        super().__init__(*a, **kw)
        self.device = type("Dev", (), {"id": device})()


def sparse_args(m=256, n=256, k=128, cls=Fake):
    """Valid fake operands of examples/sparse_gemm_f16.tile (f16 A/B, f32 C/D; ABI `buffers`)."""
    a = SparseA(cls((m, k // 2), "<f2"), cls((m // 16, k // 32, 32), "<u4"), "f16", m, k)
    return a, cls((n, k), "<f2").T, cls((m, n), "<f4"), cls((m, n), "<f4")


@pytest.fixture(scope="module")
def gemm():
    return load(os.path.join(EX, "sparse_gemm_f16.tile"))


# ---------------------------------------------------------------------------------------- geometry

def test_launch_dims_follow_each_kernels_abi():
    # sparse_gemm_f16: grid ['tiles', 1, 1], tiles = (M / 128) * (N / 256); 256 threads; 129024 bytes
    k = load(os.path.join(EX, "sparse_gemm_f16.tile"))
    assert k.launch_dims(512, 512, 128) == ((4 * 2, 1, 1), (1, 1, 1), (256, 1, 1), 129024)
    # sparse_wgmma_f16: 2-CTA clusters along M: (512/128)*(512/256) = 8 CTAs = 4 clusters of (2, 1, 1)
    k = load(os.path.join(EX, "sparse_wgmma_f16.tile"))
    # dynamic smem: 1024 + 4 slots of 41984 B (A 8192 + B 32768 + compact metadata 1024) + 8 mbarriers x 8 B
    assert k.launch_dims(512, 512, 128) == ((4, 1, 1), (2, 1, 1), (384, 1, 1), 169024)
    # sparse_f16 (one mma.sp tile per warp): grid ['N / tile_n', 'M / tile_m', 1] = (64/8, 32/16)
    k = load(os.path.join(EX, "sparse_f16.tile"))
    assert k.launch_dims(32, 64, 32) == ((8, 2, 1), (1, 1, 1), (32, 1, 1), 0)
    # tcgen05_2cta: grid ['2 * n_total / 128', 'm_total / 256', '1'] = (4, 2, 1) CTAs; cluster (2, 1, 1);
    # static shared memory only (shared_bytes), so no dynamic bytes
    k = load(os.path.join(EX, "tcgen05_2cta.tile"))
    assert k.launch_dims(512, 256, 128) == ((2, 2, 1), (2, 1, 1), (128, 1, 1), 0)


def test_unmet_requirements_are_named():
    k = load(os.path.join(EX, "sparse_gemm_f16.tile"))                # any M, N, K >= 1 (issue 17)
    assert k.unmet(128, 256, 64) == [] and k.unmet(100, 255, 63) == []
    k = load(os.path.join(EX, "sparse_gemm_nvf4.tile"))               # block-scaled: whole 128x128x256 tiles
    assert k.unmet(128, 256, 256) == []
    assert k.unmet(100, 256, 256) == ["M % 128 == 0"]
    k = load(os.path.join(EX, "gemm_bf16.tile"))         # tcgen05: K is the tile's own k = 64
    assert k.unmet(128, 256, 64) == []
    assert k.unmet(128, 256, 128) == ["K == 64"]
    with pytest.raises(ValueError, match="N % 256 == 0"):
        rabi.grid_blocks(k.abi, 128, 128, 64)


def test_tcgen05_buffers_from_layouts():
    k = load(os.path.join(EX, "tcgen05_block_scaled.tile"))
    b = rabi.buffers(k.abi, 256, 128, 256)
    # '[m_total][256] e2m1 packed': two 4-bit elements per byte -> 128 bytes a row
    assert b["A"].shape == (256, 128) and b["A"].element == "e2m1"
    assert b["SFA"].shape == (256, 16) and b["SFB"].shape == (128, 16)
    assert b["D"].written and b["D"].shape == (256, 128)


def test_abi_expressions_refuse_anything_else():
    with pytest.raises(rabi.AbiError):
        rabi.eval_expr("__import__('os')", {})
    with pytest.raises(ValueError, match="not whole"):
        rabi.eval_expr("M / 128", {"M": 100})
    with pytest.raises(rabi.AbiError):
        rabi.eval_expr("M > 1", {"M": 100})
    assert rabi.eval_expr("M // 16 <= 65535", {"M": 16 * 65536 - 1}) and not rabi.eval_expr("M < 2", {"M": 2})


def test_target_runs_on():
    assert target_runs_on("sm_80", 90) and not target_runs_on("sm_90a", 100)
    assert target_runs_on("sm_90a", 90) and not target_runs_on("sm_100a", 90)
    assert target_runs_on("sm_100f", 103) and not target_runs_on("sm_100f", 120)


# ---------------------------------------------------------------------------------------- arguments

def _err(kernel, *args, **kw) -> ArgumentError:
    with pytest.raises(ArgumentError) as e:
        kernel(*args, **kw)
    return e.value


def test_valid_arguments_reach_the_device(gemm):
    # every check passes; with no GPU here the load is the error, and it points at the emulator
    a, b, c, d = sparse_args()
    with pytest.raises(DeviceError, match="emulate|cuda-core"):
        gemm(a, b, c, out=d)


def test_wrong_dtype(gemm):
    a, b, c, d = sparse_args()
    e = _err(gemm, a, Fake((256, 128), "<f4").T, c, out=d)
    assert (e.argument, e.what, e.expected, e.got) == ("B", "dtype", "f16 elements", "f32")
    e = _err(gemm, a, b, c, out=Fake((256, 256), "<f2"))
    assert (e.argument, e.what) == ("out", "dtype") and "f32" in e.expected


def test_wrong_shape(gemm):
    a, b, c, d = sparse_args()
    e = _err(gemm, a, b, c, out=Fake((256, 128), "<f4"))
    assert (e.argument, e.what, e.expected, e.got) == ("out", "shape", "(256, 256)", "(256, 128)")
    e = _err(gemm, a, Fake((256, 64), "<f2").T, c, out=d)       # K of B != K of A
    assert e.argument == "B" and "K = 128" in e.expected


def test_wrong_problem_size(gemm):
    a, b, c, d = sparse_args(k=0)
    e = _err(gemm, a, b, c, out=d)
    assert e.what == "problem size" and e.got == "256 x 256 x 0"
    # M = 192 is a partial tile: the packed A must hold whole 128-row tiles (pack_a pads it)
    a, b, c, d = sparse_args(m=192)
    e = _err(gemm, a, b, c, out=d)
    assert (e.argument, e.what, e.expected) == ("A.values", "shape", "(256, 64)")


def test_sizes_beyond_the_stated_limits_are_refused(gemm):
    """Issue 14: every kernel states the sizes it accepts (ABI `limits`) and the launch refuses the rest,
    instead of passing a size that does not fit its u32 parameter (ctypes would keep the low 32 bits) or a
    grid CUDA cannot launch."""
    # sparse_gemm_f16: K = 2^31 is a multiple of cta K = 64, but not below 2^31
    a, b, c, d = sparse_args(k=1 << 31)
    e = _err(gemm, a, b, c, out=d)
    assert e.what == "problem size" and e.expected == "M x N x K meeting K < 2147483648"
    # M = 2^32 + 128 would reach the kernel as M = 128
    a, b, c, d = sparse_args(m=(1 << 32) + 128)
    assert "M < 2147483648" in _err(gemm, a, b, c, out=d).expected
    # its 1-D grid: (M / 128) * (N / 256) tiles = 2^16 * 2^16 = 2^32 > 2^31 - 1 (CUDA's gridDim.x limit)
    a, b, c, d = sparse_args(m=128 << 16, n=256 << 16)
    assert _err(gemm, a, b, c, out=d).expected == "M x N x K meeting tiles <= 2147483647"
    # tcgen05 (gemm_bf16, M = 128): grid y = m_total / 128 = 65536 > 65535 (gridDim.y limit)
    k = load(os.path.join(EX, "gemm_bf16.tile"))
    m = 128 * 65536
    e = _err(k, Fake((m, 64), "<V2"), Fake((256, 64), "<V2").T, out=Fake((m, 256), "<f4"))
    assert e.what == "problem size" and e.expected == "M x N x K meeting m_total // 128 <= 65535"
    assert k.unmet(128 * 65535, 256, 64) == []
    # the one-instruction mma.sp kernel (tile 16 x 8): grid y = M / 16
    k = load(os.path.join(EX, "sparse_f16.tile"))
    assert k.unmet(16 * 65535, 8, 32) == [] and k.unmet(16 * 65536, 8, 32) == ["M // tile_m <= 65535"]
    assert k.unmet(16, 8, 1 << 31) == ["K < 2147483648"]


def test_limits_bound_every_size_of_every_example():
    """Each example's kernel states an upper bound for each size it takes at launch (rabi.largest finds it
    by bisection over the ABI's limits) and a grid within CUDA's limits."""
    for name in sorted(os.listdir(EX)):
        if not name.endswith(".tile"):
            continue
        k = load(os.path.join(EX, name))
        for size in ("M", "N") + (() if rabi.fixed_k(k.abi) else ("K",)):
            top = rabi.largest(k.abi, size)
            assert top < 1 << 31, (name, size, top)
            units = rabi.size_units(k.abi)
            bigger = {**units, size: top + units[size]}
            assert k.unmet(bigger["M"], bigger["N"], bigger["K"]), (name, size)
        gx, gy, gz = rabi.grid_blocks(k.abi, rabi.largest(k.abi, "M"), rabi.size_units(k.abi)["N"],
                                      rabi.size_units(k.abi)["K"] if not rabi.fixed_k(k.abi) else k.abi["k"], 132)
        assert gx <= (1 << 31) - 1 and gy <= 65535 and gz <= 65535, name


def test_wrong_stride(gemm):
    a, b, c, d = sparse_args()
    e = _err(gemm, a, Fake((128, 256), "<f2"), c, out=d)          # row-major K x N: not B stored transposed
    assert (e.argument, e.what) == ("B", "stride") and "Bt.T" in e.expected
    e = _err(gemm, a, b, Fake((256, 256), "<f4", strides=(1032, 4)), out=d)    # rows not 16-byte multiples apart
    assert (e.argument, e.what) == ("C", "stride") and e.got == "(1032, 4) bytes"


def test_wrong_alignment(gemm):
    a, b, c, d = sparse_args()
    e = _err(gemm, a, b, c, out=Fake((256, 256), "<f4", ptr=(1 << 33) + 4))
    assert (e.argument, e.what, e.got) == ("out", "alignment", hex((1 << 33) + 4))


def test_wrong_device(gemm):
    a, b, c, d = sparse_args(cls=FakeCupy)
    d.device.id = 1
    e = _err(gemm, a, b, c, out=d)
    assert (e.argument, e.what, e.expected, e.got) == ("out", "device", "cuda:0 (where A is)", "cuda:1")


def test_host_arrays_and_unpacked_a_are_refused(gemm):
    np = pytest.importorskip("numpy")
    a, b, c, d = sparse_args()
    e = _err(gemm, a, np.zeros((128, 256), np.float16), c, out=d)
    assert (e.argument, e.what) == ("B", "device") and "host memory" in e.got
    e = _err(gemm, Fake((256, 128)), b, c, out=d)
    assert (e.argument, e.what) == ("A", "type") and "pack_a" in e.expected


def test_read_only_output(gemm):
    a, b, c, _ = sparse_args()
    e = _err(gemm, a, b, c, out=Fake((256, 256), "<f4", readonly=True))
    assert (e.argument, e.what) == ("out", "writability")


def test_sparsity_pattern_is_checked_by_pack_a(gemm):
    np = pytest.importorskip("numpy")
    dense = np.ones((128, 64), np.float16)                   # 4 non-zeros in every 4-element chunk
    with pytest.raises(ArgumentError) as e:
        gemm.pack_a(dense)
    assert e.value.what == "sparsity pattern" and "row 0, chunk 0" in e.value.got


def test_tcgen05_extras_and_fixed_k():
    k = load(os.path.join(EX, "tcgen05_block_scaled.tile"))
    a, b, d = Fake((128, 128), "|u1"), Fake((128, 128), "|u1").T, Fake((128, 128), "<f4")
    e = _err(k, a, b, out=d)
    assert (e.argument, e.what) == ("scale_a", "value")
    e = _err(k, a, Fake((128, 256), "|u1").T, out=d)
    assert e.argument == "B" and "K = 128 bytes" in e.expected   # K = 256 e2m1 elements, packed
    e = _err(k, a, b, out=d, scale_a=Fake((128, 16), "|u1"), scale_b=Fake((128, 16), "|u1"),
             metadata=Fake((128, 8), "<u4"))
    assert (e.argument, e.what) == ("metadata", "value")


# ---------------------------------------------------------------------------------------- cache

def test_cache_entries_round_trip_and_corrupt_ones_are_rebuilt(tmp_path, monkeypatch):
    from compiler.ptxas import find_ptxas

    exe = find_ptxas()
    if exe is None:
        pytest.skip("no ptxas")
    monkeypatch.setenv("TILEC_CACHE_DIR", str(tmp_path))
    from compiler.driver import compile_file

    ptx = compile_file(os.path.join(EX, "sparse_f16.tile")).ptx
    first, hit = cache.cubin(ptx, "sm_80", 13000, exe)
    assert not hit and first[:4] == b"\x7fELF"
    again, hit = cache.cubin(ptx, "sm_80", 13000, exe)
    assert hit and again == first
    (entry,) = (tmp_path / "kernels").iterdir()
    data = entry.read_bytes()
    entry.write_bytes(data[:-100])                           # truncated
    rebuilt, hit = cache.cubin(ptx, "sm_80", 13000, exe)
    assert not hit and rebuilt == first
    entry.write_bytes(b"garbage")
    assert cache.read(str(entry)) is None and not entry.exists()
    # every part of the key matters
    base = cache.key(ptx, "sm_80", "v1", (), 13000)
    assert len({base, cache.key(ptx + " ", "sm_80", "v1", (), 13000), cache.key(ptx, "sm_86", "v1", (), 13000),
                cache.key(ptx, "sm_80", "v2", (), 13000), cache.key(ptx, "sm_80", "v1", ("-O0",), 13000),
                cache.key(ptx, "sm_80", "v1", (), 13010)}) == 6


def test_cache_lives_beside_the_parser_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEC_CACHE_DIR", str(tmp_path))
    assert cache.cache_dir() == os.path.join(str(tmp_path), "kernels")


def test_cli_start_up_does_not_import_the_runtime():
    code = ("import sys; from compiler.cli import main; "
            f"rc = main(['compile', {os.path.join(EX, 'gemm_bf16.tile')!r}, '-o', '/dev/null']); "
            "assert rc == 0; bad = [m for m in sys.modules if m.startswith(('compiler.runtime', 'cuda'))]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_launch_overhead_benchmark_starts_without_a_gpu():
    # cupy / torch / cuda.core are imported only once it runs
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "launch_overhead.py"), "--help"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0 and "--launches" in proc.stdout, proc.stderr


def test_a_packed_operand_is_rechecked_for_another_kernel_or_size(gemm):
    # the runtime remembers that a SparseA passed its checks for one kernel and problem size only
    a, b, c, d = sparse_args()
    with pytest.raises(DeviceError):
        gemm(a, b, c, out=d)                 # checks pass (the load fails: no GPU here)
    bf16 = load(os.path.join(EX, "sparse_gemm_bf16.tile"))
    e = _err(bf16, a, Fake((256, 128), "<V2").T, c, out=d)
    assert (e.argument, e.what) == ("A", "dtype")


def test_block_scaled_mma_sp_takes_scale_buffers(tmp_path):
    """Block-scaled mma.sp kernels take sfa / sfb (u8 [M][K/blk], [N][K/blk]; PTX 9.7.14.3) through the
    scale_a / scale_b keywords; mxf8f6f4 1X: blk = 64 / 1 = 64, so K = 128 gives 2 scale bytes a row.
    (e2m3 / e3m2 operands: byte arrays to every library, so fakes can describe them.)"""
    src = tmp_path / "mx.tile"
    src.write_text("target sm_120a;\ntile mx {\n  engine mma.sp kind=mxf8f6f4;\n  shape M=16 N=8 K=64;\n"
                   "  A: e2m3 global; B: e3m2 global; C: f32 global; D: f32 global;\n"
                   "  SFA: ue8m0 global; SFB: ue8m0 global;\n  block_scale vec=1X;\n  sparsity 2:4;\n}\n")
    k = load(str(src))
    m, n, kk = 32, 16, 128
    b = rabi.buffers(k.abi, m, n, kk)
    assert b["sfa"].shape == (m, 2) and b["sfb"].shape == (n, 2) and b["sfa"].element == "ue8m0"
    a = SparseA(Fake((m, kk // 2), "<u1"), Fake((m // 16, kk // 64, 32), "<u4"), "e2m3", m, kk)
    bt = Fake((n, kk), "<u1").T
    with pytest.raises(ArgumentError) as e:
        k(a, bt, Fake((m, n), "<f4"))
    assert e.value.argument == "scale_a"
    with pytest.raises(ArgumentError) as e:
        k(a, bt, Fake((m, n), "<f4"), scale_a=Fake((m, 3), "<u1"), scale_b=Fake((n, 2), "<u1"))
    assert e.value.argument == "scale_a" and "3" in str(e.value)


def test_wgmma_kernel_takes_any_size_and_pitched_rows():
    """Issue 17: the sparse wgmma kernel takes any M, N, K >= 1 and B, C, D rows further apart than their
    length (a multiple of 16 bytes: TMA global strides, 16-byte vector stores); the launch passes the row
    strides (ldc, ldd in elements; B's in its tensor map) and refuses rows the kernel cannot address."""
    k = load(os.path.join(EX, "sparse_wgmma_f16.tile"))
    assert k.unmet(1, 1, 1) == [] and k.unmet(200, 136, 72) == []
    # CTA pairs of 128 x 256 tiles: M = 200 -> one pair (2 CTAs), N = 300 -> 2 tile columns
    assert rabi.grid_blocks(k.abi, 200, 300, 72) == (4, 1, 1)
    # the packer's padding: K to the instruction K (32), metadata to whole 256-row pairs and 64-wide K blocks
    assert k._padding(200, 72) == (96, 256, 128, 200)       # (values keep M rows)
    m, n, kk = 200, 135, 72

    def args(b=None, c=None, d=None):
        a = SparseA(Fake(rabi.buffer_shape(k.abi, "a_values", m, kk), "<f2"),
                    Fake(rabi.buffer_shape(k.abi, "a_metadata", m, kk), "<u4"), "f16", m, kk)
        return (a, b or Fake((n, kk), "<f2").T, c or Fake((m, n), "<f4", strides=(544, 4)),
                d or Fake((m, n), "<f4", strides=(544, 4)))

    a, b, c, d = args()
    with pytest.raises(DeviceError):          # every check passes (rows of 135 f32 padded to 544 bytes)
        k(a, b, c, out=d)
    e = _err(k, *args()[:3], out=Fake((m, n), "<f4"))                       # 540-byte rows
    assert (e.argument, e.what) == ("out", "stride") and "[:, :N]" in str(e)
    a, b, c, _ = args()
    e = _err(k, a, b, c, out=Fake((m, n), "<f4", strides=(528, 4)))          # rows overlap
    assert (e.argument, e.what) == ("out", "stride") and "at least 540" in e.expected
    kk = 70                                   # 140-byte rows of B^T: no TMA stride
    a, _, c, d = args()
    e = _err(k, a, Fake((n, kk), "<f2").T, c, out=d)
    assert (e.argument, e.what) == ("B", "stride")
    with pytest.raises(DeviceError):          # the same B in rows of 144 bytes
        k(a, Fake((n, kk), "<f2", strides=(144, 2)).T, c, out=d)


def test_wgmma_kernel_takes_a_batch():
    """A batch (grid y): SparseA of batch x M x K, batch x K x N B, batch x M x N D, C per batch or shared;
    batch strides of the TMA operands multiples of 16 bytes, D's batches not overlapping; the grid's y is
    the batch count."""
    k = load(os.path.join(EX, "sparse_wgmma_f16.tile"))
    m, n, kk, batch = 200, 136, 72, 3
    assert k.launch_dims(m, n, kk, batch=batch)[0] == (1, 3, 1)          # one CTA pair (cluster dims apart)
    assert k.unmet(m, n, kk) == [] and rabi.unmet(k.abi, m, n, kk, 65536) == ["batch <= 65535"]
    vshape = rabi.buffer_shape(k.abi, "a_values", m, kk)
    mshape = rabi.buffer_shape(k.abi, "a_metadata", m, kk)

    def args(values=None, b=None, c=None, d=None):
        a = SparseA(values or Fake((batch,) + vshape, "<f2"), Fake((batch,) + mshape, "<u4"), "f16", m, kk, batch)
        return (a, b or Fake((batch, kk, n), "<f2", strides=(n * kk * 2, 2, kk * 2)),
                c or Fake((batch, m, n), "<f4"), d or Fake((batch, m, n), "<f4"))

    a, b, c, d = args()
    with pytest.raises(DeviceError):
        k(a, b, c, out=d)
    a, b, _, d = args()
    with pytest.raises(DeviceError):          # one C for every batch (batch stride 0)
        k(a, b, Fake((m, n), "<f4"), out=d)
    a, _, c, d = args()
    e = _err(k, a, Fake((n, kk), "<f2").T, c, out=d)                 # B without the batch
    assert (e.argument, e.what) == ("B", "shape") and "batch of 3" in e.expected
    a, b, c, _ = args()
    e = _err(k, a, b, c, out=Fake((batch, m, n), "<f4", strides=(m * n * 2, n * 4, 4)))   # batches overlap
    assert (e.argument, e.what) == ("out", "stride") and "do not overlap" in e.expected
    # B's batches 8 bytes apart beyond their size: not a TMA stride
    e = _err(k, *args(b=Fake((batch, kk, n), "<f2", strides=(n * kk * 2 + 8, 2, kk * 2)))[:3], out=args()[3])
    assert (e.argument, e.what) == ("B", "stride") and "multiple of 16" in e.expected


def test_pipelined_kernel_takes_any_size_pitched_rows_and_a_batch(gemm):
    """Issue 17, the pipelined mma.sp kernel (examples/sparse_gemm_f16.tile: 128 x 256 x 64 CTA tiles): any
    M, N, K >= 1; the packed A padded to whole tiles and K blocks (what pack_a builds); B, C, D rows any
    multiple of 16 bytes apart (ldb, ldc, ldd); a batch with byte strides of the packed A and B multiples of
    16, D's batches not overlapping; Kp, the K blocks' K, derived from the ABI's `sizes`."""
    k = gemm
    m, n, kk = 200, 135, 70
    assert k.unmet(m, n, kk) == [] and k.unmet(1, 1, 1) == []
    assert rabi.derived_sizes(k.abi, m, n, kk) == {"Kp": 128}
    assert k._padding(m, kk) == (128, 256, 128, 256)           # values keep whole 128-row tiles
    assert rabi.grid_blocks(k.abi, m, n, kk) == (2, 1, 1)
    vshape, mshape = rabi.buffer_shape(k.abi, "a_values", m, kk), rabi.buffer_shape(k.abi, "a_metadata", m, kk)
    assert (vshape, mshape) == ((256, 64), (16, 4, 32))

    def args(b=None, c=None, d=None, batch=None):
        lead = (batch,) if batch else ()
        a = SparseA(Fake(lead + vshape, "<f2"), Fake(lead + mshape, "<u4"), "f16", m, kk, batch)
        return (a, b or Fake((n, kk), "<f2", strides=(144, 2)).T, c or Fake((m, n), "<f4", strides=(544, 4)),
                d or Fake((m, n), "<f4", strides=(544, 4)))

    with pytest.raises(DeviceError):          # every check passes (140-byte B rows padded to 144)
        k(*args()[:3], out=args()[3])
    e = _err(k, args()[0], Fake((n, kk), "<f2").T, *args()[2:3], out=args()[3])      # 140-byte B rows
    assert (e.argument, e.what) == ("B", "stride")
    e = _err(k, *args()[:3], out=Fake((m, n), "<f4"))                                   # 540-byte D rows
    assert (e.argument, e.what) == ("out", "stride")
    a = SparseA(Fake((m, 35), "<f2"), Fake(mshape, "<u4"), "f16", m, kk)              # unpadded values
    e = _err(k, a, *args()[1:3], out=args()[3])
    assert (e.argument, e.what, e.expected) == ("A.values", "shape", "(256, 64)")
    batch = 3
    bb = Fake((batch, kk, n), "<f2", strides=(n * 144 + 16, 2, 144))
    with pytest.raises(DeviceError):
        k(*args(b=bb, c=Fake((m, n), "<f4", strides=(544, 4)), batch=batch)[:3],
          out=Fake((batch, m, n), "<f4", strides=(m * 544, 544, 4)))
    e = _err(k, *args(b=Fake((batch, kk, n), "<f2", strides=(n * 144 + 8, 2, 144)), batch=batch)[:3],
             out=Fake((batch, m, n), "<f4", strides=(m * 544, 544, 4)))
    assert (e.argument, e.what) == ("B", "stride") and "multiple of 16" in e.expected
    e = _err(k, *args(b=bb, batch=batch)[:3], out=Fake((batch, m, n), "<f4", strides=(544, 544, 4)))
    assert (e.argument, e.what) == ("out", "stride") and "do not overlap" in e.expected
    assert rabi.unmet(k.abi, m, n, kk, 65536) == ["batch <= 65535"]
