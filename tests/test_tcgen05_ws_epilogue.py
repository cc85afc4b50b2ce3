"""The epilogue of the warp-specialised tcgen05 GEMM (compiler/ptx/tcgen05_ws_kernel.py `epilogue_role`): the
fused epilogue (tilec.epilogue_plan: alpha, beta * C, bias, activation) on the tcgen05.ld registers, D in
f32 / f16 / bf16, staged in shared memory and stored by TMA (cp.async.bulk.tensor ... bulk_group), any
M, N, K >= 1 and a batch.

Proven without a Blackwell GPU: ptxas assembles each new form for every target its tcgen05.mma form claims;
the CPU emulator runs it (eagerly and under the adversarial / random policies, several seeds, one CTA and
CTA pairs) against the f64 reference within the epilogue's tolerance (compiler/emulator/sparse_host.py
epilogue_atol), on shapes with partial tiles and a K tail, D's row padding poisoned and checked untouched;
and the TMA-store protocol's seeded bugs (a dropped wait_group.read, a dropped final wait) are caught.
"""
from __future__ import annotations

import re

import pytest

import compiler
from compiler.diagnostics import CompileError
from compiler.emulator.parse import EmulationError
from compiler.ptxas import assemble

EXAMPLE = "examples/tcgen05_gemm_f16_bias_relu.tile"

TILE = """target {target};
tile epi {{
  engine tcgen05{group};
  shape M={m} N={n} K=16;
  A: {a} smem;
  B: {a} smem;
{c}  D: {d} global;
  schedule cta={m}x{n}x64 stages=3{cluster};
  epilogue {epilogue};
}}
"""


def tile(epilogue="", d="f16", a="f16", c=False, pair=False, n=128, target="sm_100a"):
    return TILE.format(target=target, group=" cta_group=2" if pair else "", m=256 if pair else 128, n=n, a=a,
                       c="  C: f32 global;\n" if c else "", d=d, cluster=" cluster=2" if pair else "",
                       epilogue=epilogue)


# (epilogue, D, A, C, pair, N): the new forms: 16-bit outputs by cvt pairs, C read in the epilogue, a pair
FORMS = {
    "f16 bias relu": ("bias=col act=relu", "f16", "f16", False, False, 128),
    "bf16 C beta silu row bias": ("alpha=param beta=param bias=row act=silu", "bf16", "bf16", True, False, 128),
    "f32 alpha beta C": ("alpha=0.5 beta=2", "f32", "f16", True, False, 64),
    "f16 C pair gelu": ("bias=col act=gelu_tanh", "f16", "f16", True, True, 128),
    "bf16 N=16": ("act=gelu_erf", "bf16", "bf16", False, False, 16),
}


@pytest.mark.parametrize("name", list(FORMS))
def test_ptxas_every_target(name, ptxas):
    epi, d, a, c, pair, n = FORMS[name]
    r = compiler.compile_source(tile(epi, d, a, c, pair, n))
    targets = sorted(r.tiles["epi"].facts["form"].requirements().targets)
    assert {"sm_100a", "sm_110a"} <= set(targets)
    for target in targets:
        res = assemble(compiler.compile_source(tile(epi, d, a, c, pair, n, target=target)).ptx, target, ptxas)
        assert res.ok, f"{target}: {res.output}"


# (form, shape, batch, mode, seed): partial tiles along M and N and a K tail (K not a multiple of 64, nor of 8
# for f16: rows are padded to 16 bytes), a batch, several seeds and policies
RUNS = [
    ("f16 bias relu", (200, 150, 100), 1, "eager", 0),
    ("f16 bias relu", (130, 260, 37), 1, "adversarial", 1),
    ("bf16 C beta silu row bias", (130, 70, 72), 2, "random", 2),
    ("bf16 C beta silu row bias", (128, 128, 64), 1, "adversarial", 3),
    ("f32 alpha beta C", (100, 100, 9), 3, "eager", 4),
    ("f32 alpha beta C", (257, 65, 64), 1, "random", 5),
    ("f16 C pair gelu", (300, 100, 33), 1, "adversarial", 6),
    ("f16 C pair gelu", (256, 128, 64), 2, "random", 7),
    ("bf16 N=16", (129, 33, 20), 1, "adversarial", 8),
]


@pytest.mark.parametrize("name, shape, batch, mode, seed", RUNS)
def test_emulated(name, shape, batch, mode, seed):
    epi, d, a, c, pair, n = FORMS[name]
    r = compiler.compile_source(tile(epi, d, a, c, pair, n))
    em = compiler.emulate(r, shape=shape, mode=mode, seed=seed, batch=batch)
    assert em.ok, f"{em.mismatches} elements outside the tolerance"
    assert em.d.shape == ((batch,) if batch > 1 else ()) + shape[:2]
    # one TMA store per warp and 32-column chunk of every tile (partial tiles included, boxes outside M or N
    # are not issued)
    assert em.stats["tma_store"] > 0


def test_no_epilogue_f16_accumulator_any_shape(ptxas):
    """Without an epilogue a 16-bit D is the TMEM accumulator itself (its low halves, packed by bfi)."""
    src = tile("", "f16").replace("  epilogue ;\n", "").replace("global", "tmem")
    r = compiler.compile_source(src)
    assert r.tiles["epi"].op("tilec.epilogue_plan") is None and "bfi.b32" in r.ptx
    for target in sorted(r.tiles["epi"].facts["form"].requirements().targets):
        res = assemble(compiler.compile_source(src.replace("sm_100a", target)).ptx, target, ptxas)
        assert res.ok, f"{target}: {res.output}"
    em = compiler.emulate(r, shape=(150, 200, 70), mode="adversarial", seed=9, batch=2)
    assert em.ok, f"{em.mismatches} elements differ"


def test_example_structure():
    """The example's ABI: A, B and D through tensor maps (D's box: a warp's 32 rows x 32 f16 = 64-byte rows,
    64B swizzle), no D pointer, the bias, any size; its PTX: the bias add, relu, cvt pairs and the store."""
    r = compiler.compile_file(EXAMPLE)
    abi = r.to_json()["tiles"]["tcgen05_gemm_f16_bias_relu"]["kernel"]
    assert [p["name"] for p in abi["params"]] == ["tensor_maps", "bias", "M", "N", "K", "batch"]
    assert abi["tensor_maps"][2] == {"operand": "D", "elem_bits": 16, "data_type": 1, "swizzle": "64B",
                                     "box": [32, 32, 1]}
    assert abi["requires"] == [] and "batch" in abi
    assert abi["epilogue"]["out"] == "f16" and abi["epilogue"]["acc"] == "f32"
    # 32 f16 of a row = 64 bytes = 4 st.shared.v4 per chunk; 16 cvt pairs; the chunk body is emitted twice
    # (the loop, and the last chunk, after which the accumulator is released)
    epilogue = r.ptx[r.ptx.index("---- epilogue"):r.ptx.index("---- MMA issuer")]
    assert epilogue.count("cvt.rn.f16x2.f32") == 2 * 16
    assert epilogue.count("st.shared.v4.b32") == 2 * 4
    assert epilogue.count("max.f32") == 2 * 32
    assert epilogue.count("tcgen05.ld.sync.aligned.32x32b.x32.b32") == 2
    # the MMA accumulates in f32: idesc D format f32 (Table 44 bits 4-5 = 1)
    assert int(r.tiles["tcgen05_gemm_f16_bias_relu"].op("tilec.instr_desc").attrs["value"]) >> 4 & 3 == 1


def test_example_smem_plan():
    """4 slots of 32768 B, then 4 warps x 2 buffers x (32 x 64 B rounded up to 1024 = 2048 B) of D staging,
    12 mbarriers, the TMEM slot and 1024 B of alignment slack; the resource plan counts it."""
    r = compiler.compile_file(EXAMPLE)
    abi = r.to_json()["tiles"]["tcgen05_gemm_f16_bias_relu"]["kernel"]
    assert abi["dynamic_smem_bytes"] == 4 * 32768 + 4 * 2 * 2048 + 12 * 8 + 4 + 1024
    assert abi["plan"]["d_staging"] == {"chunk": 32, "buffers_per_warp": 2, "buffer_bytes": 2048, "swizzle": "64B"}


@pytest.mark.parametrize("mode, seed", [("eager", 0), ("adversarial", 1), ("random", 2)])
def test_example_emulated(mode, seed):
    r = compiler.compile_file(EXAMPLE)
    em = compiler.emulate(r, shape=(200, 300, 90), mode=mode, seed=seed)
    assert em.ok, f"{em.mismatches} elements outside the tolerance"


def _drop(ptx: str, pattern: str, nth: int = 0) -> str:
    lo, hi = ptx.index("---- epilogue"), ptx.index("---- MMA issuer")
    m = list(re.finditer(r"\t[^\n]*" + pattern + r"[^\n]*\n", ptx[lo:hi]))[nth]
    return ptx[:lo + m.start()] + ptx[lo + m.end():]


def test_seeded_bug_dropped_wait_group_read():
    """Without the wait before a staging buffer is written again, the epilogue overwrites bytes a TMA store may
    still be reading: the emulator holds a store's source until a wait_group.read retires its bulk group."""
    r = compiler.compile_file(EXAMPLE)
    broken = _drop(r.ptx, r"cp\.async\.bulk\.wait_group\.read")
    broken = _drop(broken, r"cp\.async\.bulk\.wait_group\.read")     # the loop's and the last chunk's
    assert "wait_group.read" not in broken[broken.index("---- epilogue"):broken.index("---- MMA issuer")]
    with pytest.raises(EmulationError, match="no cp.async.bulk.wait_group.read retired"):
        compiler.emulate(r, shape=(128, 256, 64), mode="eager", seed=0, ptx=broken)


def test_seeded_bug_dropped_final_wait():
    """A CTA must not exit while its TMA stores still read its shared memory."""
    r = compiler.compile_file(EXAMPLE)
    broken = _drop(r.ptx, r"cp\.async\.bulk\.wait_group 0")
    with pytest.raises(EmulationError, match="exits with TMA stores still reading"):
        compiler.emulate(r, shape=(128, 128, 64), mode="eager", seed=0, ptx=broken)


def test_seeded_bug_unclipped_store():
    """A store issued for a box wholly past N would still be clipped by TMA; a store at the wrong column is not:
    D's poisoned padding or its values show it."""
    r = compiler.compile_file(EXAMPLE)
    broken = re.sub(r"(cp\.async\.bulk\.tensor\.3d\.global\.shared::cta\.bulk_group \[%rd\d+, \{)(%r\d+)",
                    r"\g<1>%r0", r.ptx)
    assert broken != r.ptx
    try:
        em = compiler.emulate(r, shape=(128, 200, 64), mode="eager", seed=0, ptx=broken)
    except EmulationError as e:
        assert "padding" in str(e)
    else:
        assert not em.ok


@pytest.mark.parametrize("text, match, field", [
    ("D: e4m3 global", "not an output of the f32 epilogue", "e4m3"),
    ("C: f16 global", "C is read in the accumulator type f32", "f16"),
])
def test_diagnostics(text, match, field):
    src = tile("act=relu", c=True).replace("C: f32 global" if text.startswith("C") else "D: f16 global", text)
    with pytest.raises(CompileError, match=match) as e:
        compiler.compile_source(src)
    d = e.value.diagnostics[0]
    assert src.splitlines()[d.loc.line - 1][d.loc.col - 1:].startswith(field)


def test_sparse_k_needs_whole_chunks():
    """A sparse kernel takes any M, N and a batch, K in whole 2:4 chunks (its last K block's metadata image
    padded past K), and says so (tests/test_tcgen05_ws_images.py runs the edges)."""
    r = compiler.compile_file("examples/tcgen05_gemm_sparse_f16.tile")
    with pytest.raises(EmulationError, match="K % 4 == 0"):
        compiler.emulate(r, shape=(100, 128, 42))


def test_seeded_bug_dropped_proxy_fence():
    """The staged chunk is written by st.shared (the generic proxy); without fence.proxy.async.shared::cta the
    TMA store (the async proxy) may read stale bytes: the emulator tracks each warp's unfenced stores."""
    r = compiler.compile_file(EXAMPLE)
    broken = _drop(_drop(r.ptx, r"fence\.proxy\.async\.shared::cta"), r"fence\.proxy\.async\.shared::cta")
    with pytest.raises(EmulationError, match="no fence.proxy.async.shared::cta since"):
        compiler.emulate(r, shape=(128, 128, 64), mode="eager", seed=0, ptx=broken)
