"""The compact metadata layout on an H100 / H200 (compiler/sparse.py "Compact metadata"; the sparse wgmma kernel
for 16-bit A reads 16 words per 16-row tile and k-step, lane l word 2*(l//4) + l%2): the f16 and bf16 decode tiles
of examples/sparse_wgmma_decode.tile and the split-K tiles of examples/sparse_wgmma_f16_decode_split_k.tile, launched
through compiler.runtime from torch (Kernel.pack_a packs by the ABI), D against torch's matmul of the dense
operands. Exact problems (compiler/emulator/sparse_host.sparse_problem: 3 significant bits, sums exact in f32), so
D must equal torch's f32 product rounded to the tile's D type bit for bit. Partial tiles in M and N and a K tail
(the packer's padding of the compact buffer) are included. A 32-lane buffer is refused before any launch.

Run on the GPU machine: python -m pytest -q -m gpu tests/gpu/test_compact_metadata_gpu.py"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("lark", reason="tilec's parser compiles the examples")
pytest.importorskip("cuda.core", reason="the runtime runs on cuda-core")
pytest.importorskip("ml_dtypes", reason="bf16 host data needs ml_dtypes")

from compiler import sparse  # noqa: E402
from compiler.emulator.sparse_host import edge_problem, sparse_problem  # noqa: E402
from compiler.runtime import ArgumentError, SparseA, load  # noqa: E402
from compiler.runtime.kernel import upload  # noqa: E402

EX = Path(__file__).resolve().parents[2] / "examples"

TILES = [("sparse_wgmma_decode.tile", t) for t in ("sparse_wgmma_f16_decode_n64", "sparse_wgmma_f16_decode_n128",
                                                     "sparse_wgmma_bf16_decode_n64", "sparse_wgmma_bf16_decode_n128")] + \
        [("sparse_wgmma_f16_decode_split_k.tile", t) for t in ("sparse_wgmma_f16_decode_split_k",
                                                                "sparse_wgmma_f16_decode_split_k_n16",
                                                                "sparse_wgmma_f16_decode_split_k_n128")]
# decode shapes (N = 16 / 64 / 128 activation columns), a partial tile and a K tail
SHAPES = [(8192, 16, 2048), (2048, 64, 4096), (1000, 100, 2000)]


def _run(torch, example: str, tile: str, shape, seed: int):
    from compiler.driver import compile_file

    result = compile_file(str(EX / example))
    kernel = load(result, tile)
    form = result.tiles[tile].facts["form"]
    d_type = result.tiles[tile].payload.operands["D"].dtype
    m, n, k = shape
    whole = m % 16 == 0 and k % form.k == 0
    p = (sparse_problem if whole else edge_problem)(form, m, n, k, np.random.default_rng(seed), False)
    a = kernel.pack_a(p.a, library="torch")
    assert a.metadata.shape[-1] == 16, "f16 / bf16 wgmma kernels take the compact metadata layout"
    b = upload(np.ascontiguousarray(p.b.T), "torch", form.b_type).T          # K x N, K contiguous
    d = kernel(a, b)
    torch.cuda.synchronize()
    dense = upload(p.a, "torch", form.a_type)
    ref = (dense.float() @ b.float()).to(d.dtype)
    return kernel, d, ref, a


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("example,tile", TILES, ids=[t for _, t in TILES])
def test_compact_metadata_against_torch(sm90, torch_cuda, example, tile, shape):
    torch = torch_cuda
    _, d, ref, _ = _run(torch, example, tile, shape, seed=sum(shape))
    bad = (d.view(torch.int16) != ref.view(torch.int16)).nonzero()
    assert len(bad) == 0, f"{len(bad)} elements of D differ from torch; first at {bad[:3].tolist()}"


def test_a_32_lane_buffer_is_refused(sm90, torch_cuda):
    torch = torch_cuda
    kernel, _, _, a = _run(torch, "sparse_wgmma_decode.tile", "sparse_wgmma_f16_decode_n64", (256, 64, 256), 1)
    full = upload(sparse.expand_metadata(a.metadata.cpu().numpy().view(np.uint32), "f16", "m16n8k32"), "torch", "u32")
    b = torch.zeros((64, 256), device="cuda", dtype=torch.float16).t()
    with pytest.raises(ArgumentError, match="takes 16 metadata words per 16-row tile and k-step"):
        kernel(SparseA(a.values, full, a.element, a.m, a.k), b)
