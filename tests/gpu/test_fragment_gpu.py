"""The issue-16 fragment on the GPU: examples/sparse_f16.tile's mma.sp fragment (sm_90a, m16n8k32 f16, f32 C/D,
2:4, loop K = 64, `--emit func`) called from a CUDA C++ kernel out of line (`extern "C"`, linked by nvlink)
and inlined (the `--emit header` inline-asm variant), D compared with numpy for several K (1024 included).

Exact problems (values with few significant bits: every partial sum is exact in f32) must match numpy bit for
bit; normal random ones within (K/32 + 1) * 2^-22 * (|A||B| + |C|) element-wise (tests/gpu/harness/
fragment_gemm.py). Needs an sm_90 GPU, cupy, and nvcc (tests/gpu/harness/nvcc_link.py finds it) to build the
caller; the host half (packing, the build, a CPU emulation of the same loop) runs in
tests/test_fragment_gemm_host.py.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest

from tests.gpu.harness import fragment_gemm as fg
from tests.gpu.harness.nvcc_link import find_nvcc, toolchain_problem


@pytest.fixture(scope="module")
def module(sm90):
    cp = sm90
    nvcc = find_nvcc()
    problem = toolchain_problem(nvcc)
    if problem is not None:
        pytest.skip(problem)
    f = fg.fragment()
    with tempfile.TemporaryDirectory() as d:
        cubin, _ = fg.build(nvcc, Path(d), f)
        mod = cp.RawModule(path=str(cubin))
        kernels = {name: mod.get_function(name) for name in ("gemm_call", "gemm_inline")}
    return cp, f, kernels


def run(cp, f, kernel, p: fg.Problem) -> np.ndarray:
    m, n, k = p.shape
    packed = {name: cp.asarray(v) for name, v in fg.pack(f, p).items()}
    d = cp.full(packed["c"].shape, np.nan, dtype=cp.float32)        # an unwritten element fails
    grid, block, (tiles_m, tiles_n, calls) = fg.launch_dims(p, f)
    kernel(grid, block, (packed["a"], packed["b"], packed["e"], packed["c"], d,
                         np.int32(tiles_m), np.int32(tiles_n), np.int32(calls)))
    cp.cuda.runtime.deviceSynchronize()
    return fg.unpack_d(f, cp.asnumpy(d), m, n)


@pytest.mark.parametrize("kernel", ["gemm_call", "gemm_inline"])
@pytest.mark.parametrize("k", [64, 256, 1024])
@pytest.mark.parametrize("exact", [True, False], ids=["exact", "normal"])
def test_fragment_gemm_matches_numpy(module, kernel, k, exact):
    cp, f, kernels = module
    for seed in range(2):
        p = fg.problem(64, 64, k, seed=seed + 10 * k, exact=exact)
        d = run(cp, f, kernels[kernel], p)
        ref = fg.reference(p)
        if exact:
            assert np.array_equal(d, ref.astype(np.float32)), (kernel, k, seed, float(np.abs(d - ref).max()))
        else:
            err = np.abs(d.astype(np.float64) - ref)
            bound = fg.error_bound(p)
            assert np.all(err <= bound), (kernel, k, seed, float(err.max()), float((err / bound).max()))


def test_out_of_line_and_inlined_agree_bit_for_bit(module):
    cp, f, kernels = module
    p = fg.problem(128, 64, 1024, seed=7, exact=False)
    assert np.array_equal(run(cp, f, kernels["gemm_call"], p), run(cp, f, kernels["gemm_inline"], p))


def test_sass_of_the_inlined_kernel_has_no_call():
    """SASS (cuobjdump -sass of the linked cubin): the out-of-line kernel CALLs the fragment, the inlined one
    has no CALL and holds the sparse HMMAs itself. Needs nvcc and cuobjdump (a CUDA toolkit), not a GPU."""
    import re
    import shutil
    import subprocess

    cuobjdump = shutil.which("cuobjdump")
    nvcc = find_nvcc()
    if cuobjdump is None or toolchain_problem(nvcc) is not None:
        pytest.skip("needs cuobjdump and a working nvcc")
    f = fg.fragment()
    with tempfile.TemporaryDirectory() as d:
        cubin, _ = fg.build(nvcc, Path(d), f)
        sass = subprocess.run([cuobjdump, "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
    functions = dict(re.findall(r"Function : (\w+)\n(.*?)(?=\n\s*Function : |\Z)", sass, flags=re.S))
    assert {"gemm_call", "gemm_inline", f.name} <= set(functions), sorted(functions)
    assert re.search(r"\bCALL\b", functions["gemm_call"]) and "HMMA" not in functions["gemm_call"]
    assert not re.search(r"\bCALL\b", functions["gemm_inline"]) and "HMMA" in functions["gemm_inline"]
