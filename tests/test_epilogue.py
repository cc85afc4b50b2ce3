"""The fused epilogue `D = act(alpha*(A*B) + beta*C + bias)` (README "DSL tour"): the `epilogue` statement,
its IR (tilec.epilogue, tilec.epilogue_plan), the `epilogue-lowering` pass
(compiler/passes/epilogue_lowering.py) and its lowering into the sparse wgmma kernel
(compiler/ptx/sparse_wgmma_kernel.py) and the pipelined mma.sp kernel (compiler/ptx/sparse_gemm_kernel.py),
both through compiler/ptx/epilogue.py.

Factors: act (none, relu, silu, gelu_tanh, gelu_erf) x D type (f32, f16, bf16, s8, e4m3, s32) x C (absent;
present with alpha = beta = 1, so preloaded into the accumulators; beta=0.25; beta=param) x bias (none, row,
col) x alpha (none, 0.5, param) x kernel (wgmma, sync = the pipelined mma.sp GEMM; the one-instruction-tile
kernel refuses an epilogue with a located diagnostic, tests/lit/diagnostics/epilogue_warp_kernel.tile) x A
type (f16: f32 accumulators; s8: s32 accumulators; e4m3) x output scale (none, 0.375, param: s8 and e4m3 D)
x bias type (f32, f16, bf16). Not every combination is legal (`legal`, the rules of
compiler/isa/epilogue_outputs.py restated by hand: s8 inputs give s32 accumulators, whose D is s32 or s8 and
whose C only enters the accumulators; scale= only on s8 / e4m3; bias_type= only with a bias; e4m3 inputs on
the wgmma kernel only, as ptxas emulates fp8 mma.sp on sm_90a with spills). A pairwise covering set of the
legal cases (every pair of values of every two factors that some legal case has, in some case) is assembled
by ptxas and run on the CPU emulator (compiler/emulator/warp.py, whose f32 epilogue instructions model the
.approx functions by the exact function rounded to f32, and the conversions into s8 / e4m3 from the ISA's
text) against the numpy reference (compiler/emulator/sparse_host.py epilogue_reference, within
epilogue_atol); a larger product (FULL) is assembled under `slow`.
"""
from __future__ import annotations

import itertools
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from compiler import CompileError, compile_source
from compiler.emulator.sparse_host import run_sparse_gemm, run_sparse_wgmma
from compiler.passes.epilogue_lowering import f32_imm
from compiler.ptx.emission import kernel_config
from compiler.ptx.sparse_gemm_kernel import emit_sparse_gemm
from compiler.ptx.sparse_wgmma_kernel import SparseWgmmaConfig, emit_sparse_wgmma

FACTORS = {
    "act": ("none", "relu", "silu", "gelu_tanh", "gelu_erf"),
    "out": ("f32", "f16", "bf16", "s8", "e4m3", "s32"),
    "c": ("none", "C", "beta", "beta_param"),
    "bias": ("none", "row", "col"),
    "alpha": ("none", "0.5", "param"),
    "kernel": ("wgmma", "sync"),
    "a": ("f16", "s8", "e4m3"),
    "scale": ("none", "lit", "param"),
    "bias_type": ("f32", "f16", "bf16"),
}
DEFAULTS = {"a": "f16", "scale": "none", "bias_type": "f32", "kernel": "wgmma"}
# scale=lit: a literal that keeps the test data's D inside s8's range (float inputs: |A*B| of a few tens; s8
# inputs: of some 10^5), as epilogue_inputs' default for scale=param does (compiler/emulator/sparse_host.py)
SCALE_LITERAL = {"f16": "0.375", "e4m3": "0.375", "s8": "0.0009765625"}


def legal(case: dict) -> bool:
    """The combinations the compiler lowers (the others are diagnostics: BAD below)."""
    c = {**DEFAULTS, **case}
    if c["a"] == "s8":                     # s32 accumulators
        if c["out"] not in ("s32", "s8") or c["c"] in ("beta", "beta_param") or (c["c"] == "C" and c["alpha"] != "none"):
            return False
        if c["out"] == "s32" and (c["act"], c["bias"], c["alpha"], c["scale"]) != ("none", "none", "none", "none"):
            return False
    elif c["out"] == "s32":
        return False
    if c["a"] == "e4m3" and c["kernel"] != "wgmma":
        return False
    if c["scale"] != "none" and c["out"] not in ("s8", "e4m3"):
        return False
    return c["bias_type"] == "f32" or c["bias"] != "none"
# the schedules of examples/sparse_wgmma_f16.tile and examples/sparse_gemm_f16.tile (the benchmark tiles);
# small ones for the emulator: staged (the f32 tile fits the drained ring) and direct (it does not)
SCHEDULES = {
    ("wgmma", "bench"): "cta=128x256x64 warps=8x1 stages=4 mma=wgmma",
    ("sync", "bench"): "cta=128x256x64 warps=2x4 stages=3",
    ("wgmma", "staged"): "cta=128x64x64 warps=8x1 stages=2 mma=wgmma",
    ("sync", "staged"): "cta=64x64x64 warps=2x2 stages=4",
    ("wgmma", "direct"): "cta=128x64x32 warps=8x1 stages=2 mma=wgmma",
    ("sync", "direct"): "cta=128x64x32 warps=2x2 stages=2",
}


def pairs(case: dict, names) -> set:
    return {(a, case[a], b, case[b]) for a, b in itertools.combinations(names, 2)}


def pairwise(factors: dict, keep=legal) -> list[dict]:
    """A covering set: greedily the case of the (kept) product, in its order, that covers the most pairs not
    yet covered, until every pair of values of every two factors that some kept case has is covered. Pairs
    are bits of one integer per case (the product has some 12 000 legal cases)."""
    names = list(factors)
    product = [c for c in (dict(zip(names, v)) for v in itertools.product(*factors.values())) if keep(c)]
    bit: dict = {}
    masks = []
    for c in product:
        m = 0
        for p in pairs(c, names):
            m |= 1 << bit.setdefault(p, len(bit))
        masks.append(m)
    todo = (1 << len(bit)) - 1
    chosen = []
    while todo:
        best = max(range(len(product)), key=lambda i: (masks[i] & todo).bit_count())
        chosen.append(product[best])
        todo &= ~masks[best]
    return chosen


PAIRWISE = pairwise(FACTORS)
# the slow full check: every legal case with f16 inputs, an f32 bias and a scale (if any) that is a parameter
FULL = [c for c in (dict(zip(FACTORS, v)) for v in itertools.product(*FACTORS.values()))
        if legal(c) and c["a"] == "f16" and c["bias_type"] == "f32" and c["scale"] != "lit"]


def case_id(case: dict) -> str:
    return "-".join(f"{k}={v}" for k, v in case.items())


def tile_text(case: dict, size: str = "bench", name: str = "t") -> str:
    case = {**DEFAULTS, **case}
    words = []
    if case["alpha"] != "none":
        words.append(f"alpha={case['alpha']}")
    if case["c"] == "beta":
        words.append("beta=0.25")
    elif case["c"] == "beta_param":
        words.append("beta=param")
    if case["bias"] != "none":
        words.append(f"bias={case['bias']}")
        if case["bias_type"] != "f32":
            words.append(f"bias_type={case['bias_type']}")
    words.append(f"act={case['act']}")
    if case["scale"] != "none":
        words.append(f"scale={SCALE_LITERAL[case['a']] if case['scale'] == 'lit' else case['scale']}")
    acc = "s32" if case["a"] == "s8" else "f32"
    c = f"  C: {acc} global;\n" if case["c"] != "none" else ""
    k = 32 if case["a"] == "f16" else 64          # 8-bit inputs: m16n8k64 / .m64nNk64
    schedule = SCHEDULES[case["kernel"], size]
    if k == 64:                                   # twice the elements in the same bytes per stage
        schedule = re.sub(r"cta=(\d+)x(\d+)x(\d+)", lambda m: f"cta={m[1]}x{m[2]}x{2 * int(m[3])}", schedule)
    return (f"target sm_90a;\ntile {name} {{\n  engine mma.sp;\n  shape M=16 N=8 K={k};\n  A: {case['a']} global;\n"
            f"  B: {case['a']} global;\n{c}  D: {case['out']} global;\n  sparsity 2:4 metadata=runtime selector=0;\n"
            f"  schedule {schedule};\n  epilogue {' '.join(words)};\n}}\n")


def test_pairwise_set_covers_every_pair():
    names = list(FACTORS)
    product = [c for c in (dict(zip(names, v)) for v in itertools.product(*FACTORS.values())) if legal(c)]
    assert all(legal(c) for c in PAIRWISE)
    for a, b in itertools.combinations(names, 2):
        seen = {(c[a], c[b]) for c in PAIRWISE}
        assert seen == {(c[a], c[b]) for c in product}, (a, b)
    # some pairs are illegal everywhere (s32 D after silu, a scale on bf16): the covering set has none
    assert ("silu", "s32") not in {(c["act"], c["out"]) for c in PAIRWISE}
    assert len(PAIRWISE) < len(product) // 200      # 12 184 legal cases in the product


# --------------------------------------------------------------------------------------------------
# DSL and IR
# --------------------------------------------------------------------------------------------------

def test_statement_round_trips_through_the_printer():
    from compiler.frontend.build import parse_spec
    from compiler.spec_printer import print_file

    text = tile_text(dict(act="gelu_erf", out="bf16", c="beta_param", bias="row", alpha="0.5"))
    spec = parse_spec(text)
    e = spec.tiles[0].epilogue
    assert (e.alpha, e.beta, e.bias, e.act, e.acc) == ("0.5", "param", "row", "gelu_erf", None)
    assert "epilogue alpha=0.5 beta=param bias=row act=gelu_erf;" in print_file(spec)
    assert parse_spec(print_file(spec)).tiles[0].epilogue == e


def plan_of(text: str):
    r = compile_source(text, passes=["verify", "epilogue-lowering"])
    return r.module.ops("tilec.tile")[0].op("tilec.epilogue_plan").attrs


def test_where_c_enters():
    base = dict(act="none", out="f32", bias="none", alpha="none")
    # alpha = beta = 1: C is loaded into the accumulators before the first MMA (scale-d adds it)
    p = plan_of(tile_text(dict(base, c="C")))
    assert p["c"] == "accumulate" and p["steps"] == [] and p["params"] == []
    # alpha scales A*B only: C is read in the epilogue
    p = plan_of(tile_text(dict(base, c="C", alpha="0.5")))
    # 0.5 = 2^-1: sign 0, biased exponent 126 = 0x7E, mantissa 0 -> 0x7E << 23 = 0x3F000000
    assert p["c"] == "epilogue" and p["alpha"] == "0f3F000000"
    assert p["steps"] == [{"step": "scale", "ptx": ["mul.f32 {x}, {x}, 0f3F000000"]},
                          {"step": "add_c", "ptx": ["add.f32 {x}, {x}, {c}"]}]
    # beta = 0.25 = 2^-2: exponent 125 = 0x7D -> 0x7D << 23 = 0x3E800000; fma: beta*c + x
    p = plan_of(tile_text(dict(base, c="beta")))
    assert p["steps"] == [{"step": "add_c", "ptx": ["fma.rn.f32 {x}, {c}, 0f3E800000, {x}"]}]
    # beta=0: C is not read (the BLAS convention); the kernel takes no c
    p = plan_of(tile_text(dict(base, c="beta")).replace("beta=0.25", "beta=0"))
    assert p["c"] == "none" and p["steps"] == []
    # parameters: the bias pointer first, then the f32 scalars
    p = plan_of(tile_text(dict(base, c="beta_param", alpha="param", bias="col")))
    assert p["params"] == ["bias", "alpha", "beta"]


def test_f32_immediates():
    # IEEE binary32 (PTX ISA 5.2.4 0f literals): 1 = 0x7F << 23; -log2(e) = -1.4427 = -1.01110001... x 2^0
    assert f32_imm(1.0) == "0f3F800000" and f32_imm(-1.4426950408889634) == "0fBFB8AA3B"


def test_ir_prints_and_parses_the_plan():
    from compiler.ir import print_op
    from compiler.ir_parser import parse_ir

    r = compile_source(tile_text(dict(act="silu", out="bf16", c="none", bias="col", alpha="param")),
                       passes=["verify", "epilogue-lowering"])
    text = print_op(r.module)
    assert 'tilec.epilogue {alpha = "param", bias = "col", act = "silu"}' in text
    assert print_op(parse_ir(text)) == text


def test_kernel_abi_and_parameters():
    r = compile_source(tile_text(dict(act="relu", out="f16", c="beta_param", bias="row", alpha="param")))
    abi = r.to_json()["tiles"]["t"]["kernel"]
    assert [(p["name"], p["type"]) for p in abi["params"]] == [
        ("tensor_maps", "bytes"), ("c", "u64"), ("d", "u64"), ("bias", "u64"), ("alpha", "f32"), ("beta", "f32"),
        ("M", "u32"), ("N", "u32"), ("K", "u32"), ("ldc", "u32"), ("ldd", "u32"),       # row strides,
        ("batch_stride_c", "u64"), ("batch_stride_d", "u64")]                              # batch strides last
    assert abi["buffers"]["bias"]["shape"] == ["M"] and abi["buffers"]["d"]["element"] == "f16"
    assert abi["epilogue"] == {"formula": "D = act(alpha*(A*B) + beta*C + bias)", "c": "epilogue", "alpha": "param",
                               "beta": "param", "bias": "row", "act": "relu", "acc": "f32", "out": "f16"}
    kern = emit_sparse_wgmma(kernel_config(r.tiles["t"], r.module))      # the kernel's own header comment
    assert "// tilec sparse wgmma GEMM t: D = relu(alpha*(A*B) + beta*C + bias[row])" in kern.text


def test_tiles_without_an_epilogue_are_unchanged():
    # C optional for wgmma tiles: D = A*B in the accumulator type
    text = tile_text(dict(act="none", out="f32", c="none", bias="none", alpha="none"))
    r = compile_source(text.replace("  epilogue act=none;\n", ""))
    abi = r.to_json()["tiles"]["t"]["kernel"]
    assert "c" not in {p["name"] for p in abi["params"]} and "epilogue" not in abi


# --------------------------------------------------------------------------------------------------
# ptxas
# --------------------------------------------------------------------------------------------------

def _assemble(ptxas, text: str, tmp_path: Path) -> str:
    src = tmp_path / "k.ptx"
    src.write_text(text)
    res = subprocess.run([ptxas, "-arch=sm_90a", "-v", str(src), "-o", str(tmp_path / "k.cubin")],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return res.stderr


def _check_assembles(ptxas, tmp_path, case):
    r = compile_source(tile_text(case))
    log = _assemble(ptxas, r.ptx, tmp_path)
    if staged(kernel_config(r.tiles["t"], r.module)):
        # the epilogue runs in the copy-out loop of the staged accumulators: no spill at the benchmark tile.
        # (The pipelined kernel's 128 x 256 f32 tile does not fit its 3-stage ring: its epilogue runs on
        # the fragments with every accumulator live, where ptxas may spill a little: not asserted.)
        assert "0 bytes spill stores, 0 bytes spill loads" in log, log
    if case["act"] in ("silu", "gelu_erf"):
        assert "ex2.approx.ftz.f32" in r.ptx
    if case["act"] == "gelu_tanh":
        assert "tanh.approx.f32" in r.ptx


@pytest.mark.parametrize("case", PAIRWISE, ids=case_id)
def test_pairwise_cases_assemble(ptxas, tmp_path, case):
    _check_assembles(ptxas, tmp_path, case)


@pytest.mark.slow
@pytest.mark.parametrize("case", FULL, ids=case_id)
def test_every_case_assembles(ptxas, tmp_path, case):
    _check_assembles(ptxas, tmp_path, case)


# --------------------------------------------------------------------------------------------------
# numbers: the emulator against numpy
# --------------------------------------------------------------------------------------------------

def staged(cfg) -> bool:
    return cfg.staged_d if isinstance(cfg, SparseWgmmaConfig) else cfg.d_offset is not None


def emulate(text: str, m: int, n: int, k: int, seed: int = 1, transform=None):
    res = compile_source(text)
    cfg = kernel_config(res.tiles["t"], res.module)
    if isinstance(cfg, SparseWgmmaConfig):
        kern = emit_sparse_wgmma(cfg)
        text = transform(kern.text) if transform is not None else kern.text
        d, ref, stats = run_sparse_wgmma(kern, cfg.name, cfg.form, cfg.cluster_m, cfg.threads, cfg.smem_bytes, m, n,
                                         k, cfg.out_type, cfg.accumulate_c, seed=seed, text=text)
        return cfg, d, ref, stats
    kern = emit_sparse_gemm(cfg)
    text = transform(kern.text) if transform is not None else kern.text
    grid = (m // cfg.cta_m) * (n // cfg.cta_n)
    d, ref, stats = run_sparse_gemm(text, cfg.name, cfg.form, grid, cfg.threads, cfg.smem_bytes, m, n, k, cfg.out_type,
                                    cfg.accumulate_c, seed=seed, epilogue=kern.abi["epilogue"])
    return cfg, d, ref, stats


def outside(d, ref, atol) -> int:
    diff = np.abs(d.astype(np.float64) - ref.astype(np.float64))
    return int(np.count_nonzero(~(diff <= atol)))


@pytest.mark.parametrize("tiles", [1, pytest.param(2, marks=pytest.mark.slow)])
@pytest.mark.parametrize("case", PAIRWISE, ids=case_id)
def test_pairwise_cases_compute_the_epilogue(case, tiles):
    if "bf16" in (case["out"], case.get("bias_type")) or case["out"] == "e4m3":
        pytest.importorskip("ml_dtypes")
    # a CTA tile whose f32 accumulators fit the drained ring: the staged copy-out epilogue. One CTA in the
    # default run (the arithmetic per element); tiles x tiles CTAs under slow (C and bias at other tile
    # origins: also test_numeric_check_catches_broken_epilogues, tests/test_sparse_gemm_edges.py)
    cta_m, cta_n = (128, 64) if case["kernel"] == "wgmma" else (64, 64)
    cfg, d, ref, stats = emulate(tile_text(case, "staged"), tiles * cta_m, tiles * cta_n, 128)
    assert staged(cfg)
    assert outside(d, ref, stats["atol"]) == 0


DIRECT = [c for c in PAIRWISE if c["kernel"] == "wgmma"][:3] + [c for c in PAIRWISE if c["kernel"] == "sync"][:3]


@pytest.mark.parametrize("case", DIRECT, ids=case_id)
def test_direct_stores_compute_the_epilogue(case):
    if "bf16" in (case["out"], case.get("bias_type")) or case["out"] == "e4m3":
        pytest.importorskip("ml_dtypes")
    # 128 x 64 x 32 with 2 stages: the f32 tile (128 rows of 272 or 288 B) does not fit the 18 KB ring;
    # fragment stores
    cfg, d, ref, stats = emulate(tile_text(case, "direct"), 128, 128, 96 if case["a"] == "f16" else 192)
    assert not staged(cfg)
    assert outside(d, ref, stats["atol"]) == 0


# Mutations the numeric check must catch: silu's log2(e) negated (sigmoid(-x)); the erf polynomial's a1
# off by 1 %; C added twice; the bias of column n/2 for column n; relu kept negative values
MUTATIONS = {
    "silu_sign": ("silu", lambda t: t.replace("0fBFB8AA3B", "0f3FB8AA3B")),
    "erf_a1": ("gelu_erf", lambda t: t.replace(f32_imm(0.254829592), f32_imm(0.254829592 * 1.01))),
    "c_twice": ("none", lambda t: t.replace("fma.rn.f32 %ev0, %ce0, %beta, %ev0;",
                                             "fma.rn.f32 %ev0, %ce0, %beta, %ev0;\n    add.f32 %ev0, %ev0, %ce0;")),
    "bias_column": ("none", lambda t: t.replace("mul.wide.u32 %gq, %pn, 4;", "mul.wide.u32 %gq, %pn, 2;")),
    "relu_min": ("relu", lambda t: t.replace("max.f32 %ev", "min.f32 %ev")),
}


@pytest.mark.parametrize("kernel", FACTORS["kernel"])
@pytest.mark.parametrize("name", MUTATIONS)
def test_numeric_check_catches_broken_epilogues(name, kernel):
    act, mutate = MUTATIONS[name]
    case = dict(act=act, out="f32", c="beta_param", bias="col", alpha="0.5", kernel=kernel)
    text = tile_text(case, "staged")
    _, d, ref, stats = emulate(text, 128, 128, 128)
    assert outside(d, ref, stats["atol"]) == 0
    _, d, ref, stats = emulate(text, 128, 128, 128, transform=mutate)
    assert outside(d, ref, stats["atol"]) > 0


# --------------------------------------------------------------------------------------------------
# diagnostics (also as lit tests: tests/lit/diagnostics/epilogue_*.tile)
# --------------------------------------------------------------------------------------------------

BAD = [
    ("beta without C", dict(act="none", out="f32", c="none", bias="none", alpha="none"),
     ("epilogue act=none;", "epilogue beta=0.5;"), "beta scales C, and this tile has no operand C"),
    ("e5m2 out", dict(act="relu", out="f32", c="none", bias="none", alpha="none"),
     ("D: f32 global;", "D: e5m2 global;"), "D type e5m2 is not an output of the epilogue on f32 accumulators"),
    ("f16 out of s32", dict(act="none", out="s8", c="none", bias="none", alpha="none", a="s8"),
     ("D: s8 global;", "D: f16 global;"), "D type f16 is not an output of the epilogue on s32 accumulators"),
    ("scale on bf16", dict(act="none", out="bf16", c="none", bias="none", alpha="none"),
     ("act=none;", "act=none scale=2;"), "scale= is the quantisation scale of a narrow D (s8, e4m3); D is bf16"),
    ("bias_type without bias", dict(act="none", out="f32", c="none", bias="none", alpha="none"),
     ("act=none;", "act=none bias_type=f16;"), "bias_type= without a bias"),
    ("unknown bias_type", dict(act="none", out="f32", c="none", bias="col", alpha="none"),
     ("bias=col", "bias=col bias_type=f64"), "unknown epilogue bias_type 'f64'"),
    ("beta on s32 C", dict(act="none", out="s8", c="C", bias="none", alpha="none", a="s8"),
     ("act=none;", "act=none beta=0.5;"), "C of s32 accumulators enters the accumulators before the first MMA"),
    ("alpha on s32 out", dict(act="none", out="s32", c="none", bias="none", alpha="none", a="s8"),
     ("act=none;", "alpha=0.5;"), "alpha= on s32 output"),
    ("e4m3 out before sm_89", dict(act="none", out="e4m3", c="none", bias="none", alpha="none", kernel="sync"),
     ("target sm_90a;", "target sm_86;"), "the conversion into e4m3 needs sm_89 or newer, not sm_86"),
    ("acc s32 for f16", dict(act="none", out="f32", c="none", bias="none", alpha="none"),
     ("act=none;", "acc=s32;"), "acc=s32: f16 products accumulate in f32"),
    ("C type", dict(act="none", out="f32", c="C", bias="none", alpha="none"),
     ("C: f32 global;", "C: f16 global;"), "C is read in the accumulator type f32, not f16"),
    ("one-instruction-tile kernel", dict(act="relu", out="f32", c="C", bias="none", alpha="none"),
     ("warps=8x1 stages=4 mma=wgmma", "warps=2x4 stages=1"), "this tile gets the one-instruction-tile kernel"),
    ("no schedule", dict(act="relu", out="f32", c="C", bias="none", alpha="none"),
     ("  schedule cta=128x256x64 warps=8x1 stages=4 mma=wgmma;\n", ""), "the whole-GEMM kernels of a 'schedule'"),
    ("exponent literal", dict(act="none", out="f32", c="none", bias="none", alpha="none"),
     ("act=none;", "alpha=1e40;"), "alpha must be a decimal number"),
    ("alpha beyond f32", dict(act="none", out="f32", c="none", bias="none", alpha="none"),
     ("act=none;", "alpha=" + "9" * 40 + ";"), "does not fit f32"),
    ("unknown act", dict(act="none", out="f32", c="none", bias="none", alpha="none"),
     ("act=none;", "act=gelu;"), "unknown epilogue act 'gelu'"),
]


@pytest.mark.parametrize("what,case,edit,message", BAD, ids=[b[0] for b in BAD])
def test_illegal_combinations_are_located(what, case, edit, message):
    text = tile_text(case).replace(*edit)
    with pytest.raises(CompileError) as e:
        compile_source(text, filename="bad.tile")
    out = str(e.value)
    assert message in out, out
    assert re.search(r"bad\.tile:\d+:\d+: error:", out), out


TCGEN05_BAD = [
    # the warp-specialised tcgen05 kernel's epilogue stores f32 / f16 / bf16 (passes/epilogue_lowering.py
    # TCGEN05_OUTPUTS) and reads an f32 bias: the table's other legal combinations are refused there
    ("D: f32 global;", "D: e4m3 global;", "epilogue act=relu scale=0.5;", "D.dtype",
     "D type e4m3 is not an output of the f32 epilogue of the warp-specialised tcgen05 kernel"),
    ("D: f32 global;", "D: bf16 global;", "epilogue bias=col bias_type=f16;", "epilogue.bias_type",
     "bias_type=f16: the tcgen05 epilogue reads an f32 bias"),
]


@pytest.mark.parametrize("old,new,epi,field,message", TCGEN05_BAD, ids=["e4m3", "bias_type"])
def test_tcgen05_epilogue_refuses_what_it_does_not_lower(old, new, epi, field, message):
    text = ("target sm_100a;\ntile t {\n  engine tcgen05;\n  shape M=128 N=128 K=16;\n  A: f16 smem;\n"
            f"  B: f16 smem;\n  {new}\n  schedule cta=128x128x64 stages=3;\n  {epi}\n}}\n")
    with pytest.raises(CompileError) as e:
        compile_source(text, filename="bad.tile")
    out = str(e.value)
    assert message in out, out
    line, col = map(int, re.search(r"bad\.tile:(\d+):(\d+): error:", out).groups())
    # the caret under the field's value: D's type, or bias_type='s
    assert text.splitlines()[line - 1][:col - 1].endswith({"D.dtype": "D: ", "epilogue.bias_type": "bias_type="}[field])


# --------------------------------------------------------------------------------------------------
# 1-byte outputs (s8, e4m3): the example, edges and batches, the conversions' corner values
# --------------------------------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("shape,batch", [pytest.param((200, 300, 200), 1, marks=pytest.mark.slow),
                                         pytest.param((70, 100, 130), 2, marks=pytest.mark.slow), ((70, 40, 130), 1)])
def test_s8_example_on_the_emulator(shape, batch):
    # examples/sparse_wgmma_s8_s8.tile (scale=param): partial tiles byte by byte; a batch of two, whose D
    # bytes between the batches and right of N (the guard band of run_sparse_wgmma) must stay untouched
    import compiler

    e = compiler.emulate(compiler.compile_file(ROOT / "examples" / "sparse_wgmma_s8_s8.tile"), shape=shape,
                         batch=batch)
    assert e.d.dtype == np.int8 and e.d.shape == ((batch,) if batch > 1 else ()) + shape[:2]
    assert e.mismatches == 0
    # the reference's scale (2^-10 for s32 accumulators) leaves D inside s8's range but not all of it zero
    assert 0 < np.count_nonzero(e.d) and np.abs(e.d.astype(int)).max() > 32


def test_conversions_saturate_and_round_to_even():
    # the emulator's model of the conversions (compiler/emulator/warp.py, from PTX 9.7.9.21 / 9.7.9.22):
    # rni rounds ties to even (2.5 -> 2, -3.5 -> -4), the pack saturates (300 -> 127, -129 -> -128) and puts
    # a above b above c's low bits; e4m3 .satfinite clamps 1000 to 448 (0x7E: exponent 15, mantissa 6/8:
    # 2^8 * 1.75 = 448) and rounds 3.125, halfway between 3 = 1.5 * 2 (0x44: exponent 8, mantissa 4/8) and
    # 3.25 (0x45), to the even mantissa: 0x44
    from compiler.emulator.warp import _CONVERSIONS

    f = lambda *v: np.array(v, np.float32).view(np.uint32).astype(np.uint64)        # noqa: E731
    rni = _CONVERSIONS["cvt.rni.s32.f32"](f(2.5, -3.5, 1e10, np.nan))
    assert list(rni.astype(np.uint32).view(np.int32)) == [2, -4, 2**31 - 1, 0]
    s32 = lambda *v: np.array(v, np.int64).astype(np.uint64) & np.uint64(0xFFFFFFFF)  # noqa: E731
    packed = _CONVERSIONS["cvt.pack.sat.s8.s32.b32"](s32(300), s32(-129), s32(0x1234))
    assert int(packed[0]) == 0x1234 << 16 | 0x7F << 8 | 0x80
    e4 = _CONVERSIONS["cvt.rn.satfinite.e4m3x2.f32"](f(1000.0), f(3.125))
    assert int(e4[0]) == 0x7E << 8 | 0x44


def test_one_byte_stores_are_vectorised(tmp_path, ptxas):
    # a 1-byte D leaves in one 16-byte store per 16 elements (N a multiple of 16), else 8-byte ones; the
    # direct path packs a fragment pair into one 2-byte store; ptxas takes all three
    for sched, store in (("cta=128x64x128 warps=8x1 stages=2 mma=wgmma", "st.global.v4.b32"),
                         ("cta=128x24x128 warps=8x1 stages=2 mma=wgmma", "st.global.v2.b32"),
                         ("cta=128x256x64 warps=8x1 stages=2 mma=wgmma", "st.global.b16")):
        text = tile_text(dict(act="relu", out="s8", c="none", bias="col", alpha="none", a="s8", scale="lit"))
        r = compile_source(re.sub(r"schedule [^;]*;", f"schedule {sched};", text))
        assert store in r.ptx, sched
        _assemble(ptxas, r.ptx, tmp_path)


@pytest.mark.parametrize("kernel", ["wgmma", "sync"])
def test_the_run_check_of_an_exact_output_compares_exactly(kernel):
    """`tilec run --check` (compiler.run.sparse_host) on an s8 -> s32 epilogue tile: s32's tolerance is 0, so
    the per-element bound must be zeros (an exact compare), not atol / 0 = NaN, which failed every element of a
    right D on the H100 (test_pairwise_epilogues_on_gpu, the s32 cases)."""
    import numpy as np

    from compiler import compile_source
    from compiler.run import mismatches, sparse_host

    case = {"act": "none", "out": "s32", "c": "C", "bias": "none", "alpha": "none", "kernel": kernel, "a": "s8",
            "scale": "none", "bias_type": "f32"}
    result = compile_source(tile_text(case))
    abi = result.to_json()["tiles"]["t"]["kernel"]
    host = sparse_host(abi, result, "t", 64, 64, 128, 0)
    assert np.isfinite(host.scale).all() and not np.asarray(host.scale).any()
    assert mismatches(host.ref, host.ref, host.scale, "s32")[0] == 0
    off = np.asarray(host.ref).copy()
    off[0, 0] += 1
    assert mismatches(off, host.ref, host.scale, "s32")[0] == 1
