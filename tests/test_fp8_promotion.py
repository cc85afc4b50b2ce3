"""`schedule ... promote=N` (issue 17, "fp8 accuracy"): the sparse wgmma kernel's two-level accumulation
for e4m3 / e5m2 inputs (compiler/ptx/sparse_wgmma_kernel.py promote_every / promote_final): every N K
blocks the wgmma accumulators are added into a second set of f32 registers (%pacc) and the next block's
first k-step overwrites them (scale-d = 0), as cuBLAS does without fast accumulation.

What is checked: the statement (DSL, printer, IR), the located refusals (not fp8, not wgmma, N < 1, doubled
accumulators beyond the registers), ptxas -v without spills where it is legal, the register-level
behaviour in the CPU emulator (exact arithmetic: promoted and unpromoted kernels give the reference's D bit
for bit at every K-window boundary, with C, edges, late wgmma groups, persistent CTAs and split-K slices;
mutations of the promotion are caught), and, under the emulator's model of fp8 wgmma's reduced-precision sums (compiler/emulator/warp.py
fp8_acc_bits: 14 retained bits, the DeepSeek-V3 report's figure; PTX specifies nothing), that promotion
measurably reduces the error of a long-K problem. GPU numerics: tests/gpu/test_epilogue_outputs_gpu.py.
"""
from __future__ import annotations

import re
import subprocess

import numpy as np
import pytest

from compiler import CompileError, compile_source
from compiler.emulator.sparse_host import run_sparse_wgmma
from compiler.isa.wgmma import FP8_ACCUMULATOR_BITS
from compiler.ptx.emission import kernel_config
from compiler.ptx.sparse_wgmma_kernel import emit_sparse_wgmma


def tile(schedule: str = "cta=128x128x128 warps=8x1 stages=2 mma=wgmma promote=2", a: str = "e4m3",
         d: str = "f32", c: bool = False, target: str = "sm_90a") -> str:
    k = 64 if a in ("e4m3", "e5m2", "s8") else 32
    acc = "s32" if a == "s8" else "f32"
    return (f"target {target};\ntile p {{\n  engine mma.sp;\n  shape M=16 N=8 K={k};\n  A: {a} global;\n"
            f"  B: {a} global;\n{f'  C: {acc} global;' + chr(10) if c else ''}  D: {d} global;\n"
            f"  sparsity 2:4 metadata=runtime selector=0;\n  schedule {schedule};\n"
            f"{'  epilogue;' + chr(10) if d != acc else ''}}}\n")


# --------------------------------------------------------------------------------------------------
# the statement
# --------------------------------------------------------------------------------------------------

def test_statement_prints_parses_and_reaches_the_abi():
    from compiler.frontend.build import parse_spec
    from compiler.ir import print_op
    from compiler.ir_parser import parse_ir
    from compiler.spec_printer import print_file

    spec = parse_spec(tile())
    assert spec.tiles[0].schedule.promote == 2
    assert "promote=2;" in print_file(spec) and parse_spec(print_file(spec)).tiles[0] == spec.tiles[0]
    r = compile_source(tile(), passes=["verify"])
    text = print_op(r.module)
    assert 'mma = "wgmma", cluster = 1, promote = 2}' in text and print_op(parse_ir(text)) == text
    abi = compile_source(tile()).to_json()["tiles"]["p"]["kernel"]
    assert abi["promote"] == 2
    # the default: no promotion, no "promote" in the ABI (examples/sparse_wgmma_e4m3_out_bf16.tile)
    plain = compile_source(tile(schedule="cta=128x128x128 warps=8x1 stages=2 mma=wgmma"))
    assert "promote" not in plain.to_json()["tiles"]["p"]["kernel"] and "%pacc" not in plain.ptx


BAD = [
    ("warp-level mma.sp", dict(schedule="cta=128x128x128 warps=2x4 stages=3 promote=4", c=True),
     "schedule promote=N is the two-level fp8 accumulation of the sparse wgmma kernel"),
    ("f16 inputs", dict(a="f16", schedule="cta=128x128x64 warps=8x1 stages=2 mma=wgmma promote=4"),
     "f16 sums are f32 (or s32) already"),
    ("s8 inputs", dict(a="s8", d="s32", schedule="cta=128x128x128 warps=8x1 stages=2 mma=wgmma promote=4"),
     "s8 sums are f32 (or s32) already"),
    ("zero", dict(schedule="cta=128x128x128 warps=8x1 stages=2 mma=wgmma promote=0"), "every N >= 1 K blocks"),
    # 128 x 256: 2 x 128 accumulators per thread of the 384-thread CTA's 168 registers
    ("128x256", dict(schedule="cta=128x256x128 warps=8x1 stages=4 mma=wgmma promote=4"),
     "promote= doubles the accumulators: 64 x 256 per consumer warpgroup needs 2 x 128 f32 registers"),
]


@pytest.mark.parametrize("what,kw,message", BAD, ids=[b[0] for b in BAD])
def test_refusals_are_located_at_promote(what, kw, message):
    text = tile(**kw)
    with pytest.raises(CompileError) as e:
        compile_source(text, filename="bad.tile")
    out = str(e.value)
    assert message in out, out
    line, col = map(int, re.search(r"bad\.tile:(\d+):(\d+): error:", out).groups())
    assert text.splitlines()[line - 1][:col - 1].endswith("promote="), out


def test_tcgen05_refuses_promote():
    text = ("target sm_100a;\ntile t {\n  engine tcgen05;\n  shape M=128 N=128 K=16;\n  A: f16 smem;\n"
            "  B: f16 smem;\n  D: f32 tmem;\n  schedule cta=128x128x64 stages=4 promote=2;\n}\n")
    with pytest.raises(CompileError, match="promote= is not lowered for tcgen05 tiles"):
        compile_source(text)


# --------------------------------------------------------------------------------------------------
# ptxas: doubled accumulators without spills where legal
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("schedule", [
    "cta=128x128x128 warps=8x1 stages=4 mma=wgmma cluster=2 promote=4",   # the example: 2 x 64 of 168
    "cta=256x64x128 warps=8x1 stages=4 mma=wgmma promote=1",              # 2 x (2 x 32)
    "cta=64x208x128 warps=4x1 stages=4 mma=wgmma promote=4",              # one consumer: 2 x 104 of 255
    # split-K and persistent registers beside the doubled accumulators (ptxas -v: 168, no spills)
    "cta=128x128x128 warps=8x1 stages=4 mma=wgmma cluster=2 split_k=4 persistent=static promote=4",
    # 2 x 96 + 40 > 168: the consumers take the producer's registers (setmaxnreg.inc 240)
    "cta=128x192x128 warps=8x1 stages=4 mma=wgmma promote=4",
])
def test_promoted_kernels_assemble_without_spills(ptxas, tmp_path, schedule):
    r = compile_source(tile(schedule=schedule, d="bf16"))            # bf16 D: through the epilogue
    src = tmp_path / "k.ptx"
    src.write_text(r.ptx)
    res = subprocess.run([ptxas, "-arch=sm_90a", "-v", str(src), "-o", str(tmp_path / "k.cubin")],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert "0 bytes spill stores, 0 bytes spill loads" in res.stderr, res.stderr
    assert "%pacc" in r.ptx


def test_the_promotion_in_the_ptx():
    cfg_text = compile_source(tile(schedule="cta=128x128x128 warps=8x1 stages=2 mma=wgmma promote=3")).ptx
    acc = 64                                               # 64 x 128 per consumer warpgroup / 128 threads
    # each of the main loop's two K-block copies promotes (acc adds), and the end adds the rest (acc more)
    assert len(re.findall(r"^\s*add\.f32 %pacc\d+, %pacc\d+, %acc\d+;", cfg_text, re.M)) == 2 * acc
    assert len(re.findall(r"^\s*@%p12 add\.f32 %pacc\d+, %pacc\d+, %acc\d+;", cfg_text, re.M)) == acc
    assert cfg_text.count("setp.lt.u32 %p12, %pk, 3;") == 2
    # k-step 0 of a block takes scale-d %p13 (false right after a promotion), k-steps 1.. %p4 (true)
    wgmmas = re.findall(r"wgmma\.mma_async\.sp\S+ \{[^}]*\}, %da, %db, %meta\d+, 0, (%p\d+)", cfg_text)
    assert wgmmas == ["%p13", "%p4"] * 2                    # cta K 128 = 2 k-steps of 64, two block copies


# --------------------------------------------------------------------------------------------------
# the emulator: exact arithmetic, then the model of fp8's sums
# --------------------------------------------------------------------------------------------------

def emulate(text: str, m: int, n: int, k: int, *, mode: str = "eager", transform=None, bits: int | None = None,
            seed: int = 3):
    r = compile_source(text)
    cfg = kernel_config(r.tiles["p"], r.module)
    kern = emit_sparse_wgmma(cfg)
    ptx = transform(kern.text) if transform else kern.text
    d, ref, _ = run_sparse_wgmma(kern, cfg.name, cfg.form, cfg.cluster_m, cfg.threads, cfg.smem_bytes, m, n, k,
                                 cfg.out_type, cfg.accumulate_c, seed=seed, text=ptx, mode=mode, fp8_acc_bits=bits)
    return d, ref


@pytest.mark.parametrize("k,promote", [pytest.param(128, 2, marks=pytest.mark.slow),
                                       pytest.param(512, 2, marks=pytest.mark.slow), (640, 2),
                                       pytest.param(640, 4, marks=pytest.mark.slow),
                                       pytest.param(384, 1, marks=pytest.mark.slow)])
def test_promoted_sums_are_exact_at_every_window(k, promote):
    # K blocks of 128: 1 (only the final add), 4 (ends on a window: nothing left for the final add),
    # 5 (a partial last window), 3 with promote=1 (every block)
    text = tile(schedule=f"cta=128x128x128 warps=8x1 stages=2 mma=wgmma promote={promote}")
    d, ref = emulate(text, 128, 128, k)
    assert np.array_equal(d, ref)


@pytest.mark.parametrize("mode", ["eager", pytest.param("adversarial", marks=pytest.mark.slow)])
def test_promotion_with_c_edges_and_late_wgmma_groups(mode):
    # C starts the f32 sums (it never passes through fp8's accumulator); edge tiles; wgmma groups landing
    # only when wait_group retires them (the promotion's wait_group 0 must come first)
    text = tile(schedule="cta=128x128x128 warps=8x1 stages=2 mma=wgmma promote=2", c=True, d="bf16")
    d, ref = emulate(text, 100, 40, 300, mode=mode)        # one tile at both edges, 3 K blocks with a tail
    assert np.array_equal(d.view(np.uint16), ref.view(np.uint16))


@pytest.mark.slow
@pytest.mark.parametrize("schedule", ["cta=128x128x128 warps=8x1 stages=2 mma=wgmma persistent=static promote=2",
                                      "cta=128x128x128 warps=8x1 stages=4 mma=wgmma cluster=2 persistent=static "
                                      "promote=3"])
def test_promotion_restarts_with_each_tile_of_a_persistent_cta(schedule):
    # persistent CTAs walk several tiles: %pk and %pacc start again with each (init_acc), C included
    d, ref = emulate(tile(schedule=schedule, c=True), 512, 384, 640)
    assert np.array_equal(d, ref)


# split-K (compiler/ptx/sparse_wgmma_kernel.py init_registers): each slice promotes its own K blocks into
# its own %pacc, which only slice 0 starts from C; the partials are then summed in f32 in slice order
SPLIT_K = [
    # 5 K blocks in 3 slices (2, 2, 1 blocks: windows ending inside and at a slice's end), C, edge tiles
    ("cta=64x64x128 warps=4x1 stages=2 mma=wgmma split_k=3 promote=2", 60, 40, 700),
    pytest.param("cta=128x128x128 warps=8x1 stages=2 mma=wgmma split_k=2 promote=2", 128, 128, 640,
                 marks=pytest.mark.slow),
    pytest.param("cta=64x64x128 warps=4x1 stages=2 mma=wgmma split_k=2 persistent=static promote=1", 128, 64, 640,
                 marks=pytest.mark.slow),
    # setmaxnreg (the doubled accumulators beyond the launch count) with split-K
    pytest.param("cta=128x192x128 warps=8x1 stages=2 mma=wgmma split_k=2 promote=2", 128, 192, 640,
                 marks=pytest.mark.slow),
]


@pytest.mark.parametrize("schedule,m,n,k", SPLIT_K)
def test_promotion_with_split_k(schedule, m, n, k):
    d, ref = emulate(tile(schedule=schedule, c=True), m, n, k)
    assert np.array_equal(d, ref)


@pytest.mark.slow
def test_split_k_promotion_starts_one_slice_from_c():
    # every slice's %pacc starting from C adds C split_k times
    text = tile(schedule=SPLIT_K[0][0], c=True)
    broken = emulate(text, 64, 64, 640, transform=lambda t: _changed(t, lambda u: re.sub(
        r"@%p1 bra\.uni C_DONE_\d+;", "", u)))[0]
    assert not np.array_equal(broken, emulate(text, 64, 64, 640)[1])


MUTATIONS = {
    # the restart: every k-step accumulates (scale-d true) -> what was promoted is added again
    "no_restart": lambda t: t.replace("0, %p13, 1, 1;", "0, %p4, 1, 1;"),
    # the rest after the last promotion is dropped
    "no_final_add": lambda t: re.sub(r"@%p12 add\.f32 %pacc\d+, %pacc\d+, %acc\d+;\n", "", t),
    # the window counter never restarts: one promotion, then every block restarts without promoting
    "no_counter_reset": lambda t: t.replace("mov.u32 %pk, 0;\nNO_PROMOTION", "NO_PROMOTION"),
}


@pytest.mark.parametrize("name", [n if n == "no_final_add" else pytest.param(n, marks=pytest.mark.slow)
                                  for n in MUTATIONS])
def test_broken_promotions_are_caught(name):
    text = tile(schedule="cta=128x128x128 warps=8x1 stages=2 mma=wgmma promote=2")
    d, ref = emulate(text, 128, 128, 640)
    assert np.array_equal(d, ref)
    mutated = emulate(text, 128, 128, 640, transform=lambda t: _changed(t, MUTATIONS[name]))[0]
    assert not np.array_equal(mutated, ref)


def _changed(text: str, mutate) -> str:
    out = mutate(text)
    assert out != text, "the mutation matched nothing"
    return out


@pytest.mark.slow
def test_promotion_reduces_the_modelled_fp8_error_on_a_long_k():
    # K = 4096 (32 blocks of 128) under the model (each fp8 wgmma's result keeps 14 significant bits,
    # truncated): unpromoted, the running sum's low bits are lost at every one of its 64 k-steps; promoted
    # every 4 blocks, only those of a 4-block partial sum (8 k-steps), then exact f32 adds. Measured here
    # (seed 3, 128 x 128 f32 D, the inputs' few significant bits): unpromoted ~15 % of D off (max ~0.8, the
    # sums being a few hundred), promote=4 and promote=1 exact: docs/fp8_accumulation.md
    assert FP8_ACCUMULATOR_BITS == 14
    errors = {}
    for promote in (None, 4):
        sched = "cta=128x128x128 warps=8x1 stages=2 mma=wgmma" + (f" promote={promote}" if promote else "")
        d, ref = emulate(tile(schedule=sched), 128, 128, 4096, bits=FP8_ACCUMULATOR_BITS)
        errors[promote] = np.abs(d.astype(np.float64) - ref.astype(np.float64))
    assert np.count_nonzero(errors[None]) > errors[None].size // 20 and errors[None].max() > 0.1
    assert errors[4].max() < errors[None].max() / 8 and errors[4].mean() < errors[None].mean() / 8
    # without the model the same kernels are exact (the model is what makes the difference)
    d, ref = emulate(tile(schedule="cta=128x128x128 warps=8x1 stages=2 mma=wgmma"), 128, 128, 4096)
    assert np.array_equal(d, ref)
