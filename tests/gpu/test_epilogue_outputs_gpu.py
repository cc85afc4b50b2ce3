"""1-byte outputs of the fused epilogue on a Hopper GPU, against torch: examples/sparse_wgmma_s8_s8.tile
(s8 in, s32 accumulate, D = sat_s8(rni(scale * A*B))) and an e4m3 D (e4m3 in, f32 accumulate, D =
e4m3(scale * A*B), .satfinite), through compiler.runtime (scale=param passed at launch). torch computes the
reference from the same dense A and B in float64 on the GPU (the inputs have few significant bits:
compiler/sparse.py random_values, so every sum is exact): torch.round (ties to even) and clamp for s8,
clamp to +-448 and .to(torch.float8_e4m3fn) (round to nearest even) for e4m3 - exactly the conversions of
compiler/isa/epilogue_outputs.py, so D must match bit for bit. Skipped without an sm_90 GPU and torch."""
from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHAPE = (512, 768, 1024)          # 2 x 3 CTA tiles of 128 x 256 (pairs of 2), 8 K blocks of 128

E4M3_TILE = """target sm_90a;
tile e4m3_out {
  engine mma.sp;
  shape M=16 N=8 K=64;
  A: e4m3 global;
  B: e4m3 global;
  D: e4m3 global;
  sparsity 2:4 metadata=runtime selector=0;
  schedule cta=128x256x128 warps=8x1 stages=4 mma=wgmma cluster=2;
  epilogue scale=param;
}
"""


def run(torch, result, tile: str, scale: float, shape=SHAPE, seed: int = 0):
    """(D from the kernel, torch's float64 A*B on the GPU) for a random 2:4 problem."""
    import numpy as np

    from compiler.emulator.sparse_host import sparse_problem
    from compiler.runtime import load
    from compiler.runtime.kernel import upload

    kernel = load(result, tile)
    form = result.tiles[tile].facts["form"]
    m, n, k = shape
    p = sparse_problem(form, m, n, k, np.random.default_rng(seed), False)
    a = kernel.pack_a(p.a, library="torch")
    b = upload(p.bt, "torch", form.b_type).T
    d = kernel(a, b, scale=scale)
    torch.cuda.synchronize()
    dense = lambda x: torch.from_numpy(np.asarray(x).astype(np.float64)).cuda()      # noqa: E731
    return d, dense(p.a) @ dense(p.b)


def test_s8_output_matches_torch(torch_cuda, sm90):
    pytest.importorskip("lark", reason="tilec's parser compiles the tile")
    import compiler

    torch = torch_cuda
    result = compiler.compile_file(ROOT / "examples" / "sparse_wgmma_s8_s8.tile")
    scale = 2.0 ** -10                  # |A*B| of some 10^5 with s8 inputs: D spans s8 and saturates some
    d, ab = run(torch, result, "sparse_wgmma_s8_s8", scale)
    ref = torch.clamp(torch.round(ab * scale), -128, 127).to(torch.int8)
    assert d.dtype == torch.int8
    assert int((d != ref).sum()) == 0
    assert int((ref == 127).sum()) > 0 and int((ref.abs() < 127).sum()) > ref.numel() // 2


def test_e4m3_output_matches_torch(torch_cuda, sm90):
    pytest.importorskip("lark", reason="tilec's parser compiles the tile")
    import compiler

    torch = torch_cuda
    result = compiler.compile_source(E4M3_TILE)
    scale = 8.0                         # |A*B| of a few tens: some of D beyond 448 (satfinite)
    d, ab = run(torch, result, "e4m3_out", scale)
    ref = torch.clamp((ab * scale).float(), -448.0, 448.0).to(torch.float8_e4m3fn)
    assert d.dtype == torch.float8_e4m3fn
    assert int((d.view(torch.uint8) != ref.view(torch.uint8)).sum()) == 0
    assert int((ref.float().abs() == 448.0).sum()) > 0
