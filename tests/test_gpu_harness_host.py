"""The GPU checks' layout and host halves, without a GPU (the GPU slice itself: tests/gpu/, run by
tests/gpu/run_on_device.sh).

* nothing in the repository is loaded by file path: every harness is a module of tests.gpu.harness,
  imported by name by the CPU tests, the GPU tests and the benchmarks; benchmarks/ holds benchmarks and
  the fuzz driver only;
* the timing benchmarks start (their imports resolve) without cupy or torch;
* the harnesses' device workers (`python -m tests.gpu.harness.<name> device-worker`) start from any
  working directory;
* `-m gpu` selects the default GPU slice, `-m "gpu and slow"` the full sweeps;
* the ABI-driven launch (sparse_kernels): expressions, grids against the emitters' own, argument order,
  target rules, and the DSL examples' ABIs the GPU test launches (examples/sparse_wgmma_f16.tile really is
  the CTA-pair wgmma kernel);
* every schedule the benchmarks time builds, and the benchmarks' 2:4 packer equals compiler.sparse.compress
  (on the CPU, where torch is installed).
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from compiler.isa.mma_sp.forms import find_form
from compiler.ptx.sparse_gemm_kernel import SparseGemmConfig, emit_sparse_gemm
from compiler.ptx.sparse_wgmma_kernel import SparseWgmmaConfig, emit_sparse_wgmma, tensor_map_args

from tests.gpu.harness import mma_sp_hw, smem_dump, sparse_kernels as sk, wgmma_read

REPO = Path(__file__).resolve().parents[1]
F16 = find_form("m16n8k32", "f16", "f16", "f32", "f32")


# ------------------------------------------------------------------------------------------------
# Layout: imports by name only
# ------------------------------------------------------------------------------------------------

def _python_files():
    skip = {".venv", ".git", ".ci-venv", "build", "dist", ".whl"}
    for path in REPO.rglob("*.py"):
        rel = path.relative_to(REPO)
        if rel.parts[0] in skip or "site-packages" in rel.parts or rel.parts[0].endswith(".egg-info"):
            continue
        yield rel, path


def test_nothing_is_loaded_by_file_path():
    """Harnesses, benchmarks and tests import each other by module name. The one file-path load allowed
    is of setup.py, the build script at the root (tests/test_packaging.py runs its build step): it is
    no module of the repository's packages."""
    needle = "spec_from_" + "file_location"          # spelled apart so that this file does not match itself
    offenders = [f"{rel}:{number}" for rel, path in _python_files()
                 for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
                 if needle in line and '"setup.py"' not in line]
    assert offenders == [], f"load these by module name instead: {offenders}"


def test_benchmarks_holds_benchmarks_and_the_fuzz_driver_only():
    # timing: compile_speed (tilec start-up and throughput), parse_speed (the front end on 100,000 list
    # items and 10,000 tiles), limits (time and peak memory at the largest inputs the limits allow),
    # sparse_gemm (the examples' 2:4 tiles through the runtime against cuSPARSELt and cuBLAS), sparse_gemm_sync /
    # sparse_wgmma (the API-configured GPU kernels against cuSPARSELt and cuBLAS), launch_overhead
    # (compiler.runtime's host cost per launch against cupy.RawModule), fragment_call (a CUDA C++ loop
    # calling an mma.sp fragment out of line / inlined against tilec's kernel); fuzz.py: the fuzz driver;
    # ptx_mix (the per-K-block instruction mix of a Blackwell GEMM's PTX) and cute_dsl_ptx (CuTe DSL's
    # persistent GEMM compiled to PTX for it: docs/blackwell_comparison.md). GPU correctness lives in tests/gpu/.
    assert sorted(p.name for p in (REPO / "benchmarks").glob("*.py")) == [
        "compile_speed.py", "cute_dsl_ptx.py", "fragment_call.py", "fuzz.py", "launch_overhead.py", "limits.py",
        "parse_speed.py", "ptx_mix.py", "sparse_gemm.py", "sparse_gemm_sync.py", "sparse_wgmma.py"]


@pytest.mark.parametrize("script", ["sparse_gemm.py", "sparse_gemm_sync.py", "sparse_wgmma.py"])
def test_timing_benchmarks_start_without_a_gpu(script):
    """Their module-level imports (compiler, tests.gpu.harness.sparse_kernels, benchmarks.sparse_gemm_sync)
    resolve from a checkout; cupy and torch are imported only once they run."""
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / script), "--help"], capture_output=True,
                          text=True, cwd=REPO / "tests", timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "--quick" in proc.stdout


@pytest.mark.parametrize("mod", [smem_dump, wgmma_read])
def test_device_workers_run_as_modules_from_anywhere(mod, tmp_path):
    assert mod.MODULE == mod.__name__
    kw = mod.worker_environment()
    assert kw["env"]["PYTHONPATH"].split(os.pathsep)[0] == str(REPO) and kw["cwd"] == str(REPO)
    env = dict(kw["env"])
    proc = subprocess.run([sys.executable, "-m", mod.MODULE, "device-worker", "--help"], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "--start" in proc.stdout


def test_mma_sp_hw_cli_dry_run():
    proc = subprocess.run([sys.executable, "-m", "tests.gpu.harness.mma_sp_hw", "--dry-run", "--quick",
                           "--filter", "m16n8k16.f32.f16.f16.f32"], capture_output=True, text=True, cwd=REPO,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 forms" in proc.stdout and "0 failed" in proc.stdout
    assert mma_sp_hw.__name__ == "tests.gpu.harness.mma_sp_hw"


def _collect(markexpr: str) -> list[str]:
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "-m", markexpr, "tests/gpu"], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return [line for line in proc.stdout.splitlines() if "::" in line]


def test_gpu_marker_selects_the_default_slice_and_slow_the_full_sweeps():
    default = _collect("gpu")
    full = _collect("gpu and slow")
    assert default and full and not set(default) & set(full)
    # the full sweeps: every mma.sp form's whole variant set, the whole smem-dump and wgmma sweeps
    assert sum("test_form_on_gpu_all_variants" in t for t in full) == 44
    assert any("test_smem_dump.py::test_full_sweep" in t for t in full)
    assert any("test_wgmma_read.py::test_full_sweep" in t for t in full)
    assert not any("full_sweep" in t or "all_variants" in t for t in default)
    # the default slice has every harness: mma.sp forms, smem dumps, wgmma reads, both sparse GEMMs with
    # every benchmark schedule, and the DSL examples compiled from their files
    for needle in ("test_mma_sp_gpu.py::test_form_on_gpu[", "test_smem_dump.py::", "test_wgmma_read.py::",
                   "test_sparse_gemm_gpu.py::test_benchmark_schedule_on_gpu", "test_sparse_gemm_gpu.py::test_sparse",
                   "test_sparse_wgmma_gpu.py::test_benchmark_schedule_on_gpu",
                   "test_sparse_wgmma_gpu.py::test_sparse", "test_dsl_examples_gpu.py::test_dsl_example_on_gpu["):
        assert any(needle in t for t in default), needle


@pytest.mark.parametrize("args, word", [(["--jobs", "0"], "'0'"), (["--slow", "--jobs"], "''"),
                                        (["--jobs", "six"], "'six'")])
def test_run_on_device_refuses_a_bad_jobs_count_before_installing_anything(args, word, tmp_path):
    # a usage error (exit 2) before step 1: nothing is installed, no pytest starts
    env = {**os.environ, "WHEELHOUSE": str(tmp_path / "none"), "OUT": str(tmp_path / "out")}
    run = subprocess.run(["bash", str(REPO / "tests/gpu/run_on_device.sh"), *args], capture_output=True,
                         text=True, env=env, timeout=60)
    assert run.returncode == 2
    assert run.stdout.strip() == f"run_on_device: usage: --jobs N takes a positive number of pytest-xdist workers, not {word}"
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------------------------
# sparse_kernels: ABI expressions and launches
# ------------------------------------------------------------------------------------------------

def test_eval_abi():
    names = {"M": 512, "N": 768, "K": 256, "tile_m": 128, "tile_n": 256, "tiles": 12,
             "multiprocessors": 132, "max_ctas_per_sm": 1}
    assert sk.eval_abi("(M / 128) * (N / 256)", names) == 12
    assert sk.eval_abi("N / tile_n", names) == 3
    assert sk.eval_abi("M % 256 == 0", names) is True and sk.eval_abi("N % 512 == 0", names) is False
    assert sk.eval_abi("min(tiles, multiprocessors * max_ctas_per_sm)", names) == 12
    assert sk.eval_abi(1, names) == 1
    for bad in ("M / 5", "X * 2", "__import__('os')", "M.bit_length()", "abs(M)", "M ** 2"):
        with pytest.raises(ValueError):
            sk.eval_abi(bad, names)


@pytest.mark.parametrize("key", list(sk.SPARSE_GEMM_SCHEDULES))
def test_abi_grid_is_the_sparse_gemm_emitters(key):
    kern = emit_sparse_gemm(SparseGemmConfig("sg", F16, "sm_90a", accumulate_c=False, d_type="f16",
                                             **sk.SPARSE_GEMM_SCHEDULES[key]))
    sched = sk.SPARSE_GEMM_SCHEDULES[key]
    for scale in ((1, 1, 1), (2, 3, 4), (7, 5, 2)):
        m, n, k = (s * t for s, t in zip(scale, (sched["cta_m"], sched["cta_n"], sched["cta_k"])))
        assert sk.abi_unmet(kern.abi, m, n, k) == []
        for sms in (1, 4, 132):
            ctas = sms * kern.abi["max_ctas_per_sm"]
            assert sk.abi_grid(kern.abi, m, n, k, sms) == kern.grid(m, n, k, ctas if sched.get("persistent") else None)
    # any size (issue 17): partial tiles and K blocks count whole in the grid
    m, n, k = sched["cta_m"] + 16, 2 * sched["cta_n"] - 8, sched["cta_k"] + 1
    assert sk.abi_unmet(kern.abi, m, n, k) == []
    assert sk.abi_grid(kern.abi, m, n, k, 132) == kern.grid(m, n, k, 132 * kern.abi["max_ctas_per_sm"]
                                                             if sched.get("persistent") else None)


@pytest.mark.parametrize("key", list(sk.SPARSE_WGMMA_SCHEDULES))
def test_abi_grid_is_the_sparse_wgmma_emitters(key):
    kw = sk.SPARSE_WGMMA_SCHEDULES[key]
    kern = emit_sparse_wgmma(SparseWgmmaConfig("swg", F16, accumulate_c=False, d_type="f16", **kw))
    assert sk.abi_types(kern.abi) == ("m16n8k32", "f16", "f16", "f32", "f16")
    m, n, k = sk.abi_problem_size(kern.abi)
    assert m == 2 * kw["cta_m"] * kw.get("cluster_m", 1)
    assert sk.abi_grid(kern.abi, m, n, k) == kern.grid(m, n, k)
    # any size (issue 17); CTA pairs: an M of one tile still launches a whole pair (the second CTA's rows
    # lie outside D)
    assert not sk.abi_unmet(kern.abi, kw["cta_m"] - 1, n + 1, k + 1)
    assert sk.abi_grid(kern.abi, kw["cta_m"], kw["cta_n"], k) == (kw.get("cluster_m", 1), 1, 1)
    # argument order is the ABI's: tensor maps, D, M, N, K, ldd, D's batch stride (no C: D = A*B)
    maps = bytes(range(128)) * 3           # the tensor maps go by value (sparse_wgmma_kernel, "Tensor maps")
    args = sk.abi_arguments(kern.abi, {"tensor_maps": maps, "d": 0x2000}, m, n, k)
    assert [type(a) for a in args] == [bytes, np.uint64, np.uint32, np.uint32, np.uint32, np.uint32, np.uint64]
    assert args[0] == maps and [int(a) for a in args[1:]] == [0x2000, m, n, k, n, m * n]


def test_benchmark_other_forms_build():
    for shape, t, out, key, with_c in sk.SPARSE_GEMM_OTHER_FORMS.values():
        acc = "s32" if t == "s8" else "f32"
        sched = {**sk.SPARSE_GEMM_SCHEDULES, **sk.SPARSE_GEMM_OTHER_SCHEDULES}[key]
        kern = emit_sparse_gemm(SparseGemmConfig("sg", find_form(shape, t, t, acc, acc), "sm_90a",
                                                 accumulate_c=with_c, d_type=out, **sched))
        assert sk.abi_types(kern.abi)[1:] == (t, t, acc, out)
        assert any(p["name"] == "c" for p in kern.abi["params"]) == with_c


@pytest.mark.parametrize("target, sm, runs", [
    ("sm_80", 80, True), ("sm_80", 90, True), ("sm_89", 80, False), ("sm_90a", 90, True), ("sm_90a", 100, False),
    ("sm_100a", 90, False), ("sm_100f", 103, True), ("sm_100f", 120, False), ("sm_103f", 100, False)])
def test_target_runs_on(target, sm, runs):
    assert sk.target_runs_on(target, sm) is runs


def test_dsl_examples_the_gpu_test_launches():
    """What tests/gpu/test_dsl_examples_gpu.py does before its launch, for every pre-Blackwell example: the
    ABI names the kernel in the PTX, a problem of a few tiles meets `requires`, and the wgmma example is the
    CTA-pair kernel its `schedule ... mma=wgmma cluster=2` asks for (what the hand-made configuration this
    test replaces never exercised)."""
    pytest.importorskip("lark")
    import compiler

    seen = {}
    for name in ("sparse_f16", "sparse_gemm_f16", "sparse_gemm_bf16", "sparse_wgmma_f16"):
        result = compiler.compile_file(str(REPO / "examples" / f"{name}.tile"))
        (abi,) = [t["kernel"] for t in result.to_json()["tiles"].values()]
        assert abi["instruction"] in result.ptx
        m, n, k = sk.abi_problem_size(abi, scale=(4, 3, 4))
        assert sk.abi_unmet(abi, m, n, k) == []
        assert all(v > 0 for v in sk.abi_grid(abi, m, n, k, 132))
        seen[name] = abi
    wg = seen["sparse_wgmma_f16"]
    assert wg["kernel_kind"] == "sparse_wgmma" and wg["cluster"] == [2, 1, 1] and wg["target"] == "sm_90a"
    assert [p["name"] for p in wg["params"]] == ["tensor_maps", "c", "d", "M", "N", "K", "ldc", "ldd",
                                                 "batch_stride_c", "batch_stride_d"]
    m, n, k = sk.abi_problem_size(wg, scale=(4, 3, 4))
    maps = tensor_map_args(wg, m, n, k)          # what encode_tensor_maps hands the driver
    assert [mp["dims"][1] for mp in maps] == [m, n, m // 16]          # rows; dims[2]: the batch (1)
    assert [mp["dims"][2] for mp in maps] == [1, 1, 1]
    assert seen["sparse_gemm_f16"]["kernel_kind"] == "sparse_gemm"
    assert seen["sparse_f16"]["grid"] == ["N / tile_n", "M / tile_m", 1]


# ------------------------------------------------------------------------------------------------
# sparse_kernels: exact problems, comparison, failure reports
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("a_t, cd, shape, with_c, out", [
    ("f16", "f32", "m16n8k32", True, "f32"), ("f16", "f32", "m16n8k32", False, "f16"),
    ("s8", "s32", "m16n8k64", True, "s32"), ("tf32", "f32", "m16n8k16", False, "f32")])
def test_problem_reference_and_comparison(a_t, cd, shape, with_c, out, tmp_path, monkeypatch):
    from compiler import sparse

    p = sk.make_problem(np.random.default_rng(3), a_t, a_t, cd, shape, 32, 16, 128, with_c)
    assert p.mnk == (32, 16, 128) and (p.c is not None) == with_c
    a = sparse.decompress(p.values, p.meta, a_t, shape)
    assert np.array_equal(a.astype(np.float64), p.a.astype(np.float64))
    ref = sk.reference(p, cd, out)
    assert ref.dtype == np.dtype(sk.np_out(out)) and ref.shape == (32, 16)
    exact = a.astype(np.float64) @ p.b.astype(np.float64) + (p.c if with_c else 0)
    assert np.array_equal(ref.astype(np.float64), exact.astype(np.float32).astype(sk.np_out(out)).astype(np.float64))
    d = ref.copy()
    assert len(sk.differing_bytes(d, ref)) == 0
    d.view(np.uint8).reshape(32, -1)[5, 3] ^= 1
    assert sk.differing_bytes(d, ref).tolist() == [[5, 3]]
    monkeypatch.delenv("OUT", raising=False)
    assert sk.save_failure("x", p, d, ref) is None
    monkeypatch.setenv("OUT", str(tmp_path))
    saved = np.load(sk.save_failure("x", p, d, ref))
    assert np.array_equal(saved["d"], d) and ("c" in saved.files) == with_c


def test_benchmark_packer_is_compress_on_the_cpu():
    torch = pytest.importorskip("torch")
    pytest.importorskip("ml_dtypes")
    sk.check_packer(torch, "cpu", ("f16", "bf16", "e4m3", "s8"))


# ------------------------------------------------------------------------------------------------
# sparse_kernels.launch_from_abi against a CPU stand-in for cupy: every byte the GPU tests hand a kernel
# ------------------------------------------------------------------------------------------------

class _FakeArray:
    """A device buffer: bytes in a numpy array at a made-up, 4096-aligned device address."""

    def __init__(self, host: np.ndarray, heap: dict):
        self.host = np.array(host, copy=True)
        self.data = type("Ptr", (), {"ptr": 0x10000 + 0x1000 * (len(heap) + 1) * 0x100})()
        heap[self.data.ptr] = self


class _FakeCupy:
    """cupy as launch_from_abi uses it. The one kernel it runs computes D = A*B (+ C) from the bytes it
    is given, read as the ABI says (compressed A + metadata words, B^T, C, D; or, for a wgmma kernel,
    through the three tensor-map addresses), after checking entry, grid, block and shared memory."""
    uint8 = np.uint8

    def __init__(self, abi: dict, expect_grid, types):
        self.abi, self.expect_grid, self.types, self.heap, self.launches = abi, expect_grid, types, {}, []
        fake = self

        class _Device:
            attributes = {"MultiProcessorCount": 132}

            def synchronize(self):
                pass

        class _Runtime:
            @staticmethod
            def deviceSynchronize():
                pass

        class _Function:
            def __init__(self, text, name):
                assert f".entry {name}(" in text, f"no entry {name} in the PTX"
                self.max_dynamic_shared_size_bytes = 0
                self.ptr = id(self)
                functions[self.ptr] = self

            def __call__(self, grid, block, args, shared_mem=0):
                fake.run(self, grid, block, args, shared_mem)

        functions: dict[int, _Function] = {}

        class _Driver:
            @staticmethod
            def launchKernel(f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
                """cuLaunchKernel as sparse_kernels.launch_by_value makes it: each argument read back from
                the kernelParams array by the ABI's parameter types (device pointers as the heap's arrays)."""
                import ctypes

                assert extra == 0 and stream == 0
                at = (ctypes.c_void_p * len(abi["params"])).from_address(params)
                args = []
                for q, ptr in zip(abi["params"], at):
                    if q["type"] == "bytes":
                        args.append(ctypes.string_at(ptr, q["bytes"]))
                    elif q["type"] == "u32":
                        args.append(np.uint32(ctypes.c_uint32.from_address(ptr).value))
                    else:
                        v = ctypes.c_uint64.from_address(ptr).value
                        args.append(fake.heap.get(v, np.uint64(v)))
                fake.run(functions[f], (gx, gy, gz), (bx, by, bz), args, smem)

        class _Stream:
            ptr = 0

        class _RawModule:
            def __init__(self, path):
                self.text = Path(path).read_text()

            def get_function(self, name):
                return _Function(self.text, name)

        self.cuda = type("cuda", (), {"Device": _Device, "runtime": _Runtime, "driver": _Driver,
                                      "get_current_stream": staticmethod(lambda: _Stream())})
        self.RawModule = _RawModule

    def asarray(self, x):
        return _FakeArray(np.ascontiguousarray(x).view(np.uint8).reshape(-1), self.heap)

    def full(self, n, value, dtype):
        return _FakeArray(np.full(n, value, dtype=dtype), self.heap)

    @staticmethod
    def asnumpy(x):
        return x.host.copy()

    def run(self, fn, grid, block, args, shared_mem):
        from compiler import sparse

        abi = self.abi
        assert tuple(grid) == tuple(self.expect_grid) and tuple(block) == tuple(abi["block"])
        assert shared_mem == abi.get("dynamic_smem_bytes", 0) == fn.max_dynamic_shared_size_bytes
        assert len(args) == len(abi["params"])
        named = dict(zip((p["name"] for p in abi["params"]), args))
        m, n, k = (int(named[x]) for x in "MNK")
        assert all(isinstance(named[x], np.uint32) for x in "MNK")
        if "tensor_maps" in named:         # the stand-in encoder below wrote the three addresses (by value)
            ptrs = np.frombuffer(named["tensor_maps"], np.uint64)[:3]
            named.update(zip(("a_values", "b", "a_metadata"), (self.heap[int(x)] for x in ptrs)))
        shape, a_t, b_t, cd, out = self.types
        values = named["a_values"].host.view(sparse._np_dtype(a_t)).reshape(m, -1)
        # the ABI's metadata layout: 16 words a k-step (compact: the wgmma kernel for 16-bit A) or 32
        words = 16 if "lanes" in abi["buffers"]["a_metadata"] else 32
        meta = named["a_metadata"].host.view(np.uint32).reshape(m // 16, -1, words)
        a = sparse.decompress(values, meta, a_t, shape)
        b = sparse.unpack_b(named["b"].host.view(sparse._np_dtype(b_t)).reshape(n, -1), b_t, shape)
        if cd == "s32":
            d = a.astype(np.int64) @ b.astype(np.int64)
        else:
            d = a.astype(np.float64) @ b.astype(np.float64)
        if "c" in named:
            d = d + named["c"].host.view(np.int32 if cd == "s32" else np.float32).reshape(m, n)
        d = d.astype(np.int32) if cd == "s32" else d.astype(np.float32).astype(sk.np_out(out))
        named["d"].host[:] = np.ascontiguousarray(d).view(np.uint8).reshape(-1)
        self.launches.append((m, n, k))


def _fake_tensor_maps(abi, m, n, k, addresses):
    out = np.zeros(384, np.uint8)
    out[:24] = np.array([addresses["a_values"], addresses["b"], addresses["a_metadata"]], np.uint64).view(np.uint8)
    return out.tobytes()


@pytest.mark.parametrize("kind, kw, out, with_c", [
    ("gemm", sk.SPARSE_GEMM_SCHEDULES["128x256x64_s3"], "f16", False),
    ("gemm", sk.SPARSE_GEMM_SCHEDULES["256x128x128_s2_p"], None, True),
    ("gemm-s8", sk.SPARSE_GEMM_OTHER_SCHEDULES["s8_128x256x128_s3"], "s32", False),
    ("wgmma", sk.SPARSE_WGMMA_SCHEDULES["128x256x64_s4_c2"], "f16", False),
    ("wgmma", dict(cta_m=64, cta_n=64, cta_k=32, consumers=1, stages=2), None, True)])
def test_launch_from_abi_hands_the_kernel_what_its_abi_says(kind, kw, out, with_c, monkeypatch):
    import compiler.ptx.sparse_wgmma_kernel as wgk

    monkeypatch.setattr(wgk, "encode_tensor_maps", _fake_tensor_maps)        # the driver call, on a GPU
    a_t, cd, shape = ("s8", "s32", "m16n8k64") if kind == "gemm-s8" else ("f16", "f32", "m16n8k32")
    form = find_form(shape, a_t, a_t, cd, cd)
    if kind == "wgmma":
        kern = emit_sparse_wgmma(SparseWgmmaConfig("swg", form, accumulate_c=with_c, d_type=out, **kw))
    else:
        kern = emit_sparse_gemm(SparseGemmConfig("sg", form, "sm_90a", accumulate_c=with_c, d_type=out, **kw))
    m, n, k = sk.abi_problem_size(kern.abi)
    mp = 2 if kw.get("persistent") else None
    expect = kern.grid(m, n, k, 2 * kern.abi["max_ctas_per_sm"]) if mp else kern.grid(m, n, k)
    cp = _FakeCupy(kern.abi, expect, sk.abi_types(kern.abi))
    p = sk.make_problem(np.random.default_rng(1), a_t, a_t, cd, shape, m, n, k, with_c)
    d = sk.launch_from_abi(cp, kern.text, kern.abi, p, multiprocessors=mp)
    assert cp.launches == [(m, n, k)]
    assert len(sk.differing_bytes(d, sk.reference(p, cd, out or cd))) == 0
    # a C-less problem for a D = A*B + C kernel, or a size the ABI refuses, is an error before any launch
    if with_c:
        with pytest.raises(ValueError, match="needs a C"):
            sk.launch_from_abi(cp, kern.text, kern.abi, sk.make_problem(np.random.default_rng(1), a_t, a_t, cd,
                                                                         shape, m, n, k, False))
    # any size (issue 17, both kernels): only sizes beyond the limits are refused
    assert sk.abi_unmet(kern.abi, m + 16, n + 1, k + 1) == [] and sk.abi_unmet(kern.abi, m, n, 1 << 31)
    with pytest.raises(ValueError, match="breaks"):
        sk.launch_from_abi(cp, kern.text, kern.abi, SimpleNamespace(mnk=(m, n, 1 << 31)))
    assert len(cp.launches) == 1


def test_dsl_examples_launch_through_the_stand_in(monkeypatch):
    """tests/gpu/test_dsl_examples_gpu.py's launch, with the stand-in for cupy: the compiled module text,
    the ABI from CompileResult.to_json() and the examples' own types."""
    pytest.importorskip("lark")
    import compiler
    import compiler.ptx.sparse_wgmma_kernel as wgk

    monkeypatch.setattr(wgk, "encode_tensor_maps", _fake_tensor_maps)
    for name in ("sparse_f16", "sparse_gemm_f16", "sparse_gemm_bf16", "sparse_wgmma_f16"):
        if name.endswith("bf16"):
            pytest.importorskip("ml_dtypes")
        result = compiler.compile_file(str(REPO / "examples" / f"{name}.tile"))
        (abi,) = [t["kernel"] for t in result.to_json()["tiles"].values()]
        shape, a_t, b_t, cd, out = sk.abi_types(abi)
        m, n, k = sk.abi_problem_size(abi, scale=(4, 3, 4))
        cp = _FakeCupy(abi, sk.abi_grid(abi, m, n, k, 132), (shape, a_t, b_t, cd, out))
        p = sk.make_problem(np.random.default_rng(2), a_t, b_t, cd, shape, m, n, k,
                            any(q["name"] == "c" for q in abi["params"]))
        d = sk.launch_from_abi(cp, result.ptx, abi, p)
        assert cp.launches == [(m, n, k)], name
        assert len(sk.differing_bytes(d, sk.reference(p, cd, out))) == 0, name
