"""The pipelined sparse GEMM (compiler/ptx/sparse_gemm_kernel.py): address model, PTX execution model,
ptxas, configuration errors and DSL wiring.

1. Address model (no GPU): the swizzle is a bijection on 16-byte chunks; every cp.async store phase and
   every ldmatrix phase touches 8 distinct 16-byte bank groups (no shared-memory bank conflicts:
   32 banks x 4 B, PTX ISA ldmatrix reads 8 rows of 16 B per matrix); the copies of one
   stage write every byte of the stage exactly once; every fragment load reads the logical bytes the
   mma.sp fragment tables name (PTX ISA 9.7.14.6.2 (A and B fragments)).
2. Execution model: the emulator's warp machine (compiler/emulator/warp.py) runs the emitted PTX text
   itself warp by warp, with numpy registers of 32 lanes: ldmatrix (PTX ISA ldmatrix: lane 4r+c receives
   elements 2c, 2c+1 of row r of matrix j in register j), mma.sp (compiler/emulator/mma_sp.py, built on
   compiler/isa/mma_sp; checked here against closed forms of the ISA fragment figures, 9.7.14.6.2 A, B and
   C/D, 9.7.14.6.1 metadata suppliers, written independently of compiler/isa/mma_sp/fragments.py), cp.async
   with commit/wait groups (PTX ISA cp.async) and bar.sync. Warps run one at a time between barriers,
   in forward and in reverse order, and cp.async copies land either at issue ("eager") or only at the
   wait_group that retires them ("lazy"): a missing wait or barrier, or a stage refilled while another
   warp still reads it, produces wrong numbers in one of the four runs. Global and shared accesses are
   bounds-checked; shared memory starts as garbage.
3. ptxas (CUDA 13.0) assembles kernels for sm_80, sm_90 and sm_90a with no spills for the benchmark
   configurations.
"""
from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest

from compiler.diagnostics import SpecError
from compiler.emulator import EmulationError
from compiler.emulator.mma_sp import mma_sp_warp
from compiler.emulator.sparse_host import run_sparse_gemm
from compiler.isa.mma_sp.forms import find_form
from compiler.ptx.sparse_gemm_kernel import (CHUNK, SparseGemmConfig, copy_accesses, emit_sparse_gemm,
                                             fragment_accesses, physical_offsets, swizzle)

F16 = find_form("m16n8k32", "f16", "f16", "f32", "f32")
BF16 = find_form("m16n8k32", "bf16", "bf16", "f32", "f32")
S8 = find_form("m16n8k64", "s8", "s8", "s32", "s32")
TF32 = find_form("m16n8k16", "tf32", "tf32", "f32", "f32")
E4M3 = find_form("m16n8k64", "e4m3", "e4m3", "f32", "f32")
U8S8 = find_form("m16n8k64", "u8", "s8", "s32", "s32")

# the configurations the benchmark tries on the H100 (benchmarks/sparse_gemm_sync.py CONFIGS)
BENCH = [dict(cta_m=128, cta_n=256, cta_k=64, warps_m=2, warps_n=4, stages=3),
         dict(cta_m=128, cta_n=256, cta_k=64, warps_m=2, warps_n=4, stages=4),
         dict(cta_m=256, cta_n=128, cta_k=64, warps_m=4, warps_n=2, stages=4),
         dict(cta_m=128, cta_n=128, cta_k=64, warps_m=2, warps_n=2, stages=4)]
# small / odd configurations: 1 k-step blocks (odd unroll), 4 k-step blocks, partial copy rounds,
# 2 stages, one warp
ODD = [dict(cta_m=64, cta_n=64, cta_k=32, warps_m=2, warps_n=2, stages=3),
       dict(cta_m=32, cta_n=64, cta_k=128, warps_m=1, warps_n=2, stages=2),
       dict(cta_m=64, cta_n=32, cta_k=64, warps_m=2, warps_n=1, stages=5),
       dict(cta_m=16, cta_n=8, cta_k=64, warps_m=1, warps_n=1, stages=2)]


def cfg_of(form=F16, name="k", target="sm_90a", **kw) -> SparseGemmConfig:
    return SparseGemmConfig(name, form, target, **kw)


# --------------------------------------------------------------------------------------------------
# 1. address model
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("row_bytes", [32, 64, 128, 256, 512])
def test_swizzle_permutes_whole_chunks_within_a_region(row_bytes):
    size = 64 * row_bytes
    phys = [swizzle(o, row_bytes) for o in range(0, size, CHUNK)]
    assert sorted(phys) == list(range(0, size, CHUNK))                       # a bijection on chunks
    assert all(swizzle(o + b, row_bytes) == swizzle(o, row_bytes) + b      # chunks stay whole
               for o in range(0, size, CHUNK) for b in (1, 7, 15))
    if row_bytes >= 128:                                                     # rows stay rows
        assert all(swizzle(o, row_bytes) // row_bytes == o // row_bytes for o in range(0, size, CHUNK))


def _bank_groups(offsets):
    return {(o % 128) // 16 for o in offsets}


@pytest.mark.parametrize("kw", BENCH + ODD, ids=str)
@pytest.mark.parametrize("form", [F16, S8, TF32], ids=lambda f: f.name)
def test_ldmatrix_and_copy_phases_are_bank_conflict_free(form, kw):
    cfg = cfg_of(form, **kw)
    for (op, _i, _s), acc in fragment_accesses(cfg).items():
        phys = physical_offsets(cfg, acc)
        for w in range(cfg.threads // 32):
            lanes = phys[32 * w:32 * w + 32]
            if op == "E":       # ld.shared.b32: 32 consecutive words = the 32 banks once
                assert sorted((o // 4) % 32 for o in lanes) == list(range(32))
            else:               # ldmatrix: matrix j's 8 rows (lanes 8j..8j+7) in 8 different groups
                for j in range(4):
                    assert len(_bank_groups(lanes[8 * j:8 * j + 8])) == 8, (op, _i, _s, w, j)
    for (_op, _j), (acc, n) in copy_accesses(cfg).items():
        phys = physical_offsets(cfg, acc, n)
        for ph in range(0, n, 8):          # 16-byte stores: 8 threads per 128-byte wavefront
            assert len(_bank_groups(phys[ph:ph + 8])) == len(phys[ph:ph + 8])


@pytest.mark.parametrize("kw", BENCH + ODD, ids=str)
def test_copies_cover_each_stage_byte_once(kw):
    cfg = cfg_of(F16, **kw)
    written = []
    for (_op, _j), (acc, n) in copy_accesses(cfg).items():
        written += physical_offsets(cfg, acc, n)
    assert sorted(written) == list(range(0, cfg.stage_bytes, CHUNK))


@pytest.mark.parametrize("kw", BENCH[:1] + ODD[:2], ids=str)
def test_fragment_loads_read_the_fragment_table_bytes(kw):
    """Logical bytes read by lane l for register j equal what the fragment tables need:
    A reg j = word t + 4*(j>>1) of compressed row g + 8*(j&1) (PTX ISA 9.7.14.6.2 (A fragments) f16 k32 closed form grouped
    into 32-bit words), B reg j = word t + 4j of B^T row g (PTX ISA 9.7.14.6.2)."""
    cfg = cfg_of(F16, **kw)
    ra, rb = cfg.regions["A"], cfg.regions["B"]
    for (op, i, s), acc in fragment_accesses(cfg).items():
        for tid in range(cfg.threads):
            lane, warp = tid % 32, tid // 32
            wm, wn = divmod(warp, cfg.warps_n)
            for j in range(4):
                src = 32 * (lane // 8) + 8 * (lane % 8)         # ldmatrix source lane (row) of matrix j
                g, t = lane // 4, lane % 4
                if op == "A":
                    row = wm * cfg.warp_m + 16 * i + g + 8 * (j & 1)
                    want = row * ra.row_bytes + 32 * s + 4 * (t + 4 * (j >> 1))
                    # matrix j = lane >> 3 supplies its row: the row start + 4t is what lane (g, t) gets
                    rows_lane = 8 * j + g
                    got = acc.logical(32 * warp + rows_lane) + 4 * t
                elif op == "B":
                    n = wn * cfg.warp_n + 8 * i + g
                    want = n * rb.row_bytes + 64 * s + 4 * (t + 4 * j)
                    got = acc.logical(32 * warp + 8 * j + g) + 4 * t
                else:
                    continue
                del src
                assert got == want, (op, i, s, tid, j)


# --------------------------------------------------------------------------------------------------
# 2. execution model of the emitted PTX
# --------------------------------------------------------------------------------------------------

M32 = np.uint64(0xFFFFFFFF)


def _mma_tables(form):
    """Per (lane, element): A (row, chunk, kept), B (k, n), metadata (row, chunk) per (lane, nibble)
    and the supplying threads, from the closed forms of PTX ISA 9.7.14.6.2's fragment figures, not from compiler code."""
    lanes = np.arange(32)
    g, t = lanes >> 2, lanes & 3
    key = (form.k, form.layout.storage_bits)
    if key == (32, 16):          # f16/bf16 m16n8k32: 8 elements, 2 per register
        i = np.arange(8)
        a = (g[:, None] + 8 * ((i >> 1) & 1), t[:, None] + 4 * (i >> 2), np.broadcast_to(i & 1, (32, 8)))
        epr, chunk, kept = 2, 4, 2
    elif key == (64, 8):         # s8 m16n8k64: 16 elements, 4 per register
        i = np.arange(16)
        a = (g[:, None] + 8 * ((i >> 2) & 1), 2 * t[:, None] + ((i >> 1) & 1) + 8 * (i >> 3),
             np.broadcast_to(i & 1, (32, 16)))
        epr, chunk, kept = 4, 4, 2
    elif key == (16, 32):        # tf32 m16n8k16: 4 elements, 1 per register, 1:2
        i = np.arange(4)
        a = (g[:, None] + 8 * (i & 1), t[:, None] + 4 * (i >> 1), np.zeros((32, 4), int))
        epr, chunk, kept = 1, 2, 1
    else:
        raise NotImplementedError(form.name)
    nb = form.k * 8 // 32        # B elements per lane
    ib = np.arange(nb)
    b_k = t[:, None] * epr + ib % epr + (ib // epr) * 4 * epr           # PTX ISA 9.7.14.6.2
    b_n = np.broadcast_to(g[:, None], (32, nb))
    n = np.arange(8)
    if form.layout.storage_bits >= 16:      # two rows per word; pair of threads (t = 2 sel + p)
        m_row = g[:, None] + 8 * (n >> 2)
        m_chunk = 4 * (t[:, None] & 1) + (n & 3)
        suppliers = lambda sel: (2 * sel, 2 * sel + 1)                   # noqa: E731
    else:                                   # 8-bit k64: one row per word, all four threads
        m_row = g[:, None] + 8 * (t[:, None] & 1) + 0 * n
        m_chunk = 8 * (t[:, None] >> 1) + n
        suppliers = lambda sel: (0, 1, 2, 3)                              # noqa: E731
    return dict(a=a, epr=epr, chunk=chunk, kept=kept, b=(b_k, b_n), meta=(m_row, m_chunk),
                suppliers=suppliers)


def _decode(bits: np.ndarray, dtype: str) -> np.ndarray:
    """Register words -> element values (float64 / int64), element 0 in the low bits."""
    import ml_dtypes
    w = bits.astype(np.uint32)
    if dtype == "f16":
        return np.stack([(w & 0xFFFF), w >> 16], -1).astype(np.uint16).view(np.float16).astype(np.float64)
    if dtype == "bf16":
        return np.stack([(w & 0xFFFF), w >> 16], -1).astype(np.uint16).view(ml_dtypes.bfloat16).astype(np.float64)
    if dtype == "tf32":
        return (w & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)[..., None]
    if dtype in ("s8", "u8", "e4m3", "e5m2"):
        by = np.stack([(w >> (8 * b)) & 0xFF for b in range(4)], -1).astype(np.uint8)
        view = {"s8": np.int8, "u8": np.uint8, "e4m3": ml_dtypes.float8_e4m3fn,
                "e5m2": ml_dtypes.float8_e5m2}[dtype]
        return by.view(view).astype(np.int64 if dtype in ("s8", "u8") else np.float64)
    raise NotImplementedError(dtype)


def closed_form_mma_sp_warp(form, a, b, c, e, sel):
    """One warp's mma.sp from the closed forms above: a, b, c = [regs][32] words, e = [32] words -> d
    words [4][32]. The emulator's mma.sp (compiler/emulator/mma_sp.py, built on compiler/isa/mma_sp) must
    agree with it (test_emulator_mma_sp_matches_the_closed_forms)."""
    tab = _mma_tables(form)
    av = np.concatenate([_decode(a[r], form.a_type) for r in range(len(a))], -1)    # [32][elements]
    bv = np.concatenate([_decode(b[r], form.b_type) for r in range(len(b))], -1)
    k = form.k
    dense_a = np.zeros((16, k))
    meta = np.full((16, k // tab["chunk"]), -1)
    m_row, m_chunk = tab["meta"]
    for lane in range(32):
        if lane % 4 not in tab["suppliers"](sel):
            continue
        for n in range(8):
            meta[m_row[lane, n], m_chunk[lane, n]] = (int(e[lane]) >> (4 * n)) & 0xF
    assert (meta >= 0).all(), "metadata model left a chunk undescribed"
    rows, chunks, kept = tab["a"]
    for lane in range(32):
        for el in range(av.shape[1]):
            r, ch, kp = rows[lane, el], chunks[lane, el], kept[lane, el]
            nib = meta[r, ch]
            idx = (nib >> (2 * kp)) & 3                   # 9.7.14.6.1: bits 1:0 first, 3:2 second
            if tab["chunk"] == 2:                         # tf32: a slot is half an element
                idx //= 2
            dense_a[r, tab["chunk"] * ch + idx] = av[lane, el]
    dense_b = np.zeros((k, 8))
    bk, bn = tab["b"]
    dense_b[bk, bn] = bv
    with np.errstate(all="ignore"):              # garbage (unwritten shared memory) may be NaN / inf
        prod = dense_a @ dense_b
    out = np.zeros((4, 32), np.uint64)
    g, t = np.arange(32) >> 2, np.arange(32) & 3
    for i in range(4):                                    # c_i at row g + 8*(i>>1), col 2t + (i&1)
        r, col = g + 8 * (i >> 1), 2 * t + (i & 1)
        if form.c_type == "f32":
            cv = c[i].astype(np.uint32).view(np.float32).astype(np.float64)
            out[i] = (prod[r, col] + cv).astype(np.float32).view(np.uint32).astype(np.uint64)
        else:
            cv = c[i].astype(np.uint32).view(np.int32).astype(np.int64)
            out[i] = ((prod[r, col].astype(np.int64) + cv) & 0xFFFFFFFF).astype(np.uint64)
    return out


@pytest.mark.parametrize("form", [F16, BF16, S8, U8S8, E4M3, TF32], ids=lambda f: f.name)
@pytest.mark.parametrize("sel", [0, 1])
def test_emulator_mma_sp_matches_the_closed_forms(form, sel):
    """The emulator's mma.sp (fragment maps of compiler/isa/mma_sp) equals the closed forms of the ISA figures
    on random registers: every A, B, C word and the metadata of the selected threads count."""
    if form.a_type in ("bf16", "e4m3"):
        pytest.importorskip("ml_dtypes")
    if sel not in form.layout.selectors:
        pytest.skip(f"selector {sel} is undefined for {form.name}")
    from compiler.sparse import compress, pack_b, random_sparse, random_values
    rng = np.random.default_rng(7 + sel)
    a = random_sparse(rng, 16, form.k, form.a_type, form.shape)
    values, meta = compress(a, form.a_type, form.shape)
    bt = pack_b(random_values(rng, (form.k, 8), form.b_type), form.b_type, form.shape)
    a_words = values.view(np.uint8).view(np.uint32).reshape(16, -1)
    b_words = bt.view(np.uint8).view(np.uint32).reshape(8, -1)
    lanes = np.arange(32)
    g, t = lanes >> 2, lanes & 3
    a_regs = [a_words[g + 8 * (j & 1), t + 4 * (j >> 1)].astype(np.uint64) for j in range(form.layout.a_regs)]
    b_regs = [b_words[g, t + 4 * j].astype(np.uint64) for j in range(form.layout.b_regs)]
    c_regs = [(rng.integers(-8, 8, 32).astype(np.float32).view(np.uint32) if form.c_type == "f32"
               else rng.integers(-8, 8, 32).astype(np.int32).view(np.uint32)).astype(np.uint64) for _ in range(4)]
    e = meta.reshape(32).astype(np.uint64)
    # lanes the selector does not name carry garbage: the result must not depend on them
    sup = form.layout.metadata_suppliers
    named = (t >= sup * sel) & (t < sup * sel + sup)
    e = np.where(named, e, rng.integers(0, 2**32, 32).astype(np.uint64))
    ours = mma_sp_warp(form, a_regs, b_regs, c_regs, e, sel)
    theirs = closed_form_mma_sp_warp(form, a_regs, b_regs, c_regs, e, sel)
    assert all(np.array_equal(x, y) for x, y in zip(ours, theirs))


def run_model(cfg, m, n, k, land, order, seed=0, transform=None, ctas=None):
    """Emit `cfg` (its text passed through `transform` if given), run it on random sparse data on the
    emulator's warp machine; return (D, reference D, machine stats)."""
    kern = emit_sparse_gemm(cfg)
    text = transform(kern.text) if transform else kern.text
    return run_sparse_gemm(text, cfg.name, cfg.form, kern.grid(m, n, k, ctas)[0], cfg.threads, kern.smem_bytes,
                           m, n, k, cfg.out_type, cfg.accumulate_c, land=land, order=order, seed=seed)


MODEL_CASES = [
    # (form, config, M, N, K, CTAs): persistent CTAs walking several tiles each, with K blocks per tile
    # fewer than, equal to and more than the ring, staged and direct D; one tile per CTA with the ring
    # unrolled (K ending mid-unroll, odd k-step counts); raster groups that do not divide the tile rows
    (F16, dict(BENCH[0], accumulate_c=False, d_type="f16", persistent=True), 256, 512, 192, 3),
    (F16, dict(BENCH[0], accumulate_c=False, d_type="f16"), 128, 256, 320, None),
    (F16, dict(BENCH[2], persistent=True), 512, 256, 128, 3),
    (F16, dict(ODD[0], raster_group=3), 256, 192, 96, None),
    (F16, dict(ODD[2], raster_group=3, stage_d=False, persistent=True), 320, 96, 64, 4),
    (BF16, dict(ODD[1], accumulate_c=False, d_type="bf16", persistent=True), 96, 128, 256, 5),
    (S8, dict(ODD[2]), 128, 64, 384, None),
    (TF32, dict(ODD[3], raster_group=2, persistent=True), 48, 16, 128, 2),
    (U8S8, dict(ODD[0], cta_k=128), 64, 128, 256, None),
    # (FP8 on sm_120a: sm_90a emulates warp-level FP8 mma.sp, 2 mma tiles a warp at most: test_sparse_gemm_edges)
    (E4M3, dict(BENCH[3], cta_k=128, stages=3, persistent=True, target="sm_120a"), 256, 256, 256, 2),
]


# Every case runs with eager copies and warps in order; lazy copies with warps in reverse run by default
# for a persistent, a one-tile and an odd-k-step case, and for the rest in the slow sweep.
LAZY_DEFAULT = {2, 3, 5}
MODEL_RUNS = [pytest.param(*case, "eager", "forward", id=f"{i}-eager") for i, case in enumerate(MODEL_CASES)] + \
    [pytest.param(*case, "lazy", "reverse", id=f"{i}-lazy",
                  marks=() if i in LAZY_DEFAULT else pytest.mark.slow) for i, case in enumerate(MODEL_CASES)]


@pytest.mark.parametrize("form,kw,m,n,k,ctas,land,order", MODEL_RUNS)
def test_emitted_ptx_computes_the_gemm(form, kw, m, n, k, ctas, land, order):
    cfg = cfg_of(form, **kw)
    d, ref, stats = run_model(cfg, m, n, k, land, order, seed=m + n + k, ctas=ctas)
    assert stats["mma"] > 0 and stats["ldmatrix"] > 0 and stats["cp.async"] > 0
    # exact: inputs have 3 significant bits, sums stay exact in f32 / s32; f16/bf16 D rounds once
    np.testing.assert_array_equal(d, ref)


def test_model_cases_cover_both_kernels_and_both_d_paths():
    cfgs = [cfg_of(f, **kw) for f, kw, *_ in MODEL_CASES]
    assert {c.is_persistent for c in cfgs} == {True, False}
    assert {c.d_offset is None for c in cfgs} == {True, False}
    assert any(c.is_persistent and c.d_offset is not None for c in cfgs)
    assert any(c.ksteps % 2 for c in cfgs) and any(c.ksteps == 4 for c in cfgs)


@pytest.mark.parametrize("land,order", [("lazy", "forward"), ("eager", "reverse")])
def test_emitted_ptx_other_schedules(land, order):
    cfg = cfg_of(F16, **BENCH[1])
    d, ref, _ = run_model(cfg, 128, 256, 64 * 5, land, order, seed=3)
    np.testing.assert_array_equal(d, ref)


# Each mutation breaks the pipeline protocol or the addressing; the (landing, order) run named with it is
# one that must see the damage (eager copies expose a missing barrier, lazy ones a missing wait).
MUTATIONS = {
    "barrier dropped": (lambda s: s.replace("bar.sync 0;", "// dropped"), "eager", "forward"),
    "wait one group short": (lambda s: s.replace("cp.async.wait_group 1;", "cp.async.wait_group 2;"),
                             "lazy", "forward"),
    "one swizzle dropped": (lambda s: s.replace("xor.b32 %y, %y, %x;", "// dropped", 1), "eager", "forward"),
    "metadata word of the wrong tile": (lambda s: re.sub(r"(ld\.shared\.b32 %re0, \[%fb\d+\+)(\d+)\]",
                                                          lambda m: f"{m[1]}{int(m[2]) + 128}]", s, count=1),
                                        "eager", "forward"),
}


# the same for persistent CTAs (4 tiles over 4 CTAs... 2 tiles each; 5 stages: wait_group 3)
PERSISTENT_MUTATIONS = {
    "write slot wraps one block late": (lambda s: s.replace("setp.eq.u32 %pe, %rs, 0;", "setp.eq.u32 %pe, %rs, 1;"),
                                        "eager", "forward"),
    "copy side stays on its tile": (lambda s: s.replace("add.u32 %it, %it, %x;", "// dropped"), "eager", "forward"),
    "compute side skips a tile": (lambda s: s.replace("add.u32 %ct, %ct, %x;", "add.u32 %ct, %ct, 1;"),
                                  "eager", "forward"),
    "wait one group short": (lambda s: s.replace("cp.async.wait_group 3;", "cp.async.wait_group 4;"),
                             "lazy", "reverse"),
    "barrier dropped": (lambda s: s.replace("bar.sync 0;", "// dropped"), "eager", "forward"),
}


def _broken(run) -> None:
    """The model fails the run: wrong numbers, or (lazy copies) the race itself, named by the emulator's
    shared-memory check (a read of bytes whose cp.async has not landed: compiler/emulator/warp.py)."""
    try:
        d, ref, _ = run()
    except EmulationError as e:
        assert "has not finished writing" in str(e), e
        return
    assert not np.array_equal(d, ref)


@pytest.mark.parametrize("name", MUTATIONS)
def test_model_catches_a_broken_kernel(name):
    """The execution model is strict enough to fail kernels with one protocol or address bug."""
    transform, land, order = MUTATIONS[name]
    cfg = cfg_of(F16, **ODD[0])              # 3 stages: the healthy kernel waits with wait_group 1
    _broken(lambda: run_model(cfg, 256, 192, 96, land, order, seed=1, transform=transform))


@pytest.mark.parametrize("name", PERSISTENT_MUTATIONS)
def test_model_catches_a_broken_persistent_kernel(name):
    transform, land, order = PERSISTENT_MUTATIONS[name]
    cfg = cfg_of(F16, **dict(ODD[2], raster_group=3, persistent=True))
    assert cfg.is_persistent and cfg.stages == 5
    _broken(lambda: run_model(cfg, 320, 96, 192, land, order, seed=1, transform=transform, ctas=4))


# --------------------------------------------------------------------------------------------------
# 3. ptxas, configuration errors, ABI
# --------------------------------------------------------------------------------------------------

def _ptxas(ptxas, text: str, arch: str, verbose: bool = False) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "k.ptx"
        src.write_text(text)
        return subprocess.run([ptxas, *(["-v"] if verbose else []), f"-arch={arch}", "-o", str(Path(tmp) / "k.cubin"),
                               str(src)], capture_output=True, text=True)


ASSEMBLE = [(F16, kw) for kw in BENCH + ODD] + [
    (F16, dict(BENCH[0], persistent=True, accumulate_c=False, d_type="f16")),
    (BF16, dict(BENCH[0], accumulate_c=False, d_type="bf16")),
    (S8, dict(BENCH[0], cta_k=128)), (TF32, dict(BENCH[0], cta_k=32, persistent=True)),
    (U8S8, dict(ODD[0], cta_k=64)),
    (E4M3, dict(cta_m=64, cta_n=32, cta_k=128, warps_m=4, warps_n=2, stages=3))]   # 16x16 warp tiles (sm_90a: FP8 emulated)


@pytest.mark.parametrize("arch,sample", [("sm_80", 4), ("sm_90", 4), ("sm_90a", 3),
                                         pytest.param("sm_90a", 1, marks=pytest.mark.slow)])
def test_kernels_assemble(ptxas, arch, sample):
    """Every configuration the tests and the benchmark use assembles where it fits (e4m3 needs sm_89+,
    PTX ISA 9.7.14.6.3; 4 stages of a 128x256x64 tile exceed sm_80's 163 KB); text is ASCII (ptxas rejects
    anything else, even in comments)."""
    skipped = []
    # every `sample`-th configuration (ptxas takes ~1 s a kernel; all of them in the slow sweep)
    for form, kw in ASSEMBLE[::sample]:
        cfg = cfg_of(form, name="sg", target=arch, **kw)
        try:
            text = emit_sparse_gemm(cfg).text
        except SpecError as e:
            assert arch == "sm_80" and ("exceed the 166912 B" in e.message or "not available" in e.message)
            skipped.append(kw)
            continue
        assert text.isascii()
        res = _ptxas(ptxas, text, arch)
        assert res.returncode == 0, (form.name, kw, res.stderr[-2000:])
    assert len(skipped) <= 1


@pytest.mark.parametrize("kw", [dict(BENCH[0], accumulate_c=False, d_type="f16"),
                                dict(BENCH[0], accumulate_c=False, d_type="f16", persistent=True),
                                dict(BENCH[2], accumulate_c=False, d_type="f16")], ids=str)
def test_benchmark_kernels_do_not_spill(ptxas, kw):
    """The H100 schedules fit 255 registers (64x64 warp tiles: 128 accumulators + 2 x 52 fragment
    registers + addresses) without local memory (a whole-number match: "20 bytes spill stores" contains
    "0 bytes spill stores")."""
    res = _ptxas(ptxas, emit_sparse_gemm(cfg_of(F16, **kw)).text, "sm_90a", verbose=True)
    assert res.returncode == 0
    spilled = re.search(r"(\d+) bytes spill stores", res.stdout + res.stderr)
    assert spilled and int(spilled[1]) <= SPILL_ALLOWED.get(kw.get("persistent", False), 0), res.stdout + res.stderr


# Persistent CTAs (off by default: measured slower than one tile per CTA) hold the copy side's tile state
# next to the ring bases; with the B edge state (one register: rows left | K-tail offset) ptxas spills a few
# ring-base words there (20 bytes with CUDA 13.0's ptxas). One tile per CTA spills nothing.
SPILL_ALLOWED = {False: 0, True: 32}


def test_emission_is_deterministic_and_names_its_resources():
    a = emit_sparse_gemm(cfg_of(F16, name="g1", **BENCH[0]))
    b = emit_sparse_gemm(cfg_of(F16, name="g1", **BENCH[0]))
    assert a.text == b.text
    # 128x256 CTA, K block 64 (2 k-steps): A 128 rows x 64 B + B 256 rows x 128 B + metadata 8 x 256 B
    assert a.abi["dynamic_smem_bytes"] == 3 * (128 * 64 + 256 * 128 + 8 * 256) == 129024
    assert ".extern .shared .align 128 .b8 g1_smem[];" in a.text
    assert a.text.count("mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.f16.f16.f32") == \
        3 * 2 * 32        # unrolled over the 3 ring slots x 2 k-steps x (4 x 8) mma tiles per warp
    assert a.block == (256, 1, 1)
    assert a.grid(4096, 4096, 4096) == (32 * 16, 1, 1)


def test_grid_covers_partial_tiles_batches_and_persistent_ctas():
    k = emit_sparse_gemm(cfg_of(F16, **BENCH[0]))
    assert k.abi["requires"] == []
    assert k.grid(128, 300, 64) == (2, 1, 1)                # N = 300: a second, partial tile column
    assert k.grid(129, 1, 1, batch=7) == (2, 7, 1)          # batch in grid y
    with pytest.raises(SpecError, match="each must be at least 1"):
        k.grid(128, 0, 64)
    p = emit_sparse_gemm(cfg_of(F16, persistent=True, **BENCH[0]))
    assert p.abi["persistent"] and p.grid(4096, 4096, 4096, 132) == (132, 1, 1)
    assert p.grid(256, 256, 64, 132) == (2, 1, 1)           # fewer tiles than CTAs
    assert p.grid(257, 256, 1, 132, batch=3) == (3, 3, 1)


ERRORS = [
    (dict(form=find_form("m16n8k16", "f16", "f16", "f32", "f32")), "k-wide mma.sp shapes"),
    (dict(form=find_form("m16n8k32", "f16", "f16", "f16", "f16")), "32-bit accumulators"),
    (dict(BENCH[0], warps_n=3, cta_n=240), "powers of two"),
    (dict(BENCH[0], cta_k=96), "cta K = 96 must be 32, 64, 128 or 256"),
    (dict(BENCH[0], stages=1), "2..8 stages"),
    (dict(BENCH[0], warps_m=1), "needs 256 accumulator registers"),
    (dict(BENCH[0], cta_m=120), "cta M = 120 is not a positive multiple of 32"),
    (dict(BENCH[0], stages=4, target="sm_86"), "exceed the 101376 B a block may use on sm_86"),
    (dict(BENCH[0], d_type="s32"), "D type s32 cannot be stored from f32 accumulators"),
    (dict(BENCH[0], selector=2), "sparsity selector 2 is undefined"),
    (dict(BENCH[0], name="1x"), "not a PTX identifier"),
    (dict(BENCH[0], form=E4M3, cta_k=128, target="sm_80"), "not available on sm_80"),
    (dict(BENCH[0], form=E4M3, cta_k=128, target="sm_90a"), "sm_90a has no warp-level FP8 MMA"),
]


@pytest.mark.parametrize("kw,message", ERRORS, ids=[m for _, m in ERRORS])
def test_configuration_errors(kw, message):
    kw = dict(kw)
    cfg = SparseGemmConfig(kw.pop("name", "k"), kw.pop("form", F16), kw.pop("target", "sm_90a"), **kw)
    with pytest.raises(SpecError, match=re.escape(message)):
        emit_sparse_gemm(cfg)


# --------------------------------------------------------------------------------------------------
# 4. DSL: `schedule` with stages >= 2 selects this kernel
# --------------------------------------------------------------------------------------------------

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.parametrize("name", ["sparse_gemm_f16", "sparse_gemm_bf16"])
def test_examples_compile_to_the_pipelined_kernel(ptxas, name):
    from compiler import compile_file
    res = compile_file(EXAMPLES / f"{name}.tile")
    abi = res.to_json()["tiles"][name]["kernel"]
    assert abi["kernel_kind"] == "sparse_gemm" and abi["stages"] == 3 and abi["tile_n"] == 256
    assert "cp.async.cg.shared.global" in res.ptx and "ldmatrix.sync.aligned.m8n8.x4" in res.ptx
    assert _ptxas(ptxas, res.ptx, "sm_90a").returncode == 0


def _tile(schedule: str, a="f16", shape="M=16 N=8 K=32", sparsity="sparsity 2:4 metadata=runtime selector=0;",
          acc="f32") -> str:
    return (f"target sm_90a;\ntile t {{\n  engine mma.sp;\n  shape {shape};\n  A: {a} global;\n  B: {a} global;\n"
            f"  C: {acc} global;\n  D: {acc} global;\n  {sparsity}\n  {schedule}\n}}\n")


@pytest.mark.parametrize("schedule,kind", [
    ("schedule cta=128x256x64 warps=2x4 stages=3;", "sparse_gemm"),
    ("schedule cta=64x64x64 warps=2x2 stages=2;", "sparse_gemm"),
    ("schedule cta=64x64x64 warps=2x2 stages=1;", None),            # no pipeline: the simple kernel
    ("", None),
])
def test_schedule_selects_the_kernel(schedule, kind):
    from compiler import compile_source
    abi = compile_source(_tile(schedule)).to_json()["tiles"]["t"]["kernel"]
    assert abi.get("kernel_kind") == kind


def test_forms_and_metadata_the_pipeline_does_not_take_keep_the_simple_kernel():
    from compiler import compile_source
    sched = "schedule cta=64x64x128 warps=2x2 stages=3;"
    s4 = _tile(sched, a="s4", shape="M=16 N=8 K=128", sparsity="sparsity 4:8 metadata=runtime selector=0;",
               acc="s32")
    static = _tile(sched.replace("x128 ", "x64 "), sparsity="sparsity 2:4 metadata=static pattern=first_two;")
    for text in (s4, static):
        abi = compile_source(text).to_json()["tiles"]["t"]["kernel"]
        assert abi.get("kernel_kind") is None


def test_unbuildable_schedule_is_a_located_error():
    from compiler import CompileError, compile_source
    text = _tile("schedule cta=128x256x96 warps=2x4 stages=3;")
    with pytest.raises(CompileError) as ei:
        compile_source(text)
    d = ei.value.diagnostics[0]
    assert "cta K = 96" in d.message and d.loc is not None and d.loc.line == 10
