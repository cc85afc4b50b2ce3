"""The sparse wgmma GEMM (compiler/ptx/sparse_wgmma_kernel.py): execution model, geometry, ptxas,
configuration errors and DSL wiring.

1. Execution model: the emulator's warp machine (compiler/emulator/warp.py) runs the emitted PTX text itself,
   warp by warp with numpy registers of 32 lanes, and implements from the PTX ISA text the pieces this
   kernel relies on:
   * mbarrier (9.7.13.15): init count, arrive, arrive.expect_tx, complete_tx, try_wait.parity (the
     phase of parity P is complete when the current phase's parity differs from P; a fresh barrier
     counts phase -1 as complete). Extra arrivals, uninitialised barriers and deadlocks fail.
   * cp.async.bulk.tensor.3d (TMA): the box of the tensor map at the given coordinates (zero fill outside),
     written with the map's swizzle applied to the absolute shared address (bits [4, 4+B) ^= bits
     [7, 7+B), B = 1/2/3 for 32B/64B/128B; CU_TENSOR_MAP_SWIZZLE_*), completing its bytes on the
     mbarrier. A map must be fenced (fence.proxy.tensormap) before its first use.
   * wgmma.mma_async.sp (9.7.15.6): descriptors decoded from the bits (9.7.15.5.1.2.2: start, LBO, SBO,
     swizzle, base offset; K-major rows W bytes apart in 8-row atoms, SBO between atoms, the swizzle XOR
     on absolute addresses: the phase rule measured on the H100, docs/verification.md), warp w of the
     warpgroup computing rows 16w..16w+15 (9.7.15.6.2) with the metadata of the selected thread pair
     (9.7.15.6.1; decoded by compiler.sparse.decompress, whose slot table is H100-verified for mma.sp and
     which PTX draws with the same figures), D in the Figure 149 fragment layout restated there.
     wgmma.commit_group / wait_group per warp; an accumulator or metadata register touched while its
     wgmma is in flight fails.
   * bar.sync with ids and thread counts; divergent `ret`.
   * setmaxnreg (9.7.19): per-warp register counts from the kernel's .maxnreg, a per-CTA pool that .dec fills
     and .inc takes from (waiting: a deadlock if it never fills), the same instructions by every warp of a
     warpgroup.
   Copies land at issue ("eager") or only when every warp is stuck ("lazy", in random order), and wgmma
   groups execute at issue or only when wait_group retires them (reading shared memory and metadata
   then): a slot released before its wgmma finished, a missing wait or a stale phase gives wrong numbers
   or a deadlock in one of the runs. Shared memory starts as garbage and the dynamic window is not
   1024-aligned (the kernel rounds it up).
2. Geometry: the descriptor encoder against the H100-checked tcgen05->wgmma conversion of
   tests/gpu/harness/wgmma_read.py; the copy engine's address swizzle equals compiler/layout.py's canonical
   layout for every region; the Figure 149 fragment map against that benchmark's.
3. ptxas (CUDA 13.0) assembles every form for sm_90a without spills or serialised wgmma, and the register
   rules (check_registers) are ptxas's.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from compiler.diagnostics import SpecError
from compiler.emulator import EmulationError
from compiler.emulator.sparse_host import run_sparse_wgmma
from compiler.layout import swizzle_bytes
from compiler.isa.mma_sp.forms import find_form
from compiler.isa.wgmma import wgmma_descriptor
from compiler.ptx.sparse_wgmma_kernel import (SparseWgmmaConfig, descriptor_base, descriptor_offset,
                                              emit_sparse_wgmma, fragment_coord, layouts, tensor_map_args,
                                              tma_boxes)

REPO = Path(__file__).resolve().parents[1]
F16 = find_form("m16n8k32", "f16", "f16", "f32", "f32")
BF16 = find_form("m16n8k32", "bf16", "bf16", "f32", "f32")
TF32 = find_form("m16n8k16", "tf32", "tf32", "f32", "f32")
S8 = find_form("m16n8k64", "s8", "s8", "s32", "s32")
U8S8 = find_form("m16n8k64", "u8", "s8", "s32", "s32")
E4M3 = find_form("m16n8k64", "e4m3", "e4m3", "f32", "f32")
E5M2 = find_form("m16n8k64", "e5m2", "e5m2", "f32", "f32")

# the configurations benchmarks/sparse_wgmma.py times on the H100
BENCH = [dict(cta_m=128, cta_n=256, cta_k=64, stages=4), dict(cta_m=128, cta_n=256, cta_k=64, stages=5),
         dict(cta_m=256, cta_n=128, cta_k=64, stages=5), dict(cta_m=256, cta_n=128, cta_k=64, stages=6)]


def cfg_of(form=F16, name="wg", **kw) -> SparseWgmmaConfig:
    return SparseWgmmaConfig(name, form, **kw)


# --------------------------------------------------------------------------------------------------
# 1. execution model
# --------------------------------------------------------------------------------------------------

def run_model(cfg, m, n, k, mode="eager", order="forward", seed=0, transform=None, pad=None, batch=1):
    """Emit `cfg` (text passed through `transform` if given), run it on random sparse data on the emulator's
    warp machine; return (D, reference D, machine stats). `pad`: extra elements per row of B, C, D;
    `batch`: problems in one launch."""
    kern = emit_sparse_wgmma(cfg)
    text = transform(kern.text) if transform else kern.text
    return run_sparse_wgmma(kern, cfg.name, cfg.form, cfg.cluster_m, cfg.threads, cfg.smem_bytes, m, n, k,
                            cfg.out_type, cfg.accumulate_c, mode=mode, order=order, seed=seed, text=text, pad=pad,
                            batch=batch)


MODEL_CASES = [
    # (form, config, M, N, K): the benchmark tiles (2 consumers of 64 and of 128 rows) with K blocks fewer
    # than, equal to and more than the ring (wrapping phases, an odd block count ending mid-unroll), staged
    # f16 D and f32 D + C; one consumer; 1 and 4 k-steps per block (32B-swizzled A; B in two 128-byte K
    # atoms); the other forms; direct D stores; raster groups that do not divide the tile rows
    (F16, dict(BENCH[0], accumulate_c=False, d_type="f16"), 128, 512, 320),
    (F16, dict(BENCH[2], accumulate_c=False, d_type="f16", raster_group=3), 512, 256, 128),
    (F16, dict(cta_m=128, cta_n=128, cta_k=64, stages=2), 256, 128, 448),
    (F16, dict(cta_m=64, cta_n=64, cta_k=32, consumers=1, stages=3, raster_group=3), 192, 128, 160),
    (BF16, dict(cta_m=256, cta_n=64, cta_k=128, stages=2, accumulate_c=False, d_type="bf16"), 256, 128, 384),
    (F16, dict(cta_m=128, cta_n=96, cta_k=64, stages=3, stage_d=False, selector=1), 128, 192, 192),
    (TF32, dict(cta_m=128, cta_n=64, cta_k=32, stages=3), 128, 128, 96),
    (S8, dict(cta_m=128, cta_n=64, cta_k=128, stages=3), 256, 64, 384),
    (U8S8, dict(cta_m=128, cta_n=48, cta_k=64, consumers=2, stages=2, stage_d=False), 128, 96, 192),
    (E4M3, dict(cta_m=128, cta_n=128, cta_k=128, stages=2, accumulate_c=False, d_type="f16"), 128, 128, 256),
    # CTA pairs sharing B (cluster_m = 2): the benchmark tiles; B in two K atoms, each halved; one consumer
    (F16, dict(BENCH[1], cluster_m=2, accumulate_c=False, d_type="f16"), 256, 256, 448),
    (F16, dict(BENCH[3], cluster_m=2, raster_group=2, accumulate_c=False, d_type="f16"), 512, 128, 384),
    (BF16, dict(cta_m=128, cta_n=64, cta_k=128, stages=2, cluster_m=2), 512, 128, 384),
    (S8, dict(cta_m=64, cta_n=32, cta_k=64, consumers=1, stages=3, cluster_m=2, raster_group=3), 384, 64, 320),
    # setmaxnreg (PTX 9.7.19): 2 consumers of 128 x 192 (232 registers > the launch's 168: 24 / 240), f16 D; 3
    # consumers of 64 rows (warps=12x1, 512 threads: 32 / 160), f32 D + C, setmaxnreg asked for at N = 64
    # (needed only from 96 accumulators on: the large tiles' shape, in the ptxas cases and the slow sweep)
    (F16, dict(cta_m=256, cta_n=192, cta_k=64, stages=2, accumulate_c=False, d_type="f16"), 256, 192, 128),
    (BF16, dict(cta_m=192, cta_n=64, cta_k=64, consumers=3, stages=2, setmaxnreg=True), 192, 64, 192),
]
# every case eagerly; "lazy" (copies land late in random order, wgmma groups run when retired) and
# "late_mma" (copies land at once, wgmma groups run when retired) by default for a benchmark tile, an
# odd one and a CTA pair, every case in the slow sweep
LAZY_DEFAULT = {("lazy", 3), ("lazy", 10), ("late_mma", 0), ("late_mma", 13)}
MODEL_RUNS = [pytest.param(*case, "eager", "forward", id=f"{i}-eager") for i, case in enumerate(MODEL_CASES)] + \
    [pytest.param(*case, mode, "reverse", id=f"{i}-{mode}", marks=() if (mode, i) in LAZY_DEFAULT else pytest.mark.slow)
     for i, case in enumerate(MODEL_CASES) for mode in ("lazy", "late_mma")]


@pytest.mark.parametrize("form,kw,m,n,k,mode,order", MODEL_RUNS)
def test_emitted_ptx_computes_the_gemm(form, kw, m, n, k, mode, order):
    if form.a_type in ("bf16", "e4m3") or kw.get("d_type") == "bf16":
        pytest.importorskip("ml_dtypes")
    cfg = cfg_of(form, **kw)
    d, ref, stats = run_model(cfg, m, n, k, mode, order, seed=m + n + k)
    tiles = (m // cfg.cta_m) * (n // cfg.cta_n)
    blocks = k // cfg.cta_k
    # every copy and instruction happened: 2 + B-atom boxes per block; ksteps x m-blocks x consumers x 4 warps
    assert stats["tma"] == tiles * blocks * len(tma_boxes(cfg))
    assert stats["multicast"] == (tiles * blocks * (len(tma_boxes(cfg)) - 2) if cfg.cluster_m > 1 else 0)
    assert stats["wgmma"] == tiles * blocks * cfg.ksteps * cfg.m_blocks * cfg.consumers * 4
    assert np.array_equal(d.view(np.uint8), ref.view(np.uint8)), \
        f"{np.count_nonzero(d.view(np.uint8) != ref.view(np.uint8))} bytes differ"


# Any problem size (issue 17): M, N, K the CTA tile does not divide, smaller than one tile, K tails shorter
# than one k-step, CTA pairs whose second tile row lies wholly outside D; B, C and D rows further apart than
# their length (padding poisoned; D's padding is a guard band run_sparse_wgmma checks), on staged and direct
# D stores, every form. The copy engine zero-fills what lies outside A, B (tma_oob_bytes counts it), the
# packer pads the metadata to whole tiles (compress_padded), the stores are predicated at the edges.
EDGE_CASES = [
    (F16, dict(BENCH[0], accumulate_c=False, d_type="f16"), 200, 136, 72, None),
    (F16, dict(cta_m=128, cta_n=128, cta_k=64, stages=2), 130, 100, 50, dict(b=8, c=4, d=12)),
    (F16, dict(cta_m=64, cta_n=64, cta_k=32, consumers=1, stages=3, raster_group=3), 5, 7, 3, None),
    (F16, dict(cta_m=128, cta_n=96, cta_k=64, stages=3, stage_d=False, selector=1), 77, 101, 40, dict(d=4)),
    (TF32, dict(cta_m=128, cta_n=64, cta_k=32, stages=3), 100, 70, 37, None),
    (S8, dict(cta_m=128, cta_n=64, cta_k=128, stages=3), 129, 65, 200, dict(b=16)),
    (U8S8, dict(cta_m=128, cta_n=48, cta_k=64, consumers=2, stages=2, stage_d=False), 33, 50, 70, None),
    (F16, dict(BENCH[1], cluster_m=2, accumulate_c=False, d_type="f16"), 300, 200, 100, None),
    (BF16, dict(cta_m=128, cta_n=64, cta_k=128, stages=2, cluster_m=2, d_type="bf16", accumulate_c=False),
     130, 63, 129, dict(d=8)),
    (E4M3, dict(cta_m=128, cta_n=128, cta_k=128, stages=2), 1, 1, 1, None),
    (F16, dict(cta_m=192, cta_n=64, cta_k=32, consumers=3, stages=3, setmaxnreg=True), 100, 70, 50, dict(d=4)),
]


@pytest.mark.parametrize("form,kw,m,n,k,pad", EDGE_CASES, ids=lambda x: getattr(x, "name", None) or str(x))
def test_any_problem_size(form, kw, m, n, k, pad):
    if form.a_type in ("bf16", "e4m3") or kw.get("d_type") == "bf16":
        pytest.importorskip("ml_dtypes")
    cfg = cfg_of(form, **kw)
    d, ref, stats = run_model(cfg, m, n, k, seed=m + n + k, pad=pad)
    tm = cfg.cta_m * cfg.cluster_m
    tiles = -(-m // tm) * cfg.cluster_m * -(-n // cfg.cta_n)
    blocks = -(-k // cfg.cta_k)
    assert stats["tma"] == tiles * blocks * len(tma_boxes(cfg))
    assert stats["tma_oob_bytes"] > 0
    assert np.array_equal(d.view(np.uint8), ref.view(np.uint8)), \
        f"{np.count_nonzero(d.view(np.uint8) != ref.view(np.uint8))} bytes differ"


@pytest.mark.parametrize("i", [0, 3, 7])
def test_any_problem_size_adversarial(i):
    """The edge cases under the adversarial policy (copies and wgmma groups as late as possible)."""
    form, kw, m, n, k, pad = EDGE_CASES[i]
    d, ref, _ = run_model(cfg_of(form, **kw), m, n, k, mode="adversarial", seed=i, pad=pad)
    assert np.array_equal(d.view(np.uint8), ref.view(np.uint8))


# Broken edges the model must catch: an edge tile stored like an interior one, the K blocks rounded down,
# no row check or no column check on a partial chunk (staged D), no checks on direct fragment stores
EDGE_MUTATIONS = {
    "always_interior": (0, lambda t: re.sub(r"@%p7 bra\.uni", "bra.uni", t)),
    "k_blocks_rounded_down": (0, lambda t: t.replace("add.u32 %nkb, %K, 63;", "add.u32 %nkb, %K, 0;")),
    "no_row_check": (0, lambda t: t.replace("setp.lt.u32 %p8, %pm, %M;", "setp.lt.u32 %p8, %pm, 1000000;")),
    "no_column_check": (0, lambda t: t.replace("setp.lt.and.u32 %p11, %y, %N, %p10;",
                                              "setp.lt.and.u32 %p11, %y, 1000000, %p10;")),
    "direct_no_row_check": (3, lambda t: t.replace("setp.lt.u32 %p10, %pm, %M;", "setp.lt.u32 %p10, %pm, 1000000;")),
}


@pytest.mark.parametrize("name", sorted(EDGE_MUTATIONS))
def test_model_catches_broken_edges(name):
    i, mutate = EDGE_MUTATIONS[name]
    form, kw, m, n, k, pad = EDGE_CASES[i]
    cfg = cfg_of(form, **kw)
    assert mutate(emit_sparse_wgmma(cfg).text) != emit_sparse_wgmma(cfg).text, "the mutation applies"
    try:
        d, ref, _ = run_model(cfg, m, n, k, seed=1, transform=mutate, pad=pad)
    except EmulationError:
        return                        # a write outside D or into its guard band, a read outside C
    assert not np.array_equal(d.view(np.uint8), ref.view(np.uint8))


# Batches (grid y): each operand's batches BATCH_GAP poisoned bytes apart (not the packed size), odd sizes,
# C read and not, staged and direct D, a CTA pair
BATCH_CASES = [
    (F16, dict(BENCH[0], accumulate_c=False, d_type="f16"), 200, 136, 72, 3),
    (F16, dict(cta_m=128, cta_n=96, cta_k=64, stages=3, stage_d=False), 77, 101, 40, 2),
    (S8, dict(cta_m=64, cta_n=32, cta_k=64, consumers=1, stages=3, cluster_m=2, raster_group=3), 70, 40, 100, 3),
    (F16, dict(cta_m=128, cta_n=128, cta_k=64, stages=2), 128, 128, 128, 2),
]


@pytest.mark.parametrize("form,kw,m,n,k,batch", BATCH_CASES, ids=lambda x: getattr(x, "name", None) or str(x))
def test_batch(form, kw, m, n, k, batch):
    cfg = cfg_of(form, **kw)
    d, ref, stats = run_model(cfg, m, n, k, seed=batch, batch=batch, pad=dict(c=4, d=4))
    assert d.shape == (batch, m, n)
    tm = cfg.cta_m * cfg.cluster_m
    assert stats["tma"] == batch * (-(-m // tm) * cfg.cluster_m * -(-n // cfg.cta_n)) * -(-k // cfg.cta_k) * \
        len(tma_boxes(cfg))
    assert np.array_equal(d.view(np.uint8), ref.view(np.uint8))


# Broken batches: every CTA on batch 0 (the TMA z coordinate and the C/D offsets), D written at batch 0's
# place, C read from batch 0
BATCH_MUTATIONS = {
    "batch_index_0": lambda t: t.replace("mov.u32 %bz, %ctaid.y;", "mov.u32 %bz, 0;"),
    "d_without_batch_offset": lambda t: t.replace("add.u64 %gd, %gd, %bd;", ""),
    "c_without_batch_offset": lambda t: t.replace("add.u64 %gc, %gc, %bc;", ""),
}


@pytest.mark.parametrize("name", sorted(BATCH_MUTATIONS))
def test_model_catches_broken_batches(name):
    form, kw, m, n, k, batch = BATCH_CASES[3]
    cfg = cfg_of(form, **kw)
    mutate = BATCH_MUTATIONS[name]
    assert mutate(emit_sparse_wgmma(cfg).text) != emit_sparse_wgmma(cfg).text, "the mutation applies"
    try:
        d, ref, _ = run_model(cfg, m, n, k, seed=1, transform=mutate, batch=batch)
    except EmulationError:
        return                        # e.g. every batch's CTAs on one D: a guard band written
    assert not np.array_equal(d.view(np.uint8), ref.view(np.uint8))


def test_emulate_takes_a_batch_of_odd_problems():
    """compiler.emulate of the DSL example with its fused epilogue: 200 x 136 x 72, batch 3, adversarial."""
    pytest.importorskip("ml_dtypes")
    import compiler

    result = compiler.compile_file(str(REPO / "examples" / "sparse_wgmma_f16_silu_bias.tile"))
    e = compiler.emulate(result, shape=(200, 136, 72), mode="adversarial", batch=3)
    assert e.d.shape == (3, 200, 136) and e.batch == 3 and e.ok


# Mutations the model must catch: the consumer releases the slot it is reading; it releases the block
# before before that block's wgmma group completed;
# the producer waits on parity 1 always (a refill does not wait for the consumers); no wait_group 1; the A
# descriptor one k-step off; the metadata of the wrong warp.
MUTATIONS = {
    "early_release": lambda t: t.replace("shl.b32 %x, %pn, 3;", "shl.b32 %x, %st, 3;"),
    "release_before_wait": lambda t: t.replace("wgmma.wait_group.sync.aligned 1;", "").replace(
        "mov.u32 %pn, %st;", "wgmma.wait_group.sync.aligned 1;\n    mov.u32 %pn, %st;"),
    "no_wait_group": lambda t: t.replace("wgmma.wait_group.sync.aligned 1;", "wgmma.fence.sync.aligned;"),
    "producer_ignores_empty": lambda t: t.replace("xor.b32 %x, %ph, 1;", "mov.u32 %x, 1;", 1),
    "a_kstep_off": lambda t: t.replace("add.u64 %da, %da, 2;", "add.u64 %da, %da, 4;"),
    "metadata_of_warp_0": lambda t: t.replace("add.u32 %x, %x, %warp;", "add.u32 %x, %x, 0;"),
}
# CTA pairs: a consumer releases only its own CTA's slot (the peer's producer may then overwrite it);
# no cluster barrier before exit (a peer's release reaches an exited CTA); B halves both from rank 0
CLUSTER_MUTATIONS = {
    "local_release_only": lambda t: t.replace("mapa.shared::cluster.u32 %y, %x, 1;", "mapa.shared::cluster.u32 %y, %x, %rk;"),
    "no_exit_sync": lambda t: t[:t.rindex("barrier.cluster.arrive")] + t[t.rindex("barrier.cluster.wait.acquire.aligned;") + 37:],
    "same_half": lambda t: t.replace("mad.lo.u32 %c2, %rk,", "mad.lo.u32 %c2, 0,"),
}


@pytest.mark.parametrize("name", list(MUTATIONS))
def test_model_catches_broken_kernels(name):
    cfg = cfg_of(F16, **dict(BENCH[0], stages=2, accumulate_c=False, d_type="f16"))
    kern_text = emit_sparse_wgmma(cfg).text
    mutated = MUTATIONS[name](kern_text)
    assert mutated != kern_text, "mutation did not apply"
    caught = []
    for mode in ("lazy", "late_mma"):
        try:
            d, ref, _ = run_model(cfg, 128, 256, 384, mode, "reverse", seed=3, transform=MUTATIONS[name])
            caught.append(not np.array_equal(d.view(np.uint8), ref.view(np.uint8)))
        except (EmulationError, KeyError):
            caught.append(True)                    # the model refused to run it
        if caught[-1]:
            break
    assert any(caught), f"{name} went unnoticed"


@pytest.mark.parametrize("name", list(CLUSTER_MUTATIONS))
def test_model_catches_broken_cluster_kernels(name):
    cfg = cfg_of(F16, **dict(BENCH[0], stages=2, cluster_m=2, accumulate_c=False, d_type="f16"))
    kern_text = emit_sparse_wgmma(cfg).text
    assert CLUSTER_MUTATIONS[name](kern_text) != kern_text, "mutation did not apply"
    caught = []
    for mode in ("lazy", "late_mma"):
        try:
            d, ref, _ = run_model(cfg, 256, 256, 384, mode, "reverse", seed=5, transform=CLUSTER_MUTATIONS[name])
            caught.append(not np.array_equal(d.view(np.uint8), ref.view(np.uint8)))
        except (EmulationError, KeyError):
            caught.append(True)
        if caught[-1]:
            break
    assert any(caught), f"{name} went unnoticed"


# setmaxnreg (3 consumers, 512 threads launched with 128 registers: the producer's .dec 32 fills the pool with
# 4 warps x 32 lanes x 96, the consumers' .inc 160 takes 12 x 32 x 32 of it): a consumer count over the pool, no
# .dec at all (both wait for ever: a deadlock); the .dec by warp 0 alone, after warps 1-3 left, with a smaller
# .inc that the pool then still covers (runs, but the warpgroup's warps executed different setmaxnreg: PTX
# 9.7.19 calls that undefined)
SETMAXNREG_MUTATIONS = {
    "inc_over_the_pool": (lambda t: t.replace("setmaxnreg.inc.sync.aligned.u32 160;", "setmaxnreg.inc.sync.aligned.u32 168;"),
                          "waits for"),
    "no_dec": (lambda t: t.replace("setmaxnreg.dec.sync.aligned.u32 32;", ""), "waits for"),
    "dec_by_warp_0": (lambda t: t.replace("    setmaxnreg.dec.sync.aligned.u32 32;", "").replace(
        "    setp.eq.u32 %p6, %lane, 0;", "    setmaxnreg.dec.sync.aligned.u32 32;\n    setp.eq.u32 %p6, %lane, 0;", 1)
        .replace("setmaxnreg.inc.sync.aligned.u32 160;", "setmaxnreg.inc.sync.aligned.u32 136;"), "different setmaxnreg"),
}


# The large-shape tiles of examples/sparse_wgmma_setmaxnreg.tile as they are (setmaxnreg from need: 2 x 128 x
# 192 and 3 x 64 x 192), CTA pairs, persistent CTAs walking several tiles, under the adversarial policy
SETMAXNREG_SLOW = [
    (F16, dict(cta_m=256, cta_n=192, cta_k=64, stages=4, cluster_m=2, accumulate_c=False, d_type="f16"), 512, 384, 320),
    (F16, dict(cta_m=256, cta_n=192, cta_k=64, stages=3, cluster_m=2, persistent=True, accumulate_c=False,
               d_type="f16"), 1024, 384, 192),
    (F16, dict(cta_m=192, cta_n=192, cta_k=64, stages=4, consumers=3, cluster_m=2), 384, 384, 320),
    (E4M3, dict(cta_m=256, cta_n=192, cta_k=128, stages=4, accumulate_c=False, d_type="bf16"), 300, 200, 300),
]


@pytest.mark.slow
@pytest.mark.parametrize("form,kw,m,n,k", SETMAXNREG_SLOW, ids=lambda x: getattr(x, "name", None) or str(x))
def test_setmaxnreg_tiles_adversarially(form, kw, m, n, k):
    pytest.importorskip("ml_dtypes")
    cfg = cfg_of(form, **kw)
    assert cfg.register_split is not None
    d, ref, _ = run_model(cfg, m, n, k, mode="adversarial", seed=m + n + k)
    assert np.array_equal(d.view(np.uint8), ref.view(np.uint8))


@pytest.mark.parametrize("name", list(SETMAXNREG_MUTATIONS))
def test_model_catches_broken_register_handover(name):
    mutate, needle = SETMAXNREG_MUTATIONS[name]
    cfg = cfg_of(F16, cta_m=192, cta_n=64, cta_k=32, consumers=3, stages=2, setmaxnreg=True)
    text = emit_sparse_wgmma(cfg).text
    assert mutate(text) != text, "the mutation applies"
    with pytest.raises(EmulationError, match=needle):
        run_model(cfg, 192, 64, 64, seed=2, transform=mutate)


# --------------------------------------------------------------------------------------------------
# 2. geometry
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kw", BENCH + [dict(cta_m=128, cta_n=64, cta_k=32), dict(cta_m=256, cta_n=64, cta_k=128)],
                         ids=str)
def test_descriptors_match_the_h100_checked_conversion(kw):
    """wgmma_descriptor(layout strides) == tests/gpu/harness/wgmma_read.py's conversion of tilec's tcgen05
    descriptor of the same tile (that path read 206/206 tiles correctly on the H100, docs/verification.md)."""
    from tests.gpu.harness import wgmma_read as wrc
    cfg = cfg_of(F16, **kw)
    for op, lay in zip("AB", layouts(cfg)):
        region = cfg.regions[op]
        step = (32 if op == "A" else 64) * 8 // cfg.storage_bits
        base = 4096 + region.offset                   # a slot base on the 1024-byte repeat
        for s in range(cfg.ksteps):
            theirs = wrc.wgmma_descriptor(lay.descriptor(s * step, step, base_address=base).encode())
            ours = descriptor_base(cfg, op) + ((4096 + descriptor_offset(cfg, op, 0, s)) >> 4)
            assert ours == theirs, (op, s, hex(ours), hex(theirs))


def test_descriptor_bits_by_hand():
    # 9.7.15.5.1.2.2: start 0x1240 -> 0x124 at bits 0-13; LBO 16 -> 1 at 16-29; SBO 1024 -> 64 at 32-45;
    # 128-byte swizzle = 1 at bits 62-63
    assert wgmma_descriptor(0x1240, 16, 1024, "128B") == 0x124 | 1 << 16 | 64 << 32 | 1 << 62
    # 64-byte swizzle = 2, 32-byte = 3; SBO 512 -> 32
    assert wgmma_descriptor(0, 16, 512, "64B") == 1 << 16 | 32 << 32 | 2 << 62
    assert wgmma_descriptor(0, 16, 256, "32B") >> 62 == 3
    with pytest.raises(SpecError):
        wgmma_descriptor(0, 16, 1024, "128B", base_offset=8)


@pytest.mark.parametrize("kw", BENCH + [dict(cta_m=128, cta_n=64, cta_k=32), dict(cta_m=256, cta_n=64, cta_k=128)],
                         ids=str)
def test_copy_engine_swizzle_is_the_canonical_layout(kw):
    """Every byte a TMA box writes (row r, byte c of the box at its slot offset, swizzled on the address)
    lands where compiler/layout.py's canonical K-major layout of the region puts that element."""
    cfg = cfg_of(F16, **kw)
    lay_a, lay_b = layouts(cfg)
    eb = cfg.storage_bits // 8
    for box in tma_boxes(cfg):
        if box.tensor == 2:
            continue
        region, lay = (cfg.regions["A"], lay_a) if box.tensor == 0 else (cfg.regions["B"], lay_b)
        width = box.inner * eb
        for r in range(box.outer):
            for c in range(0, width, eb):
                tma_addr = swizzle_bytes(box.offset + r * width + c, region.swizzle) if region.swizzle != "none" \
                    else box.offset + r * width + c
                k_elem = (box.x0 * eb + c) // eb
                assert tma_addr == region.offset + lay.offset(r, k_elem), (box, r, c)


def test_fragment_map_matches_figure_149():
    from tests.gpu.harness import wgmma_read as wrc
    for n in (64, 256):
        theirs = wrc.fragment_map(n)
        for i, dr, dc in theirs:
            for warp in range(4):
                for lane in range(32):
                    row, col = fragment_coord(i, warp, lane)
                    assert (row, col) == (16 * warp + lane // 4 + dr, 2 * (lane % 4) + dc)


def test_tensor_map_arguments():
    cfg = cfg_of(F16, **dict(BENCH[0], accumulate_c=False, d_type="f16"))
    kern = emit_sparse_wgmma(cfg)
    a, b, e = tensor_map_args(kern.abi, 8192, 4096, 2048)
    # rank 3 (elements, rows, batches): one batch, its stride the packed array's bytes; boxes one batch deep
    # A values: K/2 = 1024 f16 per row (UINT16 = 1), M rows, row stride 2048 B; box 32 x 128 (64 B rows,
    # 64-byte swizzle = CU_TENSOR_MAP_SWIZZLE_64B = 2)
    assert (a["data_type"], a["dims"], a["strides"], a["box"], a["swizzle"]) == \
        (1, (1024, 8192, 1), (2048, 2048 * 8192), (32, 128, 1), 2)
    # B^T: K = 2048 f16 per row, N rows, stride 4096 B; box 64 x 256 (128 B rows, SWIZZLE_128B = 3)
    assert (b["dims"], b["strides"], b["box"], b["swizzle"]) == ((2048, 4096, 1), (4096, 4096 * 4096), (64, 256, 1), 3)
    # metadata (compact for f16: 16 words per k-step): K/32 = 64 k-steps x 16 words per 16-row tile (UINT32 = 2),
    # M/16 rows; box 2 k-steps x 8 tiles
    assert (e["data_type"], e["dims"], e["strides"], e["box"], e["swizzle"]) == \
        (2, (1024, 512, 1), (4096, 4096 * 512), (32, 8, 1), 0)
    # an odd problem, batch 3 with B rows of 144 bytes and batches 1 MiB apart: true extents M = 200, N = 136,
    # K = 72 (A values: K rounded up to 32 -> 96 / 2 = 48); metadata padded to two whole 128-row tiles (16 16-row
    # tiles) and 64-wide K blocks (2 blocks x 2 k-steps x 16 words)
    a, b, e = tensor_map_args(kern.abi, 200, 136, 72, {"b": 144}, 3, {"b": 1 << 20})
    assert (a["dims"], b["dims"], e["dims"]) == ((48, 200, 3), (72, 136, 3), (64, 16, 3))
    assert b["strides"] == (144, 1 << 20) and a["strides"] == (96, 96 * 200)


# --------------------------------------------------------------------------------------------------
# 3. ptxas, configuration errors, DSL
# --------------------------------------------------------------------------------------------------

def _assemble(ptxas, text: str, tmp_path: Path) -> str:
    src = tmp_path / "k.ptx"
    src.write_text(text)
    res = subprocess.run([ptxas, "-arch=sm_90a", "-v", str(src), "-o", str(tmp_path / "k.cubin")],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return res.stderr


PTXAS_CASES = [(F16, b) for b in BENCH] + [
    (F16, dict(cta_m=128, cta_n=256, cta_k=64, stages=4, accumulate_c=True)),       # f32 D + C (the DSL example)
    (BF16, dict(cta_m=256, cta_n=128, cta_k=64, stages=5, d_type="bf16", accumulate_c=False)),
    (TF32, dict(cta_m=128, cta_n=256, cta_k=32, stages=4)),
    (E4M3, dict(cta_m=128, cta_n=256, cta_k=128, stages=4, d_type="f16", accumulate_c=False)),
    (E5M2, dict(cta_m=256, cta_n=128, cta_k=128, stages=3)),
    (S8, dict(cta_m=128, cta_n=256, cta_k=128, stages=4)),
    (U8S8, dict(cta_m=64, cta_n=128, cta_k=64, consumers=1, stages=4)),
    (F16, dict(BENCH[1], cluster_m=2, d_type="f16")),                                 # CTA pairs sharing B
    (F16, dict(BENCH[3], cluster_m=2, d_type="f16")),
    # setmaxnreg: 2 consumers of 128 x 192 (producer 24, consumers 240), each large-shape form; 3 consumers of
    # 64 x 192 and 64 x 200, the widest N whose instruction fits the 512-thread launch (producer 32, consumers
    # 160); persistent CTA pairs
    (F16, dict(cta_m=256, cta_n=192, cta_k=64, stages=4, d_type="f16")),
    (BF16, dict(cta_m=256, cta_n=192, cta_k=64, stages=4, d_type="bf16")),
    (E4M3, dict(cta_m=256, cta_n=192, cta_k=128, stages=4, d_type="bf16")),
    (F16, dict(cta_m=192, cta_n=192, cta_k=64, consumers=3, stages=4, d_type="f16")),
    pytest.param(F16, dict(cta_m=192, cta_n=200, cta_k=64, consumers=3, stages=4, accumulate_c=True),
                 marks=pytest.mark.slow),
    pytest.param(F16, dict(cta_m=256, cta_n=192, cta_k=64, stages=3, d_type="f16", cluster_m=2, persistent=True),
                 marks=pytest.mark.slow),
]


@pytest.mark.parametrize("form,kw", PTXAS_CASES, ids=lambda x: getattr(x, "name", None) or str(x))
def test_ptxas_assembles_without_spills(ptxas, tmp_path, form, kw):
    kw = {"accumulate_c": False, **kw}
    cfg = cfg_of(form, **kw)
    kern = emit_sparse_wgmma(cfg)
    log = _assemble(ptxas, kern.text, tmp_path)
    assert "0 bytes spill stores, 0 bytes spill loads" in log, log
    # C7511 / C7512: "wgmma.mma_async instructions are serialized due to insufficient register resources"
    assert "C751" not in log, log
    regs = int(re.search(r"Used (\d+) registers", log).group(1))
    assert regs <= cfg.max_regs                     # one CTA of cfg.threads fits the register file
    split = cfg.register_split                      # the consumers' registers come from the producer's
    if split is not None:       # ptxas pins the launch count to .maxnreg: the pool the split's counts assume
        assert regs == cfg.max_regs == split.launch, log
    moved = re.findall(r"setmaxnreg\.(inc|dec)\.sync\.aligned\.u32 (\d+);", kern.text)
    assert moved == ([] if split is None else [("dec", str(split.low)), ("inc", str(split.high))])
    assert f"wgmma.mma_async.sp.sync.aligned.m64n{cfg.cta_n}k{form.k}" in kern.text
    assert kern.text.count("cp.async.bulk.tensor.3d") == len(tma_boxes(cfg))         # rank 3: the batch
    assert (".reqnctapercluster 2, 1, 1" in kern.text) == (cfg.cluster_m == 2)


def test_register_rules_are_ptxas_s(ptxas, tmp_path, monkeypatch):
    """check_registers' measured constants against ptxas (CUDA 13.0): 3 consumers at N = 200 assemble (100
    accumulators + 27 <= 128, the 512-thread launch count); at N = 208 check_config refuses, and so does ptxas
    when the rule is switched off (C7602, "register target of 131 or higher" = 104 + WGMMA_OPERAND_REGS)."""
    import compiler.ptx.sparse_wgmma_kernel as kernel

    wide = dict(cta_m=192, cta_k=64, consumers=3, stages=3, accumulate_c=False, d_type="f16")
    _assemble(ptxas, emit_sparse_wgmma(cfg_of(F16, cta_n=200, **wide)).text, tmp_path)
    with pytest.raises(SpecError, match="it needs 131"):
        emit_sparse_wgmma(cfg_of(F16, cta_n=208, **wide))
    monkeypatch.setattr(kernel, "WGMMA_OPERAND_REGS", 0)
    src = tmp_path / "k.ptx"
    src.write_text(emit_sparse_wgmma(cfg_of(F16, cta_n=208, **wide)).text)
    res = subprocess.run([ptxas, "-arch=sm_90a", str(src), "-o", str(tmp_path / "k.cubin")], capture_output=True,
                         text=True)
    assert res.returncode != 0 and "C7602" in res.stderr and "register target of 131" in res.stderr, res.stderr


def _silu_bias_with(schedule: str):
    """examples/sparse_wgmma_f16_silu_bias.tile (D = silu(A*B + bias[col]), bf16 D) with another schedule."""
    from compiler import compile_source

    src = (REPO / "examples" / "sparse_wgmma_f16_silu_bias.tile").read_text()
    return compile_source(re.sub(r"(?m)^(\s*)schedule [^;]*;", lambda m: m.group(1) + schedule, src))


def test_persistent_epilogue_on_registers_takes_the_producers(ptxas, tmp_path):
    """Persistent CTAs with a staged D run the fused epilogue on the registers first: with 2 m64 blocks of 128
    accumulators it needs more than the 168 of the launch (ptxas spilled 100 bytes there with C, a row bias,
    alpha and beta), so setmaxnreg gives the consumers 240 and nothing spills; one m64 block of 128 fits 168
    as it is (EPILOGUE_OTHER_REGS)."""
    wide = _silu_bias_with("schedule cta=256x128x64 warps=8x1 stages=2 mma=wgmma persistent=static;")
    assert "setmaxnreg.inc.sync.aligned.u32 240;" in wide.ptx
    assert "0 bytes spill stores" in _assemble(ptxas, wide.ptx, tmp_path)
    tall = _silu_bias_with("schedule cta=128x256x64 warps=8x1 stages=2 mma=wgmma persistent=static;")
    assert "setmaxnreg" not in tall.ptx


@pytest.mark.slow
def test_persistent_epilogue_with_setmaxnreg_on_the_emulator():
    pytest.importorskip("ml_dtypes")
    import compiler

    result = _silu_bias_with("schedule cta=256x128x64 warps=8x1 stages=2 mma=wgmma persistent=static;")
    e = compiler.emulate(result, shape=(300, 200, 150), mode="adversarial")
    assert e.ok


@pytest.mark.slow
def test_consumer_register_rule_is_ptxas_s(ptxas, tmp_path, monkeypatch):
    """CONSUMER_OTHER_REGS = 40 against ptxas: 2 consumers of 128 x 208 (208 + 40 > 240) are refused; with the
    rule at 32 they pass check_config, and ptxas serialises their wgmma chain (C7512)."""
    import compiler.ptx.sparse_wgmma_kernel as kernel

    wide = dict(cta_m=256, cta_n=208, cta_k=64, stages=3, accumulate_c=False, d_type="f16")
    with pytest.raises(SpecError, match="need 248 registers"):
        emit_sparse_wgmma(cfg_of(F16, **wide))
    monkeypatch.setattr(kernel, "CONSUMER_OTHER_REGS", 32)
    log = _assemble(ptxas, emit_sparse_wgmma(cfg_of(F16, **wide)).text, tmp_path)
    assert "C7512" in log, log


def test_emission_is_deterministic():
    cfg = cfg_of(F16, **BENCH[0])
    assert emit_sparse_wgmma(cfg).text == emit_sparse_wgmma(cfg).text


@pytest.mark.parametrize("kw,field,needle", [
    (dict(target="sm_90"), "schedule.mma", "requires sm_90a"),
    (dict(cta_n=264), "schedule.cta", "not an N"),
    (dict(cta_m=192), "schedule.cta", "64 or 128"),
    (dict(consumers=4, cta_m=256), "schedule.warps", "1 to 3 consumer"),
    (dict(consumers=3, cta_m=384, cta_n=64), "schedule.cta", "TMA box"),
    # 2 x 128 rows x N = 256: 256 accumulators + 40 > setmaxnreg's 240 (24 for the producer, 504 x 128 in all)
    (dict(cta_m=256, cta_n=256), "schedule.cta", "setmaxnreg.inc 240 is the most"),
    # 512 threads launch with 128 registers; ptxas compiles one .m64n256 (128 accumulators) only with 155
    (dict(consumers=3, cta_m=192, cta_n=256), "schedule.cta", "it needs 155"),
    # 2 x 64 x 256 needs 168 = the launch count of 384 threads: fits without setmaxnreg; 3 x 64 x 200 does not
    (dict(consumers=3, cta_m=192, cta_n=200, setmaxnreg=False), "schedule.warps", "only setmaxnreg"),
    # 1 consumer of 128 x 256 (256 + 40 registers): 256 threads launch with 255, no count setmaxnreg moves from
    (dict(consumers=1, cta_m=128, cta_n=256), "schedule.warps", "not a multiple of 8"),
    (dict(cta_k=96), "schedule.cta", "cta K"),
    (dict(stages=17), "schedule.stages", "2..16"),
    (dict(cta_m=256, cta_n=128, cta_k=128, stages=4), "schedule.stages", "exceed"),
    (dict(selector=2), "sparsity.selector", "selector 2"),
    (dict(d_type="s32"), "D.dtype", "cannot be stored"),
    (dict(cluster_m=4), "schedule", "cluster_m = 4"),
    (dict(cta_n=24, cluster_m=2), "schedule", "cluster_m = 2"),
])
def test_config_errors(kw, field, needle):
    with pytest.raises(SpecError) as e:
        emit_sparse_wgmma(cfg_of(F16, **kw))
    assert e.value.field == field and needle in e.value.message, e.value


def test_forms_without_wgmma_are_rejected():
    k16 = find_form("m16n8k16", "f16", "f16", "f32", "f32")            # not the k32 wgmma step
    with pytest.raises(SpecError, match="m64nNk32"):
        emit_sparse_wgmma(cfg_of(k16))
    s4 = find_form("m16n8k128", "s4", "s4", "s32", "s32")              # no 4-bit wgmma.sp (9.7.15.6.3)
    with pytest.raises(SpecError, match="no form"):
        emit_sparse_wgmma(cfg_of(s4))
    f16acc = find_form("m16n8k32", "f16", "f16", "f16", "f16")
    with pytest.raises(SpecError, match="accumulates in f32"):
        emit_sparse_wgmma(cfg_of(f16acc))


def test_dsl_example_selects_the_wgmma_kernel(ptxas, tmp_path):
    from compiler import compile_source
    src = (REPO / "examples" / "sparse_wgmma_f16.tile").read_text()
    res = compile_source(src)
    ptx = res.ptx
    assert ".target sm_90a" in ptx
    assert "wgmma.mma_async.sp.sync.aligned.m64n256k32.f32.f16.f16" in ptx
    assert "cp.async.bulk.tensor.3d" in ptx and "mma.sp::ordered_metadata" not in ptx
    log = _assemble(ptxas, ptx, tmp_path)
    assert "0 bytes spill stores" in log


def test_dsl_wgmma_needs_sm_90a():
    from compiler import CompileError, compile_source
    src = (REPO / "examples" / "sparse_wgmma_f16.tile").read_text().replace("target sm_90a;", "target sm_80;")
    with pytest.raises(CompileError) as e:
        compile_source(src)
    assert "sm_90a" in str(e.value)
