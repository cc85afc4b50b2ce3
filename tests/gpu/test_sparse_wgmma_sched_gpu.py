"""The sparse wgmma kernel's schedules on the H100 (issue 17): persistent CTAs (`persistent=static`,
examples/sparse_wgmma_f16_persistent.tile) at 4096^3 (512 CTA tiles in 256 pairs over the 66 pairs of 132
SMs: every pair walks 3 or 4 tiles, the ring's stage and phase carried across them) and at edge shapes and
batches. Each run goes through compiler.runtime (the grid read from the ABI with the device's SM count),
with B and D strided views and a guard band around D (tests/gpu/test_sparse_wgmma_edges_gpu.py `run`: every
byte outside D must keep its sentinel; D against numpy bit for bit, the inputs' few significant bits keep
every f32 partial sum exact up to K = 8192). The CPU side of the same checks: tests/test_sparse_wgmma_sched.py."""
from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("lark", reason="tilec's parser compiles the examples")
pytest.importorskip("cuda.core", reason="the runtime runs on cuda-core")

from tests.gpu.test_sparse_wgmma_edges_gpu import run  # noqa: E402

PERSISTENT = "sparse_wgmma_f16_persistent.tile"


@pytest.mark.parametrize("shape", [(4096, 4096, 4096), (4100, 3000, 1000), (200, 136, 72), (1, 1, 1)],
                         ids=lambda s: "x".join(map(str, s)))
def test_persistent_any_size_and_guard_band(sm90, torch_cuda, shape):
    run(torch_cuda, PERSISTENT, *shape)


@pytest.mark.parametrize("shape,batch", [((300, 600, 100), 3), ((2048, 2048, 512), 2)])
def test_persistent_batch(sm90, torch_cuda, shape, batch):
    run(torch_cuda, PERSISTENT, *shape, batch=batch, seed=batch)


def test_persistent_grid_is_the_sm_count(sm90, torch_cuda):
    """4096^3: min(512 tiles, SMs) CTAs, in pairs: the launch the runtime makes."""
    from compiler.runtime import load

    kernel = load(str(Path(__file__).resolve().parents[2] / "examples" / PERSISTENT)).load()
    sms = torch_cuda.cuda.get_device_properties(0).multi_processor_count
    grid, cluster, _, _ = kernel.launch_dims(4096, 4096, 4096)
    assert cluster == (2, 1, 1) and grid == (min(512, sms) // 2, 1, 1)


# split-K (examples/sparse_wgmma_f16_decode_split_k.tile): the decode shapes it is meant for (64 tiles of
# 128 x 64 at N <= 64, 4 slices each), its N = 16 and N = 128 tiles, K tails and slice counts that do not
# divide the K blocks, a batch. The reduction sums the slices in order, so D is bit for bit numpy's.
SPLIT = "sparse_wgmma_f16_decode_split_k.tile"


@pytest.mark.parametrize("tile,shape", [
    ("sparse_wgmma_f16_decode_split_k", (8192, 256, 8192)),
    ("sparse_wgmma_f16_decode_split_k", (8192, 16, 8192)),
    ("sparse_wgmma_f16_decode_split_k_n16", (8192, 16, 8192)),
    ("sparse_wgmma_f16_decode_split_k_n128", (8192, 256, 8192)),
    ("sparse_wgmma_f16_decode_split_k", (1000, 50, 1000)),         # 16 K blocks in 4 slices, a K tail
    ("sparse_wgmma_f16_decode_split_k_n16", (300, 16, 130)),       # 3 K blocks in 4 slices: one empty
    ("sparse_wgmma_f16_decode_split_k_n128", (5, 7, 3)),
], ids=lambda x: x if isinstance(x, str) else "x".join(map(str, x)))
def test_split_k_decode_shapes_and_guard_band(sm90, torch_cuda, tile, shape):
    run(torch_cuda, SPLIT, *shape, tile=tile)


def test_split_k_batch(sm90, torch_cuda):
    run(torch_cuda, SPLIT, 700, 64, 900, batch=3, seed=3)


def test_split_k_semaphores_are_zero_after_each_launch(sm90, torch_cuda):
    """The reducing CTAs reset their semaphores: the same Kernel (same scratch) launched again on new data
    is right again, and the semaphores read zero after every launch."""
    from compiler.runtime import load

    kernel = load(str(Path(__file__).resolve().parents[2] / "examples" / SPLIT))
    for seed in (1, 2, 3):
        run(torch_cuda, SPLIT, 2048, 64, 4096, seed=seed, kernel=kernel)
        (held,) = kernel._scratch.values()
        assert int(held["semaphores"].count_nonzero()) == 0


# the bf16 and e4m3 (-> bf16) N = 16 split-K tiles (examples/sparse_wgmma_bf16_e4m3_decode_split_k.tile):
# the benchmark's 8192 x 16 x 8192 decode rows, and an edge shape with a K tail and an empty slice
DECODE_BF16_E4M3 = "sparse_wgmma_bf16_e4m3_decode_split_k.tile"


@pytest.mark.parametrize("tile", ["sparse_wgmma_bf16_decode_split_k_n16", "sparse_wgmma_e4m3_decode_split_k_n16"])
@pytest.mark.parametrize("shape", [(8192, 16, 8192), (300, 13, 330)], ids=lambda s: "x".join(map(str, s)))
def test_bf16_and_e4m3_split_k_decode_tiles(sm90, torch_cuda, tile, shape):
    run(torch_cuda, DECODE_BF16_E4M3, *shape, tile=tile)


# stream-K (examples/sparse_wgmma_f16_decode_stream_k.tile): min(tiles x K blocks, SMs) CTAs, each an equal
# range of (tile, K block) iterations. The decode shapes (64 tiles of 128 x 64 and 128 K blocks at N <= 64:
# every tile shared by 2 or 3 CTAs), the N = 16 tile, K tails, fewer iterations than SMs (a tile over as many
# CTAs as it has K blocks), a tile count that does not divide the SMs, odd edges; D bit for bit numpy's (the
# partials are summed in K order) and the guard band around D untouched.
STREAM = "sparse_wgmma_f16_decode_stream_k.tile"


@pytest.mark.parametrize("tile,shape", [
    ("sparse_wgmma_f16_decode_stream_k", (8192, 64, 8192)),
    ("sparse_wgmma_f16_decode_stream_k", (8192, 256, 8192)),
    ("sparse_wgmma_f16_decode_stream_k", (8192, 16, 8192)),
    ("sparse_wgmma_f16_decode_stream_k_n16", (8192, 16, 8192)),
    ("sparse_wgmma_f16_decode_stream_k", (2048, 2048, 2048)),
    ("sparse_wgmma_f16_decode_stream_k", (1000, 50, 1000)),       # 8 x 1 tiles of 16 K blocks, a K tail
    ("sparse_wgmma_f16_decode_stream_k_n16", (300, 16, 130)),     # 3 tiles x 3 blocks: 9 CTAs of 1 block
    ("sparse_wgmma_f16_decode_stream_k", (5, 7, 3)),
    ("sparse_wgmma_f16_decode_stream_k", (4100, 130, 3000)),
], ids=lambda x: x if isinstance(x, str) else "x".join(map(str, x)))
def test_stream_k_shapes_and_guard_band(sm90, torch_cuda, tile, shape):
    run(torch_cuda, STREAM, *shape, tile=tile)


def test_stream_k_batch(sm90, torch_cuda):
    run(torch_cuda, STREAM, 700, 64, 900, batch=3, seed=3)


def test_stream_k_semaphores_zero_and_bits_repeat(sm90, torch_cuda):
    """The reducing CTAs reset their semaphores (zero after every launch, the same scratch reused), and the
    same input gives the same bits launch after launch (the workspace sums do not depend on timing)."""
    from compiler.runtime import load

    kernel = load(str(Path(__file__).resolve().parents[2] / "examples" / STREAM))
    for seed in (1, 2, 1):
        run(torch_cuda, STREAM, 2048, 64, 4096, seed=seed, kernel=kernel)
        (held,) = kernel._scratch.values()
        assert int(held["semaphores"].count_nonzero()) == 0


@pytest.mark.parametrize("poison", [0x7FC0_0000, 0x7F7F_7F7F, 0])        # NaN, a huge f32, zeros
def test_stream_k_ignores_what_the_workspace_held(sm90, torch_cuda, poison):
    """The runtime allocates stream-K's workspace without clearing it and keeps it across launches; the
    kernel must not depend on what it held: between launches the whole workspace is overwritten with a
    NaN, a huge value or zeros, and D is right again bit for bit (a reducer that read a slot its CTA had
    not yet stored in this launch would sum the poison; the CPU side: tests/test_sparse_wgmma_sched.py
    STREAM_MUTATIONS["every_sharer_reduces"], refused by the emulator's uninitialised workspace)."""
    from compiler.runtime import load

    kernel = load(str(Path(__file__).resolve().parents[2] / "examples" / STREAM))
    for seed in (1, 2, 3):
        run(torch_cuda, STREAM, 2048, 64, 4096, seed=seed, kernel=kernel)
        (held,) = kernel._scratch.values()
        held["workspace"].view(torch_cuda.int32).fill_(poison)       # the f32 slots' bits
        torch_cuda.cuda.synchronize()


def test_stream_k_grid_is_the_sm_count(sm90, torch_cuda):
    from compiler.runtime import load

    kernel = load(str(Path(__file__).resolve().parents[2] / "examples" / STREAM)).load()
    sms = torch_cuda.cuda.get_device_properties(0).multi_processor_count
    grid, cluster, _, _ = kernel.launch_dims(8192, 64, 8192)
    assert cluster == (1, 1, 1) and grid == (sms, 1, 1)
    assert kernel.launch_dims(128, 16, 200)[0] == (4, 1, 1)       # 1 tile x 4 K blocks: 4 CTAs


# The persistent staged D's bulk copy-out (cp.async.bulk.global.shared::cta.bulk_group, PTX 9.7.9.25.4.1: one
# copy per row of an interior tile, issued after the warpgroup's proxy fence and barrier; the edge tiles keep
# the predicated chunk loop): issue 17's 256 x 176 tiles (CTA pairs of 2 x 128-row consumers, 176 f16 / bf16
# columns = 352-byte rows) and the 128 x 256 staged tile of the persistent example. Problems of interior
# tiles only (4096 x 4224: 384 tiles over the SMs' pairs, so every CTA stages again after bulk copies of
# its last tile), edge tiles beside interior ones, D rows packed (ldd = N) and pitched (the guard band right
# of N must survive a copy of whole rows), and D rows that are no multiple of 16 bytes, which
# compiler.runtime refuses before the launch (no path of the kernel could store them).
BULK = "sparse_wgmma_256x176.tile"


@pytest.mark.parametrize("tile", ["sparse_wgmma_f16_256x176", "sparse_wgmma_bf16_256x176"])
@pytest.mark.parametrize("shape,pads", [
    pytest.param((4096, 4224, 512), (8, 8, 8), id="interior-pitched"),   # interior tiles only, guard band right of N
    pytest.param((4096, 4224, 512), (0, 0, 0), id="interior-packed"),    # interior tiles only, ldd = N
    pytest.param((4100, 4000, 300), (8, 8, 8), id="edges"),              # the last tile row and column are edges
    pytest.param((300, 200, 72), (1, 3, 1), id="one-interior"),          # one interior tile, three edge tiles
])
def test_bulk_copy_out_interior_edges_and_guard_band(sm90, torch_cuda, tile, shape, pads):
    run(torch_cuda, BULK, *shape, pads=pads, tile=tile)


@pytest.mark.parametrize("shape", [(4096, 4096, 256), (1000, 700, 130)], ids=lambda s: "x".join(map(str, s)))
def test_bulk_copy_out_of_the_persistent_staged_example(sm90, torch_cuda, shape):
    run(torch_cuda, PERSISTENT, *shape, tile="sparse_wgmma_f16_persistent_staged")


def test_bulk_copy_out_batch(sm90, torch_cuda):
    run(torch_cuda, BULK, 1024, 704, 128, batch=3, seed=3, tile="sparse_wgmma_bf16_256x176")


def test_d_rows_no_bulk_copy_could_store_are_refused(sm90, torch_cuda):
    """ldd * 2 bytes not a multiple of 16 (N = 704 f16 in rows of 705): compiler.runtime refuses D before the
    launch, as it does for every sparse wgmma kernel (the ABI's 16-byte rule)."""
    import numpy as np

    from compiler.runtime import ArgumentError, load

    torch = torch_cuda
    kernel = load(str(Path(__file__).resolve().parents[2] / "examples" / BULK), "sparse_wgmma_f16_256x176")
    m, n, k = 512, 704, 64
    a = kernel.pack_a(np.zeros((m, k), np.float16), library="torch")
    b = torch.zeros((n, k), dtype=torch.float16, device="cuda").T
    out = torch.zeros((m, n + 1), dtype=torch.float16, device="cuda")[:, :n]
    with pytest.raises(ArgumentError) as e:
        kernel(a, b, out=out)
    assert (e.value.argument, e.value.what) == ("out", "stride")


# Staged D one m64 block at a time (each 128-row consumer warpgroup stages and bulk-copies its two m64 blocks in
# turn through a region of 64 rows: 2 x 64 x 368 B = 47104 B), which lets issue 17's 256 x 176 tiles have a 4th
# stage (220288 B of the 232448). The example's tiles with stages=4, whatever the example's own stages
# (tests/test_sparse_wgmma_sched.py test_256x176_with_4_stages_*: the same on the emulator): interior tiles only
# (every CTA pair restages block 0 of its next tile after block 1's copies), edges beside interior tiles, a batch.
def _four_stages(tmp_path) -> str:
    import re

    src = (Path(__file__).resolve().parents[2] / "examples" / BULK).read_text()
    src, count = re.subn(r"stages=\d+", "stages=4", src)
    assert count == 3
    path = tmp_path / "sparse_wgmma_256x176_s4.tile"
    path.write_text(src)
    return str(path)


@pytest.mark.parametrize("tile", ["sparse_wgmma_f16_256x176", "sparse_wgmma_bf16_256x176", "sparse_wgmma_e4m3_256x176"])
@pytest.mark.parametrize("shape,pads,batch", [
    pytest.param((4096, 4224, 512), (8, 8, 8), None, id="interior"),
    pytest.param((4100, 4000, 300), (8, 8, 8), None, id="edges"),
    pytest.param((1024, 704, 200), (0, 0, 0), 3, id="batch"),
])
def test_four_stages_with_per_block_staging(sm90, torch_cuda, tmp_path, tile, shape, pads, batch):
    run(torch_cuda, _four_stages(tmp_path), *shape, pads=pads, batch=batch, tile=tile)


# The 128 x 256 CTA-pair tiles with 4 stages (examples/sparse_wgmma_128x256.tile): whole staged D rows do not fit
# beside the ring, so each 64-row consumer warpgroup stages and copies out its rows in 2 column blocks of 128
# columns (a cp.async.bulk of 256 B per row piece of an interior tile; the predicated chunk loop for edge
# tiles). f16, bf16 and e4m3 -> bf16: D against numpy bit for bit with the guard band (`run`), on interior tiles
# only (4096 x 4096: 512 tiles over the SMs' pairs, every CTA restaging after its last tile's bulk copies),
# edges in M, N and K (4100 x 4000 x 300: the last tile column's block 1 lies partly inside D; 300 x 392 x 72:
# block 1 of the edge column has 8 of its 128 columns inside), pitched and packed D rows; and against torch
# (D = A @ B in f32 on the GPU, TF32 off, converted to D's type) at an edge shape.
COLUMN_BLOCKS = "sparse_wgmma_128x256.tile"
CB_TILES = ["sparse_wgmma_f16_128x256", "sparse_wgmma_bf16_128x256", "sparse_wgmma_e4m3_128x256"]


@pytest.mark.parametrize("tile", CB_TILES)
@pytest.mark.parametrize("shape,pads", [
    pytest.param((4096, 4096, 512), (8, 8, 8), id="interior-pitched"),
    pytest.param((4096, 4096, 512), (0, 0, 0), id="interior-packed"),
    pytest.param((4100, 4000, 300), (8, 8, 8), id="edges"),
    pytest.param((300, 392, 72), (1, 3, 1), id="block-1-partly-inside"),
])
def test_column_blocks_interior_edges_and_guard_band(sm90, torch_cuda, tile, shape, pads):
    run(torch_cuda, COLUMN_BLOCKS, *shape, pads=pads, tile=tile)


def test_column_blocks_batch(sm90, torch_cuda):
    run(torch_cuda, COLUMN_BLOCKS, 1000, 700, 130, batch=3, seed=3, tile="sparse_wgmma_e4m3_128x256")


@pytest.mark.parametrize("tile", CB_TILES)
def test_column_blocks_against_torch(sm90, torch_cuda, tile):
    """D of the 128 x 256 tile at 2100 x 2000 x 520 (edge tiles in M, N and K; the last tile column's block 0
    inside D, block 1 80 columns of 128) equals torch's f32 matmul of the
    same dense (2:4-sparse) A and B converted to D's type: the inputs' few significant bits keep every f32 sum
    exact, so any summation order gives the same f32 and the same rounding to f16 / bf16 (fp8 inputs: within
    one bf16 ulp, rarely; below)."""
    import numpy as np

    from compiler.driver import compile_file
    from compiler.emulator.sparse_host import edge_problem
    from compiler.isa.wgmma import PROMOTED_A_TYPES
    from compiler.runtime import load
    from tests.gpu.test_sparse_wgmma_edges_gpu import EX, on_device, pitch_of, torch_dtype

    torch = torch_cuda
    m, n, k = 2100, 2000, 520
    kernel = load(str(EX / COLUMN_BLOCKS), tile)
    t = compile_file(str(EX / COLUMN_BLOCKS)).tiles[kernel.tile]
    form, d_type = t.facts["form"], t.payload.operands["D"].dtype
    p = edge_problem(form, m, n, k, np.random.default_rng(7), False)
    a = kernel.pack_a(p.a, library="torch")
    b = on_device(torch, [p.b], form.b_type, pitch_of(k, p.b.itemsize, 0), True)      # K x N, K contiguous
    d = torch.empty((m, n), dtype=torch_dtype(torch, d_type), device="cuda")
    assert kernel(a, b, out=d) is d
    dense_a = on_device(torch, [p.a], form.a_type, pitch_of(k, p.a.itemsize, 0))
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        ref = (dense_a.float() @ b.float()).to(d.dtype)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.cuda.synchronize()
    bits, want = d.view(torch.int16).int(), ref.view(torch.int16).int()
    bad = (bits != want).nonzero()
    if form.a_type in PROMOTED_A_TYPES:
        # fp8 wgmma sums keep about FP8_ACCUMULATOR_BITS bits, not f32's 24 (compiler/isa/wgmma.py): a sum of
        # K = 520 products may round differently from torch's exact f32 sum, which shows as a D element one
        # bf16 unit in the last place away, rarely (measured on an H200: 1 element of 4.2 M). A misplaced
        # column block would differ in whole rows of 128 elements, by far more.
        ulps = (bits - want).abs()
        assert int(ulps.max()) <= 1, f"D differs from torch by {int(ulps.max())} ulps at {bad[:3].tolist()}"
        assert len(bad) <= m * n // 100_000, f"{len(bad)} elements of D differ from torch by an ulp"
    else:
        assert len(bad) == 0, f"{len(bad)} elements of D differ from torch; first at {bad[:3].tolist()}"
