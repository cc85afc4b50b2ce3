"""compiler.runtime on the GPU: the kernels of the sm_80 / sm_90a examples launched from torch and cupy
arrays (D = A*B + C bit for bit equal to numpy: the emulator's exact problems,
compiler/emulator/sparse_host.py), in place through out=, on a non-default stream, inside a captured CUDA
graph and replayed, with the argument errors a caller can make; and `tilec run --check` / `--bench` on
every example the device can run (tcgen05 examples: a clear error naming --emulate)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("lark", reason="tilec's parser compiles the examples")
pytest.importorskip("cuda.core", reason="the runtime runs on cuda-core")

from compiler.emulator.sparse_host import reference, sparse_problem  # noqa: E402
from compiler.runtime import ArgumentError, DeviceError, load  # noqa: E402
from compiler.runtime.kernel import upload  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EX = ROOT / "examples"
RUNNABLE = ["sparse_f16.tile", "sparse_gemm_bf16.tile", "sparse_gemm_f16.tile", "sparse_wgmma_f16.tile"]


def problem(kernel, shape, seed=1):
    """(host problem, form, D type) of the kernel's tile in the emulator's exact form."""
    from compiler.driver import compile_file

    result = compile_file(str(EX / f"{kernel.tile}.tile"))
    t = result.tiles[kernel.tile]
    form = t.facts["form"]
    p = sparse_problem(form, *shape, np.random.default_rng(seed), "c" in {q["name"] for q in kernel.abi["params"]})
    return p, form, t.payload.operands["D"].dtype


def operands(kernel, p, form, library):
    a = kernel.pack_a(p.a, library=library)
    b = upload(p.bt, library, form.b_type).T
    c = upload(p.c, library, form.c_type) if p.c is not None else None
    return a, b, c


def host(d, d_type):
    from compiler.emulator.sparse_host import out_dtype

    if type(d).__module__.startswith("torch"):
        import torch

        raw = d.contiguous().view(torch.uint8).cpu().numpy()
    else:
        import cupy

        raw = cupy.asnumpy(d.view(cupy.uint8))
    return raw.view(out_dtype(d_type)).reshape(d.shape)


def assert_bitwise(d, ref):
    bad = np.argwhere(np.ascontiguousarray(d).view(np.uint8) != np.ascontiguousarray(ref).view(np.uint8))
    assert not len(bad), f"{len(bad)} bytes of D differ; first at {bad[:3].tolist()}"


SHAPES = {"sparse_f16": (32, 64, 128), "sparse_gemm_f16": (256, 512, 256), "sparse_gemm_bf16": (256, 512, 256),
          "sparse_wgmma_f16": (512, 512, 256)}


@pytest.mark.parametrize("name", RUNNABLE)
def test_runtime_from_torch(sm90, torch_cuda, name):
    torch = torch_cuda
    kernel = load(str(EX / name))
    p, form, d_type = problem(kernel, SHAPES[kernel.tile])
    a, b, c = operands(kernel, p, form, "torch")
    d = kernel(a, b, c)
    assert isinstance(d, torch.Tensor) and d.shape == (p.a.shape[0], p.b.shape[1])
    torch.cuda.synchronize()
    assert_bitwise(host(d, d_type), reference(form, p, d_type))


@pytest.mark.parametrize("name", ["sparse_f16.tile", "sparse_gemm_f16.tile", "sparse_wgmma_f16.tile"])
def test_runtime_from_cupy_in_place(sm90, name):
    cp = sm90
    kernel = load(str(EX / name))
    p, form, d_type = problem(kernel, SHAPES[kernel.tile], seed=2)
    a, b, c = operands(kernel, p, form, "cupy")
    out = cp.full(p.a.shape[0] * p.b.shape[1], np.nan, dtype=cp.float32).reshape(p.a.shape[0], p.b.shape[1])
    d = kernel(a, b, c, out=out)
    assert d is out
    cp.cuda.runtime.deviceSynchronize()
    assert_bitwise(host(d, d_type), reference(form, p, d_type))


@pytest.mark.parametrize("name, shape", [("sparse_f16.tile", (65536, 17408, 32)),
                                         ("sparse_gemm_f16.tile", (65536, 16640, 64))])
def test_d_rows_past_4_gib(sm90, torch_cuda, name, shape):
    """Issue 14 (a kernel never computes a wrapped address): D (f32, row-major M x N) of more than 2^32
    bytes, whose rows from 2^32 / (4 N) on start past 4 GiB (64-bit row offsets: mul.wide.u32 row, N then
    shl.b64). C is zero (the runtime allocates it); the first rows, the rows around 4 GiB and the last rows
    equal A B bit for bit. About 9 GB of device memory (C and D), a few MB of host data."""
    from compiler.driver import compile_file
    from compiler.emulator.sparse_host import SparseProblem

    torch = torch_cuda
    kernel = load(str(EX / name))
    m, n, k = shape
    assert m * n * 4 > 1 << 32 and kernel.unmet(m, n, k) == []
    t = compile_file(str(EX / name)).tiles[kernel.tile]
    form, d_type = t.facts["form"], t.payload.operands["D"].dtype
    p = sparse_problem(form, m, n, k, np.random.default_rng(4), False)
    a = kernel.pack_a(p.a, library="torch")
    b = upload(p.bt, "torch", form.b_type).T
    d = kernel(a, b)
    torch.cuda.synchronize()
    edge = (1 << 32) // (4 * n)                     # the first row that starts past 4 GiB is edge + 1
    for rows in (slice(0, 8), slice(edge - 8, edge + 8), slice(m - 8, m)):
        sub = SparseProblem(p.a[rows], p.b, None, p.values, p.meta, p.bt)
        assert_bitwise(host(d[rows], d_type), reference(form, sub, d_type))
    del a, b, d
    torch.cuda.empty_cache()


def test_non_default_stream(sm90, torch_cuda):
    torch, cp = torch_cuda, sm90
    kernel = load(str(EX / "sparse_gemm_f16.tile"))
    p, form, d_type = problem(kernel, SHAPES["sparse_gemm_f16"], seed=3)
    a, b, c = operands(kernel, p, form, "torch")
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):                      # the default: torch's current stream, here s
        d1 = torch.full((p.a.shape[0], p.b.shape[1]), float("nan"), device="cuda")
        kernel(a, b, c, out=d1)
    d2 = torch.full_like(d1, float("nan"))
    torch.cuda.synchronize()
    kernel(a, b, c, out=d2, stream=s)               # an explicit torch stream
    s.synchronize()
    ref = reference(form, p, d_type)
    assert_bitwise(host(d1, d_type), ref)
    assert_bitwise(host(d2, d_type), ref)
    # cupy: its current stream, and a raw handle
    a, b, c = operands(kernel, p, form, "cupy")
    with cp.cuda.Stream(non_blocking=True) as cs:
        d3 = kernel(a, b, c)
        cs.synchronize()
    assert_bitwise(host(d3, d_type), ref)
    cs2 = cp.cuda.Stream(non_blocking=True)
    d4 = cp.full(d3.shape, np.nan, dtype=cp.float32)
    cs2.synchronize()
    kernel(a, b, c, out=d4, stream=cs2.ptr)
    cs2.synchronize()
    assert_bitwise(host(d4, d_type), ref)


@pytest.mark.parametrize("name", ["sparse_gemm_f16.tile", "sparse_wgmma_f16.tile"])
def test_captured_in_a_cuda_graph(sm90, torch_cuda, name):
    torch = torch_cuda
    kernel = load(str(EX / name))
    p, form, d_type = problem(kernel, SHAPES[kernel.tile], seed=4)
    a, b, c = operands(kernel, p, form, "torch")
    d = torch.empty((p.a.shape[0], p.b.shape[1]), device="cuda")
    kernel(a, b, c, out=d)                          # loads the module (and encodes the tensor maps) first
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        kernel(a, b, c, out=d)
    d.fill_(float("nan"))
    torch.cuda.synchronize()
    g.replay()
    torch.cuda.synchronize()
    assert_bitwise(host(d, d_type), reference(form, p, d_type))
    d.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    assert_bitwise(host(d, d_type), reference(form, p, d_type))


def _err(kernel, *args, **kw) -> ArgumentError:
    with pytest.raises(ArgumentError) as e:
        kernel(*args, **kw)
    return e.value


def test_argument_errors(sm90, torch_cuda):
    torch = torch_cuda
    kernel = load(str(EX / "sparse_gemm_f16.tile"))
    m, n, k = SHAPES["sparse_gemm_f16"]
    p, form, _ = problem(kernel, (m, n, k), seed=5)
    a, b, c = operands(kernel, p, form, "torch")
    e = _err(kernel, a, b.float(), c)
    assert (e.argument, e.what, e.got) == ("B", "dtype", "f32")
    e = _err(kernel, a, b, c, out=torch.empty((m, n // 2), device="cuda"))
    assert (e.argument, e.what) == ("out", "shape")
    e = _err(kernel, a, b.contiguous(), c)                       # row-major K x N, not B stored transposed
    assert (e.argument, e.what) == ("B", "stride")
    flat = torch.empty(m * n + 1, device="cuda")
    e = _err(kernel, a, b, c, out=flat[1:].view(m, n))           # 4 bytes past an allocation: misaligned
    assert (e.argument, e.what) == ("out", "alignment")
    e = _err(kernel, a, b, c.cpu())
    assert (e.argument, e.what) == ("C", "device")
    e = _err(kernel, p.a, b, c)                                  # dense A: pack it first
    assert (e.argument, e.what) == ("A", "type") and "pack_a" in e.expected
    dense = torch.ones((m, k), dtype=torch.float16, device="cuda")
    with pytest.raises(ArgumentError) as info:
        kernel.pack_a(dense)
    assert info.value.what == "sparsity pattern"


class BareArray:
    """A torch tensor seen only through __cuda_array_interface__ (numba-like: no device attribute), so the
    runtime asks the driver which device its memory is on (CudaDriver.pointer_device)."""

    def __init__(self, t):
        self.t, self.__cuda_array_interface__ = t, t.__cuda_array_interface__


def test_bare_arrays_device_from_the_driver_and_overlap_refused(sm90, torch_cuda):
    torch = torch_cuda
    from compiler.runtime import driver

    kernel = load(str(EX / "sparse_wgmma_f16.tile"))
    p, form, d_type = problem(kernel, SHAPES["sparse_wgmma_f16"], seed=7)
    a, b, c = operands(kernel, p, form, "torch")
    assert driver.current().pointer_device(c.data_ptr()) == torch.cuda.current_device()
    out = torch.full(c.shape, float("nan"), device="cuda")
    d = kernel(a, BareArray(b), BareArray(c), out=BareArray(out))
    torch.cuda.synchronize()
    assert isinstance(d, BareArray)
    assert_bitwise(host(out, d_type), reference(form, p, d_type))
    # D one row further along the buffer that holds C: it would overwrite rows of C other CTAs still read
    flat = torch.empty(c.numel() + c.shape[1], device="cuda")
    c2 = flat[: c.numel()].view(c.shape)
    e = _err(kernel, a, b, c2, out=flat[c.shape[1]:].view(c.shape))
    assert (e.argument, e.what) == ("out", "memory")


def test_blackwell_kernel_is_refused_with_the_emulator_named(sm90):
    kernel = load(str(EX / "gemm_bf16.tile"))
    with pytest.raises(DeviceError, match="sm_100a.*emulate"):
        kernel.load()


def _tilec(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    return subprocess.run([sys.executable, "-m", "compiler.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          env=env)


@pytest.mark.parametrize("name", RUNNABLE)
def test_run_cli_check(sm90, name):
    proc = _tilec("run", "--check", str(EX / name))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "D matches numpy" in proc.stdout


def test_run_cli_bench_and_shape(sm90):
    proc = _tilec("run", "--check", "--bench", "--iters", "20", "--shape", "1024,1024,512",
                  str(EX / "sparse_gemm_f16.tile"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1024 x 1024 x 512" in proc.stdout and "median" in proc.stdout and "D matches numpy" in proc.stdout


def test_run_cli_blackwell_tile_suggests_emulate(sm90):
    proc = _tilec("run", str(EX / "gemm_bf16.tile"))
    assert proc.returncode == 1 and "--emulate" in proc.stderr and "Traceback" not in proc.stderr


def test_programmatic_launches_in_a_chain_see_the_grid_before(sm90, torch_cuda):
    """Programmatic dependent launch (the sparse wgmma kernel's default, compiler/isa/griddepcontrol.py): two
    launches back to back on one stream, Y = A1 B1 + X (K = 8192: the long one) then X = A2 B2 + Y (K = 64):
    the second reads as C what the first writes (read after write) and writes what the first reads as C
    (write after read), and may start while the first still runs. Its griddepcontrol.wait orders both after
    the first grid: Y and X are bit for bit those of the same launches with a synchronisation between
    them, and Y, poisoned with NaN before each pair, never reaches X unwritten."""
    torch = torch_cuda
    kernel = load(str(EX / "sparse_wgmma_f16.tile"))
    assert kernel.programmatic
    from compiler.driver import compile_file

    form = compile_file(str(EX / "sparse_wgmma_f16.tile")).tiles[kernel.tile].facts["form"]
    rng = np.random.default_rng(9)
    m, n = 2048, 1024
    p1, p2 = (sparse_problem(form, m, n, k, rng, True) for k in (8192, 64))
    a1, b1, c0 = operands(kernel, p1, form, "torch")
    a2, b2, _ = operands(kernel, p2, form, "torch")
    y_sync, x_sync = torch.empty_like(c0), torch.empty_like(c0)
    kernel(a1, b1, c0, out=y_sync)
    torch.cuda.synchronize()
    kernel(a2, b2, y_sync, out=x_sync)
    torch.cuda.synchronize()
    y = torch.empty_like(c0)
    for _ in range(3):
        x = c0.clone()
        y.fill_(float("nan"))
        torch.cuda.synchronize()
        kernel(a1, b1, x, out=y)
        kernel(a2, b2, y, out=x)
        torch.cuda.synchronize()
        assert torch.equal(y.view(torch.int32), y_sync.view(torch.int32))
        assert torch.equal(x.view(torch.int32), x_sync.view(torch.int32))
    assert torch.isfinite(x).all()
