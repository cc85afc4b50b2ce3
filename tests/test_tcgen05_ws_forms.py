"""The `.ws` form (tcgen05.mma.ws, PTX 9.7.16.10.9.3) in the persistent warp-specialised tcgen05 kernel
(compiler/ptx/tcgen05_ws_kernel.py) of scheduled tiles.

No Blackwell GPU here: ptxas assembles each kernel for every target its form claims, and the CPU emulator
(compiler/emulator/tcgen05.py: TMA, mbarrier phases, tcgen05.mma.ws through the folded data-path layouts
E / G, PTX 9.7.16.10.5) runs it against numpy under the adversarial scheduler. One small case per variant in
the default run; the others are `slow`.
"""
from __future__ import annotations

import re

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


@pytest.mark.slow     # sm_100a in the default run: tests/test_tcgen05_kernels.py test_example_assembles
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


# ---- A in Tensor Memory ---------------------------------------------------------------------------

A_TMEM_EXAMPLE = "examples/tcgen05_gemm_a_tmem_f16.tile"

AT = """target {target};
tile at {{
  engine tcgen05{engine};
  shape M={m} N={n} K={k};
  A: {a} tmem;
  B: {a} smem;
  D: {d} tmem;{extra}
  schedule cta={m}x{n}x{cta_k} stages={stages}{schedule};
}}
"""


def at_tile(m=128, n=128, k=16, a="f16", d="f32", cta_k=64, stages=2, target="sm_100a", engine="", extra="",
            schedule=""):
    return AT.format(m=m, n=n, k=k, a=a, d=d, cta_k=cta_k, stages=stages, target=target, engine=engine, extra=extra,
                     schedule=schedule)


@pytest.fixture(scope="module")
def a_tmem_example():
    return compiler.compile_file(A_TMEM_EXAMPLE)


def test_a_tmem_plan(a_tmem_example):
    """A per slot: 128 rows x 64 f16 = 16384 B after B's 16384, unswizzled (a box of 8 f16 x 128 rows per
    16-byte K chunk); 4 MMAs x 8 columns = 32 TMEM columns per slot; two 128-column accumulators + 4 x 32 = 384
    columns, allocated 512. With N = 256 two accumulators would not fit (2 x 256 + 4 x 32 > 512): one, and why."""
    tile = a_tmem_example.tiles["tcgen05_gemm_a_tmem_f16"]
    plan = tile.op("tilec.ws_plan").attrs
    assert (plan["a_smem"], plan["a_bytes"], plan["a_region"]) == (16384, 16384, 0)
    assert (plan["tmem_stage"], plan["tmem_stage_columns"], plan["accumulators"], plan["tmem_columns"]) == \
        (256, 32, 2, 512)
    wide = compiler.compile_source(at_tile(n=256, stages=4)).tiles["at"].op("tilec.ws_plan").attrs
    assert (wide["accumulators"], wide["tmem_stage"], wide["tmem_columns"]) == (1, 256, 512)
    assert wide["why"] == "2 x 256 D columns + 4 x 32 per-slot A columns exceed the 512 TMEM columns"
    abi = a_tmem_example.to_json()["tiles"]["tcgen05_gemm_a_tmem_f16"]["kernel"]
    assert [(t["operand"], t["box"], t["swizzle"]) for t in abi["tensor_maps"]][0] == ("A", [8, 128, 1], "none")
    assert tile.op("tilec.resources").attrs["a_tmem"].endswith("= 384 of 512 allocated")
    ptx = a_tmem_example.ptx
    mma = ptx[ptx.index("---- MMA issuer"):ptx.index("---- TMA producer")]
    # per K block: the 4 copies, then the 4 MMAs reading the copied columns (same thread: a pipelined pair)
    assert mma.count("tcgen05.cp.cta_group::1.128x256b [") == 4
    assert mma.rindex("tcgen05.cp.") < mma.index("tcgen05.mma.")
    assert len(re.findall(r"tcgen05\.mma\.cta_group::1\.kind::f16 \[%r\d+\], \[%r\d+\], %rd\d+", mma)) == 4
    assert ptx[ptx.index("---- TMA producer"):].count("cp.async.bulk.tensor.3d") == 8 + 1    # A chunks + B's atom


@pytest.mark.slow     # sm_100a in the default run: tests/test_tcgen05_kernels.py test_example_assembles
def test_a_tmem_ptxas(a_tmem_example, ptxas):
    targets = sorted(a_tmem_example.tiles["tcgen05_gemm_a_tmem_f16"].facts["form"].requirements().targets)
    for target in targets:
        r = a_tmem_example if target == "sm_100a" else compiler.compile_source(
            open(A_TMEM_EXAMPLE).read().replace("target sm_100a", f"target {target}"))
        res = assemble(r.ptx, target, ptxas)
        assert res.ok, f"{target}: {res.output}"


def test_a_tmem_emulated(a_tmem_example):
    """128 x 128 x 128: one tile, 2 K blocks; copies, MMAs and commits complete late (adversarial): a copy
    overwriting columns an MMA still reads, or a slot refilled before its commit, would stop the emulator."""
    em = compiler.emulate(a_tmem_example, shape=(128, 128, 128), mode="adversarial", seed=1)
    assert em.ok, f"{em.mismatches} elements differ"


@pytest.mark.slow
@pytest.mark.parametrize("kw", [
    dict(engine=" cta_group=2", m=256, a="bf16", schedule=" cluster=2"),
    dict(n=256, stages=4),                 # one accumulator: 2 x 256 + 4 x 32 columns would not fit
    dict(engine=" ws"),
    dict(k=8, a="tf32", cta_k=32, stages=3),
    dict(k=32, a="e4m3", cta_k=128),
    dict(k=32, a="s8", d="s32", cta_k=128),
    dict(engine=" kind=mxf8f6f4", k=32, a="e4m3", cta_k=128, extra="\n  block_scale vec=32;"),
], ids=["pair", "n256", "ws", "tf32", "e4m3", "s8", "mxf8f6f4"])
@pytest.mark.parametrize("mode, seed", [("adversarial", 2), ("random", 3)])
def test_a_tmem_variants(kw, mode, seed, ptxas):
    r = compiler.compile_source(at_tile(**kw))
    targets = sorted(r.tiles["at"].facts["form"].requirements().targets)
    for target in targets:
        res = assemble(compiler.compile_source(at_tile(**kw, target=target)).ptx, target, ptxas)
        assert res.ok, f"{target}: {res.output}"
    m, n, cta_k = kw.get("m", 128), kw.get("n", 128), kw.get("cta_k", 64)
    em = compiler.emulate(r, shape=(2 * m, 2 * n, 3 * cta_k), mode=mode, seed=seed)
    assert em.ok, f"{em.mismatches} elements differ"


@pytest.mark.parametrize("kw, field, message", [
    # the TMEM budget: 2 x 256 accumulator columns + 2 x 32 per-slot A columns > 512 (shared memory runs out before
    # A's columns alone could: a slot's A takes 512 bytes of shared memory per TMEM column)
    (dict(n=256, schedule=" accumulators=2"), "2;", "two accumulators need 2 x 256 TMEM columns + 2 x 32 per-slot A "
     "columns, more than the 512"),
    # .ws M = 64 / 32: Layouts E / G are figures only in PTX 9.7.16.10.5 (README, "A in TMEM for .ws M = 64 / 32")
    (dict(engine=" ws", m=64), "64 N=", "reads A through data-path Layout E, whose TMEM lanes for A's rows the PTX "
     "ISA does not state in text"),
    (dict(engine=" ws", m=32), "32 N=", "Layout G, whose TMEM lanes"),
    (dict(m=64), "64 N=", "Layout F (PTX 9.7.16.10.5) uses half the data path's lanes"),
    (dict(engine=" kind=f8f6f4", k=32, a="e2m1", cta_k=128), "e2m1", "TMA copies bytes"),
    (dict(engine=" ashift", ), "ashift", ".ashift shifts A's rows"),
])
def test_a_tmem_refusals_are_located(kw, field, message):
    src = at_tile(**kw)
    with pytest.raises(CompileError) as e:
        compiler.compile_source(src)
    d = e.value.diagnostics[0]
    assert message in d.message
    assert src.splitlines()[d.loc.line - 1][d.loc.col - 1:].startswith(field)


def _a_copy_bug(ptx: str, what: str) -> str:
    """The example's PTX with one A copy of each K block broken: `drop` removes MMA 1's tcgen05.cp (MMA 1
    reads columns never written, or the previous block's A); `column` copies MMA 1's A over MMA 0's."""
    lines = ptx.split("\n")
    cps = [i for i, line in enumerate(lines) if "tcgen05.cp.cta_group::1.128x256b" in line]
    assert len(cps) == 4
    if what == "drop":
        del lines[cps[1]]
    else:
        at = lines[cps[1]].split("[")[1].split("]")[0]
        j = next(i for i in range(cps[1] - 1, cps[0], -1) if lines[i].strip().startswith(f"add.u32 {at},"))
        assert lines[j].endswith(", 8;")
        lines[j] = lines[j][:-len(", 8;")] + ", 0;"
    return "\n".join(lines)


@pytest.mark.slow
@pytest.mark.parametrize("what", ["drop", "column"])
def test_a_copy_bugs_fail_the_emulator(a_tmem_example, what):
    broken = _a_copy_bug(a_tmem_example.ptx, what)
    assert broken != a_tmem_example.ptx
    em = compiler.emulate(a_tmem_example, shape=(128, 128, 128), mode="eager", seed=1, ptx=broken)
    assert not em.ok


# ---- sparse .ws (tcgen05.mma.ws.sp) -----------------------------------------------------------------

WS_SPARSE = """target sm_100a;
tile wsp {{
  engine tcgen05 ws;
  shape M={m} N={n} K={k};
  A: {a} smem;
  B: {a} smem;
  D: {d} tmem;
  sparsity {sp} metadata=runtime;
  schedule cta={m}x{n}x{cta_k} stages=2;
}}
"""


def ws_sparse(m=64, n=128, k=32, a="f16", d="f32", cta_k=64, sp="2:4"):
    return WS_SPARSE.format(m=m, n=n, k=k, a=a, d=d, cta_k=cta_k, sp=sp)


def test_ws_sparse_emulated(ptxas):
    """.ws.sp M = 64 (layout E): the metadata image repeats the tile's 64 rows in both lane halves (a copy that
    did not would stop the emulator: its MMA reader checks that the lane groups agree)."""
    r = compiler.compile_source(ws_sparse())
    assert r.ptx.count("tcgen05.mma.ws.sp.cta_group::1.kind::f16 ") == 2
    assert assemble(r.ptx, "sm_100a", ptxas).ok
    em = compiler.emulate(r, shape=(128, 128, 128), mode="adversarial", seed=1)
    assert em.ok, f"{em.mismatches} elements differ"


@pytest.mark.slow
@pytest.mark.parametrize("kw", [dict(m=32, n=64), dict(m=128), dict(k=16, a="tf32", cta_k=32, sp="1:2", n=64),
                                dict(k=64, a="e4m3", cta_k=128), dict(m=32, k=64, a="s8", d="s32", cta_k=128)],
                         ids=["m32", "m128", "tf32", "e4m3", "s8"])
@pytest.mark.parametrize("mode, seed", [("adversarial", 2), ("random", 3)])
def test_ws_sparse_variants(kw, mode, seed, ptxas):
    r = compiler.compile_source(ws_sparse(**kw))
    for target in sorted(r.tiles["wsp"].facts["form"].requirements().targets):
        res = assemble(compiler.compile_source(ws_sparse(**kw).replace("sm_100a", target)).ptx, target, ptxas)
        assert res.ok, f"{target}: {res.output}"
    m, n, cta_k = kw.get("m", 64), kw.get("n", 128), kw.get("cta_k", 64)
    em = compiler.emulate(r, shape=(2 * m, 2 * n, 2 * cta_k), mode=mode, seed=seed)
    assert em.ok, f"{em.mismatches} elements differ"


@pytest.mark.slow
@pytest.mark.parametrize("path", [EXAMPLE, A_TMEM_EXAMPLE])
@pytest.mark.parametrize("mode, seed, batch", [("adversarial", 3, 1), ("random", 4, 2)])
def test_odd_sizes_and_batches(path, mode, seed, batch):
    """Dense scheduled tiles take any M, N, K and a batch: partial tiles and a K tail read TMA's zero fill (A in
    TMEM too: the copies move those zeros into TMEM), the TMA store clips D."""
    em = compiler.emulate(compiler.compile_file(path), shape=(100, 200, 72), mode=mode, seed=seed, batch=batch)
    assert em.ok, f"{em.mismatches} elements differ"
