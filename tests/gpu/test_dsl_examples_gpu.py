"""Every example in examples/ that a pre-Blackwell GPU can run, compiled from its file through the whole
DSL pipeline (compiler.compile_file: parser, passes, kernel selection from the `schedule` statement, PTX
emission) and launched from the ABI the compiler reports (parameters, grid, requires, tensor maps), on an
exact problem of a few CTA tiles: D = A*B + C must equal numpy bit for bit (3-significant-bit inputs,
compiler.sparse.random_values; D poisoned first; a mismatch is saved under $OUT).

examples/sparse_wgmma_f16.tile thus runs as written: `mma=wgmma cluster=2` (the warpgroup kernel with CTA
pairs sharing B through TMA multicast), not a configuration rebuilt by hand. Examples whose target the
device cannot run (sm_100a and later here) are skipped with the reason; lark (tilec's parser) is needed."""
from __future__ import annotations

import re
import zlib
from pathlib import Path

import numpy as np
import pytest

from tests.gpu.harness import sparse_kernels as sk

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
_TARGET = re.compile(r"^\s*target\s+(sm_\d+[af]?)\s*;", re.M)


def example_target(path: Path) -> str:
    match = _TARGET.search(path.read_text())
    assert match, f"{path.name} has no target statement"
    return match.group(1)


# the examples a Hopper (or older) GPU could run at all: targets up to sm_90a
PRE_BLACKWELL = sorted(p.name for p in EXAMPLES.glob("*.tile") if int(example_target(p)[3:].rstrip("af")) <= 90)


def test_pre_blackwell_examples_are_the_sparse_ones():
    # the mma.sp examples (one-instruction tiles, the pipelined mma.sp GEMM, the warpgroup wgmma GEMM) are
    # the ones a Hopper GPU runs; tcgen05 examples need sm_100a or later. Derived from the files, so a new
    # example joins by itself; the output types benchmarks/sparse_gemm.py times must be among them.
    engines = {name: set(re.findall(r"^\s*engine\s+(\S+?)[\s;]", (EXAMPLES / name).read_text(), re.M))
               for name in PRE_BLACKWELL}
    assert engines and all(e == {"mma.sp"} for e in engines.values()), engines
    assert {"sparse_f16.tile", "sparse_gemm_f16.tile", "sparse_wgmma_f16.tile", "sparse_wgmma_f16_out_f16.tile",
            "sparse_wgmma_bf16_out_bf16.tile", "sparse_wgmma_e4m3_out_bf16.tile",
            "sparse_wgmma_s8_out_s32.tile", "sparse_wgmma_f16_persistent.tile",
            "sparse_wgmma_f16_decode_split_k.tile", "sparse_wgmma_setmaxnreg.tile"} <= set(PRE_BLACKWELL)


@pytest.mark.parametrize("name", PRE_BLACKWELL)
def test_dsl_example_on_gpu(cupy_device, name):
    cp, sm = cupy_device
    path = EXAMPLES / name
    target = example_target(path)
    if not sk.target_runs_on(target, sm):
        pytest.skip(f"{name} is {target} code; the device is sm_{sm}")
    pytest.importorskip("lark", reason="tilec's parser compiles the example")
    import compiler

    result = compiler.compile_file(str(path))
    tiles = result.to_json()["tiles"]
    assert tiles, f"{name} has no tile"
    for tile_name, tile in tiles.items():
        abi = tile["kernel"]
        assert abi["instruction"] in result.ptx, (tile_name, abi["instruction"])      # the kernel the ABI names
        if "epilogue" in abi:       # a fused epilogue: bias / alpha / beta through the runtime, `tilec run --check`
            from compiler.run import run_tile

            ok, lines = run_tile(result, tile_name, sk.abi_problem_size(abi, scale=(4, 3, 4)), check=True,
                                 bench=False, iters=0, warmup=0, seed=zlib.crc32(name.encode()))
            assert ok, "\n".join(lines)
            continue
        shape, a_t, b_t, cd, out = sk.abi_types(abi)
        if "bf16" in (a_t, b_t, out) or a_t.startswith("e"):
            pytest.importorskip("ml_dtypes", reason=f"{a_t} / {out} host data needs ml_dtypes")
        m, n, k = sk.abi_problem_size(abi, scale=(4, 3, 4))
        with_c = any(p["name"] == "c" for p in abi["params"])
        p = sk.make_problem(np.random.default_rng(zlib.crc32(f"{name}:{tile_name}".encode())),
                            a_t, b_t, cd, shape, m, n, k, with_c)
        d = sk.launch_from_abi(cp, result.ptx, abi, p)
        ref = sk.reference(p, cd, out)
        bad = sk.differing_bytes(d, ref)
        if len(bad):
            sk.save_failure(f"example_{tile_name}", p, d, ref)
        assert len(bad) == 0, (f"{tile_name} ({m} x {n} x {k}): {len(bad)} bytes differ, first at {bad[0]}: "
                               f"{d.ravel()[:4]} vs {ref.ravel()[:4]}")
