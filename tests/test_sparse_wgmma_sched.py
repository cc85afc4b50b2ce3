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
# (128 x 128 f32 + C) and direct D (128 x 256 f16: ring + region do not fit 227 KB); an odd tile count
# (a CTA walks one tile more); edges in M, N and K (a K tail shorter than a k-step); a batch (each batch's
# own persistent CTAs); CTA pairs sharing B; 8-bit and tf32 forms; one consumer
PERSISTENT_CASES = [
    (F16, dict(cta_m=128, cta_n=128, cta_k=64, stages=2), 256, 384, 448, 1, None),
    (F16, dict(BENCH[0], accumulate_c=False, d_type="f16"), 384, 512, 320, 1, None),
    (F16, dict(cta_m=128, cta_n=96, cta_k=64, stages=3), 300, 250, 100, 1, dict(c=4, d=12)),
    (F16, dict(cta_m=64, cta_n=64, cta_k=32, consumers=1, stages=3, raster_group=3), 190, 130, 37, 1, None),
    (BF16, dict(cta_m=128, cta_n=64, cta_k=128, stages=2, d_type="bf16", accumulate_c=False), 130, 200, 129, 2,
     dict(d=8)),
    (F16, dict(BENCH[1], cluster_m=2, accumulate_c=False, d_type="f16"), 512, 512, 200, 1, None),
    (S8, dict(cta_m=64, cta_n=32, cta_k=64, consumers=1, stages=3, cluster_m=2, raster_group=3), 300, 70, 100, 1,
     None),
    (TF32, dict(cta_m=128, cta_n=64, cta_k=32, stages=3), 250, 128, 40, 1, None),
    (E4M3, dict(cta_m=128, cta_n=128, cta_k=128, stages=2, accumulate_c=False, d_type="f16"), 256, 300, 200, 1,
     None),
]
POLICIES = ("eager", "adversarial", "random")
# by default: every case eagerly, the adversarial policy on staged D, an edge + C case and a CTA pair, the
# random one on direct D and a batch; everything under every policy and two seeds in the slow sweep
QUICK = {("eager", i) for i in range(len(PERSISTENT_CASES))} | {("adversarial", 0), ("adversarial", 2),
                                                                  ("adversarial", 5), ("random", 1), ("random", 4)}
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
    assert _same(d, ref), f"{np.count_nonzero(d.view(np.uint8) != ref.view(np.uint8))} bytes differ"


def test_staged_d_has_its_own_region_where_it_fits():
    """Persistent CTAs stage D after the ring's barriers (the ring is refilled during the epilogue): 128 x 128
    f32 + 16 B pitch padding = 67584 B next to 2 x 26624 B of ring; 128 x 256 f16 (67584 B) does not fit
    next to 4 x 43008 B (227 KB = 232448 B per block): direct fragment stores."""
    staged = cfg_of(F16, cta_m=128, cta_n=128, cta_k=64, stages=2, persistent=True)
    assert staged.staged_d and staged.d_offset >= staged.ring.bytes and \
        staged.smem_bytes == 1024 + staged.d_offset + 128 * (128 * 4 + 16)
    direct = cfg_of(F16, **dict(BENCH[0], accumulate_c=False, d_type="f16", persistent=True))
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


def test_persistent_example_on_the_emulator():
    """examples/sparse_wgmma_f16_persistent.tile: 4 x 2 CTA tiles (2 per CTA pair at 2 SMs), and an edge shape."""
    import compiler

    result = compiler.compile_file(str(REPO / "examples" / "sparse_wgmma_f16_persistent.tile"))
    for shape, mode in (((512, 512, 192), "eager"), ((300, 600, 100), "adversarial")):
        assert compiler.emulate(result, shape=shape, mode=mode, seed=1).ok


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


@pytest.mark.parametrize("form,kw", PTXAS_PERSISTENT, ids=lambda x: getattr(x, "name", None) or str(x))
def test_ptxas_assembles_persistent_kernels(ptxas, tmp_path, form, kw):
    cfg = cfg_of(form, persistent=True, **kw)
    log = _assemble(ptxas, emit_sparse_wgmma(cfg).text, tmp_path)
    assert "0 bytes spill stores, 0 bytes spill loads" in log, log
    assert int(re.search(r"Used (\d+) registers", log).group(1)) <= cfg.max_regs
