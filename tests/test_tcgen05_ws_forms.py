"""The `.ws` form (tcgen05.mma.ws, PTX 9.7.16.10.9.3) in the persistent warp-specialised tcgen05 kernel
(compiler/ptx/tcgen05_ws_kernel.py) of scheduled tiles.

No Blackwell GPU here: ptxas assembles each kernel for every target its form claims, and the CPU emulator
(compiler/emulator/tcgen05.py: TMA, mbarrier phases, tcgen05.mma.ws through the folded data-path layouts
E / G, PTX 9.7.16.10.5) runs it against numpy under the adversarial scheduler. One small case per variant in
the default run; the others are `slow`.
"""
from __future__ import annotations

import pytest

import compiler
from compiler.diagnostics import CompileError
from compiler.ptxas import assemble

EXAMPLE = "examples/tcgen05_gemm_ws_f16.tile"

WS = """target {target};
tile ws {{
  engine tcgen05 ws{engine};
  shape M={m} N={n} K={k};
  A: {a} smem;
  B: {a} smem;
  D: {d} tmem;{extra}
  schedule cta={m}x{n}x{cta_k} stages=2;
}}
"""


def ws_tile(m=64, n=128, k=16, a="f16", d="f32", cta_k=64, target="sm_100a", engine="", extra=""):
    return WS.format(m=m, n=n, k=k, a=a, d=d, cta_k=cta_k, target=target, engine=engine, extra=extra)


@pytest.fixture(scope="module")
def example():
    return compiler.compile_file(EXAMPLE)


def test_example_plan(example):
    """M = 64: layout E folds the 64 rows into both lane halves, N / 2 = 64 columns per accumulator; two
    accumulators = 128 TMEM columns."""
    abi = example.to_json()["tiles"]["tcgen05_gemm_ws_f16"]["kernel"]
    assert abi["kernel_kind"] == "tcgen05_ws" and abi["tile_m"] == 64
    assert abi["plan"]["acc_columns"] == 64 and abi["plan"]["accumulators"] == 2 and abi["tmem_columns"] == 128
    # A's box: 64 f16 along K (one 128-byte swizzle atom) x the tile's 64 rows
    assert [(t["operand"], t["box"]) for t in abi["tensor_maps"]][:2] == [("A", [64, 64, 1]), ("B", [64, 128, 1])]
    res = example.tiles["tcgen05_gemm_ws_f16"].op("tilec.resources").attrs
    assert res["ws"].startswith("tcgen05.mma.ws: data-path layout E (64 rows x 2 lane group(s), 64 TMEM columns")
    assert example.ptx.count("tcgen05.mma.ws.cta_group::1.kind::f16 ") == 4
    assert "collector" not in example.ptx


def test_example_ptxas(example, ptxas):
    targets = sorted(example.tiles["tcgen05_gemm_ws_f16"].facts["form"].requirements().targets)
    assert "sm_100a" in targets
    for target in targets:
        r = example if target == "sm_100a" else compiler.compile_source(
            open(EXAMPLE).read().replace("target sm_100a", f"target {target}"))
        res = assemble(r.ptx, target, ptxas)
        assert res.ok, f"{target}: {res.output}"


def test_example_emulated(example):
    """128 x 128 x 128: two 64-row tiles, 2 K blocks each through the 4-slot ring; TMA, MMAs and commits
    complete late (adversarial)."""
    em = compiler.emulate(example, shape=(128, 128, 128), mode="adversarial", seed=1)
    assert em.ok, f"{em.mismatches} elements differ"


@pytest.mark.slow
@pytest.mark.parametrize("m, n, k, a, d, cta_k, extra", [
    (128, 128, 16, "f16", "f32", 64, ""),          # layout D: one lane group
    (32, 128, 16, "f16", "f32", 64, ""),           # layout G: 4 lane groups of 32 columns
    (64, 256, 16, "bf16", "f32", 64, ""),
    (64, 128, 16, "f16", "f32", 64, "\n  zero_columns cols=[0..7];"),
    (64, 64, 8, "tf32", "f32", 32, ""),
    (64, 128, 32, "e4m3", "f32", 128, ""),
    (32, 256, 32, "s8", "s32", 128, ""),
    (64, 128, 16, "f16", "f16", 64, ""),           # a 16-bit D
])
@pytest.mark.parametrize("mode, seed", [("adversarial", 2), ("random", 3)])
def test_emulated_variants(m, n, k, a, d, cta_k, extra, mode, seed, ptxas):
    r = compiler.compile_source(ws_tile(m=m, n=n, k=k, a=a, d=d, cta_k=cta_k, extra=extra))
    res = assemble(r.ptx, "sm_100a", ptxas)
    assert res.ok, res.output
    em = compiler.emulate(r, shape=(2 * m, 2 * n, 3 * cta_k), mode=mode, seed=seed)
    assert em.ok, f"{em.mismatches} elements differ"


def test_zero_columns_change_d():
    """The mask is applied: D's columns 0..7 of each N tile are zero, the others A * B^T (the emulator's
    reference reads B's masked columns as zeros, so a kernel ignoring the mask would fail `em.ok`)."""
    r = compiler.compile_source(ws_tile(m=32, n=64, extra="\n  zero_columns cols=[0..7];"))
    em = compiler.emulate(r, shape=(32, 64, 64), mode="eager", seed=4)
    assert em.ok, f"{em.mismatches} elements differ"
    assert (em.d[:, :8] == 0).all() and (em.d[:, 8:] != 0).any()


@pytest.mark.parametrize("engine, extra, field", [
    (" collector=b1::use", "", "b1::use"),
    ("", "\n  zero_columns cols=[0..7] shift=2;", "2;"),
])
def test_refusals_are_located(engine, extra, field):
    src = ws_tile(engine=engine, extra=extra)
    with pytest.raises(CompileError) as e:
        compiler.compile_source(src)
    d = e.value.diagnostics[0]
    assert src.splitlines()[d.loc.line - 1][d.loc.col - 1:].startswith(field)


def test_discard_collector_is_the_default():
    """`collector=b0::discard` is what no qualifier means (PTX 9.7.16.10.9.1): accepted, spelled as written."""
    r = compiler.compile_source(ws_tile(engine=" collector=b0::discard"))
    assert r.ptx.count("tcgen05.mma.ws.cta_group::1.kind::f16.collector::b0::discard ") == 4
