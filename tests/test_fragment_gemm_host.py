"""Host half of the fragment GEMM GPU test (tests/gpu/test_fragment_gpu.py, benchmarks/fragment_call.py;
tests/gpu/harness/fragment_gemm.py): everything but the launch.

- The packing places every operand by the fragment's per-lane table and undoes exactly (C -> D).
- The loop both kernels run (per warp tile, one fragment call per 64 of K, C carried through D), executed on
  the CPU by compiler.emulator's mma.sp on the packed registers, equals numpy bit for bit on exact data for
  K = 64 and 1024: the packed operands mean what the fragment's parameters say.
- The build (README recipe: header, --emit func PTX, -rdc caller, device link to a cubin) succeeds with nvcc
  here; the cubin holds both kernels and the fragment; the inlined kernel's PTX has the two mma.sp of each
  call inline and no call, the out-of-line kernel calls the fragment.
"""
import re
import tempfile
from pathlib import Path

import numpy as np
import pytest

from tests.gpu.harness import fragment_gemm as fg
from tests.gpu.harness.nvcc_link import entry_bodies


def test_pack_places_c_and_unpack_undoes_it():
    f = fg.fragment()
    p = fg.problem(32, 16, 64, seed=0, exact=False)
    packed = fg.pack(f, p)
    assert packed["a"].shape == (2, 2, 32, 4) and packed["b"].shape == (2, 2, 32, 4)
    assert packed["e"].shape == (2, 2, 32) and packed["c"].shape == (2, 2, 32, 4)
    # lane 5 (g 1, t 1), register 2 of tile (1, 0): row g+8 = 9 of the second 16-row tile, column 2t = 2
    # (PTX ISA 9.7.14.6.2 accumulator fragment: c2 at row groupID+8, column 2*threadID_in_group)
    assert packed["c"][1, 0, 5, 2] == p.c[16 + 9, 2]
    assert np.array_equal(fg.unpack_d(f, packed["c"], 32, 16), p.c)


@pytest.mark.parametrize("k", [64, 1024])
def test_the_kernels_loop_emulated_on_packed_operands_is_exact(k):
    f = fg.fragment()
    p = fg.problem(32, 16, k, seed=k, exact=True)
    packed = fg.pack(f, p)
    d = fg.unpack_d(f, fg.emulate(f, packed, p.shape), *p.shape[:2])
    assert np.array_equal(d, fg.reference(p).astype(np.float32))
    # a wrong placement is caught: B's registers 0 and 1 swapped
    bad = dict(packed, b=packed["b"][..., [1, 0, 2, 3]])
    assert not np.array_equal(fg.unpack_d(f, fg.emulate(f, bad, p.shape), *p.shape[:2]), d)


def test_normal_data_stays_within_the_stated_bound():
    f = fg.fragment()
    p = fg.problem(32, 16, 256, seed=3, exact=False)
    d = fg.unpack_d(f, fg.emulate(f, fg.pack(f, p), p.shape), *p.shape[:2])
    assert np.all(np.abs(d - fg.reference(p)) <= fg.error_bound(p))


def test_the_gpu_tests_kernels_build_with_nvcc(nvcc):
    f = fg.fragment()
    with tempfile.TemporaryDirectory() as d:
        cubin, ptx = fg.build(nvcc, Path(d), f)
        import subprocess

        symbols = subprocess.run(["readelf", "-sW", str(cubin)], capture_output=True, text=True, check=True).stdout
    defined = {ln.split()[-1] for ln in symbols.splitlines() if " FUNC " in ln and " UND " not in ln}
    assert {"gemm_call", "gemm_inline", f.name} <= defined
    bodies = entry_bodies(ptx)
    assert len(re.findall(r"\bmma\.sp", bodies["gemm_inline"])) == 2 and not re.search(r"\bcall", bodies["gemm_inline"])
    assert re.search(rf"\bcall(\.uni)?\s*\(\w+\),\s*{f.name},", bodies["gemm_call"]) and "mma.sp" not in bodies["gemm_call"]


def test_the_benchmark_starts_without_a_gpu():
    """benchmarks/fragment_call.py imports cupy only once it runs: --help works from anywhere."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, str(root / "benchmarks" / "fragment_call.py"), "--help"],
                          capture_output=True, text=True, cwd=root / "tests", timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "--rounds" in proc.stdout
