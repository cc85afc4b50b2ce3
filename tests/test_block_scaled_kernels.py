"""Block-scaled mma.sp in whole-GEMM kernels (PTX ISA 9.7.14.6.3 `.kind::mxf8f6f4 / mxf4 / mxf4nvf4
.block_scale`, block scaling 9.7.14.3): every kind, scale vector, scale type and (mxf8f6f4) element type
through the DSL, the emulator (the kernel's own PTX on the warp machine, with SFA / SFB in global memory
as the ABI states them) and the reference model compiler.sim.mma_sp (elements and scales decoded through
ml_dtypes, A expanded by the model's own metadata reading) against each other; the host packer of
compiler.sparse (quantize_block_scaled) through the same path. sm_120a hardware is not available: ptxas
assembles what the emulator runs (tests/test_mma_sp_block_scale.py: every target of the form).
"""
from __future__ import annotations

import numpy as np
import pytest

from compiler.isa.mma_sp.block_scale import SCALE_VECTOR, block_elements
from compiler.isa.mma_sp.forms import BLOCK_SCALES, F8F6F4
from compiler.isa.targets import MAX_PTX

EXPRESSIBLE = [s for s in BLOCK_SCALES if s.min_ptx <= MAX_PTX]
# mxf8f6f4 takes any A type with any B type of F8F6F4 (PTX 9.7.14.6.3); each type once as A and once as B
MXF8_PAIRS = [(a, F8F6F4[(i + 1) % len(F8F6F4)]) for i, a in enumerate(F8F6F4)]


def _tile(kind: str, a: str, b: str, vec: str, stype: str, *, name: str = "mx", schedule: str = "",
          target: str = "sm_120a") -> str:
    k = 64 if kind == "mxf8f6f4" else 128
    return (f"target {target};\ntile {name} {{\n  engine mma.sp kind={kind};\n  shape M=16 N=8 K={k};\n"
            f"  loop K={2 * k};\n  A: {a} global;\n  B: {b} global;\n  C: f32 global;\n  D: f32 global;\n"
            f"  SFA: {stype} global;\n  SFB: {stype} global;\n  block_scale vec={vec};\n"
            f"  sparsity {'2:4' if kind == 'mxf8f6f4' else '4:8'} metadata=runtime;\n{schedule}}}\n")


def _cases():
    out = []
    for bs in EXPRESSIBLE:
        pairs = MXF8_PAIRS if bs.kind == "mxf8f6f4" else [("e2m1", "e2m1")]
        out += [pytest.param(bs.kind, a, b, bs.scale_vec, bs.scale_type,
                             id=f"{bs.kind}-{a}x{b}-{bs.scale_vec}-{bs.scale_type}") for a, b in pairs]
    return out


def sim_d(form, p) -> np.ndarray:
    """compiler.sim.mma_sp's D for a sparse_host problem: from the dense operands' element codes (the
    model compresses and reads its own metadata codes) and the raw scale bytes."""
    from compiler.sim.mma_sp import GRANULARITY_BY_K, sparse_block_scaled_gemm
    from compiler.sim.numerics import encode
    from compiler.sim.tcgen05 import compress_sparse

    a_codes = encode(p.a.astype(np.float64), form.a_type)
    stored, meta = compress_sparse(a_codes, GRANULARITY_BY_K[form.k])
    return sparse_block_scaled_gemm(stored, meta, form.a_type, encode(p.b.astype(np.float64), form.b_type),
                                    form.b_type, p.sfa, p.sfb, form.block_scale.scale_type, k_step=form.k,
                                    scale_vec=form.block_scale.scale_vec, c=p.c)


def run(text: str, shape: tuple[int, int, int], seed: int = 1, problem=None, land="eager", order="forward"):
    """(form, problem, emulated D, sparse_host's numpy reference) of the only tile of `text`."""
    from compiler.driver import compile_source
    from compiler.emulator.sparse_host import run_sparse_gemm, sparse_problem

    r = compile_source(text, "mx.tile")
    (tile,) = r.tiles
    form = r.tiles[tile].facts["form"]
    abi = r.to_json()["tiles"][tile]["kernel"]
    m, n, k = shape
    rng = np.random.default_rng(seed)
    p = problem or sparse_problem(form, m, n, k, rng, accumulate_c=True)
    if abi.get("kernel_kind") == "sparse_gemm":
        grid = ((m // abi["tile_m"]) * (n // abi["tile_n"]), 1)
    else:
        grid = (n // abi["tile_n"], m // abi["tile_m"])
    d, ref, stats = run_sparse_gemm(r.ptx, abi["entry"], form, grid, abi["block"][0],
                                    abi.get("dynamic_smem_bytes", 0), m, n, k, "f32", True, land=land,
                                    order=order, problem=p, rng=rng)
    assert stats["mma"] > 0
    return form, p, d, ref, abi


@pytest.mark.parametrize("kind,a,b,vec,stype", _cases())
def test_simple_kernel_emulator_reference_and_model_agree(kind, a, b, vec, stype):
    """The one-instruction-tile kernel (SFA / SFB read per k-step from global memory) on 2 x 2 CTAs and
    3 k-steps: emulated D == numpy reference == compiler.sim model, bit for bit (exact sums), and the
    scales matter."""
    form, p, d, ref, abi = run(_tile(kind, a, b, vec, stype), (32, 16, 3 * (64 if kind == "mxf8f6f4" else 128)))
    blk = block_elements(form.k, vec)
    assert abi["buffers"]["sfa"]["shape"] == ["M", f"K/{blk}"] and p.sfa.shape == (32, p.a.shape[1] // blk)
    assert len(np.unique(p.sfa)) > 1 and len(np.unique(p.sfb)) > 1
    np.testing.assert_array_equal(d, ref)
    np.testing.assert_array_equal(sim_d(form, p), ref)
    unscaled = (p.a.astype(np.float64) @ p.b.astype(np.float64) + p.c).astype(np.float32)
    assert not np.array_equal(unscaled, ref)


def test_model_reads_scale_blocks_along_k():
    """The model on a closed form: kept A = B = ones, mxf4nvf4 4X (4 blocks of 128 / 4 = 32 K per k-step,
    Table 35), SFA block j = 2^j (ue4m3 0x38 + 8j: exponent field 7 + j, bias 7), SFB = 1 (0x38). A 4:8
    row keeps 4 of every 8, so each 32-K block holds 16 ones: D = 16 * (1 + 2 + 4 + 8) = 240."""
    from compiler.sim.mma_sp import sparse_block_scaled_gemm
    from compiler.sim.numerics import encode

    m, n, k = 16, 8, 128
    one = int(encode(np.array(1.0), "e2m1"))
    stored = np.full((m, k // 2), one, np.uint64)
    meta = np.full((m, k // 8), 0b0100, np.uint64)          # 4:8: pairs 0 and 1 of each 8 kept
    b = np.full((k, n), one, np.uint64)
    sfa = np.tile(np.array([0x38 + 8 * j for j in range(4)], np.uint8), (m, 1))
    sfb = np.full((n, 4), 0x38, np.uint8)
    d = sparse_block_scaled_gemm(stored, meta, "e2m1", b, "e2m1", sfa, sfb, "ue4m3", k_step=128, scale_vec="4X")
    np.testing.assert_array_equal(d, np.full((m, n), 16 * (1 + 2 + 4 + 8), np.float32))
    assert SCALE_VECTOR["4X"] == 4


# -- the host packer ----------------------------------------------------------------------------------

@pytest.mark.parametrize("kind,ab,vec,stype", [("mxf8f6f4", "e4m3", "1X", "ue8m0"), ("mxf4", "e2m1", "2X", "ue8m0"),
                                               ("mxf4nvf4", "e2m1", "4X", "ue4m3")])
def test_quantized_operands_run_through_the_kernel(kind, ab, vec, stype):
    """compiler.sparse.quantize_block_scaled on float A (structured-sparse) and B, packed with compress /
    pack_b, SFA / SFB in the ABI's layout: the emulated kernel equals the model bit for bit and the float
    product within the formats' quantization error (|error| <= 2^-mantissa-bits relative to each block's
    largest magnitude, summed over K: a loose bound, 0.25 of |A| |B|)."""
    from compiler import sparse
    from compiler.emulator.sparse_host import SparseProblem
    from compiler.isa.mma_sp.forms import find_form

    form = find_form("m16n8k64" if kind == "mxf8f6f4" else "m16n8k128", ab, ab, "f32", "f32", kind,
                     scale_vec=vec, scale_type=stype)
    m, n, k = 32, 16, 2 * form.k
    blk = block_elements(form.k, vec)
    rng = np.random.default_rng(5)
    pattern = sparse.random_sparse(rng, m, k, ab, form.shape).astype(np.float32) != 0
    xa = np.where(pattern, rng.normal(size=(m, k)) * np.exp2(rng.integers(-8, 8, (m, 1))), 0.0)
    xb = rng.normal(size=(k, n)) * 3.0
    qa, sfa = sparse.quantize_block_scaled(xa, ab, stype, blk, k_axis=1)
    qb, sfb = sparse.quantize_block_scaled(xb, ab, stype, blk, k_axis=0)
    assert sfa.shape == (m, k // blk) and sfb.shape == (n, k // blk) and sfa.dtype == np.uint8
    assert np.array_equal(qa.astype(np.float32) != 0, pattern & (qa.astype(np.float32) != 0))   # still sparse
    values, meta = sparse.compress(qa, ab, form.shape)
    c = np.zeros((m, n), np.float32)
    p = SparseProblem(qa, qb, c, values, meta, sparse.pack_b(qb, ab, form.shape), sfa, sfb)
    _form, _p, d, _ref, _abi = run(_tile(kind, ab, ab, vec, stype), (m, n, k), problem=p)
    np.testing.assert_array_equal(d, sim_d(form, p))
    exact = xa @ xb
    bound = np.abs(xa) @ np.abs(xb)
    assert np.all(np.abs(d - exact) <= 0.25 * bound + 1e-30)


def test_scale_encoding_is_exact_or_an_error():
    from compiler import sparse
    from compiler.diagnostics import SpecError

    # ue8m0 byte e is 2^(e - 127): 1.0 -> 127, 2^-127 -> 0, 2^127 -> 254; ue4m3 0x38 = 1.0, 0x3C = 1.5
    assert sparse.encode_scales([1.0, 2.0 ** -127, 2.0 ** 127], "ue8m0").tolist() == [127, 0, 254]
    assert sparse.encode_scales([[1.0, 1.5, 448.0]], "ue4m3").tolist() == [[0x38, 0x3C, 0x7E]]
    for bad, stype in ((3.0, "ue8m0"), (-1.0, "ue4m3"), (1.1, "ue4m3"), (np.nan, "ue8m0")):
        with pytest.raises(SpecError):
            sparse.encode_scales([bad], stype)
    codes = np.arange(255, dtype=np.uint8)                                 # 0xFF is ue8m0's NaN
    assert np.array_equal(sparse.encode_scales(sparse.decode_scales(codes, "ue8m0"), "ue8m0"), codes)


def test_runtime_pack_scales_checks_before_uploading():
    """Kernel.pack_scales encodes with the ABI's scale type; inexact values, a wrong operand name and a
    kernel without scale factors are refused before anything reaches a device."""
    import os

    from compiler.runtime import ArgumentError, load
    from compiler.runtime.errors import TilecRuntimeError

    root = os.path.join(os.path.dirname(__file__), "..", "examples")
    k = load(os.path.join(root, "sparse_mxf4nvf4.tile"))
    assert k.abi["buffers"]["sfa"]["element"] == "ue4m3"
    with pytest.raises(ArgumentError) as e:
        k.pack_scales(np.full((16, 8), 1.1), "a")                # 1.1 is no ue4m3 value
    assert e.value.what == "value" and "ue4m3" in e.value.got
    with pytest.raises(ArgumentError):
        k.pack_scales(np.ones((16, 8)), "c")
    with pytest.raises(TilecRuntimeError):
        load(os.path.join(root, "sparse_f16.tile")).pack_scales(np.ones((16, 2)))


# -- the pipelined kernel (compiler/ptx/sparse_gemm_kernel.py) ------------------------------------------

# (kind, A, B, vec, stype, schedule, M x N x K): selectors byte-id 0..3 (1X, 4 k-steps a block), 0/2 (2X),
# 0 (4X); tile pairs / quads complete and not (tiles_m 1, 2, 3; tiles_n 1, 3, 4, 8); 1..32 scale bytes a
# row and block (u8, u16, b32, v2, v4, two v4 loads); odd unrolls doubled for the two scale sets
PIPELINED = [
    ("mxf8f6f4", "e4m3", "e5m2", "1X", "ue8m0", "cta=32x32x256 warps=1x1 stages=3", (64, 64, 768)),
    ("mxf8f6f4", "e3m2", "e2m3", "1X", "ue8m0", "cta=32x64x64 warps=2x1 stages=2", (64, 128, 192)),
    ("mxf8f6f4", "e2m1", "e4m3", "1X", "ue8m0", "cta=16x64x128 warps=1x1 stages=3", (32, 64, 256)),
    ("mxf4", "e2m1", "e2m1", "2X", "ue8m0", "cta=48x24x256 warps=1x1 stages=2", (96, 48, 512)),
    ("mxf4", "e2m1", "e2m1", "2X", "ue8m0", "cta=32x16x128 warps=2x2 stages=4", (64, 32, 512)),
    ("mxf4nvf4", "e2m1", "e2m1", "4X", "ue4m3", "cta=64x64x512 warps=2x2 stages=2", (64, 128, 1024)),
    ("mxf4nvf4", "e2m1", "e2m1", "4X", "ue4m3", "cta=16x8x1024 warps=1x1 stages=2", (32, 16, 2048)),
    ("mxf4nvf4", "e2m1", "e2m1", "2X", "ue8m0", "cta=32x32x256 warps=1x2 stages=3", (64, 64, 512)),
]


def _pipelined_tile(case, name: str = "mx") -> str:
    kind, a, b, vec, stype, sched, _shape = case
    return _tile(kind, a, b, vec, stype, name=name, schedule=f"  schedule {sched};\n")


@pytest.mark.parametrize("case", PIPELINED, ids=lambda c: f"{c[0]}-{c[1]}x{c[2]}-{c[3]}-{c[5].split()[0]}")
def test_pipelined_kernel_emulator_reference_and_model_agree(case):
    """A `schedule` makes a block-scaled tile the pipelined GEMM (cp.async ring, ldmatrix, scales loaded a K
    block ahead): its emulated D equals the numpy reference and the model bit for bit, with copies landing
    at issue and warps in order, and with copies landing only at their wait_group and warps in reverse."""
    for land, order in (("eager", "forward"), ("lazy", "reverse")):
        form, p, d, ref, abi = run(_pipelined_tile(case), case[6], seed=11, land=land, order=order)
        assert abi["kernel_kind"] == "sparse_gemm" and {"sfa", "sfb"} <= set(abi["buffers"])
        np.testing.assert_array_equal(d, ref)
    np.testing.assert_array_equal(sim_d(form, p), ref)


def _selectors(ptx: str) -> set[tuple[int, int, int, int]]:
    import re

    return {tuple(map(int, m)) for m in re.findall(r"%sfa\d+, \{(\d), (\d)\}, %sfb\d+, \{(\d), (\d)\};", ptx)}


def test_pipelined_selectors_cover_the_isa_ranges():
    """1X with 4 k-steps a K block uses byte-id 0..3 (the four scale bytes of a row in one register),
    thread-id-a 0/1 (two A tiles a register), thread-id-b 0..3 (four B tiles); 2X with 2 k-steps byte-id 0/2;
    4X byte-id 0 (compiler/isa/mma_sp/block_scale.BYTE_ID: every legal value, and only those)."""
    from compiler.driver import compile_source
    from compiler.isa.mma_sp.block_scale import BYTE_ID, THREAD_ID_A, THREAD_ID_B

    for vec, stype, kind, sched in (("1X", "ue8m0", "mxf8f6f4", "cta=32x32x256 warps=1x1 stages=3"),
                                    ("2X", "ue8m0", "mxf4", "cta=32x32x256 warps=1x1 stages=3"),
                                    ("4X", "ue4m3", "mxf4nvf4", "cta=32x32x256 warps=1x1 stages=3")):
        ab = "e4m3" if kind == "mxf8f6f4" else "e2m1"
        ptx = compile_source(_tile(kind, ab, ab, vec, stype, schedule=f"  schedule {sched};\n"), "mx.tile").ptx
        sels = _selectors(ptx)
        assert {s[0] for s in sels} == set(BYTE_ID[vec]) and all(s[0] == s[2] for s in sels)
        assert {s[1] for s in sels} == set(THREAD_ID_A) and {s[3] for s in sels} == set(THREAD_ID_B)


# Each mutation points one lane group or k-step at other scale bytes; the model must see it.
SCALE_MUTATIONS = {
    "thread-id-a of the second A tile": lambda s: s.replace("{1, 1}, %sfb", "{1, 0}, %sfb", 1),
    "thread-id-b of the fourth B tile": lambda s: s.replace(", {2, 3};", ", {2, 2};", 1),
    "byte-id of the third k-step": lambda s: s.replace(", {2, 0}, %sfb", ", {1, 0}, %sfb", 1),
    "SFB pointer not moved on after block 0": lambda s: s.replace("add.u64 %psb0, %psb0, 4;", "// dropped", 1),
}


@pytest.mark.parametrize("name", SCALE_MUTATIONS)
def test_model_catches_wrong_scale_selection(name):
    from compiler.driver import compile_source
    from compiler.emulator.sparse_host import run_sparse_gemm, sparse_problem

    text = _pipelined_tile(PIPELINED[0])
    r = compile_source(text, "mx.tile")
    form = r.tiles["mx"].facts["form"]
    abi = r.to_json()["tiles"]["mx"]["kernel"]
    broken = SCALE_MUTATIONS[name](r.ptx)
    assert broken != r.ptx
    m, n, k = PIPELINED[0][6]
    rng = np.random.default_rng(2)
    p = sparse_problem(form, m, n, k, rng, accumulate_c=True)
    d, ref, _ = run_sparse_gemm(broken, "mx", form, ((m // 32) * (n // 32), 1), abi["block"][0],
                                abi["dynamic_smem_bytes"], m, n, k, "f32", True, problem=p, rng=rng)
    assert not np.array_equal(d, ref)


@pytest.mark.parametrize("case", PIPELINED[::2] + [PIPELINED[5]], ids=lambda c: f"{c[0]}-{c[3]}-{c[5].split()[0]}")
def test_pipelined_kernels_assemble_on_every_target_of_the_form(ptxas, case):
    """ptxas (CUDA 13) assembles the pipelined block-scaled kernel on every target the form's support row
    lists (mxf8f6f4: sm_120a, sm_121a and the family targets; mxf4 / mxf4nvf4: sm_120a, sm_121a)."""
    import subprocess
    import tempfile
    from pathlib import Path

    from compiler.driver import compile_source
    from compiler.isa.mma_sp.forms import find_form

    kind, a, b, vec, stype = case[:5]
    form = find_form("m16n8k64" if kind == "mxf8f6f4" else "m16n8k128", a, b, "f32", "f32", kind,
                     scale_vec=vec, scale_type=stype)
    targets = form.row.target_rule.targets()
    assert "sm_120a" in targets
    for target in targets:
        text = _pipelined_tile(case).replace("target sm_120a;", f"target {target};")
        ptx = compile_source(text, "mx.tile").ptx
        assert "cp.async.cg.shared.global" in ptx and "ldmatrix" in ptx
        with tempfile.TemporaryDirectory() as tmp:
            src = Path(tmp) / "k.ptx"
            src.write_text(ptx)
            res = subprocess.run([ptxas, f"-arch={target}", "-v", str(src), "-o", str(Path(tmp) / "k.o")],
                                 capture_output=True, text=True)
        assert res.returncode == 0, f"{target}: {res.stderr}"
        assert " 0 bytes spill stores" in res.stderr, res.stderr


def test_pipelined_configuration_errors():
    """Persistent CTAs (API only) refuse block-scaled forms by name; a schedule whose scale registers
    overflow the thread is a located error on the schedule (passes/limits.py counts them)."""
    from compiler.diagnostics import CompileError, SpecError
    from compiler.driver import compile_source
    from compiler.isa.mma_sp.forms import find_form
    from compiler.ptx.sparse_gemm_kernel import SparseGemmConfig, emit_sparse_gemm

    form = find_form("m16n8k128", "e2m1", "e2m1", "f32", "f32", "mxf4nvf4", scale_vec="4X", scale_type="ue4m3")
    with pytest.raises(SpecError) as e:
        emit_sparse_gemm(SparseGemmConfig(name="k", form=form, target="sm_120a", cta_m=64, cta_n=64, cta_k=256,
                                          warps_m=2, warps_n=2, stages=2, persistent=True))
    assert e.value.field == "schedule.persistent" and "block-scaled" in str(e.value)
    case = ("mxf4nvf4", "e2m1", "e2m1", "4X", "ue4m3", "cta=64x64x1024 warps=1x1 stages=2", None)
    with pytest.raises(CompileError) as e:
        compile_source(_pipelined_tile(case), "mx.tile")
    # 64x64 warp tile: 4 x 8 tiles x 4 = 128 accumulators; 2 x (4 x 4 A + 8 x 4 B + 4 metadata) = 104
    # fragments + 2 sets x (2 pairs + 2 quads) x 8 words (8 k-steps x 4 scales = 32 bytes) = 64 scale registers
    assert "128 accumulator + 168 fragment registers" in str(e.value) and "mx.tile:14:" in str(e.value)


@pytest.mark.parametrize("form_args,kw", [
    (("m16n8k32", "f16", "f16", "f32", "f32"), dict(cta_m=16, cta_n=8, cta_k=256)),
    (("m16n8k64", "e4m3", "e4m3", "f32", "f32"), dict(cta_m=16, cta_n=16, cta_k=512)),   # sm_90a FP8: 2 mma tiles
], ids=["f16", "e4m3"])
def test_one_warp_copies_rows_longer_than_its_threads(form_args, kw):
    """8 k-steps a K block with one warp: a metadata row of the block is 8 x 128 B = 64 chunks, two cp.async
    rounds of 32 threads along the same row (the rounds used to step T/cpr = 0 rows and copied the first
    half twice), and 4-bit A / B rows step K/4 and K/2 bytes per round (tests above: mxf4 at cta K 1024)."""
    from compiler.emulator.sparse_host import run_sparse_gemm
    from compiler.isa.mma_sp.forms import find_form
    from compiler.ptx.sparse_gemm_kernel import SparseGemmConfig, emit_sparse_gemm

    form = find_form(*form_args)
    cfg = SparseGemmConfig(name="k", form=form, target="sm_90a", warps_m=1, warps_n=1, stages=2, **kw)
    assert cfg.ksteps == 8 and cfg.regions["E"].chunks_per_row == 2 * cfg.threads
    kern = emit_sparse_gemm(cfg)
    m, n, k = 2 * cfg.cta_m, 2 * cfg.cta_n, 2 * cfg.cta_k
    d, ref, _ = run_sparse_gemm(kern.text, "k", form, kern.grid(m, n, k)[0], cfg.threads, kern.smem_bytes, m, n, k,
                                "f32", True, land="lazy", seed=4)
    np.testing.assert_array_equal(d, ref)


def test_pipelined_block_scaled_with_fused_epilogue():
    """The fused epilogue runs on the block-scaled accumulators: D = relu(alpha * (A*SFA)(B*SFB) + C + bias)
    in bf16 within the epilogue's tolerance (compiler.emulate; its reference applies the scales)."""
    from compiler.driver import compile_source
    from compiler.emulator.api import emulate

    case = ("mxf4nvf4", "e2m1", "e2m1", "4X", "ue4m3", "cta=64x64x256 warps=2x2 stages=3", None)
    text = _pipelined_tile(case).replace("  D: f32 global;", "  D: bf16 global;").replace(
        "stages=3;\n", "stages=3;\n  epilogue alpha=param bias=col act=relu;\n")
    r = compile_source(text, "mx.tile")
    abi = r.to_json()["tiles"]["mx"]["kernel"]
    assert abi["kernel_kind"] == "sparse_gemm" and abi["epilogue"]["act"] == "relu" and "sfa" in abi["buffers"]
    em = emulate(r, "mx", shape=(128, 64, 512), seed=3)
    assert em.ok and em.d.dtype.name == "bfloat16" and np.count_nonzero(em.d.astype(np.float32)) > 0


def test_scale_register_count_matches_the_declarations():
    """SparseGemmConfig.scale_registers (which passes/limits.py mirrors for the register budget) is what
    the kernel declares: 32x32 warp tile, 4X, 4 k-steps: 2 sets x (1 pair + 1 quad) x 16 bytes / 4 = 16."""
    import re

    from compiler.isa.mma_sp.forms import find_form
    from compiler.ptx.sparse_gemm_kernel import SparseGemmConfig, emit_sparse_gemm

    form = find_form("m16n8k128", "e2m1", "e2m1", "f32", "f32", "mxf4nvf4", scale_vec="4X", scale_type="ue4m3")
    cfg = SparseGemmConfig(name="k", form=form, target="sm_120a", cta_m=64, cta_n=64, cta_k=512, warps_m=2,
                           warps_n=2, stages=2)
    text = emit_sparse_gemm(cfg).text
    declared = sum(int(n) for n in re.findall(r"%sf[ab]<(\d+)>", text))
    assert cfg.scale_registers == declared == 16


# (kind, A, B, vec, stype, target, edit, line:col, message): every illegal combination of a block-scaled
# tile is an error at the statement that makes it so (file:line:col, source line, caret, hint). Lines of
# _tile: 1 target, 6 A, 7 B, 8 C, 10 SFA, 11 SFB, 12 block_scale.
ILLEGAL = [
    ("mxf8f6f4", "e4m3", "e4m3", "2X", "ue8m0", "sm_120a", None, "12:19", "no block scale scale_vec::2X"),  # Table 36
    ("mxf8f6f4", "e4m3", "e4m3", "1X", "ue4m3", "sm_120a", None, "10:8", "scale_vec::1X with scale type ue4m3"),
    ("mxf4nvf4", "e2m1", "e2m1", "2X", "ue4m3", "sm_120a", None, "10:8", "scale_vec::2X with scale type ue4m3"),
    # Table 36 row of PTX 9.1, beyond the pinned ptxas (forms.BLOCK_SCALES)
    ("mxf4nvf4", "e2m1", "e2m1", "4X", "ue8m0", "sm_120a", None, "12:19", "needs PTX ISA 9.1"),
    ("mxf4", "e2m1", "e2m1", "2X", "ue8m0", "sm_120f", None, "1:8", "not available on sm_120f"),   # sm_120a only
    ("mxf4", "e2m1", "e2m1", "2X", "ue8m0", "sm_100a", None, "1:8", "not available on sm_100a"),
    ("mxf4", "e4m3", "e4m3", "2X", "ue8m0", "sm_120a", None, "6:6", "A type e4m3 is not legal"),
    ("mxf8f6f4", "e4m3", "s8", "1X", "ue8m0", "sm_120a", None, "7:6", "B type s8 cannot be combined"),
    ("mxf8f6f4", "e4m3", "e4m3", "1X", "ue8m0", "sm_120a", ("f32 global;\n  D: f32", "f16 global;\n  D: f16"),
     "8:6", "C type f16 is not legal"),                                       # block-scaled kinds: f32 C/D only
    ("mxf4nvf4", "e2m1", "e2m1", "4X", "ue4m3", "sm_120a", ("SFB: ue4m3", "SFB: ue8m0"), "11:8",
     "SFA and SFB must have the same scale type"),                                       # one .stype
]


@pytest.mark.parametrize("kind,a,b,vec,stype,target,edit,where,message", ILLEGAL,
                         ids=[f"{c[0]}-{c[1]}x{c[2]}-{c[3]}-{c[4]}-{c[5]}-{c[7]}" for c in ILLEGAL])
def test_illegal_combinations_are_located_errors(kind, a, b, vec, stype, target, edit, where, message):
    from compiler.diagnostics import CompileError
    from compiler.driver import compile_source

    text = _tile(kind, a, b, vec, stype, target=target)
    if edit:
        text = text.replace(*edit)
    with pytest.raises(CompileError) as e:
        compile_source(text, "mx.tile")
    out = str(e.value)
    assert out.startswith(f"mx.tile:{where}: error: ") and message in out, out
    assert "^" in out and "hint:" in out, out


@pytest.mark.parametrize("case", PIPELINED, ids=lambda c: f"{c[0]}-{c[1]}x{c[2]}-{c[3]}-{c[5].split()[0]}")
def test_pipelined_kernel_under_adversarial_scheduling(case):
    """compiler.emulate's adversarial policy (every cp.async completes as late as its wait allows, warps
    interleave a few instructions at a time in a seeded order): D still equals the scaled reference."""
    import compiler
    from compiler.driver import compile_source

    r = compile_source(_pipelined_tile(case), "mx.tile")
    em = compiler.emulate(r, "mx", shape=case[6], seed=5, mode="adversarial")
    assert em.kernel == "sparse_gemm" and em.ok and em.stats["mma"] > 0
