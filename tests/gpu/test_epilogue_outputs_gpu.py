"""1-byte outputs of the fused epilogue and fp8 promotion on a Hopper GPU, against torch: examples/sparse_wgmma_s8_s8.tile
(s8 in, s32 accumulate, D = sat_s8(rni(scale * A*B))) and an e4m3 D (e4m3 in, f32 accumulate, D =
e4m3(scale * A*B), .satfinite), through compiler.runtime (scale=param passed at launch). torch computes the
reference from the same dense A and B in float64 on the GPU (the inputs have few significant bits:
compiler/sparse.py random_values, so every sum is exact): torch.round (ties to even) and clamp for s8,
clamp to +-448 and .to(torch.float8_e4m3fn) (round to nearest even) for e4m3 - exactly the conversions of
compiler/isa/epilogue_outputs.py, so D must match bit for bit. Then `schedule promote=4` against no
promotion on a long K (test_fp8_promotion_on_gpu). Skipped without an sm_90 GPU and torch."""
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


PROMOTE_TILE = """target sm_90a;
tile fp8 {
  engine mma.sp;
  shape M=16 N=8 K=64;
  A: e4m3 global;
  B: e4m3 global;
  D: f32 global;
  sparsity 2:4 metadata=runtime selector=0;
  schedule cta=128x128x128 warps=8x1 stages=4 mma=wgmma cluster=2%s;
}
"""


def test_fp8_promotion_on_gpu(torch_cuda, sm90):
    """schedule promote=4 against no promotion on a long K (docs/fp8_accumulation.md): fp8 inputs of full
    precision (uniform in [0.25, 1), rounded to e4m3: every sum grows, the worst case for a sum that keeps
    few bits), f32 D, against torch's float64 product. wgmma's fp8 sums keep about 14 bits (the DeepSeek-V3
    report), so the unpromoted kernel's relative error is expected near 1e-3 at K = 16384 and the promoted
    one's near f32 rounding: the promoted error must be the smaller by 2x at least (the numbers are in the
    assertion message: docs/fp8_accumulation.md "Measured")."""
    pytest.importorskip("lark", reason="tilec's parser compiles the tile")
    ml_dtypes = pytest.importorskip("ml_dtypes")
    import numpy as np

    import compiler
    from compiler import sparse
    from compiler.runtime import load
    from compiler.runtime.kernel import upload

    torch = torch_cuda
    m, n, k = 256, 256, 16384
    rng = np.random.default_rng(0)
    pattern = sparse.random_sparse(rng, m, k, "e4m3", "m16n8k64").astype(np.float32) != 0
    a = np.where(pattern, rng.uniform(0.25, 1.0, (m, k)), 0.0).astype(ml_dtypes.float8_e4m3fn)
    b = rng.uniform(0.25, 1.0, (k, n)).astype(ml_dtypes.float8_e4m3fn)
    ref = torch.from_numpy(a.astype(np.float64)).cuda() @ torch.from_numpy(b.astype(np.float64)).cuda()
    errors = {}
    for promote in ("", " promote=4"):
        result = compiler.compile_source(PROMOTE_TILE % promote)
        kernel = load(result, "fp8")
        d = kernel(kernel.pack_a(a, library="torch"), upload(sparse.pack_b(b, "e4m3", "m16n8k64"), "torch", "e4m3").T)
        torch.cuda.synchronize()
        errors[promote.strip() or "none"] = float(torch.linalg.norm(d.double() - ref) / torch.linalg.norm(ref))
    assert errors["promote=4"] * 2 <= errors["none"], errors
