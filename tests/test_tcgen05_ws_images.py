"""Sparse and block-scaled warp-specialised tcgen05 kernels at any M, N, a batch and any K of whole metadata
chunks / scale vectors (the ABI's `requires`, `_WsKernel.k_units`): the META / SFA / SFB images
(tcgen05_ws_kernel.tmem_image) cover whole CTA (pair) tiles and K blocks, the rows past M / N and the K past
K of a partial last block padded with legal values (metadata nibbles 0b0100, scale factors 1.0: isa.tmem
METADATA_PAD_WORD, SCALE_ONE), each problem of a batch after the previous one's; the producer's image row
walks the batch like the tile loop. The emulator runs check D against numpy with D's row padding poisoned
(run_ws_problem: the TMA store must clip at N, rows past M are outside the array). A K tail is a real test
of the padding: host_problem's natural META words hold nibble 0 (no legal code: the emulator refuses it,
sim.tcgen05._kept_positions) for the chunks past K, and a scale factor past K other than a finite one
would make D NaN."""
from __future__ import annotations

import numpy as np
import pytest

import compiler
from compiler.isa.tmem import METADATA_PAD_WORD, SCALE_ONE
from compiler.ptx.tcgen05_ws_kernel import tensor_map_args, tmem_image
from compiler.runtime import abi as rabi
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


# K units (PTX ISA): a 2:4 chunk of f16 is 4 elements (9.7.16.10.8); .block16 / vec=32 scale factors cover
# 16 / 32 elements of K (9.7.16.10.7); packed e2m1 rows (2 a byte) need even K, which 16 covers
@pytest.mark.parametrize("path, unit", [(SPARSE, 4), (MXF8, 32), (NVF4, 16)])
def test_requires_whole_chunks_or_scale_vectors_only(path, unit):
    abi = _abi(compiler.compile_file(path))
    assert abi["requires"] == [f"K % {unit} == 0"] and "META / SFA / SFB" in abi["batch"]
    image = next(iter(abi["tmem_images"].values()))
    assert image["chunk" if "format" in image else "vector"] == unit
    # a partial last K block still has its image: ceil(K / K block) of them
    k = abi["tile_k"] + unit
    assert tensor_map_args(abi, 1, 1, k)[2]["dims"][1] == 2 * abi["tensor_maps"][2]["image_rows"]


def test_image_pads_the_k_tail_with_legal_values():
    """K = 68: the second K block of the sparse f16 image holds 1 live chunk of 16; its cells are those of
    natural words whose nibbles past chunk 16 are 0b0100 (and of words past K: all 0b0100), whatever the
    natural layout holds there; the scale image of NVF4 at K = 272 holds 1.0 past factor 17."""
    abi = _abi(compiler.compile_file(SPARSE))
    spec = abi["tmem_images"]["META"]
    rng = np.random.default_rng(1)
    natural = rng.choice([0x44444444, 0xEEEEEEEE, 0x4E4E4E4E], (128, 3)).tolist()
    natural = [[row[0], row[1], row[2] & 0xF | 0x12345670] for row in natural]     # chunks 16.. illegal (0x..0)
    padded = [[row[0], row[1], row[2] & 0xF | METADATA_PAD_WORD & ~0xF, METADATA_PAD_WORD] for row in natural]
    image = tmem_image(spec, natural, 128, 68)
    assert len(image) == 2 * abi["buffers"]["META"]["shape"][2]
    assert image == tmem_image(spec, padded, 128, 128)         # the same as a whole-block K, legal values
    assert image != tmem_image(spec, [row + [0] for row in natural], 128, 128)
    abi = _abi(compiler.compile_file(NVF4))
    spec = abi["tmem_images"]["SFA"]
    natural = rng.choice([0x30, 0x38, 0x40], (128, 17)).tolist()
    assert tmem_image(spec, natural, 128, 272) == \
        tmem_image(spec, [row + [SCALE_ONE["ue4m3"]] * 15 for row in natural], 128, 512)


# one small odd case each in the default run (2 partial tiles: a batch of 2 one-tile problems; K a K tail:
# sparse 64 + 36 of a second block, NVF4 144 of its only 256-deep block, 9 of each row's 16 factors live)
@pytest.mark.parametrize("path, shape", [(SPARSE, (70, 72, 100)), (NVF4, (70, 40, 144))])
def test_odd_size_and_batch_emulated(path, shape):
    em = compiler.emulate(compiler.compile_file(path), shape=shape, batch=2, mode="random", seed=3)
    assert em.ok, f"{em.mismatches} elements differ"
    assert em.d.shape == (2,) + shape[:2]


@pytest.mark.slow
@pytest.mark.parametrize("path, shape, batch, mode, seed", [
    (SPARSE, (200, 300, 128), 2, "adversarial", 1),
    (SPARSE, (129, 1, 64), 3, "random", 2),
    (SPARSE, (200, 300, 196), 2, "adversarial", 6),      # K tails: 3 blocks, the last 4 of 64 deep
    (SPARSE, (129, 65, 4), 2, "random", 7),              # one chunk: the only block partial
    (MXF8, (200, 300, 256), 2, "random", 3),
    (MXF8, (1, 129, 128), 2, "adversarial", 4),
    (MXF8, (200, 300, 288), 2, "adversarial", 8),        # 3 blocks, the last 32 of 128
    (MXF8, (65, 129, 32), 2, "random", 9),
    (NVF4, (257, 129, 512), 2, "random", 5),
    (NVF4, (257, 129, 528), 2, "adversarial", 10),       # 3 blocks, the last 16 of 256
    (NVF4, (64, 1, 16), 3, "random", 11),
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


# every sparse kind the warp-specialised kernel serves, dense-MMA (M = 128) and .ws (M = 64 / 32) data paths,
# the block-scaled fp4 kinds with 32-element vectors, and sparse block-scaled fp8 / NVFP4, at a K tail (one block and one K unit: a block that
# is almost all padding) on two partial tiles
KINDS = {
    "tf32 1:2": ("tf32", "tf32", "f32", "sparsity 1:2 metadata=runtime;", "", 16, 32),
    "e4m3 2:4": ("e4m3", "e4m3", "f32", "sparsity 2:4 metadata=runtime;", "", 64, 128),
    "s8 2:4": ("s8", "s8", "s32", "sparsity 2:4 metadata=runtime;", "", 64, 128),
    "mxf4 vec=32": ("e2m1", "e2m1", "f32", "SFA: ue8m0 tmem; SFB: ue8m0 tmem; block_scale vec=32;", " kind=mxf4", 64,
                    256),
    "mxf4nvf4 vec=32": ("e2m1", "e2m1", "f32", "SFA: ue8m0 tmem; SFB: ue8m0 tmem; block_scale vec=32;",
                        " kind=mxf4nvf4", 64, 256),
    # sparse and block-scaled: the K unit is one scale factor's K, twice the dense one (Table 54)
    "mxf8f6f4 2:4 vec=32": ("e4m3", "e5m2", "f32", "SFA: ue8m0 tmem; SFB: ue8m0 tmem; block_scale vec=32; "
                            "sparsity 2:4 metadata=runtime;", " kind=mxf8f6f4", 64, 256),
    "mxf4nvf4 4:8 vec=16": ("e2m1", "e2m1", "f32", "SFA: ue4m3 tmem; SFB: ue4m3 tmem; block_scale vec=16; "
                            "sparsity 4:8 metadata=runtime;", " kind=mxf4nvf4", 128, 256),
}


def _kind_tile(which: str, m: int, ws: str) -> str:
    a, b, d, extra, kind, k, kb = KINDS[which]
    return (f"target sm_100a;\ntile t {{ engine tcgen05{kind}{ws}; shape M={m} N=128 K={k}; A: {a} smem; "
            f"B: {b} smem; D: {d} tmem; {extra} schedule cta={m}x128x{kb} stages=3; }}\n")


@pytest.mark.slow
@pytest.mark.parametrize("which, m, ws", [(w, 128, "") for w in KINDS] +
                         [(w, m, " ws") for w in KINDS if "vec" not in w for m in (64, 32)])
def test_every_kind_k_tail_emulated(which, m, ws):
    r = compiler.compile_source(_kind_tile(which, m, ws))
    abi = _abi(r)
    unit = rabi.size_units(abi)["K"]
    assert unit == {"tf32 1:2": 2, "e4m3 2:4": 4, "s8 2:4": 4, "mxf8f6f4 2:4 vec=32": 64}.get(which, 32)
    em = compiler.emulate(r, shape=(m + 3, 130, abi["tile_k"] + unit), batch=2, mode="random", seed=12)
    assert em.ok, f"{em.mismatches} elements differ"


@pytest.mark.slow
@pytest.mark.parametrize("which", list(PAIRS))
def test_pairs_k_tail_emulated(which):
    r = compiler.compile_source(PAIRS[which])
    abi = _abi(r)
    k = 2 * abi["tile_k"] + rabi.size_units(abi)["K"]
    em = compiler.emulate(r, shape=(300, 200, k), batch=2, mode="adversarial", seed=13)
    assert em.ok, f"{em.mismatches} elements differ"
