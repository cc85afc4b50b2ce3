"""Block-scale vector sizes and scale types, both engines (issue 14: no silently wrong kernels).

tcgen05 spells a vector size `.block16` / `.block32` (elements per scale factor) or `.scale_vec::NX` (factors
per row of one MMA); PTX ISA 9.7.16.10.9.1 makes them aliases: block32 = 1X for mxf8f6f4, = 2X for mxf4 /
mxf4nvf4; block16 = 4X (mxf4nvf4). UE4M3 scales go with 16-element vectors only (mxf4nvf4 with block16 /
4X). The scale type lives in the instruction descriptor (Table 44 bit 23), which ptxas never sees: a tile
with `vec=2X` and ue4m3 scales used to compile with exit 0 (the verifier mapped only block16/block32 to a
vector size) into a kernel whose scales mean nothing the ISA defines.

mma.sp spells its sizes 1X/2X/4X only (PTX ISA 9.7.14.3 Table 35); the legal (kind, size, scale type) rows
are compiler/isa/mma_sp/forms.py BLOCK_SCALES (Table 36), and the verifier reads the spellings from
compiler/isa/mma_sp/block_scale.py SCALE_VECTOR.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from compiler import CompileError, compile_source
from compiler.isa.tmem import scale_vector_elements

ROOT = Path(__file__).resolve().parent.parent
TCGEN05 = (ROOT / "examples" / "tcgen05_block_scaled.tile").read_text().replace("target sm_100f;", "target sm_100a;")
# (kind, A/B type, shape K of one dense MMA: Table 39) for a tcgen05 tile of the example's geometry
KINDS = {"mxf8f6f4": ("e4m3", 32), "mxf4": ("e2m1", 64), "mxf4nvf4": ("e2m1", 64)}
SPELLINGS = ("16", "32", "1X", "2X", "4X")


def tcgen05_tile(kind: str, vec: str, stype: str) -> str:
    ab, k = KINDS[kind]
    text = (TCGEN05.replace("kind=mxf4nvf4", f"kind={kind}").replace("e2m1", ab)
            .replace("K=64;", f"K={k};").replace("ue4m3", stype).replace("vec=16", f"vec={vec}"))
    assert f"vec={vec};" in text and f"SFB: {stype} tmem;" in text
    return text


def verdict(text: str) -> str:
    try:
        compile_source(text, "bs.tile")
        return "ok"
    except CompileError as e:
        return e.diagnostics[0].message


def test_scale_vec_2x_with_ue4m3_scales_is_a_located_error():
    text = tcgen05_tile("mxf4nvf4", "2X", "ue4m3")
    with pytest.raises(CompileError) as e:
        compile_source(text, "bs.tile")
    (d,) = e.value.diagnostics
    assert d.message == "kind::mxf4nvf4 with ue4m3 scales takes vectors of 16 elements, not 32"
    line = text.splitlines().index("  block_scale vec=2X;") + 1
    assert (d.loc.line, d.loc.col) == (line, len("  block_scale vec=") + 1)


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("stype", ["ue8m0", "ue4m3"])
def test_an_alias_is_accepted_exactly_when_its_block_spelling_is(kind, stype):
    """scale_vec::NX and the .blockNN it stands for (9.7.16.10.9.1) get the same verdict for every kind and
    scale type: a vector size with no alias for the kind is refused as a spelling, not as a scale type."""
    alias = {"mxf8f6f4": {"1X": "32"}, "mxf4": {"2X": "32"}, "mxf4nvf4": {"2X": "32", "4X": "16"}}[kind]
    for nx, block in alias.items():
        assert (verdict(tcgen05_tile(kind, nx, stype)) == "ok") == (verdict(tcgen05_tile(kind, block, stype)) == "ok"), \
            (kind, nx, block, stype)
    # UE4M3 scales: mxf4nvf4 with 16-element vectors only (Table 44; PTX 9.7.16.10.9.1)
    accepted = {v for v in SPELLINGS if verdict(tcgen05_tile(kind, v, stype)) == "ok"}
    want = {("mxf8f6f4", "ue8m0"): {"1X", "32"}, ("mxf4", "ue8m0"): {"2X", "32"},
            ("mxf4nvf4", "ue8m0"): {"2X", "32", "4X", "16"}, ("mxf4nvf4", "ue4m3"): {"4X", "16"}}
    assert accepted == want.get((kind, stype), set())


def test_elements_per_scale_factor():
    # the kind's dense K (Table 39) / the factors per row of one MMA (Table 54):
    # mxf8f6f4 K=32, 1X -> 32; mxf4 K=64, 2X -> 32; mxf4nvf4 K=64, 2X -> 32, 4X -> 16; K=96: block32 3 factors
    # -> 32, block16 6 factors -> 16 (9.7.16.10.7.2.4/.5)
    assert scale_vector_elements("mxf8f6f4", "scale_vec::1X") == scale_vector_elements("mxf8f6f4", "block32") == 32
    assert scale_vector_elements("mxf4", "scale_vec::2X") == scale_vector_elements("mxf4", "implicit") == 32
    assert scale_vector_elements("mxf4nvf4", "scale_vec::2X") == scale_vector_elements("mxf4nvf4", "block32") == 32
    assert scale_vector_elements("mxf4nvf4", "scale_vec::4X") == scale_vector_elements("mxf4nvf4", "block16") == 16
    assert scale_vector_elements("mxf4nvf4", "block32", k96=True) == 32
    assert scale_vector_elements("mxf4nvf4", "block16", k96=True) == 16
    assert scale_vector_elements("mxf8f6f4", "scale_vec::2X") is None       # no such pairing: the form check names it


# -- mma.sp ----------------------------------------------------------------------------------------------

def mma_sp_tile(kind: str, vec: str, stype: str) -> str:
    shape, ab = {"mxf8f6f4": (64, "e4m3"), "mxf4": (128, "e2m1"), "mxf4nvf4": (128, "e2m1")}[kind]
    return (f"target sm_120a;\ntile mx {{\n  engine mma.sp kind={kind};\n  shape M=16 N=8 K={shape};\n"
            f"  loop K={2 * shape};\n  A: {ab} global;\n  B: {ab} global;\n  C: f32 global;\n  D: f32 global;\n"
            f"  SFA: {stype} global;\n  SFB: {stype} global;\n  block_scale vec={vec};\n"
            f"  sparsity {'2:4' if kind == 'mxf8f6f4' else '4:8'};\n}}\n")


def test_mma_sp_accepts_exactly_the_rows_of_table_36():
    """Every (kind, vector size, scale type) the DSL can spell compiles iff it is a BLOCK_SCALES row the
    supported PTX reaches (mxf4nvf4 4X with ue8m0 needs PTX 9.1); block16/block32 are tcgen05's words."""
    from compiler.isa.mma_sp.forms import BLOCK_SCALES
    from compiler.isa.targets import MAX_PTX

    rows = {(s.kind, s.scale_vec, s.scale_type) for s in BLOCK_SCALES if s.min_ptx <= MAX_PTX}
    for kind in KINDS:
        for vec in SPELLINGS:
            for stype in ("ue8m0", "ue4m3"):
                got = verdict(mma_sp_tile(kind, vec, stype))
                if vec in ("16", "32"):
                    assert re.match(r"mma\.sp spells the scale vector size 1X, 2X or 4X; block\d\d is", got), got
                else:
                    assert (got == "ok") == ((kind, vec, stype) in rows), (kind, vec, stype, got)
    assert verdict(mma_sp_tile("mxf4nvf4", "2X", "ue4m3")) == \
        "kind::mxf4nvf4 has no block scale scale_vec::2X with scale type ue4m3"
