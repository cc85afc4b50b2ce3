"""The persistent warp-specialised tcgen05 GEMM (compiler/ptx/tcgen05_ws_kernel.py) on the GPU through the
runtime (issue 18): on a B200 (sm_100), `tilec run --check` of every scheduled tcgen05 example (dense f16,
2:4-sparse f16 with META, block-scaled mxf8f6f4 and mxf4nvf4 with SFA / SFB, .ws M = 64, A in TMEM) and of a CTA pair (clusters of
two, also block-scaled and sparse) must match numpy, with more tiles than CTAs (the persistent loop wraps;
persistent=clc: a CTA per tile, most of them canceled and taken by running ones); on an H100 (sm_90) the same
command must say the tile cannot run there (exit 1, --emulate named, no traceback). A batch of problems of
every kind goes through Kernel.__call__ from torch (3-D A / B / D with strided batches, per-problem images:
test_ws_batch_from_torch; the same bytes on the CPU emulator: tests/test_runtime_emulated.py). The launch plan itself
(grid, cluster, dynamic shared memory, tensor maps, parameters) is checked without a GPU in
tests/test_runtime_launch.py."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.gpu.harness import ws_batch

pytest.importorskip("lark", reason="tilec's parser compiles the examples")
pytest.importorskip("cuda.core", reason="the runtime runs on cuda-core")

ROOT = Path(__file__).resolve().parents[2]
EX = ROOT / "examples"
WS_EXAMPLES = ["tcgen05_gemm_f16.tile", "tcgen05_gemm_sparse_f16.tile", "tcgen05_gemm_mxf8f6f4.tile",
               "tcgen05_gemm_mxf4nvf4.tile", "tcgen05_gemm_f16_bias_relu.tile", "tcgen05_gemm_ws_f16.tile",
               "tcgen05_gemm_a_tmem_f16.tile", "tcgen05_gemm_f16_clc.tile", "tcgen05_gemm_sparse_mxf4nvf4.tile"]
PAIR = """target sm_100a;
tile pair {
  engine tcgen05 cta_group=2;
  shape M=256 N=128 K=16;
  A: bf16 smem;
  B: bf16 smem;
  D: f32 tmem;
  schedule cta=256x128x64 stages=4 cluster=2;
}
"""


@pytest.fixture(scope="session")
def sm100(cupy_device):
    cp, sm = cupy_device
    if sm != 100:
        pytest.skip(f"sm_100a code (tcgen05; an arch-specific `.target`) runs on sm_100 only; the device is sm_{sm}")
    return cp


def _tilec(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    return subprocess.run([sys.executable, "-m", "compiler.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, input=stdin)


@pytest.mark.parametrize("name", WS_EXAMPLES)
def test_ws_example_checks_on_b200(sm100, name):
    proc = _tilec("run", "--check", str(EX / name))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "D matches numpy" in proc.stdout


def test_ws_more_tiles_than_sms_and_bench(sm100):
    """4096 x 4096: 1024 tiles of 128 x 128 on 148 CTAs (each loops over ~7 tiles: ring and accumulators
    wrap many times); --bench times it."""
    proc = _tilec("run", "--check", "--bench", "--iters", "20", "--shape", "4096,4096,1024",
                  str(EX / "tcgen05_gemm_f16.tile"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "D matches numpy" in proc.stdout and "median" in proc.stdout


def test_ws_cta_pair_cluster_launch(sm100):
    """cta_group::2: clusters of (2, 1, 1), min(tiles, SMs / 2) of them; 16 x 16 pair tiles > 74 pairs."""
    proc = _tilec("run", "--check", "--shape", "4096,2048,512", "-", stdin=PAIR)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "D matches numpy" in proc.stdout


PAIR_SCALED = PAIR.replace("tile pair {", "tile pmx {").replace("engine tcgen05 cta_group=2;",
                                                              "engine tcgen05 kind=mxf8f6f4 cta_group=2;") \
    .replace("A: bf16 smem;\n  B: bf16 smem;\n  D: f32 tmem;",
             "A: e4m3 smem;\n  B: e5m2 smem;\n  D: f32 tmem;\n  SFA: ue8m0 tmem;\n  SFB: ue8m0 tmem;\n  block_scale vec=32;") \
    .replace("K=16", "K=32").replace("256x128x64", "256x128x128")
PAIR_SPARSE = PAIR.replace("tile pair {", "tile psp {").replace("A: bf16 smem;\n  B: bf16 smem;",
                                                                "A: f16 smem;\n  B: f16 smem;") \
    .replace("K=16", "K=32").replace("D: f32 tmem;", "D: f32 tmem;\n  sparsity 2:4 metadata=runtime;")
# sparse and block-scaled (tcgen05.mma.sp .kind::mxf8f6f4.block_scale): META, SFA and SFB in each CTA's slots;
# the batch harness's tile (its batched launch: test_ws_batch_from_torch["sparse mxf8f6f4 pair"])
PAIR_SPARSE_SCALED = ws_batch.SPARSE_SCALED_PAIR


@pytest.mark.parametrize("source", [PAIR_SCALED, PAIR_SPARSE, PAIR_SPARSE_SCALED],
                         ids=["mxf8f6f4", "sparse_f16", "sparse_mxf8f6f4"])
def test_ws_scaled_and_sparse_pairs(sm100, source):
    """Block-scaled, sparse, and sparse block-scaled CTA pairs: images through tensor maps in both CTAs,
    tcgen05.cp.cta_group::2."""
    proc = _tilec("run", "--check", "--shape", "2048,1024,512", "-", stdin=source)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "D matches numpy" in proc.stdout


def test_ws_from_torch(sm100, torch_cuda):
    """The runtime called directly: A [M][K] and B [N][K] f16 as torch tensors (B passed as its K x N view),
    D allocated by the runtime; exact small values, so D is numpy's bit for bit."""
    import numpy as np

    torch = torch_cuda
    from compiler.runtime import load

    kernel = load(str(EX / "tcgen05_gemm_f16.tile"))
    m, n, k = 512, 384, 256
    rng = np.random.default_rng(3)
    a = (rng.integers(-3, 4, (m, k)) * 0.5).astype(np.float16)
    b = (rng.integers(-3, 4, (n, k)) * 0.5).astype(np.float16)
    d = kernel(torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda().T)
    torch.cuda.synchronize()
    assert d.shape == (m, n) and d.dtype == torch.float32
    assert np.array_equal(d.cpu().numpy(), a.astype(np.float32) @ b.astype(np.float32).T)


def test_ws_example_on_hopper_says_it_cannot_run(sm90):
    proc = _tilec("run", "--check", str(EX / "tcgen05_gemm_f16.tile"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "compiled for sm_100a" in proc.stderr and "--emulate" in proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr


def test_ws_fused_epilogue_partial_tiles(sm100):
    """The fused epilogue (bias + relu, f16 out through the smem staging and TMA stores) on a problem with
    partial tiles along M and N and a K tail: 1000 x 1000 x 1000 (rows of 2000 bytes: TMA strides)."""
    proc = _tilec("run", "--check", "--shape", "1000,1000,1000", str(EX / "tcgen05_gemm_f16_bias_relu.tile"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "D matches numpy" in proc.stdout


@pytest.mark.parametrize("name", ["tcgen05_gemm_sparse_f16.tile", "tcgen05_gemm_mxf8f6f4.tile",
                                  "tcgen05_gemm_mxf4nvf4.tile", "tcgen05_gemm_sparse_mxf4nvf4.tile"])
def test_ws_sparse_and_block_scaled_partial_tiles(sm100, name):
    """Sparse and block-scaled tiles at M, N off the tile (1000 x 1000, K = 1024 whole K blocks): the META /
    SFA / SFB images padded to whole tiles with legal values (tcgen05_ws_kernel.tmem_image)."""
    proc = _tilec("run", "--check", "--shape", "1000,1000,1024", str(EX / name))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "D matches numpy" in proc.stdout


@pytest.mark.parametrize("name, k", [("tcgen05_gemm_sparse_f16.tile", 1008), ("tcgen05_gemm_mxf8f6f4.tile", 1056),
                                     ("tcgen05_gemm_mxf4nvf4.tile", 1056), ("tcgen05_gemm_sparse_mxf4nvf4.tile", 1088)])
def test_ws_sparse_and_block_scaled_k_tail(sm100, name, k):
    """Sparse and block-scaled tiles at a K off the K block (the last block 48 of 64 / 32 of 128 / 32 of 256 /
    64 of 256 deep; rows stay multiples of 16 bytes, TMA strides: sparse e2m1 A's rows are K / 4 bytes): A and B zero-filled past K by the TMA, the META /
    SFA / SFB images of the last block padded past K with legal values (tcgen05_ws_kernel.tmem_image)."""
    proc = _tilec("run", "--check", "--shape", f"1000,1000,{k}", str(EX / name))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "D matches numpy" in proc.stdout


# ---- persistent=clc: cluster launch control (a CTA per tile; running CTAs cancel waiting ones) ----------

def test_clc_many_more_tiles_than_sms_and_bench(sm100):
    """4096 x 4096: 1024 tiles, a grid of 1024 CTAs of which about 148 run at once: the others are canceled
    by clusterlaunchcontrol.try_cancel and their tiles taken; --bench times it (compare with the static
    schedule of test_ws_more_tiles_than_sms_and_bench, same shape)."""
    proc = _tilec("run", "--check", "--bench", "--iters", "20", "--shape", "4096,4096,1024",
                  str(EX / "tcgen05_gemm_f16_clc.tile"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "D matches numpy" in proc.stdout and "median" in proc.stdout


def test_clc_cta_pair(sm100):
    """A CTA pair under cluster launch control: the leader's multicast try_cancel answers both CTAs; 16 x 16
    pair tiles = 256 clusters of (2, 1, 1)."""
    proc = _tilec("run", "--check", "--shape", "4096,2048,512", "-",
                  stdin=PAIR.replace("cluster=2;", "cluster=2 persistent=clc;"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "D matches numpy" in proc.stdout


# ---- a batch through Kernel.__call__ (3-D A / B / D, per-problem images, strided batches) -------------------

@pytest.mark.parametrize("key", ["dense", "sparse", "mxf8f6f4", "mxf4nvf4", "sparse mxf4nvf4", "sparse mxf8f6f4 pair",
                                 "a_tmem", "clc", "pair", "epilogue C"])
def test_ws_batch_from_torch(sm100, torch_cuda, key):
    """Every kind of ws kernel, a batch of 3 problems of 1000 (a pair: 1100) x 520 x 4 K blocks (partial tiles
    in M and N) through Kernel.__call__ with torch tensors: A, B, D (and C) batch-first, each problem 16 bytes
    after the previous one's end (the tensor maps' third stride), the gaps poisoned; the META / SFA / SFB
    images from Kernel.pack_image of the batch's natural layouts. D must match the reference problem by
    problem (exact, or within a fused epilogue's bound) and its gaps stay untouched. The same bytes run on the
    CPU emulator in tests/test_runtime_emulated.py (tests.gpu.harness.ws_batch)."""
    import numpy as np

    from compiler.runtime import load

    torch = torch_cuda
    result, tile = ws_batch.compile_kind(key)
    kernel = load(result, tile)
    m, n, k, batch = (1100 if ws_batch.is_pair(key) else 1000), 520, 4 * kernel.abi["tile_k"], 3
    p = ws_batch.batch_problem(result, tile, m, n, k, batch)
    dtypes = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32, "u32": torch.int32}
    bases, arrays = {}, {}
    for name, (raw, element) in p.raw.items():
        base = torch.from_numpy(ws_batch.strided_base(raw, ws_batch.POISON.get(name, 0x7F))).cuda()
        typed = base.view(dtypes.get(element, torch.uint8))
        shape, strides = ws_batch.typed_strides(raw, typed.element_size())
        bases[name], arrays[name] = base, typed.as_strided(shape, strides)
    args = [arrays["A"], arrays["B"].transpose(1, 2)] + ([arrays["C"]] if "C" in arrays else [])
    kw = {x: v for x, v in p.kwargs.items() if x != "bias"}
    if "bias" in p.kwargs:
        kw["bias"] = torch.from_numpy(p.kwargs["bias"]).cuda()
    for kwarg, name in ws_batch.IMAGES:
        if name in p.naturals:
            kw[kwarg] = kernel.pack_image(name, p.naturals[name], library="torch", k=k)
    d = kernel(*args, out=arrays["D"], **kw)
    torch.cuda.synchronize()
    assert d is arrays["D"]
    assert ws_batch.d_mismatches(p, bases["D"].cpu().numpy()) == []


@pytest.mark.parametrize("name", ["tcgen05_gemm_f16.tile", "tcgen05_gemm_sparse_f16.tile",
                                  "tcgen05_gemm_mxf4nvf4.tile", "tcgen05_gemm_sparse_mxf4nvf4.tile",
                                  "tcgen05_gemm_f16_bias_relu.tile"])
def test_ws_batch_check_and_bench(sm100, name):
    """`tilec run --check --bench --batch 3`: three problems of 1000 x 1000 x 1024 in one launch (partial
    tiles), each checked against numpy; --bench times the batched launch (TFLOP/s counts the 3 problems)."""
    proc = _tilec("run", "--check", "--bench", "--iters", "10", "--batch", "3", "--shape", "1000,1000,1024",
                  str(EX / name))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "x 3 problems" in proc.stdout and "D matches numpy" in proc.stdout and "median" in proc.stdout
