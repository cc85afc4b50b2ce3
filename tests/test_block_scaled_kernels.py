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
