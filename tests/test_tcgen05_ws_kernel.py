"""The persistent warp-specialised tcgen05 GEMM (compiler/ptx/tcgen05_ws_kernel.py) of scheduled tiles.

Proven without a Blackwell GPU: ptxas assembles it for every target its tcgen05.mma form claims (Tables
60/61 rows: form.requirements().targets); the CPU emulator (compiler/emulator/tcgen05.py on the warp
machine) runs every role of the emitted PTX on problems with more tiles than CTAs (CTAs loop over tiles,
the ring and the accumulators wrap) against numpy, eagerly and under the adversarial and random
scheduling policies with several seeds (TMA copies, tcgen05.mma and commits complete late); and seeded
bugs in the emitted PTX (a dropped wait, a dropped arrive, a flipped phase) each fail the emulator.
"""
from __future__ import annotations

import re

import pytest

import compiler
from compiler.diagnostics import CompileError, SpecError
from compiler.emulator.parse import EmulationError
from compiler.ptxas import assemble
from tests.gpu.harness import ws_batch

EXAMPLE = "examples/tcgen05_gemm_f16.tile"

TILE = """target {target};
tile {name} {{
  engine tcgen05;
  shape M=128 N={n} K={k};
  A: {a} smem;
  B: {b} smem;
  D: {d} tmem;
  schedule cta=128x{n}x{cta_k} stages={stages}{extra};
}}
"""


def tile(name="ws", target="sm_100a", n=128, k=16, a="f16", b="f16", d="f32", cta_k=64, stages=4, extra=""):
    return TILE.format(name=name, target=target, n=n, k=k, a=a, b=b, d=d, cta_k=cta_k, stages=stages, extra=extra)


@pytest.fixture(scope="module")
def example():
    return compiler.compile_file(EXAMPLE)


# ---- structure: the IR plan and the ABI ------------------------------------------------------------

def test_plan_in_ir_and_abi(example):
    ir = example.ir if hasattr(example, "ir") else None
    abi = example.to_json()["tiles"]["tcgen05_gemm_f16"]["kernel"]
    assert abi["kernel_kind"] == "tcgen05_ws"
    assert abi["grid"] == ["min(tiles, multiprocessors)", 1, 1] and abi["block"] == [192, 1, 1]
    assert "cluster" not in abi
    # 4 slots of A 128 x 64 f16 (16384 B) + B 128 x 64 f16 (16384 B), the D staging (4 epilogue warps x 2
    # buffers x 32 rows x 32 f32 = 4096 B), 12 mbarriers, the TMEM slot, 1024 B slack
    assert abi["dynamic_smem_bytes"] == 4 * 32768 + 4 * 2 * 4096 + 12 * 8 + 4 + 1024
    # one box per 128-byte swizzle atom: 64 f16 along K x 128 rows x one batch, 128B swizzle (the smem layouts');
    # D: a warp's 32 rows x 32 f32 columns (128-byte rows, 128B swizzle)
    assert [(t["operand"], t["box"], t["swizzle"]) for t in abi["tensor_maps"]] == [
        ("A", [64, 128, 1], "128B"), ("B", [64, 128, 1], "128B"), ("D", [32, 32, 1], "128B")]
    assert abi["plan"]["d_staging"] == {"chunk": 32, "buffers_per_warp": 2, "buffer_bytes": 4096, "swizzle": "128B"}
    assert abi["requires"] == [] and [p["name"] for p in abi["params"]] == ["tensor_maps", "M", "N", "K", "batch"]
    assert abi["plan"]["accumulators"] == 2 and abi["tmem_columns"] == 256
    assert abi["plan"]["barriers"]["acc_empty"] == {"count": 4, "number": 2}
    del ir


def test_roles_in_ptx(example):
    """Each role issues what the plan says: TMA loads only in the producer, the MMAs and commits only in the
    MMA warp, TMEM loads only in the epilogue."""
    ptx = example.ptx
    producer = ptx[ptx.index("---- TMA producer"):]
    mma = ptx[ptx.index("---- MMA issuer"):ptx.index("---- TMA producer")]
    epilogue = ptx[ptx.index("---- epilogue"):ptx.index("---- MMA issuer")]
    assert producer.count("cp.async.bulk.tensor.3d") == 2 and "tcgen05.mma" not in producer
    # 64 / 16 = 4 MMAs of K = 16 per K block, a commit per block (slot empty) and per tile (accumulator full)
    assert mma.count("tcgen05.mma.cta_group::1.kind::f16") == 4
    assert mma.count("tcgen05.commit") == 2
    assert "tcgen05.ld" in epilogue and "tcgen05.mma" not in epilogue and "st.global" not in epilogue
    # D leaves through shared memory: one TMA store per chunk, its bulk group waited on before the buffer is reused
    assert epilogue.count("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group") == 2     # loop body + last chunk
    assert "cp.async.bulk.wait_group.read 1;" in epilogue and "fence.proxy.async.shared::cta;" in epilogue
    assert ptx.count("mbarrier.init") == 4 + 4 + 2 + 2


def test_schedule_round_trip():
    from compiler.spec_printer import print_file

    spec = compiler.parse_source(tile(extra=" accumulators=1"))
    assert spec.tiles[0].schedule.accumulators == 1
    text = print_file(spec)
    assert "accumulators=1" in text
    assert compiler.parse_source(text).tiles[0].schedule == spec.tiles[0].schedule


def test_one_accumulator_says_why():
    r = compiler.compile_source(tile(n=256, cta_k=32, stages=6, extra=" accumulators=1"))
    plan = r.tiles["ws"].op("tilec.ws_plan").attrs
    assert plan["accumulators"] == 1 and plan["why"] == "written accumulators=1"


@pytest.mark.parametrize("extra, field", [(" accumulators=3", "3;"), (" warps=4x1", "4x1"),
                                          (" mma=wgmma", "wgmma"), (" cluster=2", "2;")])
def test_illegal_schedule_fields_are_located(extra, field):
    """The diagnostic points at the value of the field written."""
    with pytest.raises(CompileError) as e:
        compiler.compile_source(tile(extra=extra))
    d = e.value.diagnostics[0]
    line = tile(extra=extra).splitlines()[d.loc.line - 1]
    assert line[d.loc.col - 1:].startswith(field)


# ---- ptxas: every target the form claims ----------------------------------------------------------

@pytest.mark.parametrize("a, b, d, k, cta_k", [("f16", "f16", "f32", 16, 64), ("bf16", "bf16", "f32", 16, 32),
                                               ("tf32", "tf32", "f32", 8, 32), ("e4m3", "e5m2", "f32", 32, 128),
                                               ("s8", "s8", "s32", 32, 128)])
def test_ptxas_every_target(ptxas, a, b, d, k, cta_k):
    r = compiler.compile_source(tile(a=a, b=b, d=d, k=k, cta_k=cta_k))
    targets = sorted(r.tiles["ws"].facts["form"].requirements().targets)
    # kind::i8 has no sm_103a / family rows (Tables 60/61); every other kind here runs on all six targets
    assert set(targets) >= ({"sm_100a", "sm_110a"} if a == "s8" else
                            {"sm_100a", "sm_103a", "sm_110a", "sm_100f", "sm_103f", "sm_110f"})
    for target in targets:
        rt = compiler.compile_source(tile(a=a, b=b, d=d, k=k, cta_k=cta_k, target=target))
        res = assemble(rt.ptx, target, ptxas)
        assert res.ok, f"{target}: {res.output}"


# ---- the emulator against numpy -----------------------------------------------------------------

@pytest.mark.parametrize("mode, seed", [("eager", 0), ("adversarial", 1), ("adversarial", 2), ("random", 3),
                                        ("random", 4)])
def test_emulated_example(example, mode, seed):
    """256 x 384 x 128: 6 tiles on 2 CTAs (3 each: both accumulators are reused), 2 K blocks per tile through
    a 4-slot ring (6 blocks per CTA: the ring wraps)."""
    em = compiler.emulate(example, shape=(256, 384, 128), mode=mode, seed=seed)
    assert em.ok, f"{em.mismatches} elements differ"
    assert em.stats["tma"] == 6 * 2 * 2                 # tiles x K blocks x (A, B)


@pytest.mark.parametrize("a, b, d, k, cta_k, n, extra", [
    ("bf16", "bf16", "f32", 16, 32, 256, " accumulators=1"),      # 64B swizzle, one accumulator
    ("f16", "f16", "f32", 16, 128, 64, ""),                        # two 128-byte atoms per K block
    ("tf32", "tf32", "f32", 8, 32, 128, ""),
    ("e4m3", "e4m3", "f32", 32, 128, 128, ""),
    ("s8", "s8", "s32", 32, 128, 128, ""),
    ("f16", "f16", "f16", 16, 64, 128, ""),                        # a 16-bit D
])
def test_emulated_variants(a, b, d, k, cta_k, n, extra):
    r = compiler.compile_source(tile(a=a, b=b, d=d, k=k, cta_k=cta_k, n=n, stages=2, extra=extra))
    em = compiler.emulate(r, shape=(128, 3 * n, 3 * cta_k), mode="adversarial", seed=5)
    assert em.ok, f"{em.mismatches} elements differ"


PAIR = ws_batch.PAIR          # a CTA pair: cta_group::2, cluster=2, 256 x 128 tiles


@pytest.fixture(scope="module")
def pair():
    return compiler.compile_source(PAIR)


def test_pair_structure(pair):
    """cta_group::2: a cluster of two; both CTAs' copies complete on the leader's full barrier, which alone
    expects their bytes (2 x (128 x 64 + 64 x 64) bf16 = 49152); the leader's commits multicast to both
    CTAs; the 8 epilogue warps of the pair release the leader's accumulator."""
    abi = pair.to_json()["tiles"]["pair"]["kernel"]
    assert abi["cluster"] == [2, 1, 1] and abi["plan"]["tx_bytes"] == 2 * (128 * 64 + 64 * 64) * 2
    assert abi["plan"]["barriers"]["acc_empty"]["count"] == 8
    assert [t["box"] for t in abi["tensor_maps"]] == [[64, 128, 1], [64, 64, 1], [32, 32, 1]]
    ptx = pair.ptx
    assert ".reqnctapercluster 2, 1, 1" in ptx
    assert ptx.count("complete_tx::bytes.cta_group::2") == 2
    assert ptx.count("tcgen05.commit.cta_group::2.mbarrier::arrive::one.shared::cluster.multicast::cluster") == 2
    assert "mbarrier.arrive.release.cluster.shared::cluster.b64" in ptx


def test_pair_accumulator_release_is_cluster_scoped(pair):
    """Each CTA's epilogue arrives on the accumulator's empty barrier of both CTAs (through mapa) once its
    tcgen05.ld reads of the tile are done; the leader's MMA warp waits there and then overwrites those TMEM
    columns. A release orders the arriving thread's reads before the waiter's acquire only when each
    operation's scope includes the other's thread (PTX ISA 8.5 scope, 8.7 morally strong operations, 8.8
    release and acquire patterns); the default .cta scope of mbarrier.arrive (9.7.13.15.13) and of
    try_wait (9.7.13.15.16) leaves out the peer CTA, so both sides are at cluster scope. The smem ring's
    waits stay .cta: the leader's commits arrive there (tcgen05.commit arrives at cluster scope itself), and
    the single-CTA kernel has no cluster-scoped operation at all."""
    ptx = pair.ptx
    epi = ptx[slice(*role_span(ptx, "---- epilogue"))]
    remote = re.findall(r"mbarrier\.arrive[.\w:]*\.shared::cluster\.b64", epi)
    assert remote == ["mbarrier.arrive.release.cluster.shared::cluster.b64"] * 2      # rank 0 and rank 1
    mma = ptx[slice(*role_span(ptx, "---- MMA issuer"))]
    waits = re.findall(r"mbarrier\.try_wait\.parity[.\w:]*\.b64", mma)
    # per tile: the accumulator's empty barrier (cluster scope); per K block: the slot's full barrier
    assert waits == ["mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64",
                     "mbarrier.try_wait.parity.shared::cta.b64"]
    single = compiler.compile_source(PAIR.replace("cta_group=2", "cta_group=1").replace("M=256", "M=128")
                                     .replace("cta=256x128x64", "cta=128x128x64").replace(" cluster=2", "")).ptx
    assert ".cluster.shared" not in single and "acquire.cluster" not in single


def test_pair_ptxas(pair, ptxas):
    targets = sorted(pair.tiles["pair"].facts["form"].requirements().targets)
    for target in targets:
        r = compiler.compile_source(PAIR.replace("sm_100a", target))
        res = assemble(r.ptx, target, ptxas)
        assert res.ok, f"{target}: {res.output}"


@pytest.mark.parametrize("mode, seed", [("adversarial", 6), ("random", 7)])
def test_pair_emulated(pair, mode, seed):
    """768 x 128 x 192: 3 pair tiles on one cluster (both accumulators reused), 3 K blocks through 2 slots."""
    em = compiler.emulate(pair, shape=(768, 128, 192), mode=mode, seed=seed)
    assert em.ok, f"{em.mismatches} elements differ"


def test_pair_seeded_bug(pair):
    """The peer's epilogue warps do not release the leader's accumulator: the leader's MMA warp waits forever."""
    broken = drop_line(pair.ptx, "---- epilogue", r"mbarrier\.arrive\.release\.cluster\.shared::cluster")
    with pytest.raises(EmulationError, match="deadlock"):
        compiler.emulate(pair, shape=(768, 128, 192), mode="adversarial", seed=1, ptx=broken)


SPARSE = "examples/tcgen05_gemm_sparse_f16.tile"


@pytest.fixture(scope="module")
def sparse():
    return compiler.compile_file(SPARSE)


def test_sparse_structure(sparse):
    """No staging warps (192 threads): each slot holds the K block's metadata image after A and B, loaded by
    the producer through its own tensor map (128 rows of 16 bytes) and copied into the slot's TMEM columns by
    the MMA thread with one tcgen05.cp .128x128b; A's box is the kept half (32 f16 = 64 B rows, 64B
    swizzle)."""
    abi = sparse.to_json()["tiles"]["tcgen05_gemm_sparse_f16"]["kernel"]
    assert abi["block"] == [192, 1, 1] and [p["name"] for p in abi["params"]][:2] == ["tensor_maps", "META"]
    # the metadata image is per K block (its rows padded to whole tiles, a batch's problems one after another)
    # (any K of whole 2:4 chunks: a partial last K block's image is padded, tests/test_tcgen05_ws_images.py)
    assert abi["requires"] == ["K % 4 == 0"] and "batch" in abi
    assert set(abi["plan"]["barriers"]) == {"full", "empty", "acc_full", "acc_empty"}
    assert [(t["box"], t["swizzle"], t.get("k_per_block")) for t in abi["tensor_maps"]] == [
        ([32, 128, 1], "64B", 32), ([64, 128, 1], "128B", 64), ([16, 128], "none", None), ([32, 32, 1], "128B", None)]
    plan = sparse.tiles["tcgen05_gemm_sparse_f16"].op("tilec.ws_plan").attrs
    # 64 / 32 = 2 f16 MMAs a block, one metadata column each (shared16), rounded up to one 4-column copy:
    # 128 lanes x 16 B = 2048 bytes after A (128 x 32 f16 = 8192 B) and B (128 x 64 f16 = 16384 B)
    assert (plan["cp_operands"], plan["cp_smem"], plan["cp_bytes"]) == (["META"], [24576], [2048])
    assert plan["tx_bytes"] == 8192 + 16384 + 2048 and plan["threads"] == 192
    # 2 x 128 D columns, then 4 slots of 8 columns (4 written per copy, 2 read by the MMAs)
    assert (plan["tmem_stage"], plan["tmem_stage_columns"], plan["tmem_columns"]) == (256, 8, 512)
    assert sparse.ptx.count("tcgen05.mma.sp.cta_group::1.kind::f16") == 2
    assert sparse.ptx.count("tcgen05.cp.cta_group::1.128x128b [") == 1
    # A: one 64B-swizzled box, B: one 128B box, the metadata image: one box per K block
    assert sparse.ptx.count("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [") == 2
    assert sparse.ptx.count("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [") == 1
    # the buffer: per 128-row tile and 64-deep K block (the last one partial), 512 words (128 lanes x 4 columns)
    assert abi["buffers"]["META"]["shape"] == ["((M + 127) // 128)", "(K + 63) // 64", 512]


def test_sparse_ptxas(sparse, ptxas):
    for target in sorted(sparse.tiles["tcgen05_gemm_sparse_f16"].facts["form"].requirements().targets):
        r = compiler.compile_file(SPARSE, arch=target)
        res = assemble(r.ptx, target, ptxas)
        assert res.ok, f"{target}: {res.output}"


@pytest.mark.parametrize("mode, seed", [("eager", 0), ("adversarial", 1), ("random", 2)])
def test_sparse_emulated(sparse, mode, seed):
    """256 x 384 x 128: 6 tiles on 2 CTAs, random 2:4 patterns and metadata from META."""
    em = compiler.emulate(sparse, shape=(256, 384, 128), mode=mode, seed=seed)
    assert em.ok, f"{em.mismatches} elements differ"


@pytest.mark.parametrize("bug, mutate", [
    # the metadata copy is not issued: the MMAs read TMEM columns nothing wrote (or a previous block's)
    ("mma drops its tcgen05.cp", lambda p: drop_line(p, "---- MMA issuer", r"tcgen05\.cp\.")),
    # the producer does not load the metadata image: the slot's expected bytes never all arrive
    ("producer drops the metadata copy", lambda p: drop_line(p, "---- TMA producer", r"cp\.async\.bulk\.tensor",
                                                             nth=-1)),
    # the MMA warp does not wait for the slot: its tcgen05.cp reads an image a copy has not written
    ("mma skips full wait", lambda p: drop_wait(p, "---- MMA issuer", 1)),
])
def test_sparse_seeded_bug(sparse, bug, mutate):
    broken = mutate(sparse.ptx)
    assert broken != sparse.ptx
    assert first_failure(sparse, broken) is not None, f"seeded bug '{bug}' went unnoticed"


SCALED = {"examples/tcgen05_gemm_mxf8f6f4.tile": ("tcgen05_gemm_mxf8f6f4", 128),
          "examples/tcgen05_gemm_mxf4nvf4.tile": ("tcgen05_gemm_mxf4nvf4", 256)}


@pytest.mark.parametrize("path", list(SCALED))
def test_block_scaled_structure_and_ptxas(path, ptxas):
    """SFA and SFB are parameters; their per-slot TMEM columns follow the accumulators; every target the form
    claims assembles."""
    name, cta_k = SCALED[path]
    groups = {128: 1, 256: 4}[cta_k]
    r = compiler.compile_file(path)
    abi = r.to_json()["tiles"][name]["kernel"]
    assert [p["name"] for p in abi["params"]][:3] == ["tensor_maps", "SFA", "SFB"]
    assert abi["tile_k"] == cta_k and abi["block"] == [192, 1, 1]
    # one 4-byte group of each row's factor stream per 4 MMAs (mxf8f6f4: 1 factor per 32-deep MMA, 4 MMAs a
    # block; mxf4nvf4: 4 factors per 64-deep MMA, 4 MMAs) = one .32x128b.warpx4 copy of 512 bytes per group
    plan = r.tiles[name].op("tilec.ws_plan").attrs
    assert plan["cp_operands"] == ["SFA", "SFB"] and plan["cp_bytes"] == [512 * groups] * 2
    assert r.ptx.count("tcgen05.cp.cta_group::1.32x128b.warpx4 [") == 2 * groups
    assert abi["buffers"]["SFA"]["shape"] == ["((M + 127) // 128)", f"(K + {cta_k - 1}) // {cta_k}", 512 * groups]
    # 128-byte TMA rows: 128 e4m3 / 256 packed e2m1 values, copied as 128 bytes; then SFA's and SFB's images,
    # 32 rows of 16 bytes per 4-byte group
    assert [(t["box"], t["elem_bits"]) for t in abi["tensor_maps"][:4]] == [
        ([128, 128, 1], 8), ([128, 128, 1], 8), ([16, 32 * groups], 8), ([16, 32 * groups], 8)]
    for target in sorted(r.tiles[name].facts["form"].requirements().targets):
        res = assemble(compiler.compile_file(path, arch=target).ptx, target, ptxas)
        assert res.ok, f"{target}: {res.output}"


@pytest.mark.parametrize("path, mode, seed", [(p, m, s) for p in SCALED for m, s in (("adversarial", 1), ("random", 2))])
def test_block_scaled_emulated(path, mode, seed):
    """128 x 384 x 2 blocks: 3 tiles on one CTA, random UE8M0 / UE4M3 factors per 32 / 16 values."""
    _, cta_k = SCALED[path]
    r = compiler.compile_file(path)
    em = compiler.emulate(r, shape=(128, 384, 2 * cta_k), mode=mode, seed=seed)
    assert em.ok, f"{em.mismatches} elements differ"


@pytest.mark.parametrize("bug, mutate", [
    # SFA's copy dropped: the MMAs scale A by whatever the columns held
    ("mma drops SFA's tcgen05.cp", lambda p: drop_line(p, "---- MMA issuer", r"tcgen05\.cp\.")),
    # SFB's image not loaded: the slot's full barrier never completes
    ("producer drops SFB's copy", lambda p: drop_line(p, "---- TMA producer", r"cp\.async\.bulk\.tensor", nth=-1)),
    # the producer refills a slot (A, B and the factor images) before its MMAs and copies completed
    ("producer skips empty wait", lambda p: drop_wait(p, "---- TMA producer", 0)),
])
def test_block_scaled_seeded_bug(bug, mutate):
    r = compiler.compile_file("examples/tcgen05_gemm_mxf8f6f4.tile")
    broken = mutate(r.ptx)
    assert first_failure(r, broken, shape=(128, 384, 256)) is not None, f"seeded bug '{bug}' went unnoticed"


# ---- sparse and block-scaled A (tcgen05.mma.sp ... .block_scale): META, SFA and SFB in every slot ---------

SPARSE_SCALED_EXAMPLE = "examples/tcgen05_gemm_sparse_mxf4nvf4.tile"
SPARSE_SCALED_TILE = """target {target};
tile {name} {{
  engine tcgen05 kind={kind}{cta_group};
  shape M={m} N={n} K={k};
  A: {a} smem;
  B: {b} smem;
  D: f32 tmem;
  SFA: {sf} tmem;
  SFB: {sf} tmem;
  block_scale vec={vec};
  sparsity {sp} metadata=runtime;
  schedule cta={m}x{n}x{cta_k} stages=3{cluster};
}}
"""
# every sparse block-scaled kind (PTX 9.7.16.10.9.2 with 9.7.16.10.7; Table 54: the same factors per MMA as the
# dense MMA, over the sparse MMA's twice-as-deep K): the sparse K of one MMA, its types, scale type and vector,
# N of a CTA tile (a pair's N for vec=16: 256, where two accumulators do not fit), and the K unit the ABI asks
# (one scale factor's elements of K); cta K = 256: 4 fp8 / 2 fp4 MMAs a block, each row's factors whole 4-byte
# groups (warp_specialization.cp_columns)
SPARSE_SCALED = {
    "mxf8f6f4 2:4": dict(kind="mxf8f6f4", k=64, a="e4m3", b="e5m2", sf="ue8m0", vec=32, sp="2:4", n=(128, 128),
                         unit=64),
    "mxf4 4:8": dict(kind="mxf4", k=128, a="e2m1", b="e2m1", sf="ue8m0", vec=32, sp="4:8", n=(64, 64), unit=64),
    "mxf4nvf4 4:8 vec=32": dict(kind="mxf4nvf4", k=128, a="e2m1", b="e2m1", sf="ue8m0", vec=32, sp="4:8",
                                n=(128, 128), unit=64),
    "mxf4nvf4 4:8 vec=16": dict(kind="mxf4nvf4", k=128, a="e2m1", b="e2m1", sf="ue4m3", vec=16, sp="4:8",
                                n=(128, 256), unit=32),
}


def sparse_scaled(which: str, cta_group: int = 1, target: str = "sm_100a") -> str:
    v = SPARSE_SCALED[which]
    return SPARSE_SCALED_TILE.format(
        target=target, name="ssx", kind=v["kind"], cta_group="" if cta_group == 1 else " cta_group=2",
        m=128 * cta_group, n=v["n"][cta_group - 1], k=v["k"], a=v["a"], b=v["b"], sf=v["sf"], vec=v["vec"],
        sp=v["sp"], cta_k=256, cluster="" if cta_group == 1 else " cluster=2")


@pytest.fixture(scope="module")
def sparse_scaled_example():
    return compiler.compile_file(SPARSE_SCALED_EXAMPLE)


def test_sparse_scaled_example_structure(sparse_scaled_example, ptxas):
    """NVFP4 4:8 with UE4M3 factors (.block16): META, SFA and SFB are parameters, each slot holds the block's
    three images after A and B, and the MMA thread copies all three into the slot's TMEM columns before the
    block's 2 MMAs (256 / 128); each MMA reads its metadata columns and its own 4-byte group of SFA and SFB
    (4 factors an MMA, Table 54). ptxas on every target the form claims: no family target for sparse fp4
    (Tables 60/61)."""
    r = sparse_scaled_example
    name = "tcgen05_gemm_sparse_mxf4nvf4"
    abi = r.to_json()["tiles"][name]["kernel"]
    assert [p["name"] for p in abi["params"]][:4] == ["tensor_maps", "META", "SFA", "SFB"]
    assert abi["block"] == [192, 1, 1] and abi["tile_k"] == 256
    # 4 UE4M3 factors per 128-deep sparse MMA: one factor per 32 elements of K
    assert abi["requires"] == ["K % 32 == 0"]
    plan = r.tiles[name].op("tilec.ws_plan").attrs
    # META: 2 MMAs x 2 columns (the row8 format of 4:8 fp4: 2 words of codes per row per 128-deep MMA,
    # isa.tmem.metadata_format), one 4-column copy = 128 lanes x 16 B; SFA / SFB: 2 groups of 4 bytes (one per
    # MMA) = 2 .32x128b.warpx4 copies of 512 B
    assert plan["cp_operands"] == ["META", "SFA", "SFB"] and plan["cp_bytes"] == [2048, 1024, 1024]
    # the slot's columns: META +0..+3, SFA +4..+11, SFB +12..+19, rounded up to 24; 2 x 128 D columns first
    assert (plan["stage_regions"], plan["tmem_stage_columns"], plan["tmem_stage"]) == ([0, 4, 12], 24, 256)
    res = r.tiles[name].op("tilec.resources").attrs
    assert res["tmem_operands"] == (
        "per slot: META columns +0..+3 (1 x tcgen05.cp .128x128b), SFA columns +4..+11 (2 x tcgen05.cp "
        ".32x128b.warpx4), SFB columns +12..+19 (2 x tcgen05.cp .32x128b.warpx4); TMEM 2 x 128 accumulator + "
        "3 x 24 per-slot columns = 328 of 512 allocated")
    assert r.to_json()["tiles"][name]["resources"]["tmem_operands"] == res["tmem_operands"]     # --emit json
    assert r.ptx.count("tcgen05.cp.cta_group::1.128x128b [") == 1
    assert r.ptx.count("tcgen05.cp.cta_group::1.32x128b.warpx4 [") == 4
    mmas = re.findall(r"tcgen05\.mma\.sp\.cta_group::1\.kind::mxf4nvf4\.block_scale\.block16 \[%r\d+\], %rd\d+, "
                      r"%rd\d+, \[(%r\d+)\], %r\d+, \[(%r\d+)\], \[(%r\d+)\], %p\d+;", r.ptx)
    assert len(mmas) == 2
    # MMA i reads metadata columns +2i.., SFA columns +4 + 4i and SFB +12 + 4i of the slot
    offsets = [[int(re.search(rf"add\.u32 {reg}, %r\d+, (\d+);", r.ptx).group(1)) for reg in mma] for mma in mmas]
    assert offsets == [[0, 4, 12], [2, 8, 16]]
    targets = sorted(r.tiles[name].facts["form"].requirements().targets)
    assert targets == ["sm_100a", "sm_103a", "sm_110a"]
    for target in targets:
        res = assemble(r.ptx if target == "sm_100a" else compiler.compile_file(SPARSE_SCALED_EXAMPLE, arch=target).ptx,
                       target, ptxas)
        assert res.ok, f"{target}: {res.output}"


@pytest.mark.parametrize("which", list(SPARSE_SCALED))
@pytest.mark.parametrize("cta_group", [1, 2])
def test_sparse_scaled_structure_and_ptxas(ptxas, which, cta_group):
    """Every sparse block-scaled kind, cta_group::1 and ::2: the plan holds META, SFA and SFB per slot (a
    pair: SFB for the pair's N in each CTA), one tcgen05.mma.sp ... .block_scale per MMA, the targets its form
    claims (sparse mxf8f6f4 has the family targets too, sparse fp4 not: Tables 60/61), and ptxas assembles it
    for sm_100a (the other targets: test_sparse_scaled_ptxas_every_target, slow)."""
    r = compiler.compile_source(sparse_scaled(which, cta_group))
    v = SPARSE_SCALED[which]
    plan = r.tiles["ssx"].op("tilec.ws_plan").attrs
    assert plan["cp_operands"] == ["META", "SFA", "SFB"]
    block = {16: ".block16", 32: ".block32"}[v["vec"]]
    assert r.ptx.count(f"tcgen05.mma.sp.cta_group::{cta_group}.kind::{v['kind']}.block_scale{block} [") == \
        256 // v["k"]
    assert r.to_json()["tiles"]["ssx"]["kernel"]["requires"] == [f"K % {v['unit']} == 0"]
    targets = sorted(r.tiles["ssx"].facts["form"].requirements().targets)
    assert targets == (["sm_100a", "sm_100f", "sm_103a", "sm_103f", "sm_110a", "sm_110f"] if v["kind"] == "mxf8f6f4"
                       else ["sm_100a", "sm_103a", "sm_110a"])
    res = assemble(r.ptx, "sm_100a", ptxas)
    assert res.ok, res.output


@pytest.mark.slow
@pytest.mark.parametrize("which", list(SPARSE_SCALED))
@pytest.mark.parametrize("cta_group", [1, 2])
def test_sparse_scaled_ptxas_every_target(ptxas, which, cta_group):
    """The same tiles for every other target their form claims."""
    r = compiler.compile_source(sparse_scaled(which, cta_group))
    for target in sorted(r.tiles["ssx"].facts["form"].requirements().targets - {"sm_100a"}):
        res = assemble(compiler.compile_source(sparse_scaled(which, cta_group, target)).ptx, target, ptxas)
        assert res.ok, f"{target}: {res.output}"


def test_sparse_scaled_tmem_budget():
    """TMEM (PTX 9.7.16.1: 512 columns) = accumulators x N + stages x (META + SFA + SFB columns per slot): a
    pair of N = 256 fits one accumulator, and says why; accumulators=2 written there is refused at its value;
    N = 256 on one CTA with 2 stages fits one accumulator only as well."""
    r = compiler.compile_source(sparse_scaled("mxf4nvf4 4:8 vec=16", 2))
    plan = r.tiles["ssx"].op("tilec.ws_plan").attrs
    # per slot: META 4 + SFA 8 + SFB 16 (the pair's 256 columns of B: 2 x 4 slices a group) = 28 -> 32 columns
    assert plan["accumulators"] == 1 and plan["tmem_stage_columns"] == 32
    assert plan["why"] == "2 x 256 D columns + 3 x 32 per-slot metadata / scale-factor columns exceed the 512 TMEM columns"
    src = sparse_scaled("mxf4nvf4 4:8 vec=16", 2).replace("cluster=2", "cluster=2 accumulators=2")
    with pytest.raises(CompileError, match="two accumulators need 2 x 256 TMEM columns") as e:
        compiler.compile_source(src)
    d = e.value.diagnostics[0]
    assert src.splitlines()[d.loc.line - 1][d.loc.col - 1:] == "2;"
    one = sparse_scaled("mxf8f6f4 2:4").replace("N=128", "N=256").replace("128x128x256 stages=3",
                                                                          "128x256x256 stages=2")
    plan = compiler.compile_source(one).tiles["ssx"].op("tilec.ws_plan").attrs
    assert plan["accumulators"] == 1 and plan["why"].startswith("2 x 256 D columns + 2 x 24 per-slot")


def test_sparse_scaled_emulated(sparse_scaled_example):
    """128 x 256 x 2 blocks: 2 tiles on one CTA, 4 K blocks through the 3-slot ring (it wraps), random 4:8
    patterns, META codes and UE4M3 factors, MMAs and copies completing late."""
    em = compiler.emulate(sparse_scaled_example, shape=(128, 256, 512), mode="adversarial", seed=1)
    assert em.ok, f"{em.mismatches} elements differ"


def _second_slot_column(ptx: str, operand: str, to: int) -> str:
    """The MMA thread's first copy of `operand` (META / SFA / SFB) aimed at column +`to` of the slot instead of
    its own (the `add.u32 %rX, %rY, OFFSET;` after the operand's comment)."""
    lo, hi = role_span(ptx, "---- MMA issuer")
    m = re.search(rf"// {operand}: [^\n]*\n\tadd\.u32 (%r\d+), (%r\d+), (\d+);", ptx[lo:hi])
    fixed = m.group(0)[:m.start(3) - m.start(0)] + f"{to};"
    return ptx[:lo + m.start()] + fixed + ptx[lo + m.end():]


def _mma_scale_column(ptx: str, nth: int, operand_index: int, to: int) -> str:
    """The nth MMA's `operand_index`th TMEM address register (0: metadata, 1: SFA, 2: SFB) computed at slot
    column +`to`."""
    lo, hi = role_span(ptx, "---- MMA issuer")
    mmas = list(re.finditer(r"tcgen05\.mma\.sp[^\n]*\[(%r\d+)\], %r\d+, \[(%r\d+)\], \[(%r\d+)\]", ptx[lo:hi]))
    reg = mmas[nth].group(1 + operand_index)
    m = list(re.finditer(rf"add\.u32 {reg}, (%r\d+), (\d+);", ptx[lo:lo + mmas[nth].start()]))[-1]
    return ptx[:lo + m.start()] + f"add.u32 {reg}, {m.group(1)}, {to};" + ptx[lo + m.end():]


SPARSE_SCALED_BUGS = {
    # the metadata copy written over SFA's columns: the MMAs read the slot's metadata columns unwritten (the
    # emulator refuses undefined codes) and SFA's factors clobbered by metadata words
    "META copied to SFA's columns": lambda p: _second_slot_column(p, "META", 4),
    # SFA's first group copied into SFB's columns: MMA 0 scales A by stale factors
    "SFA copied to SFB's columns": lambda p: _second_slot_column(p, "SFA", 12),
    # the second MMA reads the first MMA's SFB group (its factor ID / group wrong): its K half scaled wrongly
    "MMA 1 reads MMA 0's SFB": lambda p: _mma_scale_column(p, 1, 2, 12),
    # the second MMA reads the first MMA's metadata columns: the wrong kept positions for its K half
    "MMA 1 reads MMA 0's metadata": lambda p: _mma_scale_column(p, 1, 0, 0),
}


@pytest.mark.parametrize("bug", list(SPARSE_SCALED_BUGS))
def test_sparse_scaled_seeded_bug(sparse_scaled_example, bug):
    broken = SPARSE_SCALED_BUGS[bug](sparse_scaled_example.ptx)
    assert broken != sparse_scaled_example.ptx
    assert first_failure(sparse_scaled_example, broken, shape=(128, 128, 512)) is not None, \
        f"seeded bug '{bug}' went unnoticed"


def test_sparse_scaled_fp8_scale_factor_id_bug():
    """mxf8f6f4 2:4: 4 MMAs share each 4-byte group of SFA / SFB, MMA i reading byte i (the SF IDs of its
    instruction descriptor, PTX 9.7.16.4.2 Table 43 bits 4-5 and 29-30); the second MMA's descriptor with the
    first's IDs (byte 0) scales its K slice by the wrong factors, and the emulator says so."""
    r = compiler.compile_source(sparse_scaled("mxf8f6f4 2:4"))
    lo, hi = role_span(r.ptx, "---- MMA issuer")
    idescs = re.findall(r"mov\.b32 %r\d+, (0x[0-9a-f]{8});", r.ptx[lo:hi])[:4]
    ids = [((int(x, 16) >> 29) & 3, (int(x, 16) >> 4) & 3) for x in idescs]
    assert ids == [(0, 0), (1, 1), (2, 2), (3, 3)]
    wrong = f"{int(idescs[1], 16) & ~(3 << 29) & ~(3 << 4):#010x}"
    broken = r.ptx.replace(f", {idescs[1]};", f", {wrong};", 1)
    assert broken != r.ptx
    assert first_failure(r, broken, shape=(128, 128, 256)) is not None


@pytest.mark.slow
@pytest.mark.parametrize("which", list(SPARSE_SCALED))
@pytest.mark.parametrize("cta_group", [1, 2])
@pytest.mark.parametrize("mode, seed, batch, k_tail", [("adversarial", 1, 1, False), ("random", 2, 2, True),
                                                        ("adversarial", 3, 2, True), ("random", 4, 1, False)])
def test_sparse_scaled_emulated_every_kind(which, cta_group, mode, seed, batch, k_tail):
    """Every sparse block-scaled kind on one CTA and a pair, partial tiles in M and N (rows past M / N of the
    META / SFA / SFB images padded with legal values), 2 K blocks or a K tail (a third block one K unit deep:
    one scale factor of each row live, the rest padding 1.0, its metadata past K the zero-selecting code), a
    batch of 2 (each problem's images after the previous one's), under adversarial and random completion."""
    v = SPARSE_SCALED[which]
    r = compiler.compile_source(sparse_scaled(which, cta_group))
    k = 512 + (v["unit"] if k_tail else 0)
    em = compiler.emulate(r, shape=(128 * cta_group + 72, v["n"][cta_group - 1] + 8, k), batch=batch, mode=mode,
                          seed=seed)
    assert em.ok, f"{em.mismatches} elements differ"


EPILOGUE = """target sm_100a;
tile epi {{
  engine tcgen05;
  shape M=128 N=128 K=16;
  A: bf16 smem;
  B: bf16 smem;
  D: f32 tmem;
  schedule cta=128x128x64 stages=3;
  epilogue {epilogue};
}}
"""


@pytest.mark.parametrize("epilogue", ["alpha=param bias=col act=silu", "alpha=0.5 bias=row act=gelu_tanh",
                                      "bias=col act=relu", "act=gelu_erf"])
def test_fused_epilogue_emulated(epilogue, ptxas):
    """D = act(alpha * (A*B) + bias) in the epilogue warps (tilec.epilogue_plan), against the f64 reference
    within the activations' error bounds (compiler/emulator/sparse_host.py epilogue_atol)."""
    r = compiler.compile_source(EPILOGUE.format(epilogue=epilogue))
    abi = r.to_json()["tiles"]["epi"]["kernel"]
    assert abi["epilogue"]["act"] == epilogue.split("act=")[1]
    assert assemble(r.ptx, "sm_100a", ptxas).ok
    em = compiler.emulate(r, shape=(128, 384, 128), mode="adversarial", seed=3)
    assert em.ok, f"{em.mismatches} elements outside the tolerance"


def test_fused_epilogue_seeded_bug():
    """The bias add dropped from the emitted epilogue: D misses its bias and the emulator says so."""
    r = compiler.compile_source(EPILOGUE.format(epilogue="bias=col act=relu"))
    lo, hi = role_span(r.ptx, "---- epilogue")
    broken = r.ptx[:lo] + re.sub(r"\tadd\.f32 [^\n]*\n", "", r.ptx[lo:hi]) + r.ptx[hi:]
    assert broken != r.ptx
    em = compiler.emulate(r, shape=(128, 384, 128), mode="eager", seed=3, ptx=broken)
    assert not em.ok


def test_epilogue_output_types_located():
    """The epilogue converts f32 accumulators to f32, f16 or bf16 (epilogue-lowering's FLOAT_OUTPUTS); another
    D type is refused at D's type, and acc= other than the MMA's natural f32 at acc=."""
    src = EPILOGUE.format(epilogue="act=relu").replace("D: f32 tmem", "D: e4m3 global")
    with pytest.raises(CompileError, match="not an output of the f32 epilogue") as e:
        compiler.compile_source(src)
    d = e.value.diagnostics[0]
    assert src.splitlines()[d.loc.line - 1][d.loc.col - 1:].startswith("e4m3")
    with pytest.raises(CompileError, match="acc=f16"):
        compiler.compile_source(EPILOGUE.format(epilogue="act=relu acc=f16"))


# ---- seeded bugs: each one fails the emulator --------------------------------------------------------

# the role comments the ws kernel's PTX starts each role with (tile scheduler: persistent=clc)
ROLES = ("---- epilogue", "---- MMA issuer", "---- TMA producer", "---- staging", "---- tile scheduler")


def role_span(ptx: str, marker: str) -> tuple[int, int]:
    """[start, end) of the role that `marker` starts: up to the next role's comment."""
    starts = {m: ptx.index(m) for m in ROLES if m in ptx}
    start = starts[marker]
    ends = [s for s in starts.values() if s > start]
    return start, min(ends) if ends else len(ptx)


def drop_wait(ptx: str, marker: str, nth: int = 0) -> str:
    """Remove the nth mbarrier wait loop (try_wait and its branch back) of a role."""
    lo, hi = role_span(ptx, marker)
    waits = [m for m in re.finditer(r"\tmbarrier\.try_wait\.parity[^\n]*\n\t@!%p\d+ bra(\.uni)? [^\n]*\n",
                                    ptx[lo:hi])]
    m = waits[nth]
    return ptx[:lo + m.start()] + ptx[lo + m.end():]


def flip_wait_parity(ptx: str, marker: str, nth: int = 0) -> str:
    """Make the nth wait of a role wait for the other parity (a phase bit flipped)."""
    lo, hi = role_span(ptx, marker)
    waits = list(re.finditer(r"mbarrier\.try_wait\.parity\.shared::cta\.b64 (%p\d+), \[(%r\d+)\], (%r\d+);",
                             ptx[lo:hi]))
    m = waits[nth]
    text = m.group(0)
    flipped = f"xor.b32 {m.group(3)}, {m.group(3)}, 1;\n\t{text}\n\txor.b32 {m.group(3)}, {m.group(3)}, 1;"
    # the flip sits inside the spin loop: flip before the test and restore after it
    return ptx[:lo + m.start()] + flipped + ptx[lo + m.end():]


# The policies a seeded bug is tried under, until one fails it: adversarial completes every asynchronous
# operation as late as possible; random completes them at random points (a copy may land before a slow
# warp has written what the consumer also waits for).
POLICY_SEEDS = (("adversarial", 1), ("adversarial", 2), ("random", 1), ("random", 2), ("random", 3))


def first_failure(result, broken: str, shape=(256, 384, 128)) -> str | None:
    """How the emulator rejects the broken PTX (its error, or how many elements differ), or None. The
    reference model's SpecError counts: an MMA read operands the kernel never wrote (e.g. undefined
    metadata codes in TMEM)."""
    for mode, seed in POLICY_SEEDS:
        try:
            em = compiler.emulate(result, shape=shape, mode=mode, seed=seed, ptx=broken)
        except (EmulationError, SpecError) as e:
            return str(e)
        if not em.ok:
            return f"{em.mismatches} elements differ"
    return None


def drop_line(ptx: str, marker: str, pattern: str, nth: int = 0) -> str:
    """Remove the nth line of a role matching `pattern`."""
    lo, hi = role_span(ptx, marker)
    found = list(re.finditer(r"\t[^\n]*" + pattern + r"[^\n]*\n", ptx[lo:hi]))
    assert len(found) > nth, pattern
    m = found[nth]
    return ptx[:lo + m.start()] + ptx[lo + m.end():]


BUGS = {
    # the MMA warp does not wait for the slot's TMA bytes: it reads shared memory a copy has not written
    "mma skips full wait": (lambda p: drop_wait(p, "---- MMA issuer", 1), "had not finished writing"),
    # the producer refills a slot before the MMAs that read it completed
    "producer skips empty wait": (lambda p: drop_wait(p, "---- TMA producer", 0), None),
    # the epilogue reads TMEM before the commit of the tile's MMAs arrived (then arrives out of turn)
    "epilogue skips full wait": (lambda p: drop_wait(p, "---- epilogue", 0), None),
    # the MMA warp overwrites an accumulator the epilogue has not released
    "mma skips accumulator-empty wait": (lambda p: drop_wait(p, "---- MMA issuer", 0), None),
    # an epilogue warp never releases the accumulator: the MMA warp waits forever
    "epilogue drops its arrive": (lambda p: drop_line(p, "---- epilogue", r"mbarrier\.arrive\.shared"), "deadlock"),
    # the producer announces no bytes: the full barrier's phase completes before the copies land
    "producer drops expect_tx": (lambda p: drop_line(p, "---- TMA producer", r"mbarrier\.arrive\.expect_tx"), None),
    # a flipped phase bit: the producer waits for the empty phase that has not happened yet
    "producer flips its phase": (lambda p: flip_wait_parity(p, "---- TMA producer", 0), "deadlock"),
    # a flipped phase bit in the epilogue: it waits for a phase of the accumulator barrier that never comes
    # while the MMA warp waits for the accumulator it holds (a deadlock; under random completions it may
    # instead read TMEM before the MMAs committed)
    "epilogue flips its phase": (lambda p: flip_wait_parity(p, "---- epilogue", 0), "deadlock"),
}


@pytest.mark.parametrize("bug", list(BUGS))
def test_seeded_bug_fails_the_emulator(example, bug):
    mutate, message = BUGS[bug]
    broken = mutate(example.ptx)
    assert broken != example.ptx
    failed = first_failure(example, broken)
    assert failed is not None, f"seeded bug '{bug}' went unnoticed"
    if message is not None:
        assert message in failed, failed


def test_scale_factor_groups_must_be_whole_per_k_block():
    """tcgen05.cp copies whole 32-bit TMEM columns: a K block of 2 mxf8f6f4 MMAs (1 UE8M0 factor each) holds 2
    bytes of a row's factor stream, half a column, so the schedule is refused at compile time."""
    text = open("examples/tcgen05_gemm_mxf8f6f4.tile").read().replace("cta=128x128x128", "cta=128x128x64")
    with pytest.raises(CompileError) as e:
        compiler.compile_source(text)
    assert "not whole 4-byte groups" in str(e.value) and "multiple of 4 MMAs" in str(e.value)


PAIRS = {"scaled": """target sm_100a;
tile pmx {
  engine tcgen05 kind=mxf8f6f4 cta_group=2;
  shape M=256 N=128 K=32;
  A: e4m3 smem;
  B: e5m2 smem;
  D: f32 tmem;
  SFA: ue8m0 tmem;
  SFB: ue8m0 tmem;
  block_scale vec=32;
  schedule cta=256x128x128 stages=3 cluster=2;
}
""", "sparse": """target sm_100a;
tile psp {
  engine tcgen05 cta_group=2;
  shape M=256 N=128 K=32;
  A: f16 smem;
  B: f16 smem;
  D: f32 tmem;
  sparsity 2:4 metadata=runtime;
  schedule cta=256x128x64 stages=3 cluster=2;
}
"""}


@pytest.mark.parametrize("which", list(PAIRS))
def test_scaled_and_sparse_pairs(which, ptxas):
    """Block-scaled and sparse tiles on a CTA pair (cta_group::2, M = 256): each CTA's producer loads its
    128 rows' SFA / metadata image and the pair's SFB image (the same in both: every CTA's TMEM holds SFB for
    all N, 9.7.16.10.7) on the leader's full barrier; the leader's MMA thread copies them in both CTAs with
    tcgen05.cp.cta_group::2 (each CTA from its own shared memory, 9.7.16.8.2). 512 x 384: 6 pair tiles on 2
    pairs, under the adversarial policy; ptxas on every target the form claims."""
    r = compiler.compile_source(PAIRS[which])
    name = next(iter(r.tiles))
    abi = r.to_json()["tiles"][name]["kernel"]
    assert abi["cluster"] == [2, 1, 1] and abi["block"] == [192, 1, 1]
    assert r.ptx.count("tcgen05.cp.cta_group::2.") == (2 if which == "scaled" else 1)
    assert all(t["row_tile"] == 128 for t in abi["tensor_maps"] if "image_rows" in t)
    em = compiler.emulate(r, shape=(512, 384, 2 * abi["tile_k"]), mode="adversarial", seed=1)
    assert em.ok, f"{em.mismatches} elements differ"
    for target in sorted(r.tiles[name].facts["form"].requirements().targets):
        res = assemble(compiler.compile_source(PAIRS[which], arch=target).ptx, target, ptxas)
        assert res.ok, f"{target}: {res.output}"
