"""Scheduling of the sparse wgmma GEMM (compiler/ptx/sparse_wgmma_kernel.py, issue 17): persistent CTAs
(`persistent=static`) on the emulator's warp machine, their grid, ptxas, and broken variants the model must
catch.

Persistent CTAs: the grid is min(tiles, multiprocessors x CTAs/SM) per batch (CTA pairs: in whole pairs);
run_sparse_wgmma sizes it for EMULATED_MULTIPROCESSORS = 2 SMs, so every CTA below walks 2 or more tiles
(asserted), and the ring's stage and phase carry across the tiles of a CTA: a refill of the next tile's
blocks overlaps the epilogue. Each run checks D bit for bit against numpy (and D's guard band), under the
eager, adversarial (every copy and wgmma group as late as possible, warps interleaved) and random policies.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from compiler.emulator import EmulationError
from compiler.emulator.sparse_host import EMULATED_MULTIPROCESSORS
from compiler.ptx.sparse_wgmma_kernel import emit_sparse_wgmma, tma_boxes
from tests.test_sparse_wgmma_kernel import BENCH, BF16, E4M3, F16, S8, TF32, cfg_of, run_model

REPO = Path(__file__).resolve().parents[1]


def _tiles(cfg, m, n):
    tm = cfg.cta_m * cfg.cluster_m
    return -(-m // tm) * cfg.cluster_m * -(-n // cfg.cta_n)


def _same(d, ref) -> bool:
    return np.array_equal(d.view(np.uint8), ref.view(np.uint8))


# (form, config, M, N, K, batch, pad): 2-3 tiles per CTA (grid 2, or one pair); staged D in its own region
# (128 x 128 f32 + C), in 2 column blocks (128 x 256 f16: whole rows, 67584 B, do not fit beside 4 stages in
# 227 KB; 2 x 64 x 272 B do), in 8 (the CTA pair's 5 stages leave room for 2 x 64 x 80 B only) and direct D
# (stage_d=False); an odd tile count (a CTA walks one tile more); edges in M, N and K (a K tail shorter than a
# k-step); a batch (each batch's own persistent CTAs); CTA pairs sharing B; 8-bit and tf32 forms; one consumer
PERSISTENT_CASES = [
    (F16, dict(cta_m=128, cta_n=128, cta_k=64, stages=2), 256, 384, 192, 1, None),
    (F16, dict(BENCH[0], accumulate_c=False, d_type="f16"), 384, 512, 128, 1, None),
    (F16, dict(cta_m=128, cta_n=96, cta_k=64, stages=3), 200, 250, 100, 1, dict(c=4, d=12)),
    (F16, dict(cta_m=64, cta_n=64, cta_k=32, consumers=1, stages=3, raster_group=3), 190, 130, 37, 1, None),
    (BF16, dict(cta_m=128, cta_n=64, cta_k=128, stages=2, d_type="bf16", accumulate_c=False), 130, 130, 129, 2,
     dict(d=8)),
    (F16, dict(BENCH[1], cluster_m=2, accumulate_c=False, d_type="f16"), 512, 512, 100, 1, None),
    (S8, dict(cta_m=64, cta_n=32, cta_k=64, consumers=1, stages=3, cluster_m=2, raster_group=3), 300, 70, 100, 1,
     None),
    (TF32, dict(cta_m=128, cta_n=64, cta_k=32, stages=3), 250, 128, 40, 1, None),
    (E4M3, dict(cta_m=128, cta_n=128, cta_k=128, stages=2, accumulate_c=False, d_type="f16"), 256, 300, 200, 1,
     None),
    (F16, dict(BENCH[0], accumulate_c=False, d_type="f16", stage_d=False), 384, 512, 128, 1, None),
]
POLICIES = ("eager", "adversarial", "random")
# by default (the suite's time is shared): staged and direct D and a CTA pair eagerly, edges + C and one
# consumer adversarially, a batch randomly; every case under every policy and two seeds in the slow sweep
QUICK = {("eager", 0), ("eager", 1), ("eager", 5), ("adversarial", 2), ("adversarial", 3), ("random", 4)}
RUNS = [pytest.param(i, mode, seed, id=f"{i}-{mode}-{seed}",
                     marks=() if (mode, i) in QUICK and seed == 1 else pytest.mark.slow)
        for i in range(len(PERSISTENT_CASES)) for mode in POLICIES for seed in (1, 2)]


@pytest.mark.parametrize("i,mode,seed", RUNS)
def test_persistent_ctas_compute_the_gemm(i, mode, seed):
    form, kw, m, n, k, batch, pad = PERSISTENT_CASES[i]
    if form.a_type in ("bf16", "e4m3") or kw.get("d_type") == "bf16":
        pytest.importorskip("ml_dtypes")
    cfg = cfg_of(form, persistent=True, **kw)
    kern = emit_sparse_wgmma(cfg)
    tiles = _tiles(cfg, m, n)
    gx, gy, _ = kern.grid(m, n, k, batch, EMULATED_MULTIPROCESSORS)
    assert gy == batch and gx == min(tiles, EMULATED_MULTIPROCESSORS) and tiles >= 2 * gx, (tiles, gx)
    d, ref, stats = run_model(cfg, m, n, k, mode, seed=seed, pad=pad, batch=batch)
    assert stats["tma"] == batch * tiles * -(-k // cfg.cta_k) * len(tma_boxes(cfg))
    assert stats["wgmma"] == batch * tiles * -(-k // cfg.cta_k) * cfg.ksteps * cfg.m_blocks * cfg.consumers * 4
    # staged D: one cp.async.bulk per row (per row piece of each column block) of every interior tile
    # (m0 + cta_m <= M, n0 + cta_n <= N)
    interior_rows = batch * (m // cfg.cta_m) * (n // cfg.cta_n) * cfg.cta_m
    assert stats.get("bulk_store", 0) == (interior_rows * cfg.d_col_blocks if cfg.bulk_copy_out else 0)
    assert _same(d, ref), f"{np.count_nonzero(d.view(np.uint8) != ref.view(np.uint8))} bytes differ"


def test_staged_d_has_its_own_region_where_it_fits():
    """Persistent CTAs stage D after the ring's barriers (the ring is refilled during the epilogue): 128 x 128
    f32 + 16 B pitch padding = 67584 B next to 2 x 25600 B of ring; 128 x 256 f16 (67584 B) does not fit
    next to 4 x 41984 B (227 KB = 232448 B per block; slots of A 8192 + B 32768 + compact metadata 1024), its
    rows cut in 2 column blocks (2 x 64 x (128 x 2 + 16) = 34816 B) do; stage_d=False: direct fragment
    stores."""
    staged = cfg_of(F16, cta_m=128, cta_n=128, cta_k=64, stages=2, persistent=True)
    assert staged.staged_d and staged.d_offset >= staged.ring.bytes and \
        staged.smem_bytes == 1024 + staged.d_offset + 128 * (128 * 4 + 16)
    blocks = cfg_of(F16, **dict(BENCH[0], accumulate_c=False, d_type="f16", persistent=True))
    whole = 1024 + blocks.d_offset + 2 * 64 * (256 * 2 + 16)
    # the ring: 4 x 41984 + 8 mbarriers x 8 = 168000 B, at the next 128-byte boundary 168064
    assert whole - blocks.smem_limit == 1024 + 168064 + 67584 - 232448 == 4224
    assert blocks.d_col_blocks == 2 and blocks.d_pitch == 272
    assert blocks.staged_d and blocks.smem_bytes == 1024 + blocks.d_offset + 2 * 64 * 272 == 203904
    direct = cfg_of(F16, **dict(BENCH[0], accumulate_c=False, d_type="f16", persistent=True, stage_d=False))
    assert not direct.staged_d and direct.smem_bytes == 1024 + direct.ring.bytes
    assert cfg_of(F16, **dict(BENCH[0], accumulate_c=False, d_type="f16")).staged_d     # the drained ring
    text = emit_sparse_wgmma(staged).text
    # no CTA-wide consumer barrier before the copy-out: each warpgroup waits for its own previous copy-out
    assert "bar.sync 1," not in text and "bar.sync %z, 128;" in text


def test_persistent_grid_and_abi():
    """ABI grid x = min(tiles, multiprocessors x max_ctas_per_sm) (pairs: whole pairs), y = batch."""
    from compiler.runtime import abi as rabi

    kern = emit_sparse_wgmma(cfg_of(F16, **dict(BENCH[0], accumulate_c=False, d_type="f16", persistent=True)))
    assert kern.abi["persistent"] and kern.abi["max_ctas_per_sm"] == 1
    assert rabi.grid_blocks(kern.abi, 4096, 4096, 4096, 132) == (132, 1, 1)      # 512 tiles
    assert rabi.grid_blocks(kern.abi, 256, 512, 64, 132, batch=3) == (4, 3, 1)   # fewer tiles than SMs
    pair = emit_sparse_wgmma(cfg_of(F16, **dict(BENCH[1], cluster_m=2, persistent=True)))
    assert rabi.launch_dims(pair.abi, 4096, 4096, 4096, 131)[:2] == ((65, 1, 1), (2, 1, 1))   # 130 CTAs
    assert rabi.grid_blocks(pair.abi, 300, 256, 64, 132) == (4, 1, 1)            # 2 pairs of M tiles
    with pytest.raises(Exception, match="multiprocessor"):
        kern.grid(4096, 4096, 4096)


# Broken persistent kernels: a consumer (or the producer) that restarts the ring at every tile instead of
# carrying stage and phase across tiles; a consumer that never frees a tile's last slot (the producer waits
# for it forever, or refills it too early); every CTA starting at tile 0
PERSISTENT_MUTATIONS = {
    "consumer_restarts_ring": lambda t: _at_work_item(t, 2),
    "producer_restarts_ring": lambda t: _at_work_item(t, 1),
    "last_slot_never_freed": lambda t: re.sub(r"(// the tile's last slot is free[^\n]*\n(?:[^\n]*\n){1})[^\n]*\n",
                                              r"\1", t),
    "every_cta_from_tile_0": lambda t: t.replace("mov.u32 %t, %ctaid.x;", "mov.u32 %t, 0;"),
}


def _at_work_item(text: str, which: int) -> str:
    """Insert a ring restart (stage 0, phase 0) at the top of the `which`-th work loop (1: producer, 2: consumers)."""
    marker = "// work item %t: a new tile; the ring's stage and phase carry on from the last one"
    parts = text.split(marker)
    assert len(parts) == 3
    parts[which] = "\n    mov.u32 %st, 0;\n    mov.u32 %ph, 0;" + parts[which]
    return marker.join(parts)


@pytest.mark.parametrize("name", sorted(PERSISTENT_MUTATIONS))
def test_model_catches_broken_persistent_kernels(name):
    form, kw, m, n, k, batch, pad = PERSISTENT_CASES[0]
    cfg = cfg_of(form, persistent=True, **kw)
    text = emit_sparse_wgmma(cfg).text
    mutate = PERSISTENT_MUTATIONS[name]
    assert mutate(text) != text, "the mutation applies"
    caught = False
    for mode in ("adversarial", "eager"):
        try:
            d, ref, _ = run_model(cfg, m, n, k, mode, seed=3, transform=mutate)
            caught = not _same(d, ref)
        except EmulationError:
            caught = True                 # a deadlock, a refill over a slot being read, an extra arrival
        if caught:
            break
    assert caught, f"{name} went unnoticed"


# The staged D's bulk copy-out (cp.async.bulk, PTX 9.7.9.25.4.1), broken: a thread that stages the next tile
# without waiting until its bulk copy has read the region (cp.async.bulk.wait_group.read), staged rows handed
# to the copy engine (async proxy) without fence.proxy.async after the generic-proxy stores, a CTA that exits
# with its last bulk copies in flight, a copy size that is no multiple of 16 bytes. Each is caught by its own check of the emulator, under the adversarial
# policy (the copies complete as late as the kernel allows).
BULK_MUTATIONS = {
    "no_read_wait_before_restaging": (lambda t: t.replace("cp.async.bulk.wait_group.read 0;", ""),
                                      "overwrites shared memory .* no cp.async.bulk.wait_group.read retired"),
    "no_proxy_fence_before_the_copy": (lambda t: re.sub(r"fence\.proxy\.async\.shared::cta; *// the staged rows[^\n]*\n",
                                                        "", t), "no fence.proxy.async.shared::cta since"),
    "no_wait_before_exit": (lambda t: t.replace("cp.async.bulk.wait_group 0;", ""), "still in flight"),
    "row_size_not_a_multiple_of_16": (lambda t: t.replace("[%x], 512;", "[%x], 504;"), "multiple of 16"),
}


@pytest.mark.parametrize("name", sorted(BULK_MUTATIONS))
def test_model_catches_broken_bulk_copy_out(name):
    form, kw = PERSISTENT_CASES[0][:2]
    cfg = cfg_of(form, persistent=True, **kw)
    assert cfg.bulk_copy_out
    mutate, message = BULK_MUTATIONS[name]
    text = emit_sparse_wgmma(cfg).text
    assert mutate(text) != text, "the mutation applies"
    with pytest.raises(EmulationError, match=message):   # 3 interior tiles, one K block: CTA 0 walks 2 of them
        run_model(cfg, 384, 128, 64, "adversarial", seed=3, transform=mutate)


@pytest.mark.slow
def test_dsl_example_with_fused_epilogue_runs_persistent():
    """The fused epilogue (silu(A*B + C + bias[col]), staged f32 in the copy-out) with persistent CTAs: the
    example tile with persistent=static, an odd problem and a batch under the adversarial policy."""
    pytest.importorskip("ml_dtypes")
    import compiler

    src = (REPO / "examples" / "sparse_wgmma_f16_silu_bias.tile").read_text()
    sched = re.search(r"^  schedule [^;]*", src, re.M).group(0)
    result = compiler.compile_source(src.replace(sched, sched + " persistent=static"), "p.tile")
    abi = next(iter(result.to_json()["tiles"].values()))["kernel"]
    assert abi["persistent"]
    e = compiler.emulate(result, shape=(300, 520, 72), mode="adversarial", batch=2, seed=4)
    assert e.ok and e.d.shape == (2, 300, 520)


EPILOGUE_C = """target sm_90a;
tile ep {
  engine mma.sp;
  shape M=16 N=8 K=32;
  A: f16 global; B: f16 global; C: f32 global; D: f16 global;
  sparsity 2:4 metadata=runtime selector=0;
  schedule cta=128x128x64 warps=8x1 stages=3 mma=wgmma persistent=static;
  epilogue alpha=param beta=param bias=row act=relu;
}
"""


def test_persistent_staged_epilogue_with_c_and_bias():
    """Persistent CTAs run the fused epilogue on the registers (C and a row bias read per pair, alpha and
    beta parameters) and stage f16 D (128 x (128 x 2 + 16) B = 34816 B after a ring of 3 slots of A 8192 +
    B 16384 + metadata 1024 (8 tiles x 2 k-steps x 64 B, compact) = 25600 B and 6 mbarriers, at the next 128-byte
    boundary): an odd problem (edge
    tiles) and a batch, adversarially and randomly."""
    import compiler

    result = compiler.compile_source(EPILOGUE_C, "ep.tile")
    abi = result.to_json()["tiles"]["ep"]["kernel"]
    assert abi["persistent"] and abi["epilogue"]["c"] == "epilogue"
    ring = 3 * 25600 + 6 * 8
    assert abi["dynamic_smem_bytes"] == 1024 + -(-ring // 128) * 128 + 128 * (128 * 2 + 16)
    for shape, mode, batch in (((200, 260, 72), "adversarial", 2), ((256, 384, 128), "random", 1)):
        assert compiler.emulate(result, shape=shape, mode=mode, batch=batch, seed=4).ok


def test_persistent_example_on_the_emulator():
    """examples/sparse_wgmma_f16_persistent.tile, both tiles: 4 stages with D staged in 2 column blocks on 4 x 2
    CTA tiles (2 per CTA pair at 2 SMs), 3 stages with whole rows staged on an edge shape adversarially."""
    import compiler

    result = compiler.compile_file(str(REPO / "examples" / "sparse_wgmma_f16_persistent.tile"))
    blocks, staged = result.tiles
    assert compiler.emulate(result, blocks, shape=(512, 512, 128), mode="eager", seed=1).ok
    assert compiler.emulate(result, staged, shape=(300, 520, 64), mode="adversarial", seed=1).ok


def _assemble(ptxas, text: str, tmp_path: Path) -> str:
    src = tmp_path / "k.ptx"
    src.write_text(text)
    res = subprocess.run([ptxas, "-arch=sm_90a", "-v", str(src), "-o", str(tmp_path / "k.cubin")],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return res.stderr


PTXAS_PERSISTENT = [
    (F16, dict(BENCH[0], d_type="f16", accumulate_c=False)),              # direct D
    (F16, dict(BENCH[0], stages=2, accumulate_c=True)),                   # f32 D + C staged in its region
    (F16, dict(BENCH[1], cluster_m=2, d_type="f16", accumulate_c=False)),  # CTA pairs
    (F16, dict(BENCH[2], d_type="f16", accumulate_c=False)),               # 2 x 128-row consumers
    (E4M3, dict(cta_m=128, cta_n=256, cta_k=128, stages=4, d_type="f16", accumulate_c=False)),
    (S8, dict(cta_m=128, cta_n=128, cta_k=128, stages=3, accumulate_c=False)),
    (TF32, dict(cta_m=128, cta_n=128, cta_k=32, stages=4)),
]


def test_ptxas_assembles_the_persistent_staged_epilogue(ptxas, tmp_path):
    import compiler

    for src in (EPILOGUE_C, (REPO / "examples" / "sparse_wgmma_f16_persistent.tile").read_text()):
        ptx = compiler.compile_source(src, "p.tile").ptx
        assert "cp.async.bulk.global.shared::cta.bulk_group" in ptx        # the staged D's bulk copy-out
        log = _assemble(ptxas, ptx, tmp_path)
        assert "0 bytes spill stores, 0 bytes spill loads" in log, log


# The other examples whose persistent CTAs stage D and copy interior tiles out with cp.async.bulk (PTX
# 9.7.9.25.4.1; tests/golden lists every example whose kernel changed with it), issue 17's 256 x 176 tiles first;
# the 128 x 256 tiles stage D in 2 column blocks (a bulk copy per row piece)
@pytest.mark.parametrize("example", ["sparse_wgmma_256x176.tile", "sparse_wgmma_128x256.tile",
                                     "sparse_wgmma_small_cube.tile", "sparse_wgmma_f16_decode_stream_k.tile"])
def test_ptxas_assembles_the_bulk_copy_out_of_the_examples(ptxas, tmp_path, example):
    import compiler

    result = compiler.compile_file(str(REPO / "examples" / example))
    assert "cp.async.bulk.global.shared::cta.bulk_group" in result.ptx
    log = _assemble(ptxas, result.ptx, tmp_path)
    assert log.count("0 bytes spill stores, 0 bytes spill loads") == len(result.tiles), log


@pytest.mark.parametrize("form,kw", PTXAS_PERSISTENT, ids=lambda x: getattr(x, "name", None) or str(x))
def test_ptxas_assembles_persistent_kernels(ptxas, tmp_path, form, kw):
    cfg = cfg_of(form, persistent=True, **kw)
    log = _assemble(ptxas, emit_sparse_wgmma(cfg).text, tmp_path)
    assert "0 bytes spill stores, 0 bytes spill loads" in log, log
    assert int(re.search(r"Used (\d+) registers", log).group(1)) <= cfg.max_regs


# --------------------------------------------------------------------------------------------------
# split-K
# --------------------------------------------------------------------------------------------------

# (form, config, M, N, K, batch, pad): slice counts that divide the K blocks and that do not (10 blocks in 4
# slices: 2, 3, 2, 3; 5 in 3), fewer blocks than slices (3 in 4: one slice without blocks, a zero partial),
# K tails shorter than a k-step; C read (only slice 0 preloads it), f32 and f16 D, staged and direct D;
# decode-like narrow tiles (N 16); batches; a CTA pair; persistent CTAs walking split work items; s32
# partials (s8); the workspace starts poisoned and the semaphores must come back zero (run_sparse_wgmma)
SPLIT_CASES = [
    (F16, dict(cta_m=128, cta_n=64, cta_k=64, stages=3, split_k=4, accumulate_c=False, d_type="f16"), 256, 64, 640,
     1, None),
    (F16, dict(cta_m=128, cta_n=64, cta_k=64, stages=3, split_k=3), 200, 100, 300, 1, dict(c=4, d=8)),
    (F16, dict(cta_m=128, cta_n=16, cta_k=64, stages=4, split_k=4, accumulate_c=False, d_type="f16"), 130, 16, 130,
     1, None),
    (F16, dict(cta_m=128, cta_n=96, cta_k=64, stages=3, stage_d=False, split_k=2), 140, 96, 200, 2, None),
    (F16, dict(cta_m=64, cta_n=32, cta_k=32, consumers=1, stages=3, split_k=8), 64, 40, 500, 1, None),
    (F16, dict(cta_m=128, cta_n=64, cta_k=64, stages=3, split_k=2, persistent=True), 384, 128, 300, 1, None),
    (F16, dict(cta_m=128, cta_n=64, cta_k=64, stages=2, split_k=2, cluster_m=2, accumulate_c=False, d_type="f16"),
     256, 64, 270, 1, None),
    (S8, dict(cta_m=128, cta_n=32, cta_k=128, stages=3, split_k=3), 128, 32, 700, 1, None),
]
SPLIT_QUICK = {("eager", 0), ("eager", 3), ("eager", 7), ("adversarial", 2), ("adversarial", 5), ("random", 1),
               ("random", 6)}
SPLIT_RUNS = [pytest.param(i, mode, seed, id=f"{i}-{mode}-{seed}",
                           marks=() if (mode, i) in SPLIT_QUICK and seed == 1 else pytest.mark.slow)
              for i in range(len(SPLIT_CASES)) for mode in POLICIES for seed in (1, 2)]


@pytest.mark.parametrize("i,mode,seed", SPLIT_RUNS)
def test_split_k_computes_the_gemm(i, mode, seed):
    form, kw, m, n, k, batch, pad = SPLIT_CASES[i]
    cfg = cfg_of(form, **kw)
    kern = emit_sparse_wgmma(cfg)
    tiles, blocks = _tiles(cfg, m, n), -(-k // cfg.cta_k)
    gx, gy, _ = kern.grid(m, n, k, batch, EMULATED_MULTIPROCESSORS)
    assert gy == batch and gx == (min(tiles * cfg.split_k, EMULATED_MULTIPROCESSORS) if cfg.persistent
                                  else tiles * cfg.split_k)
    d, ref, stats = run_model(cfg, m, n, k, mode, seed=seed, pad=pad, batch=batch)
    # every K block of every tile is loaded once, whichever slice it falls in
    assert stats["tma"] == batch * tiles * blocks * len(tma_boxes(cfg))
    assert _same(d, ref), f"{np.count_nonzero(d.view(np.uint8) != ref.view(np.uint8))} bytes differ"


def test_slices_cover_the_k_blocks():
    """Slice s of S takes blocks [s * nkb // S, (s + 1) * nkb // S): consecutive, covering, sizes differing by
    at most one, empty only when nkb < S (the kernel's first_block arithmetic, restated)."""
    for nkb in range(1, 40):
        for S in range(2, 9):
            bounds = [(s * nkb // S, (s + 1) * nkb // S) for s in range(S)]
            assert bounds[0][0] == 0 and bounds[-1][1] == nkb
            assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
            sizes = [e - b for b, e in bounds]
            assert max(sizes) - min(sizes) <= 1 and (min(sizes) > 0 or nkb < S)


def test_split_k_abi_scratch_and_grid():
    """ABI: grid x = tiles x split_k; `scratch` names the workspace (one f32 partial per tile and slice) and
    the semaphores (one u32 per tile, zeroed once); the kernel takes them after d."""
    from compiler.runtime import abi as rabi

    kern = emit_sparse_wgmma(cfg_of(F16, cta_m=128, cta_n=64, cta_k=64, stages=6, split_k=4, accumulate_c=False,
                                    d_type="f16"))
    abi = kern.abi
    assert abi["split_k"] == 4 and abi["grid"][0] == "tiles * 4"
    assert [p["name"] for p in abi["params"]][:4] == ["tensor_maps", "d", "workspace", "semaphores"]
    assert rabi.grid_blocks(abi, 8192, 16, 8192) == (64 * 4, 1, 1)          # 64 tiles of 128 x 64, 4 slices
    env = rabi.names(abi, 8192, 16, 8192, batch=2)
    ws, sem = abi["scratch"]["workspace"], abi["scratch"]["semaphores"]
    assert [rabi.eval_expr(x, env) for x in ws["shape"]] == [2, 256, 128 * 64] and ws["element"] == "f32"
    assert [rabi.eval_expr(x, env) for x in sem["shape"]] == [2, 64] and sem["zeroed"] and not ws["zeroed"]
    pers = emit_sparse_wgmma(cfg_of(F16, **dict(BENCH[0], split_k=2, persistent=True)))
    assert rabi.grid_blocks(pers.abi, 8192, 256, 8192, 132) == (128, 1, 1)     # min(64 x 2, 132)


# Broken split-K kernels: the last-arrival test off by one (a slice reduces before the last partial is written
# and the last one does not reduce); the semaphore never reset (the next launch would miscount); C preloaded
# by every slice (C added split_k times); the slices' K ranges overlapping (each slice from block 0); the
# reducer summing slice 0's partial only
SPLIT_MUTATIONS = {
    "last_arrival_off_by_one": lambda t: re.sub(r"setp\.ne\.u32 %p2, %x, (\d+);",
                                                lambda m: f"setp.ne.u32 %p2, %x, {int(m.group(1)) - 1};", t),
    "semaphore_not_reset": lambda t: t.replace("@%p1 st.relaxed.gpu.global.u32 [%gs], 0;", ""),
    "c_in_every_slice": lambda t: t.replace("setp.ne.u32 %p1, %sl, 0;", "setp.ne.u32 %p1, %sl, %sl;"),
    "slices_from_block_0": lambda t: t.replace("mov.u32 %kb, %k0;", "mov.u32 %kb, 0;"),
    "reduce_slice_0_only": lambda t: re.sub(r"@%p1 bra\.uni REDUCE_\d+;", "", t),
}


@pytest.mark.parametrize("name", sorted(SPLIT_MUTATIONS))
def test_model_catches_broken_split_k(name):
    form, kw, m, n, k, batch, pad = SPLIT_CASES[1]
    cfg = cfg_of(form, **kw)
    text = emit_sparse_wgmma(cfg).text
    mutate = SPLIT_MUTATIONS[name]
    assert mutate(text) != text, "the mutation applies"
    try:
        d, ref, _ = run_model(cfg, m, n, k, "adversarial", seed=5, transform=mutate)
    except EmulationError:
        return                            # a semaphore left non-zero, a read of an unwritten partial, ...
    assert not _same(d, ref), f"{name} went unnoticed"


def test_split_k_example_on_the_emulator():
    """examples/sparse_wgmma_f16_decode_split_k.tile, every tile: a decode-like 256 x 16 x 320 (2 tiles of 5
    K blocks in 4 or 2 slices) adversarially, and an odd batch."""
    import compiler

    result = compiler.compile_file(str(REPO / "examples" / "sparse_wgmma_f16_decode_split_k.tile"))
    assert len(result.tiles) == 3
    for tile in result.tiles:
        assert compiler.emulate(result, tile, shape=(256, 16, 320), mode="adversarial", seed=1).ok
    assert compiler.emulate(result, shape=(200, 70, 200), mode="random", batch=2, seed=2).ok


@pytest.mark.parametrize("tile,k", [pytest.param("sparse_wgmma_bf16_decode_split_k_n16", 200, marks=pytest.mark.slow),
                                    ("sparse_wgmma_e4m3_decode_split_k_n16", 600)])
def test_bf16_and_e4m3_split_k_decode_tiles_on_the_emulator(tile, k):
    """examples/sparse_wgmma_bf16_e4m3_decode_split_k.tile: one M tile of a decode-like shape at a column
    edge (N = 13 of the tile's 16), K blocks in 4 slices with a K tail (bf16: 4 blocks of 64, e4m3: 5 of
    128), warps interleaved at random; bf16 D against the reference bit for bit. (The bf16 tile is the f16
    n16 tile's twin, and test_emulator.py emulates it in the default run too: here under slow.)"""
    import compiler

    result = compiler.compile_file(str(REPO / "examples" / "sparse_wgmma_bf16_e4m3_decode_split_k.tile"))
    assert result.tiles[tile].payload.schedule.split_k == 4
    e = compiler.emulate(result, tile, shape=(100, 13, k), mode="random", seed=1)
    assert e.ok and e.d.dtype.name == "bfloat16", e.mismatches


PTXAS_SPLIT = [
    (F16, dict(cta_m=128, cta_n=64, cta_k=64, stages=6, d_type="f16", accumulate_c=False, split_k=4)),
    (F16, dict(cta_m=128, cta_n=16, cta_k=64, stages=8, d_type="f16", accumulate_c=False, split_k=8)),
    (F16, dict(BENCH[0], split_k=2, accumulate_c=True)),                        # f32 D + C, 128 accumulators
    (F16, dict(BENCH[0], split_k=4, persistent=True, d_type="f16", accumulate_c=False)),
    (F16, dict(BENCH[1], cluster_m=2, split_k=2, d_type="f16", accumulate_c=False)),
    (S8, dict(cta_m=128, cta_n=64, cta_k=128, stages=4, split_k=4, accumulate_c=True)),    # s32 partials
    (E4M3, dict(cta_m=128, cta_n=64, cta_k=128, stages=4, split_k=4, d_type="f16", accumulate_c=False)),
]


@pytest.mark.parametrize("form,kw", PTXAS_SPLIT, ids=lambda x: getattr(x, "name", None) or str(x))
def test_ptxas_assembles_split_k_kernels(ptxas, tmp_path, form, kw):
    cfg = cfg_of(form, **kw)
    text = emit_sparse_wgmma(cfg).text
    assert "atom.acq_rel.gpu.global.add.u32" in text and "st.relaxed.gpu.global.u32" in text
    log = _assemble(ptxas, text, tmp_path)
    assert "0 bytes spill stores, 0 bytes spill loads" in log, log
    assert int(re.search(r"Used (\d+) registers", log).group(1)) <= cfg.max_regs


def test_split_k_config_errors():
    from compiler.diagnostics import SpecError

    for bad in (0, 65, 2.5):
        with pytest.raises(SpecError) as e:
            emit_sparse_wgmma(cfg_of(F16, cta_m=128, cta_n=64, cta_k=64, stages=3, split_k=bad))
        assert e.value.field == "schedule.split_k"


# --------------------------------------------------------------------------------------------------
# tilec tune: the search table's persistent and split_k axes reach the kernel
# --------------------------------------------------------------------------------------------------

def test_tune_searches_persistent_and_split_k():
    """compiler/ptx/schedules.py's persistent / split_k rows now give legal wgmma schedules, and the estimate
    ranks them sensibly: split-K first for a decode shape whose tiles do not fill the SMs, persistent first
    at 4096^3 (4 waves: the copy latency paid once), and a persistent CTA no worse than a one-tile one when
    a single wave holds every tile."""
    import compiler
    from compiler.ptx import schedules

    r = compiler.compile_file(str(REPO / "examples" / "sparse_wgmma_f16_out_f16.tile"))
    view = r.tiles["sparse_wgmma_f16_out_f16"]
    legal = schedules.legal_schedules(view, r.module)
    assert any(c.schedule.persistent == "static" for c in legal)
    assert {c.schedule.split_k for c in legal} == {1, 2, 4, 8, "stream"}
    assert schedules.ranked(legal, view, 8192, 16, 8192, 132)[0].schedule.split_k > 1
    assert schedules.ranked(legal, view, 4096, 4096, 4096, 132)[0].schedule.persistent == "static"
    form = view.facts["form"]
    one = cfg_of(F16, **dict(BENCH[0], d_type="f16", accumulate_c=False))
    pers = cfg_of(F16, **dict(BENCH[0], d_type="f16", accumulate_c=False, persistent=True))
    est = lambda c, *shape: schedules.estimate_cycles("sparse_wgmma", c, form, *shape, 132)   # noqa: E731
    assert est(pers, 1024, 1024, 4096) == est(one, 1024, 1024, 4096)           # 32 tiles: one wave
    assert est(pers, 4096, 4096, 4096) < est(one, 4096, 4096, 4096)


# --------------------------------------------------------------------------------------------------
# compiler.runtime: the launches it makes (a recording driver, no GPU: tests/test_runtime_launch.py)
# --------------------------------------------------------------------------------------------------

def _fake_launch(monkeypatch, path: str, tile: str | None, m: int, n: int, k: int):
    """Load `tile` of example `path` on a fake H100 (132 SMs), allocate scratch as fake arrays; returns
    (kernel, recording driver, operands, scratch allocations)."""
    from compiler.runtime import SparseA, driver, load
    from compiler.runtime import abi as rabi
    from compiler.runtime import kernel as kernel_mod
    from test_runtime import Fake
    from test_runtime_launch import H100, FakeDriver

    fake = FakeDriver(H100)
    previous = driver.use(fake)
    allocated = []

    def allocate_like(lead, shape, element, fill_zero=False, name="out"):
        allocated.append((tuple(shape), element, fill_zero))
        return Fake(shape, {"f32": "<f4", "s32": "<i4", "f16": "<f2"}[element])

    monkeypatch.setattr(kernel_mod, "allocate_like", allocate_like)
    monkeypatch.setattr(kernel_mod, "_synchronize", lambda lead: None)
    kernel = load(str(REPO / "examples" / path), tile)
    a = SparseA(Fake(rabi.buffer_shape(kernel.abi, "a_values", m, k), "<f2"),
                Fake(rabi.buffer_shape(kernel.abi, "a_metadata", m, k), "<u4"), "f16", m, k)
    return kernel, fake, (a, Fake((n, k), "<f2").T, Fake((m, n), "<f2")), allocated, previous


def test_runtime_launches_persistent_ctas_on_the_sm_count(monkeypatch):
    from compiler.runtime import driver

    kernel, fake, (a, b, d), _, previous = _fake_launch(monkeypatch, "sparse_wgmma_f16_persistent.tile", None,
                                                        4096, 4096, 4096)
    try:
        kernel(a, b, out=d)
    finally:
        driver.use(previous)
    plan = fake.launches[-1][0]
    # 512 CTA tiles of 128 x 256 in 256 pairs; 132 SMs: 66 pairs = 66 clusters of (2, 1, 1)
    assert plan.grid == (66, 1, 1) and plan.cluster == (2, 1, 1)


def test_runtime_allocates_split_k_scratch_once(monkeypatch):
    """The split-K tile's workspace ([batch, tiles x 4, 128 x 64] f32) and semaphores ([batch, tiles], zeroed)
    are allocated on the first launch of a size and passed after d; a second launch reuses them."""
    from compiler.runtime import driver

    m, n, k = 8192, 16, 8192
    kernel, fake, (a, b, d), allocated, previous = _fake_launch(monkeypatch, "sparse_wgmma_f16_decode_split_k.tile",
                                                                "sparse_wgmma_f16_decode_split_k", m, n, k)
    try:
        kernel(a, b, out=d)
        kernel(a, b, out=d)
    finally:
        driver.use(previous)
    assert allocated == [((1, 64 * 4, 128 * 64), "f32", False), ((1, 64), "s32", True)]
    plan, _, args, _ = fake.launches[-1]
    assert plan.grid == (64 * 4, 1, 1)
    names = [p["name"] for p in kernel.abi["params"]]
    ws, sem = (args[names.index(x)] for x in ("workspace", "semaphores"))
    assert ws and sem and ws != sem and fake.launches[0][2] == args


def test_runtime_gives_each_stream_its_own_split_k_scratch(monkeypatch):
    """Launches on two streams may overlap: each stream gets its own workspace and semaphores (shared
    semaphores would let one launch's CTAs count the other's slices); a stream's later launch reuses its own."""
    from compiler.runtime import driver

    m, n, k = 8192, 16, 8192
    kernel, fake, (a, b, d), allocated, previous = _fake_launch(monkeypatch, "sparse_wgmma_f16_decode_split_k.tile",
                                                                "sparse_wgmma_f16_decode_split_k", m, n, k)
    try:
        for stream in (1, 2, 1):
            kernel(a, b, out=d, stream=stream)
    finally:
        driver.use(previous)
    assert len(allocated) == 4                                   # workspace + semaphores, for streams 1 and 2
    names = [p["name"] for p in kernel.abi["params"]]
    pointers = [tuple(args[names.index(x)] for x in ("workspace", "semaphores")) for _, _, args, _ in fake.launches]
    assert pointers[0] != pointers[1] and pointers[0] == pointers[2]


# --------------------------------------------------------------------------------------------------
# stream-K (split_k=stream)
# --------------------------------------------------------------------------------------------------

def stream_ranges(tiles: int, nkb: int, ctas: int) -> list[tuple[int, int]]:
    """CTA c's stream-K range: the W' = sk x nkb iterations after the S = dp x nkb of the data-parallel tiles
    (stream_split), [S + c Q + min(c, R), S + (c + 1) Q + min(c + 1, R)), Q, R = divmod(W', G) (the kernel's
    stream_bound, restated)."""
    dp, sk = stream_split(tiles, ctas)
    s, w = dp * nkb, sk * nkb
    q, r = divmod(w, ctas)
    return [(s + c * q + min(c, r), s + (c + 1) * q + min(c + 1, r)) for c in range(ctas)]


def stream_split(tiles: int, ctas: int) -> tuple[int, int]:
    """(data-parallel tiles, stream-K tiles): all but the last full wave and the partial one are walked whole
    (the kernel's stream_split, restated: (max(T / G, 1) - 1) G and min(T, T % G + G))."""
    dp = (max(tiles // ctas, 1) - 1) * ctas
    sk = min(tiles, tiles % ctas + ctas)
    return dp, sk


def stream_plan(tiles: int, nkb: int, ctas: int) -> list[list[tuple[int, int]]]:
    """Per CTA, its work items in order as (first, end) iterations: data-parallel tiles c, c + G, .. whole,
    then the segments of its stream-K range (each within one tile)."""
    dp, _ = stream_split(tiles, ctas)
    plan = []
    for c, (b, e) in enumerate(stream_ranges(tiles, nkb, ctas)):
        items = [(t * nkb, (t + 1) * nkb) for t in range(c, dp, ctas)]
        while b < e:
            end = min(e, (b // nkb + 1) * nkb)
            items.append((b, end))
            b = end
        plan.append(items)
    return plan


def sharers(tiles: int, nkb: int, ctas: int) -> list[list[int]]:
    """Per tile, the CTAs whose work items hold some of its K blocks."""
    plan = stream_plan(tiles, nkb, ctas)
    return [[c for c, items in enumerate(plan) if any(b < (t + 1) * nkb and e > t * nkb for b, e in items)]
            for t in range(tiles)]


def test_stream_ranges_cover_the_iterations():
    """The stream-K ranges: contiguous, covering the W' iterations after the data-parallel tiles, sizes
    differing by at most one, none empty (G <= W'), and stream_owner's formula (max(i / (Q + 1) + G,
    (i + Q G - R) / Q) - G, i counted from S) finds the CTA of every iteration."""
    for t in range(1, 40):
        for nkb in (1, 3):
            for g in range(1, t * nkb + 1):
                ranges = stream_ranges(t, nkb, g)
                dp, sk = stream_split(t, g)
                s, w = dp * nkb, sk * nkb
                assert ranges[0][0] == s and ranges[-1][1] == t * nkb
                assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
                sizes = [e - b for b, e in ranges]
                assert max(sizes) - min(sizes) <= 1 and min(sizes) >= 1
                q, r = divmod(w, g)
                for i in range(w):
                    owner = max(i // (q + 1) + g, (i + q * g - r) // q) - g
                    b, e = ranges[owner]
                    assert b <= i + s < e


def test_hybrid_stream_k_plan():
    """Data-parallel tiles for all but the last full wave and the partial one (CUTLASS's data-parallel +
    stream-K decomposition): every (tile, K block) iteration in exactly one CTA's items; data-parallel tile j
    whole in CTA j % G; the stream-K tiles one full wave and the remainder (G <= sk < 2G once T >= G; fewer
    tiles than a wave: all streamed); a CTA's items other than its first and last stream-K segments are
    whole tiles (two workspace slots a CTA suffice); a tile count the grid divides shares no tile."""
    for t in range(1, 50):
        for nkb in (1, 2, 5):
            for g in range(1, min(t * nkb, 20) + 1):
                plan = stream_plan(t, nkb, g)
                dp, sk = stream_split(t, g)
                assert dp + sk == t and dp % g == 0
                assert (g <= sk < 2 * g) if t >= g else (dp == 0 and sk == t)
                seen = sorted(i for items in plan for b, e in items for i in range(b, e))
                assert seen == list(range(t * nkb))
                for c, items in enumerate(plan):
                    n_dp = len(range(c, dp, g))
                    assert items[:n_dp] == [(j * nkb, (j + 1) * nkb) for j in range(c, dp, g)]
                    assert all(b // nkb == (e - 1) // nkb for b, e in items)
                    assert all(b % nkb == 0 and e - b == nkb for b, e in items[n_dp:][1:-1])
                if t % g == 0:
                    assert all(len(s) == 1 for s in sharers(t, nkb, g))
    assert stream_split(729, 66) == (660, 69)     # 13824 x 5120, 512 x 192 pair tiles, 66 pairs: 10 waves whole
    assert stream_split(64, 132) == (0, 64)       # decode: every tile streamed


def run_stream(cfg, m, n, k, mode, seed, ctas, batch=1, pad=None, transform=None):
    """run_sparse_wgmma with the grid of a device of `ctas` SMs (grid x = min(W, ctas))."""
    from compiler.emulator.sparse_host import run_sparse_wgmma

    kern = emit_sparse_wgmma(cfg)
    text = transform(kern.text) if transform else kern.text
    return run_sparse_wgmma(kern, cfg.name, cfg.form, cfg.cluster_m, cfg.threads, cfg.smem_bytes, m, n, k,
                            cfg.out_type, cfg.accumulate_c, mode=mode, seed=seed, text=text, pad=pad, batch=batch,
                            multiprocessors=ctas)


def stream_cfg(form=F16, **kw):
    return cfg_of(form, split_k="stream", persistent=True, **kw)


SMALL_STREAM = dict(cta_m=64, cta_n=16, cta_k=32, consumers=1, stages=2)
# (form, config, M, N, K, batch, pad, SMs): 2 tiles of 7 K blocks (K = 200: a tail of 8, shorter than a
# k-step) on 5 CTAs: ranges [0,3) [3,6) [6,9) [9,12) [12,14), each tile over 3 CTAs, CTA 2 finishing tile 0
# and starting tile 1, C preloaded by the segment from K block 0 only; whole tiles next to shared ones (6 tiles
# of 3 blocks on 4 CTAs); a batch; f16 D, direct D; two consumers of 64 rows with staged f32 D + C; fewer
# iterations than SMs (one K block a CTA: a tile over nkb CTAs); s32 partials (s8); CTA pairs (ranges of pair
# tiles: 2 pair tiles of 7 blocks on 3 pairs, each tile over 2 pairs; 9 pair tiles of 6 blocks on 2 pairs);
# three consumer warpgroups (the fix-up's barrier and partial layout over 384 consumer threads); fp8 with
# promote=2 (each segment promotes every 2 of its K blocks; the partial is the promoted f32 sum)
STREAM_CASES = [
    (F16, SMALL_STREAM, 128, 16, 200, 1, None, 5),
    (F16, dict(SMALL_STREAM, accumulate_c=False, d_type="f16"), 190, 40, 90, 1, dict(d=8), 4),
    (F16, dict(cta_m=128, cta_n=64, cta_k=64, stages=3), 256, 100, 300, 2, dict(c=4, d=4), 3),
    (F16, dict(cta_m=128, cta_n=96, cta_k=64, stages=3, stage_d=False, accumulate_c=False, d_type="f16"), 130, 96,
     260, 1, None, 16),
    (S8, dict(cta_m=64, cta_n=32, cta_k=64, consumers=1, stages=3), 128, 32, 450, 1, None, 3),
    (F16, dict(SMALL_STREAM, cluster_m=2), 256, 16, 200, 1, dict(d=4), 6),
    (S8, dict(cta_m=64, cta_n=32, cta_k=64, consumers=1, stages=3, cluster_m=2), 300, 70, 330, 1, None, 4),
    (F16, dict(cta_m=192, cta_n=16, cta_k=32, consumers=3, stages=2), 200, 16, 150, 1, None, 3),
    (E4M3, dict(cta_m=64, cta_n=32, cta_k=64, consumers=1, stages=2, promote=2, accumulate_c=False, d_type="f16"),
     128, 32, 450, 1, None, 3),
    # data-parallel tiles before the stream-K ranges: 7 tiles of 4 K blocks on 3 CTAs (tiles 0-2 whole, tiles
    # 3-6 over ranges of 6, 5, 5 iterations); 6 tiles on 3 CTAs (one whole tile each after the data-parallel
    # wave: nothing shared); 5 pair tiles of 7 blocks on 2 pairs (2 whole, 3 over ranges of 11 and 10)
    (F16, SMALL_STREAM, 448, 16, 100, 1, None, 3),
    (F16, SMALL_STREAM, 384, 16, 100, 1, dict(c=4), 3),
    (F16, dict(SMALL_STREAM, cluster_m=2), 640, 16, 200, 2, dict(d=4), 4),
]
HYBRID = len(STREAM_CASES) - 3
STREAM_RUNS = [pytest.param(i, mode, seed, id=f"{i}-{mode}-{seed}",
                            marks=() if (i, mode, seed) in ((0, "adversarial", 1), (HYBRID, "adversarial", 1))
                            else pytest.mark.slow)
               for i in range(len(STREAM_CASES)) for mode in POLICIES for seed in (1, 2)]


@pytest.mark.parametrize("i,mode,seed", STREAM_RUNS)
def test_stream_k_computes_the_gemm(i, mode, seed):
    form, kw, m, n, k, batch, pad, sms = STREAM_CASES[i]
    cfg = stream_cfg(form, **kw)
    kern = emit_sparse_wgmma(cfg)
    tiles, blocks = _tiles(cfg, m, n), -(-k // cfg.cta_k)
    gx, gy, _ = kern.grid(m, n, k, batch, sms)
    cm = cfg.cluster_m
    assert gy == batch and gx == cm * min(tiles * blocks // cm, sms // cm)
    if i == 0:          # what the case is for: each tile over 3 CTAs, one CTA in both
        assert sharers(tiles, blocks, gx) == [[0, 1, 2], [2, 3, 4]]
    if i == 5:          # ranges of pairs: each pair tile over 2 pairs
        assert sharers(tiles // 2, blocks, gx // 2) == [[0, 1], [1, 2]]
    if i == HYBRID:     # tiles 0-2 data-parallel, the rest shared
        assert sharers(tiles, blocks, gx) == [[0], [1], [2], [0], [0, 1], [1, 2], [2]]
    if i == HYBRID + 1:
        assert sharers(tiles, blocks, gx) == [[0], [1], [2], [0], [1], [2]]
    if i == HYBRID + 2:
        assert sharers(tiles // 2, blocks, gx // 2) == [[0], [1], [0], [0, 1], [1]]
    d, ref, stats = run_stream(cfg, m, n, k, mode, seed, sms, batch=batch, pad=pad)
    # every K block of every tile is loaded once, whichever CTA's range it falls in
    assert stats["tma"] == batch * tiles * blocks * len(tma_boxes(cfg))
    assert _same(d, ref), f"{np.count_nonzero(d.view(np.uint8) != ref.view(np.uint8))} bytes differ"


def test_stream_k_is_deterministic(monkeypatch):
    """Same input, same bits under any timing: C of magnitude 2^20 makes the f32 sum of the partials round (so
    another order of summation would show), and two schedules of the emulator (every copy and wgmma group
    eager, or as late as possible with the warps interleaved) give identical D. 2 tiles of 4 K blocks on 3
    CTAs (ranges [0,3) [3,6) [6,8): CTA 1 in both tiles)."""
    from compiler.emulator import sparse_host

    plain = sparse_host.edge_problem

    def big_c(form, m, n, k, rng, accumulate_c):
        p = plain(form, m, n, k, rng, accumulate_c)
        p.c = (p.c * np.float32(1 << 20) + np.float32(0.375)).astype(np.float32)
        return p

    monkeypatch.setattr(sparse_host, "edge_problem", big_c)
    cfg = stream_cfg(F16, **SMALL_STREAM)
    runs = [run_stream(cfg, 128, 16, 100, mode, 3, 3)[0] for mode in ("eager", "adversarial")]
    assert _same(runs[0], runs[1])
    assert np.abs(runs[0]).max() >= 1 << 20


@pytest.mark.slow
def test_stream_k_is_deterministic_slow(monkeypatch):
    """As above, more schedules (random, reversed warp order) and the 3-CTA tiles of STREAM_CASES[0]."""
    from compiler.emulator import sparse_host

    plain = sparse_host.edge_problem
    monkeypatch.setattr(sparse_host, "edge_problem", lambda *a: _scaled_c(plain(*a)))
    cfg = stream_cfg(F16, **SMALL_STREAM)
    runs = [run_stream(cfg, 128, 16, 200, mode, 4, 5)[0] for mode in POLICIES]
    from compiler.emulator.sparse_host import run_sparse_wgmma

    kern = emit_sparse_wgmma(cfg)
    runs.append(run_sparse_wgmma(kern, cfg.name, cfg.form, 1, cfg.threads, cfg.smem_bytes, 128, 16, 200, "f32", True,
                                 mode="random", order="reverse", seed=4, multiprocessors=5)[0])
    assert all(_same(runs[0], r) for r in runs[1:])


def _scaled_c(p):
    p.c = (p.c * np.float32(1 << 20) + np.float32(0.375)).astype(np.float32)
    return p


# Broken stream-K kernels: the first CTA to arrive at a shared tile reducing (and, the semaphore reset left
# out, only it), not the last: it reads partials not yet written (the fix-up CTA not waiting for the others);
# every sharer reducing (the last one too, and only the last resetting the semaphore): the last D written may
# be the right one, but the earlier reducers read slots their CTAs have not stored yet (on the GPU garbage or
# the previous launch's partials, and a wrong D whenever an early reducer's D lands last), which the
# emulator's uninitialised workspace refuses (compiler/emulator/memory.py); the last-arrival test waiting
# for one arrival too many (nobody reduces); C preloaded by every segment; a CTA's two partial segments in
# one slot; the semaphore never reset.
STREAM_MUTATIONS = {
    "every_sharer_reduces": lambda t: re.sub(
        r"[ ]*@%p2 bra\.uni NOT_LAST_\d+;.*\n(.*\n)([ ]+)(@%p1 st\.relaxed\.gpu\.global\.u32 \[%gs\], 0;)",
        r"\1\2setp.eq.and.u32 %p1, %x, %nr, %p1;\n\2\3", t),
    "first_arrival_reduces": lambda t: t.replace("setp.ne.u32 %p2, %x, %nr;", "setp.ne.u32 %p2, %x, 0;").replace(
        "@%p1 st.relaxed.gpu.global.u32 [%gs], 0;", ""),
    "one_arrival_too_many": lambda t: t.replace("setp.ne.u32 %p2, %x, %nr;",
                                                "sub.u32 %x, %x, 1;\n    setp.ne.u32 %p2, %x, %nr;"),
    "c_in_every_segment": lambda t: re.sub(r"setp\.ne\.u32 %p1, %k0, 0;(\s+@%p1 bra\.uni C_DONE)",
                                           r"setp.ne.u32 %p1, %k0, %k0;\1", t),
    "one_slot_per_cta": lambda t: t.replace("min.u32 %z, %k0, 1;", "min.u32 %z, %k0, 0;"),
    "semaphore_not_reset": lambda t: t.replace("@%p1 st.relaxed.gpu.global.u32 [%gs], 0;", ""),
}


@pytest.mark.parametrize("name", [pytest.param(n, marks=() if n == "every_sharer_reduces" else pytest.mark.slow)
                                  for n in sorted(STREAM_MUTATIONS)])
def test_model_catches_broken_stream_k(name):
    cfg = stream_cfg(F16, **SMALL_STREAM)
    text = emit_sparse_wgmma(cfg).text
    mutate = STREAM_MUTATIONS[name]
    assert mutate(text) != text, "the mutation applies"
    try:
        d, ref, _ = run_stream(cfg, 128, 16, 100, "adversarial", 5, 3, transform=mutate)
    except EmulationError:
        return                            # a semaphore left non-zero, a read of an unwritten partial, ...
    assert not _same(d, ref), f"{name} went unnoticed"


# Broken data-parallel walks (10 tiles of 4 K blocks on 3 CTAs: tiles 0-5 whole, two a CTA; 6-9 shared): the next whole
# tile G + 1 on instead of G (tiles skipped, others done twice); the stream-K ranges over the partial wave
# only (the last full wave's tiles left undone); the stream-K range entered at the CTA's first data-parallel tile's end.
HYBRID_MUTATIONS = {
    "stride_g_plus_1": lambda t: t.replace("    sub.u32 %y, %y, 1;\n    mad.lo.u32 %t, %y, %nkb, %t;",
                                           "    mad.lo.u32 %t, %y, %nkb, %t;"),
    "last_full_wave_not_streamed": lambda t: t.replace("    rem.u32 %x, %c0, %y;\n    add.u32 %x, %x, %y;\n",
                                                      "    rem.u32 %x, %c0, %y;\n"),
    "no_second_whole_tile": lambda t: t.replace("    setp.lt.u32 %p1, %t, %c1;\n", "    setp.lt.u32 %p1, %t, 0;\n"),
}


@pytest.mark.parametrize("name", sorted(HYBRID_MUTATIONS))
def test_model_catches_broken_hybrid_stream_k(name):
    cfg = stream_cfg(F16, **SMALL_STREAM)
    mutate = HYBRID_MUTATIONS[name]
    assert mutate(emit_sparse_wgmma(cfg).text) != emit_sparse_wgmma(cfg).text, "the mutation applies"
    d, ref, _ = run_stream(cfg, 640, 16, 100, "adversarial", 5, 3)
    assert _same(d, ref)
    try:
        d, ref, _ = run_stream(cfg, 640, 16, 100, "adversarial", 5, 3, transform=mutate)
    except EmulationError:
        return
    assert not _same(d, ref), f"{name} went unnoticed"


def test_stream_k_abi_scratch_and_grid():
    """ABI: grid x = min(tiles x K blocks, SMs); the workspace holds two partials per CTA of the grid and
    batch, the semaphores one u32 per tile and batch; limits keep the iteration index u32."""
    from compiler.runtime import abi as rabi

    kern = emit_sparse_wgmma(stream_cfg(F16, cta_m=128, cta_n=64, cta_k=64, stages=6, accumulate_c=False,
                                        d_type="f16"))
    abi = kern.abi
    assert abi["split_k"] == "stream" and abi["persistent"]
    assert abi["grid"][0] == "min(tiles * ((K + 63) // 64), multiprocessors * max_ctas_per_sm)"
    assert [p["name"] for p in abi["params"]][:4] == ["tensor_maps", "d", "workspace", "semaphores"]
    assert rabi.grid_blocks(abi, 8192, 16, 8192, 132) == (132, 1, 1)          # 64 tiles x 128 blocks
    assert rabi.grid_blocks(abi, 128, 16, 200, 132) == (4, 1, 1)              # 1 tile x 4 blocks
    env = rabi.names(abi, 8192, 16, 8192, 132, batch=2)
    ws, sem = abi["scratch"]["workspace"], abi["scratch"]["semaphores"]
    assert [rabi.eval_expr(x, env) for x in ws["shape"]] == [2, 264, 128 * 64] and ws["element"] == "f32"
    assert [rabi.eval_expr(x, env) for x in sem["shape"]] == [2, 64] and sem["zeroed"] and not ws["zeroed"]
    assert not rabi.unmet(abi, 8192, 16, 8192, 2)
    assert rabi.unmet(abi, 1 << 30, 1 << 20, 1 << 20)                         # (tiles + 1) x blocks >= 2^31


def test_stream_k_config_errors():
    from compiler.diagnostics import SpecError

    with pytest.raises(SpecError) as e:
        emit_sparse_wgmma(cfg_of(F16, **dict(BENCH[1], split_k="stream", persistent=False)))
    assert e.value.field == "schedule.split_k"


PTXAS_STREAM = [
    (F16, dict(BENCH[0], d_type="f16", accumulate_c=False)),                  # 128 accumulators, direct D
    (F16, dict(cta_m=128, cta_n=64, cta_k=64, stages=6, d_type="f16", accumulate_c=False)),
    (S8, dict(cta_m=128, cta_n=128, cta_k=128, stages=3, accumulate_c=True)),   # s32 partials + C
    (TF32, dict(cta_m=128, cta_n=128, cta_k=32, stages=4)),                   # staged f32 D + C
    (E4M3, dict(cta_m=128, cta_n=256, cta_k=128, stages=4, d_type="f16", accumulate_c=False)),
    (F16, dict(BENCH[1], cluster_m=2, d_type="f16", accumulate_c=False)),    # CTA pairs
    (F16, dict(cta_m=192, cta_n=128, cta_k=64, consumers=3, stages=4, d_type="f16", accumulate_c=False)),
    (F16, dict(cta_m=256, cta_n=192, cta_k=64, stages=3, d_type="f16", accumulate_c=False)),   # setmaxnreg
]


@pytest.mark.parametrize("form,kw", PTXAS_STREAM, ids=lambda x: getattr(x, "name", None) or str(x))
def test_ptxas_assembles_stream_k_kernels(ptxas, tmp_path, form, kw):
    cfg = stream_cfg(form, **kw)
    text = emit_sparse_wgmma(cfg).text
    assert "atom.acq_rel.gpu.global.add.u32" in text and "st.relaxed.gpu.global.u32" in text
    log = _assemble(ptxas, text, tmp_path)
    assert "0 bytes spill stores, 0 bytes spill loads" in log, log
    assert int(re.search(r"Used (\d+) registers", log).group(1)) <= cfg.max_regs


@pytest.mark.slow
def test_stream_k_fused_epilogue_with_c_and_bias():
    """The fused epilogue (relu(alpha (A*B) + beta C + bias[row]), f16 D) runs once per tile, by the CTA that
    reduces a shared tile or the one that holds a whole tile: 9 tiles of 2 K blocks on 2 CTAs (tile 4 shared:
    9 iterations each), an edge shape and a batch, adversarially and randomly."""
    import compiler

    src = EPILOGUE_C.replace("persistent=static", "split_k=stream")
    result = compiler.compile_source(src, "ep.tile")
    abi = result.to_json()["tiles"]["ep"]["kernel"]
    assert abi["split_k"] == "stream" and abi["epilogue"]["c"] == "epilogue"
    for shape, mode, batch in (((300, 260, 72), "adversarial", 2), ((300, 260, 150), "random", 1)):
        assert compiler.emulate(result, shape=shape, mode=mode, batch=batch, seed=4).ok


@pytest.mark.slow
def test_stream_k_example_on_the_emulator():
    """examples/sparse_wgmma_f16_decode_stream_k.tile, both tiles: 3 tiles x 5 K blocks on 2 CTAs (tile 1
    shared), adversarially; an odd batch randomly."""
    import compiler

    result = compiler.compile_file(str(REPO / "examples" / "sparse_wgmma_f16_decode_stream_k.tile"))
    assert len(result.tiles) == 2
    for tile in result.tiles:
        assert compiler.emulate(result, tile, shape=(384, 16, 320), mode="adversarial", seed=1).ok
    assert compiler.emulate(result, shape=(200, 70, 200), mode="random", batch=2, seed=2).ok


def test_ptxas_assembles_the_stream_k_fused_epilogue(ptxas, tmp_path):
    import compiler

    log = _assemble(ptxas, compiler.compile_source(EPILOGUE_C.replace("persistent=static", "split_k=stream"),
                                                   "p.tile").ptx, tmp_path)
    assert "0 bytes spill stores, 0 bytes spill loads" in log, log


def test_runtime_sizes_stream_k_scratch_with_the_sm_count(monkeypatch):
    """The stream-K tile on a fake H100 (132 SMs): grid 132 CTAs, the workspace two 128 x 64 f32 partials a
    CTA ([1, 264, 8192]), the semaphores one per tile ([1, 64], zeroed), allocated once."""
    from compiler.runtime import driver

    m, n, k = 8192, 64, 8192
    kernel, fake, (a, b, d), allocated, previous = _fake_launch(monkeypatch, "sparse_wgmma_f16_decode_stream_k.tile",
                                                                "sparse_wgmma_f16_decode_stream_k", m, n, k)
    try:
        kernel(a, b, out=d)
        kernel(a, b, out=d)
    finally:
        driver.use(previous)
    assert allocated == [((1, 2 * 132, 128 * 64), "f32", False), ((1, 64), "s32", True)]
    assert fake.launches[-1][0].grid == (132, 1, 1)


# Spill-prone configurations no example uses (ptxas -v, CUDA 13.0, sm_90a): stream-K's range state beside 128
# accumulators (12 B with f32 D + C at 128 x 256 and 256 x 128; 28-48 B with f16 D), and a persistent staged
# epilogue on the m64 blocks of 128-row consumers (32 B at 128 x 208 with one consumer warpgroup, 40 B at 256 x 192):
# the compiler warns at the schedule, and the resource plan says why (sparse_wgmma_kernel.spill_note).
# Their neighbours that assemble without spills get no note (112 accumulators in 2 blocks; 128 x 144 and 128 x 160
# with one consumer warpgroup; 256 x 128 and 256 x 160; the 128 x 64 stream-K example).
SPILL_TILE = """target sm_90a;
tile t {{
  engine mma.sp;
  shape M=16 N=8 K=32;
  A: f16 global; B: f16 global; C: f32 global; D: {d} global;
  sparsity 2:4 metadata=runtime selector=0;
  schedule cta={cta} warps={warps} stages={stages} mma=wgmma {sched};
{epilogue}}}
"""
EP_LINE = "  epilogue alpha=param beta=param bias=row act=relu;\n"
# The persistent staged epilogues run on one m64 block a staging pass (the region holds 64 rows per warpgroup):
# 256 x 128, 128 x 160 and 256 x 160 spilled 20-28 B when both blocks' epilogues ran before one staging pass,
# and spill no more; 128 x 208 (one consumer warpgroup of 255) and 256 x 192 (setmaxnreg's 240) still do.
# 128 x 256 (2 x 64-row consumers, 128 accumulators in the launch's 168) spilled 24 B with whole rows (3 stages)
# and 36 B in column blocks (4 stages) while its epilogue read C beside them; setmaxnreg's 240 removes it
SPILL_PRONE = [   # (cta, warps, schedule, D, epilogue?, stages, spills on CUDA 13.0)
    ("128x256x64", "8x1", "split_k=stream", "f32", False, 4, True),
    ("256x128x64", "8x1", "split_k=stream", "f32", False, 3, True),
    ("256x128x64", "8x1", "persistent=static", "f16", True, 3, False),
    ("128x160x64", "4x1", "persistent=static", "f16", True, 3, False),
    ("256x160x64", "8x1", "persistent=static", "f16", True, 3, False),
    ("256x112x64", "8x1", "split_k=stream", "f32", False, 3, False),
    ("128x144x64", "4x1", "persistent=static", "f16", True, 3, False),
    ("128x64x64", "8x1", "split_k=stream", "f32", False, 6, False),
    ("128x208x64", "4x1", "persistent=static", "f16", True, 3, True),
    ("256x192x64", "8x1", "persistent=static", "f16", True, 2, True),
    ("128x256x64", "8x1", "persistent=static", "f16", True, 3, False),
    ("128x256x64", "8x1", "persistent=static", "f16", True, 4, False),
]


def _spill_source(cta, warps, sched, d, ep, stages):
    return SPILL_TILE.format(cta=cta, warps=warps, sched=sched, d=d, stages=stages, epilogue=EP_LINE if ep else "")


def test_spill_prone_schedules_warn_at_the_schedule():
    """A stream-K tile of 128 x 256 and a persistent staged epilogue of one 128-row consumer at N = 208: one
    located warning each (line, column of `schedule`, a hint), the plan's spill_note; the 128 x 64 stream-K
    tile and the epilogue at N = 160 none. One consumer warpgroup with the epilogue compiles (setmaxnreg cannot
    raise a 256-thread CTA's 255, so the epilogue's need does not ask for it and fail)."""
    import compiler

    for case, warned in ((SPILL_PRONE[0], True), (SPILL_PRONE[8], True), (SPILL_PRONE[3], False),
                         (SPILL_PRONE[7], False)):
        src = _spill_source(*case[:6])
        result = compiler.compile_source(src, "s.tile")
        notes = [w for w in result.warnings if "ptxas may spill" in w.message]
        assert len(notes) == warned, result.warning_text(src)
        plan = result.to_json()["tiles"]["t"]["resources"]
        assert ("spill_note" in plan) == warned
        if warned:
            text = result.warning_text(src)
            assert "s.tile:7:3: warning: tile 't':" in text and "hint: " in text, text
            assert "setmaxnreg" not in result.ptx or case[1] == "8x1"


@pytest.mark.parametrize("i", [pytest.param(i, marks=() if i == 3 else pytest.mark.slow) for i in range(len(SPILL_PRONE))])
def test_ptxas_spills_only_where_the_compiler_warns(ptxas, tmp_path, i):
    """No silent spill: ptxas -v spills exactly where the compiler warned (the measurements above). In the
    default run the one consumer warpgroup of 128 x 160 with the epilogue, a form refused before (its PTX is
    assembled here), which spilled 28 B before its m64 blocks were staged one at a time."""
    import compiler

    *case, spills = SPILL_PRONE[i]
    result = compiler.compile_source(_spill_source(*case), "s.tile")
    warned = any("ptxas may spill" in w.message for w in result.warnings)
    log = _assemble(ptxas, result.ptx, tmp_path)
    spilled = int(re.search(r"(\d+) bytes spill stores", log).group(1))
    assert warned == spills and (spilled > 0) == spills, (warned, log)


# Issue 17's 256 x 176 tiles with a 4th stage: persistent CTA pairs of 2 x 128-row consumers stage D one m64
# block at a time through a region of 2 warpgroups x 64 rows x 368 B = 47104 B after the ring (4 x 40960 B of
# slots (A 16384 + B 22528 + compact metadata 2048) + 8 mbarriers = 163904 B, at the next 128-byte boundary
# 163968; + 1024 B of alignment slack: 212096 B of the 232448 B a CTA may have); the whole tile's region (256 x 368 B = 94208 B) left room for 3 stages only.
# Interior problem: 512 x 352, 4 tiles of which the one CTA pair walks 2 each (every row leaves by a bulk copy,
# block 1 restages the region after block 0's copies, the next tile's block 0 after block 1's); edge problem:
# 300 x 200 x 130 (one interior tile, the others cut in M, N and K)
S4_FORMS = {"f16": (F16, dict(cta_k=64, d_type="f16")), "e4m3_bf16": (E4M3, dict(cta_k=128, d_type="bf16"))}
S4_PROBLEMS = {"interior": (512, 352, 64), "edge": (300, 200, 130)}
S4_RUNS = [pytest.param(f, p, mode, id=f"{f}-{p}-{mode}",
                        marks=() if (f, p, mode) == ("e4m3_bf16", "interior", "adversarial") else pytest.mark.slow)
           for f in S4_FORMS for p in S4_PROBLEMS for mode in ("adversarial", "random")]


def _s4_cfg(name: str):
    form, kw = S4_FORMS[name]
    return cfg_of(form, cta_m=256, cta_n=176, stages=4, cluster_m=2, persistent=True, accumulate_c=False, **kw)


def test_256x176_with_4_stages_stages_d_per_m64_block():
    cfg = _s4_cfg("f16")
    # a slot: A 256 x 64 B = 16384, B 176 x 128 B = 22528, metadata 16 tiles x 2 k-steps x 64 B (compact) = 2048
    ring_end = -(-(4 * 40960 + 8 * 8) // 128) * 128
    assert (cfg.staged_d, cfg.bulk_copy_out, cfg.d_block_rows, cfg.d_offset) == (True, True, 64, ring_end)
    assert cfg.d_region_bytes == 2 * 64 * 368 and cfg.smem_bytes == 1024 + ring_end + 2 * 64 * 368 == 212096
    # 256 x 192 f16 (slots of 16384 + 24576 + 2048 = 43008 B): with 4 stages whole rows fit (1024 + 172160 + 2 x 64
    # x 400 = 224384 <= 232448); with 5 the whole rows are 34944 B over the 232448 and 2 column blocks of 96
    # (2 x 64 x 208 B) still 10368 B over: rows staged in 4 column blocks of 48 columns (2 x 64 x 112 B)
    fits = cfg_of(F16, cta_m=256, cta_n=192, cta_k=64, stages=4, cluster_m=2, persistent=True, accumulate_c=False,
                  d_type="f16")
    assert fits.staged_d and fits.d_col_blocks == 1 and fits.smem_bytes == 1024 + -(-(4 * 43008 + 8 * 8) // 128) * 128 \
        + 2 * 64 * 400 == 224384
    wide = cfg_of(F16, cta_m=256, cta_n=192, cta_k=64, stages=5, cluster_m=2, persistent=True, accumulate_c=False,
                  d_type="f16")
    ring = -(-(5 * 43008 + 10 * 8) // 128) * 128
    assert (1024 + ring + 2 * 64 * 400 - wide.smem_limit, 1024 + ring + 2 * 64 * 208 - wide.smem_limit) == (34944, 10368)
    assert wide.staged_d and wide.d_col_blocks == 4 and wide.d_region_bytes == 2 * 64 * 112
    # one m64 block per warpgroup (128 x 256, 2 consumers of 64 rows): the region as before, cta_m x pitch
    one = cfg_of(F16, cta_m=128, cta_n=128, cta_k=64, stages=2, persistent=True)
    assert one.d_region_bytes == 128 * (128 * 4 + 16)
    text = emit_sparse_wgmma(cfg).text
    # per tile and warpgroup: 2 staging passes, each with its read wait, barrier, fence, barrier and bulk copies
    assert text.count("cp.async.bulk.wait_group.read 0;") == 2
    assert text.count("cp.async.bulk.global.shared::cta.bulk_group [%rp], [%x], 352;") == 2


def _staged_run_matches(cfg, m: int, n: int, k: int, mode: str, seed: int) -> None:
    """A persistent kernel with staged D on the emulator: D equals the reference bit for bit, and every
    interior tile left by one bulk copy per row piece (d_col_blocks pieces a row; whole rows: 1)."""
    d, ref, stats = run_model(cfg, m, n, k, mode, seed=seed)
    assert stats["bulk_store"] == (m // cfg.cta_m) * (n // cfg.cta_n) * cfg.cta_m * cfg.d_col_blocks
    assert _same(d, ref), f"{np.count_nonzero(d.view(np.uint8) != ref.view(np.uint8))} bytes differ"


@pytest.mark.parametrize("form,problem,mode", S4_RUNS)
def test_256x176_with_4_stages_on_the_emulator(form, problem, mode):
    pytest.importorskip("ml_dtypes")
    cfg = _s4_cfg(form)
    assert cfg.d_col_blocks == 1                          # whole rows: a copy per interior row
    _staged_run_matches(cfg, *S4_PROBLEMS[problem], mode, seed=2)


# Staging one m64 block at a time, broken: block 1 staged before block 0's bulk copies have read the region (no
# cp.async.bulk.wait_group.read before the second pass; the barrier after it stays), or before the other
# threads of the warpgroup issued theirs (no barrier after that wait). Caught under the adversarial policy.
BLOCK_MUTATIONS = {
    "block_1_staged_before_block_0_is_read": (
        lambda t: re.sub(r"cp\.async\.bulk\.wait_group\.read 0; *// its bulk copy of m64 block 0[^\n]*\n", "", t),
        "overwrites shared memory .* no cp.async.bulk.wait_group.read retired"),
    "block_1_staged_without_the_warpgroup": (
        lambda t: re.sub(r"add\.u32 %z, %wg, 2;\n *bar\.sync %z, 128; *// this warpgroup's copy-out of m64 block 0"
                         r"[^\n]*\n", "", t), None),
}


@pytest.mark.parametrize("name", [pytest.param(n, marks=() if i == 0 else pytest.mark.slow)
                                  for i, n in enumerate(BLOCK_MUTATIONS)])
def test_model_catches_broken_per_block_staging(name):
    cfg = _s4_cfg("f16")
    mutate, message = BLOCK_MUTATIONS[name]
    text = emit_sparse_wgmma(cfg).text
    assert mutate(text) != text, "the mutation applies"
    try:
        d, ref, _ = run_model(cfg, 512, 352, 64, "adversarial", seed=3, transform=mutate)
    except EmulationError as e:
        assert message is None or re.search(message, str(e)), e
        return
    assert message is None and not _same(d, ref), f"{name} went unnoticed"


def test_persistent_staged_epilogue_per_m64_block():
    """EPILOGUE_C on 256 x 64 tiles: 128-row consumer warpgroups run alpha*(A*B) + beta*C + bias[row], relu on
    one m64 block's registers at a time and stage it (C and the bias of block 1 are 64 rows further on); an
    edge problem (the last tile row has 4 rows, the last tile column 36 columns) adversarially."""
    import compiler

    result = compiler.compile_source(EPILOGUE_C.replace("cta=128x128x64", "cta=256x64x64"), "ep.tile")
    assert result.to_json()["tiles"]["ep"]["resources"]["d_staging_bytes"] == 2 * 64 * (64 * 2 + 16)
    assert compiler.emulate(result, shape=(260, 100, 40), mode="adversarial", seed=4).ok


PACKED_D = """target sm_90a;
tile p8 {
  engine mma.sp;
  shape M=16 N=8 K=64;
  A: s8 global; B: s8 global; D: s8 global;
  sparsity 2:4 metadata=runtime selector=0;
  schedule cta=256x24x128 warps=8x1 stages=3 mma=wgmma persistent=static;
  epilogue scale=param;
}
"""


def test_persistent_one_byte_d_is_stored_from_the_fragments(ptxas, tmp_path):
    """A 1-byte D (s8, packed by the epilogue) in persistent CTAs: stored from the fragments (the staging of D's
    type pair by pair has no packed-byte store; it emitted `st.shared.None`, which ptxas refuses), right on the
    emulator (edges, adversarially)."""
    import compiler

    result = compiler.compile_source(PACKED_D, "p8.tile")
    assert "st.shared" not in result.ptx and "d_staging" not in result.to_json()["tiles"]["p8"]["resources"]
    _assemble(ptxas, result.ptx, tmp_path)
    assert compiler.emulate(result, shape=(300, 30, 130), mode="adversarial", seed=1).ok


# A 128 x 256 tile with 4 stages (cuSPARSELt's persistent CTA-pair tile; examples/sparse_wgmma_128x256.tile):
# 2 consumer warpgroups of 64 rows. Whole staged rows (2 x 64 x (256 x 2 + 16) = 67584 B) do not fit beside
# the ring (f16: 4 x 41984 B (A 8192 + B 32768 + compact metadata 1024) + 8 mbarriers, at the next 128-byte
# boundary 168064; + 1024 B of slack), so D is staged in h = 2 column blocks of 128 columns through 2 x 64 x
# 272 B = 34816 B: 203904 B of the 232448. Each
# warpgroup stages column block 0, copies its 64 row pieces of 256 B out (a bulk copy each), waits until they
# have read the region, stages column block 1 and copies it to columns n0 + 128... Interior problem: 256 x 512
# x 64 (4 interior tiles, 2 per CTA of the pair); edge problem: 200 x 392 x 40 (one interior tile; in the
# last tile column block 0 lies inside D, block 1 has 8 of its 128 columns inside, and the second tile row 72
# of its 128 rows; K shorter than one K block).
CB_FORMS = {"f16": (F16, dict(cta_k=64, d_type="f16")), "bf16": (BF16, dict(cta_k=64, d_type="bf16")),
            "e4m3_bf16": (E4M3, dict(cta_k=128, d_type="bf16"))}
CB_PROBLEMS = {"interior": (256, 512, 64), "edge": (200, 392, 40)}
CB_RUNS = [pytest.param(f, p, mode, id=f"{f}-{p}-{mode}",
                        marks=() if (f, p, mode) == ("f16", "edge", "eager") else pytest.mark.slow)
           for f in CB_FORMS for p in CB_PROBLEMS for mode in ("eager", "adversarial", "random")]


def _cb_cfg(name: str, **kw):
    form, fkw = CB_FORMS[name]
    return cfg_of(form, **{**dict(cta_m=128, cta_n=256, stages=4, cluster_m=2, persistent=True, accumulate_c=False),
                           **fkw, **kw})


def test_128x256_with_4_stages_stages_d_in_column_blocks():
    cfg = _cb_cfg("f16")
    ring_end = -(-(4 * 41984 + 8 * 8) // 128) * 128
    assert 1024 + ring_end + 2 * 64 * (256 * 2 + 16) > cfg.smem_limit == 232448          # whole rows: no room
    assert (cfg.staged_d, cfg.bulk_copy_out) == (True, True)
    assert (cfg.d_col_blocks, cfg.d_piece_cols, cfg.d_pitch) == (2, 128, 272)
    assert cfg.d_region_bytes == 2 * 64 * 272 and cfg.smem_bytes == 1024 + ring_end + 2 * 64 * 272 == 203904
    assert _cb_cfg("e4m3_bf16").d_col_blocks == 2                         # 32-lane metadata: slots of 43008 B
    # f32 D (C read): pieces of 64 columns x 4 B; the CTA pair's 5 stages (5 x 41984 + 80 -> 210048 B of ring)
    # leave room for 4 pieces of 64 columns (1024 + 210048 + 2 x 64 x 144 = 229504), not 2 (245888)
    assert _cb_cfg("f16", d_type=None, accumulate_c=True).d_col_blocks == 4
    assert _cb_cfg("f16", stages=5).d_col_blocks == 4
    # whole rows where they fit (h = 1: the kernels of before), and the pieces a block may not have: 176 columns
    # in 4 blocks of 44 would cut the accumulator pairs' 8-column groups
    assert _cb_cfg("f16", stages=3).d_col_blocks == 1 and _s4_cfg("f16").d_col_blocks == 1
    assert "multiple of 8" in _s4_cfg("f16").d_piece_problem(4) and _s4_cfg("f16").d_piece_problem(2) is None
    text = emit_sparse_wgmma(cfg).text
    # per tile and warpgroup: 2 staging passes (the read wait before each), one 256-byte bulk copy per row piece,
    # the second to the columns 128 further on
    assert text.count("cp.async.bulk.wait_group.read 0;") == 2
    assert text.count("cp.async.bulk.global.shared::cta.bulk_group [%rp], [%x], 256;") == 2
    assert text.count("add.u32 %pn, %n0, 128;") == 1 and text.count("add.u32 %pn, %pn, 128;") == 1   # bulk, edge


@pytest.mark.parametrize("form,problem,mode", CB_RUNS)
def test_128x256_column_blocks_on_the_emulator(form, problem, mode):
    pytest.importorskip("ml_dtypes")
    _staged_run_matches(_cb_cfg(form), *CB_PROBLEMS[problem], mode, seed=2)


@pytest.mark.slow
@pytest.mark.parametrize("kw,problem", [(dict(d_type=None, accumulate_c=True), (200, 392, 100)),   # f32 + C, h = 4
                                        (dict(d_type=None, stages=5), (256, 520, 64))],             # h = 8
                         ids=["f32-h4", "f32-h8"])
def test_finer_column_blocks_on_the_emulator(kw, problem):
    _staged_run_matches(_cb_cfg("f16", **kw), *problem, "adversarial", seed=3)


# Column blocks, broken: column block 1 copied to the columns of block 0 (its column offset lost), caught by D;
# block 1 staged before block 0's bulk copies have read the region (no cp.async.bulk.wait_group.read before
# the second pass), caught by the emulator's bulk-copy model under the adversarial policy.
CB_MUTATIONS = {
    "column_block_1_at_column_0": (lambda t: t.replace("add.u32 %pn, %n0, 128;", "add.u32 %pn, %n0, 0;"), "eager",
                                   None),
    "column_block_1_staged_before_block_0_is_read": (
        lambda t: re.sub(r"cp\.async\.bulk\.wait_group\.read 0; *// its bulk copy of m64 block 0 columns 0\.\.127"
                         r"[^\n]*\n", "", t), "adversarial",
        "overwrites shared memory .* no cp.async.bulk.wait_group.read retired"),
}


@pytest.mark.parametrize("name", [pytest.param(n, marks=() if i == 0 else pytest.mark.slow)
                                  for i, n in enumerate(CB_MUTATIONS)])
def test_model_catches_broken_column_blocks(name):
    cfg = _cb_cfg("f16")
    mutate, mode, message = CB_MUTATIONS[name]
    text = emit_sparse_wgmma(cfg).text
    assert mutate(text) != text, "the mutation applies"
    try:
        d, ref, _ = run_model(cfg, 256, 512, 64, mode, seed=3, transform=mutate)
    except EmulationError as e:
        assert message is not None and re.search(message, str(e)), e
        return
    assert message is None and not _same(d, ref), f"{name} went unnoticed"


EPILOGUE_CB = EPILOGUE_C.replace("cta=128x128x64 warps=8x1 stages=3", "cta=128x256x64 warps=8x1 stages=4").replace(
    "bias=row", "bias=col")


@pytest.mark.parametrize("shape,mode", [
    pytest.param((100, 300, 40), "eager", id="edges"),               # edge tiles only: 100 rows; 256 + 44 columns
    pytest.param((130, 300, 40), "adversarial", id="interior", marks=pytest.mark.slow),   # tile (0, 0) interior
])
def test_column_blocks_with_a_fused_epilogue(shape, mode):
    """alpha*(A*B) + beta*C + bias[col], relu on the registers, f16 D staged in 2 column blocks (128 x 256, 4
    stages): C and the bias read at the pair's column of the tile, D staged at its column of the block's piece;
    the last tile column's block 0 partly inside D, its block 1 wholly outside."""
    import compiler

    result = compiler.compile_source(EPILOGUE_CB, "ep.tile")
    plan = result.to_json()["tiles"]["ep"]["resources"]
    assert plan["d_staging_bytes"] == 2 * 64 * 272 and "column blocks h = 2" in plan["d_staging"]
    assert compiler.emulate(result, shape=shape, mode=mode, seed=4).ok


LIGHT_EPILOGUE_CB = EPILOGUE_CB.replace("epilogue alpha=param beta=param bias=col act=relu;",
                                       "epilogue alpha=param bias=col act=relu;").replace(" C: f32 global;", "")


@pytest.mark.parametrize("case", ["f32-h4", "f32-h8", "epilogue", "epilogue-c"])
def test_ptxas_assembles_column_blocks(ptxas, tmp_path, case):
    """The staged column blocks' forms: f32 D + C in 4 blocks, f32 D in 8 blocks of 128 B pieces, a fused epilogue (alpha,
    a column bias, relu) and EPILOGUE_CB's (C read with beta besides: 128 accumulators + EPILOGUE_C_OTHER_REGS
    over the launch's 168, so the producer gives the consumers its registers, setmaxnreg 240; without it ptxas
    spilled 32 B), none spilling."""
    import compiler

    if case in ("f32-h4", "f32-h8"):
        # h = 8: f32 D beside 5 stages (with compact metadata, f16 D beside 5 stages needs only 4 blocks)
        cfg = _cb_cfg("f16", d_type=None, accumulate_c=True) if case == "f32-h4" else _cb_cfg("f16", d_type=None, stages=5)
        assert cfg.d_col_blocks == (4 if case == "f32-h4" else 8)
        text = emit_sparse_wgmma(cfg).text
    else:
        result = compiler.compile_source(EPILOGUE_CB if case == "epilogue-c" else LIGHT_EPILOGUE_CB, "ep.tile")
        plan = result.to_json()["tiles"]["ep"]["resources"]
        assert "column blocks h = 2" in plan["d_staging"] and ("setmaxnreg" in plan) == (case == "epilogue-c"), plan
        text = result.ptx
    log = _assemble(ptxas, text, tmp_path)
    assert "0 bytes spill stores, 0 bytes spill loads" in log, log


# Programmatic dependent launch (compiler/isa/griddepcontrol.py): a memory instruction whose state space is
# global (explicit, or the generic / tensor-map / bulk copies that reach it)
GLOBAL_ACCESS = re.compile(r"^\s*(@!?%p\d+\s+)?(ld\.global|ld\.(?!param|shared)|st\.(?!shared)|cp\.|atom\.|red\.|"
                           r"prefetch\.(?!param)|multimem\.)")


def test_every_thread_waits_for_the_grid_before_it_ahead_of_any_global_access():
    """Every sparse wgmma kernel of the examples says programmatic_launch in its ABI, and its PTX runs
    griddepcontrol.launch_dependents then griddepcontrol.wait in the entry's straight-line set-up (no label,
    no branch before them: every thread executes both), with no global memory access before the wait: so
    a launch that overlaps the grid before it (programmatic stream serialization) reads B, A and C and
    writes D only after that grid has completed and its writes are visible (PTX ISA 9.7.13 griddepcontrol)."""
    import compiler

    seen = 0
    for path in sorted((Path(__file__).resolve().parents[1] / "examples").glob("*.tile")):
        result = compiler.compile_file(str(path))
        for name, tile in result.to_json()["tiles"].items():
            abi = tile["kernel"]
            if not abi or abi.get("kernel_kind") != "sparse_wgmma":
                continue
            seen += 1
            assert abi["programmatic_launch"] is True
            text = result.ptx[result.ptx.index(f".entry {name}("):]
            body = text[text.index("{"):].splitlines()
            at = {ins: next(i for i, ln in enumerate(body) if ln.strip() == ins)
                  for ins in ("griddepcontrol.launch_dependents;", "griddepcontrol.wait;")}
            assert at["griddepcontrol.launch_dependents;"] < at["griddepcontrol.wait;"]
            before = body[:at["griddepcontrol.wait;"]]
            assert not [ln for ln in before if GLOBAL_ACCESS.match(ln)], name
            assert not [ln for ln in before if re.match(r"^\s*([A-Za-z_$][\w$]*:\s*$|(@!?%p\d+\s+)?bra)", ln)], name
    assert seen >= 20
