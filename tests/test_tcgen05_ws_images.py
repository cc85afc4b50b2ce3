"""Sparse and block-scaled warp-specialised tcgen05 kernels at any M, N and a batch (K in whole K blocks):
the META / SFA / SFB images (tcgen05_ws_kernel.tmem_image) cover whole CTA (pair) tiles, the rows past M / N
padded with legal values (metadata nibbles 0b0100, scale factors 1.0: isa.tmem METADATA_PAD_WORD, SCALE_ONE),
each problem of a batch after the previous one's; the producer's image row walks the batch like the tile loop.
The emulator runs check D against numpy with D's row padding poisoned (run_ws_problem: the TMA store must
clip at N, rows past M are outside the array)."""
from __future__ import annotations

import numpy as np
import pytest

import compiler
from compiler.isa.tmem import METADATA_PAD_WORD, SCALE_ONE
from compiler.ptx.tcgen05_ws_kernel import tensor_map_args, tmem_image
from tests.test_tcgen05_ws_kernel import PAIRS

SPARSE = "examples/tcgen05_gemm_sparse_f16.tile"
MXF8 = "examples/tcgen05_gemm_mxf8f6f4.tile"
NVF4 = "examples/tcgen05_gemm_mxf4nvf4.tile"


def _abi(r):
    return r.to_json()["tiles"][next(iter(r.tiles))]["kernel"]


@pytest.mark.parametrize("path, pad", [(SPARSE, METADATA_PAD_WORD), (NVF4, SCALE_ONE["ue4m3"])])
def test_image_pads_partial_tiles_with_legal_values(path, pad):
    """130 rows: 2 row tiles, rows 130..255 as if the natural layout held `pad` there (whatever it holds);
    the buffer shape and the image map's rows count them, times the batch."""
    abi = _abi(compiler.compile_file(path))
    name = next(iter(abi["tmem_images"]))
    spec = abi["tmem_images"][name]
    k = abi["tile_k"]
    per_block = spec["words"] if "format" in spec else \
        spec["columns"] // spec["group_columns"] * 4 // spec["step_bytes"] * spec["nsf"]
    rng = np.random.default_rng(0)
    natural = rng.integers(0, 256, (256, per_block)).tolist()
    if "format" in spec:                        # legal metadata words: nibbles 0b0100 / 0b1110 (2:4, in order)
        natural = [[int(rng.choice([0x44444444, 0xEEEEEEEE, 0x4E4E4E4E])) for _ in row] for row in natural]
    padded = natural[:130] + [[pad] * per_block] * 126
    image = tmem_image(spec, natural, 130, k)
    assert image == tmem_image(spec, padded, 256, k)
    assert image != tmem_image(spec, natural, 256, k)          # the natural rows past 130 are not read
    assert len(image) == 2 * abi["buffers"][name]["shape"][2]  # 2 row tiles x 1 K block
    rows = next(t for t in tensor_map_args(abi, 130, 130, k, batch=3) if t["operand"] == name)["dims"][1]
    assert rows == 2 * 1 * 3 * next(t["image_rows"] for t in abi["tensor_maps"] if t["operand"] == name)


def test_requires_whole_k_blocks_only():
    for path in (SPARSE, MXF8, NVF4):
        abi = _abi(compiler.compile_file(path))
        assert abi["requires"] == [f"K % {abi['tile_k']} == 0"] and "META / SFA / SFB" in abi["batch"]


# one small odd case each in the default run (2 partial tiles: a batch of 2 one-tile problems)
@pytest.mark.parametrize("path, shape", [(SPARSE, (70, 72, 64)), (NVF4, (70, 40, 256))])
def test_odd_size_and_batch_emulated(path, shape):
    em = compiler.emulate(compiler.compile_file(path), shape=shape, batch=2, mode="random", seed=3)
    assert em.ok, f"{em.mismatches} elements differ"
    assert em.d.shape == (2,) + shape[:2]


@pytest.mark.slow
@pytest.mark.parametrize("path, shape, batch, mode, seed", [
    (SPARSE, (200, 300, 128), 2, "adversarial", 1),
    (SPARSE, (129, 1, 64), 3, "random", 2),
    (MXF8, (200, 300, 256), 2, "random", 3),
    (MXF8, (1, 129, 128), 2, "adversarial", 4),
    (NVF4, (257, 129, 512), 2, "random", 5),
])
def test_odd_sizes_and_batches_emulated(path, shape, batch, mode, seed):
    em = compiler.emulate(compiler.compile_file(path), shape=shape, batch=batch, mode=mode, seed=seed)
    assert em.ok, f"{em.mismatches} elements differ"


@pytest.mark.slow
@pytest.mark.parametrize("which", list(PAIRS))
def test_pairs_odd_size_and_batch_emulated(which):
    """A pair's META / SFA image has 2 row tiles per 256-row pair tile (the second CTA's may be all padding)."""
    r = compiler.compile_source(PAIRS[which])
    em = compiler.emulate(r, shape=(300, 200, 2 * _abi(r)["tile_k"]), batch=2, mode="adversarial", seed=1)
    assert em.ok, f"{em.mismatches} elements differ"
