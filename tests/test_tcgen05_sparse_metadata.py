"""Sparse tcgen05 metadata: the Tensor Memory image the kernel stages (compiler/isa/tmem.py), the
sparse-metadata-packing pass, the per-MMA selector and the emitted staging code.

Independent references:
- the reference model (compiler/sim/tcgen05.py `encode_sparse_metadata` / `decode_sparse_metadata`,
  digest §4.2: layouts D, A and F);
- CUTLASS's TMEM metadata atoms `UMMA::tmem_e_frg` / `tmem_e_frg_ws` (mma_sm100_desc.hpp), evaluated here as
  CuTe layouts: virtual offset v -> TMEM lane v % 128, bit (v // 128) * unit (unit 2 for tf32: `upcast<2>`).
  They cover .ws M = 64 / 32, which the model does not.
"""
from __future__ import annotations

import random

import numpy as np
import pytest

from compiler.diagnostics import CompileError
from compiler.driver import compile_source
from compiler.isa.tmem import (METADATA_CHUNK, data_path, metadata_format, metadata_image,
                                       pack_metadata_words)
from compiler.sim.tcgen05 import decode_sparse_metadata, encode_sparse_metadata

KINDS = ("f16", "tf32", "f8f6f4", "i8", "mxf8f6f4", "mxf4", "mxf4nvf4")
# 9.7.16.10.8.2/.3 codes (only the six increasing pairs, digest §9.2); tf32 keeps 0b0100 / 0b1110.
CODES = {"tf32": (0b0100, 0b1110)}
ORDERED = (0b0100, 0b1000, 0b1100, 0b1001, 0b1101, 0b1110)
# Dense K of one sparse MMA (Table 39) / elements per chunk = chunks (codes) per MMA per row.
CHUNKS_PER_MMA = {"f16": 8, "tf32": 8, "f8f6f4": 16, "i8": 16, "mxf8f6f4": 16, "mxf4": 16, "mxf4nvf4": 16}


def random_codes(kind: str, rows: int, chunks: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    legal = CODES.get(kind, ORDERED)
    return [[rng.choice(legal) for _ in range(chunks)] for _ in range(rows)]


def image_array(image: dict, columns: int) -> np.ndarray:
    out = np.zeros((128, columns), dtype=np.uint64)
    for (lane, col), v in image.items():
        out[lane, col] = v
    return out


# --------------------------------------------------------------------------------------------------
# The image against the reference model (layouts D, A, F; one MMA)

@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("m, cta_group", [(128, 1), (64, 1), (256, 2)])
def test_image_matches_reference_model(kind, m, cta_group):
    if kind.startswith("mx") and (m, cta_group) == (64, 1):
        pytest.skip("Table 39: block-scaled kinds have no M = 64")
    dp = data_path(m, cta_group, sparse=True)
    codes = random_codes(kind, dp.rows, CHUNKS_PER_MMA[kind], seed=m + len(kind))
    words = [pack_metadata_words(row) for row in codes]       # natural words of one MMA
    image = image_array(metadata_image(kind, dp, words), len(words[0]))
    got = decode_sparse_metadata(image, kind, m, selector=0, cta_group=cta_group)
    per_cta = np.asarray(got)[:dp.rows] if cta_group == 2 else np.asarray(got)
    assert (per_cta == np.asarray(codes)).all()
    if cta_group == 1:
        # and the model's own encoder puts every code where the image does
        ref = np.asarray(encode_sparse_metadata(np.asarray(codes, dtype=np.uint64), kind, m), dtype=np.uint64)
        for lane in {lane for lane, _ in metadata_image(kind, dp, words)}:
            assert (ref[lane, :image.shape[1]] == image[lane]).all(), lane


def test_f16_pair_of_mmas_shares_a_granule():
    """digest §4.3: two f16 MMAs use columns 2j and 2j+1; the even address is passed and the selector is
    the parity. The model reads column (address + selector)."""
    fmt = metadata_format("f16")
    assert [fmt.selector_and_column(s) for s in range(4)] == [(0, 0), (1, 0), (0, 2), (1, 2)]
    assert [metadata_format("i8").selector_and_column(s) for s in range(3)] == [(0, 0), (0, 2), (0, 4)]
    dp = data_path(128, 1, sparse=True)
    codes = random_codes("f16", 128, 16, seed=7)                # two MMAs: words 0 and 1 of each row
    words = [pack_metadata_words(row) for row in codes]
    image = image_array(metadata_image("f16", dp, words), 2)
    for step in (0, 1):
        got = decode_sparse_metadata(image, "f16", 128, selector=step)
        assert (np.asarray(got) == np.asarray(codes)[:, 8 * step:8 * step + 8]).all()


# --------------------------------------------------------------------------------------------------
# The image against CUTLASS's metadata atoms (every M, .ws included)

def _size(shape) -> int:
    return shape if isinstance(shape, int) else int(np.prod([_size(s) for s in shape]))


def cute_offset(shape, stride, coord: int) -> int:
    """A CuTe layout mode (nested shape/stride tuples) at a flat coordinate (colexicographic order)."""
    if isinstance(shape, int):
        return coord * stride
    total = 0
    for s, d in zip(shape, stride):
        total += cute_offset(s, d, coord % _size(s))
        coord //= _size(s)
    return total


# (format, M) -> (M mode, K mode, replication mode or None, bit unit): CUTLASS tmem_e_frg (M = 128) and
# tmem_e_frg_ws (M = 128 / 64 / 32), virtual addressing DP stride 1, column (bit) stride 128.
_F16_M = {128: (((8, 2, 8), (1, 2048, 16)), None),
          64: (((8, 2, 4), (1, 2048, 16)), (2, 64)),
          32: (((8, 2, 2), (1, 2048, 16)), (4, 32))}
CUTE_ATOMS = {}
for _m, (_mode, _rep) in _F16_M.items():
    CUTE_ATOMS[("f16", _m)] = (_mode, ((16, 2), (128, 8)), _rep, 1)                  # FP16: 128x32 atom
    CUTE_ATOMS[("tf32", _m)] = ((_mode[0], (1, 1024, 16)), ((8, 2), (128, 8)), _rep, 2)   # TF32, upcast<2>
CUTE_ATOMS[("i8", 128)] = ((128, 1), (64, 128), None, 1)                                 # S8|F8: 128x64
CUTE_ATOMS[("i8", 64)] = ((64, 1), (64, 128), (2, 64), 1)                                # Shape<_64,(_64,_2)>
CUTE_ATOMS[("i8", 32)] = ((32, 1), (64, 128), (4, 32), 1)                                # Shape<_32,(_64,_4)>


@pytest.mark.parametrize("fmt_kind, m", sorted(CUTE_ATOMS))
def test_ws_image_matches_cutlass_atoms(fmt_kind, m):
    (m_shape, m_stride), (k_shape, k_stride), rep, unit = CUTE_ATOMS[(fmt_kind, m)]
    dp = data_path(m, 1, sparse=True, ws=True)
    chunk = METADATA_CHUNK[fmt_kind]
    codes = random_codes(fmt_kind, m, CHUNKS_PER_MMA[fmt_kind], seed=m)
    image = metadata_image(fmt_kind, dp, [pack_metadata_words(r) for r in codes])
    for row in range(m):
        for c, code in enumerate(codes[row]):
            k = c * chunk                                     # the chunk's first dense element
            v = cute_offset(m_shape, m_stride, row) + cute_offset(k_shape, k_stride, k)
            lanes = [v % 128 + (rep[1] * r if rep else 0) for r in range(rep[0] if rep else 1)]
            bit = (v // 128) * unit
            for lane in lanes:
                cell = image[(lane, bit // 32)]
                assert (cell >> (bit % 32)) & 0xF == code, (row, c, lane, bit)


# --------------------------------------------------------------------------------------------------
# The pass

def compile_tile(kind_line: str, a: str, m: int, k: int, sparsity: str, loop: int | None = None,
                 extra: str = "", target: str = "sm_100a", passes=None):
    types = {"f16": ("f16", "f32"), "tf32": ("tf32", "f32"), "i8": ("s8", "s32"), "f8f6f4": ("e4m3", "f32")}
    t, d = types.get(a, (a, "f32"))
    text = (f"target {target};\ntile t {{\n  engine tcgen05 {kind_line};\n  shape M={m} N=64 K={k};\n"
            f"  loop K={loop or 2 * k};\n  A: {t} smem;\n  B: {t} smem;\n  D: {d} tmem;\n  {sparsity}\n{extra}}}\n")
    return compile_source(text, "t.tile", passes=passes)


def test_static_first_two_packs_to_one_word():
    """first_two keeps elements 0,1 of every chunk: code 0b0100 (9.7.16.10.8.2) in all 8 nibbles of a word,
    0x44444444; period 1 row x 1 word."""
    r = compile_tile("kind=f16", "f16", 128, 32, "sparsity 2:4 pattern=first_two;")
    meta = r.tiles["t"].facts["tcgen05_metadata"]
    assert meta.source == "static" and meta.table == ((0x44444444,),)
    assert ".global .align 4 .b32 t_meta[1] = {0x44444444};" in r.ptx


def test_static_rotate_period():
    """rotate: code (r + c) % 6 of the six ordered codes; the table repeats every 6 rows and
    lcm(6, 8) / 8 = 3 words (24 chunks)."""
    r = compile_tile("kind=i8", "i8", 128, 64, "sparsity 2:4 pattern=rotate;")
    meta = r.tiles["t"].facts["tcgen05_metadata"]
    assert (meta.period_rows, meta.period_words) == (6, 3)
    for row in range(12):
        for w in range(6):
            word = meta.word(row, w)
            for i in range(8):
                assert (word >> 4 * i) & 0xF == ORDERED[(row + 8 * w + i) % 6]


def test_runtime_metadata_parameter_and_words_per_row():
    """ABI: META uint32 [m_total][K / (8 * chunk)]: i8 loop K=256 -> 256 / 32 = 8 words per row."""
    r = compile_tile("kind=i8", "i8", 128, 64, "sparsity 2:4 metadata=runtime;", loop=256)
    meta = r.tiles["t"].facts["tcgen05_metadata"]
    assert meta.words_per_row == 8
    params = [p["name"] for p in r.to_json()["tiles"]["t"]["kernel"]["params"]]
    assert params == ["A", "B", "D", "META", "m_total", "n_total"]


def test_f16_selector_alternates_per_mma():
    """Table 42 bits 0-1 = column parity: steps 0,1,2,3 of a stage get selectors 0,1,0,1 and read
    metadata columns 0,0,2,2 of the region. idesc for f16 -> f32, M=128, N=64, sparse (bit 2):
    F32 (1<<4) | F16 A,B (0) | N>>3=8 (<<17) | M>>4=8 (<<24) | 1<<2 = 0x08100014."""
    r = compile_tile("kind=f16", "f16", 128, 32, "sparsity 2:4 metadata=runtime;", loop=128)
    idesc = r.tiles["t"].op("tilec.instr_desc")
    assert [int(v) for v in idesc.attrs["step_values"]] == [0x08100014, 0x08100015, 0x08100014, 0x08100015]
    plan = r.tiles["t"].facts["tmem_plan"]
    mma_lines = [ln for ln in r.ptx.splitlines() if "tcgen05.mma.sp" in ln]
    assert len(mma_lines) == 4
    meta_adds = [ln for ln in r.ptx.splitlines() if ln.strip().startswith("add.u32") and f", {plan.meta}" in ln
                 or f", {plan.meta + 2};" in ln]
    assert any(ln.strip().endswith(f", {plan.meta};") for ln in meta_adds)
    assert any(ln.strip().endswith(f", {plan.meta + 2};") for ln in meta_adds)


def test_8bit_kinds_use_two_columns_and_selector_zero():
    """digest §4.2: 8-bit kinds one lane per row, two columns per MMA, selector 0 (one idesc value)."""
    r = compile_tile("kind=i8", "i8", 128, 64, "sparsity 2:4 metadata=runtime;", loop=256)
    idesc = r.tiles["t"].op("tilec.instr_desc")
    assert "step_values" not in idesc.attrs
    plan = r.tiles["t"].facts["tmem_plan"]
    steps = r.tiles["t"].facts["k_block"] // 64
    assert plan.meta_columns == 2 * steps


@pytest.mark.parametrize("sparsity, message", [
    ("sparsity 2:4 rows=[[0:1, 1:1]];", "keeps 2 distinct"),
    ("sparsity 2:4 pattern=nope;", "unknown sparsity pattern"),
])
def test_invalid_static_metadata_is_located(sparsity, message):
    """The nibble rules of 9.7.14.6.1 / 9.7.16.10.8 (compiler/isa/mma_sp/metadata.py validators) apply."""
    with pytest.raises(CompileError) as exc:
        compile_tile("kind=f16", "f16", 128, 32, sparsity)
    diag = exc.value.diagnostics[0]
    assert message in diag.message and diag.loc is not None and diag.loc.line == 9


def test_tf32_pattern_rules():
    """tf32 is 1:2: a chunk keeps one element (codes 0b0100 / 0b1110 only); two kept is rejected."""
    r = compile_tile("kind=tf32", "tf32", 128, 16, "sparsity 1:2 rows=[[0], [1]];")
    meta = r.tiles["t"].facts["tcgen05_metadata"]
    assert meta.table == ((0x44444444,), (0xEEEEEEEE,))
    with pytest.raises(CompileError):
        compile_tile("kind=tf32", "tf32", 128, 16, "sparsity 1:2 rows=[[0:1]];")


def test_staging_code_shape():
    """The kernel stages metadata with tcgen05.st.32x32b (thread t -> lane t, 9.7.16.8.4) once per stage and
    waits for the stores before the MMAs (tcgen05.wait::st, 9.7.16.8.5)."""
    r = compile_tile("kind=f16", "f16", 64, 32, "sparsity 2:4 metadata=runtime;", loop=64)
    ptx = r.ptx
    st = ptx.index("tcgen05.st.sync.aligned.32x32b.x2.b32")
    assert st < ptx.index("tcgen05.wait::st.sync.aligned") < ptx.index("tcgen05.mma.sp")
    # shared16 format: two rows (m, m+8) per cell, halves picked by bit 3 of the logical lane
    assert "bfe.u32" in ptx and "and.b32" in ptx and "or.b32" in ptx


# --------------------------------------------------------------------------------------------------
# The other TMEM layouts of compiler/isa/tmem.py against CUTLASS's atoms (same CuTe evaluation)

def test_data_path_table():
    """PTX 9.7.16.10.5 table: (M, cta_group, sparsity, .ws) -> layout id."""
    cases = {(32, 1, False, True): "G", (32, 1, True, True): "G", (64, 1, False, True): "E",
             (64, 1, True, True): "E", (64, 1, False, False): "F", (64, 1, True, False): "F",
             (128, 1, False, False): "D", (128, 1, True, True): "D", (128, 2, False, False): "B",
             (128, 2, True, False): "C", (256, 2, False, False): "A", (256, 2, True, False): "A"}
    for (m, g, sp, ws), letter in cases.items():
        assert data_path(m, g, sp, ws).layout == letter, (m, g, sp, ws)


# D atoms (CUTLASS UMMA::tmem_frg / tmem_frg_ws), virtual offset v -> (lane v % 128, column v // 128)
D_ATOMS = {
    "D": lambda n: ((128, 1), (n, 128)),
    "F": lambda n: (((16, 4), (1, 32)), (n, 128)),
    "E": lambda n: ((64, 1), ((n // 2, 2), (128, 64))),
    "B": lambda n: ((64, 1), ((n // 2, 2), (128, 64))),
    "G": lambda n: ((32, 1), ((n // 4, 4), (128, 32))),
}


@pytest.mark.parametrize("m, g, sp, ws", [(128, 1, False, False), (64, 1, False, False), (64, 1, False, True),
                                          (32, 1, False, True), (128, 2, False, False)])
@pytest.mark.parametrize("n", [64, 128, 256])
def test_d_cells_match_cutlass(m, g, sp, ws, n):
    dp = data_path(m, g, sp, ws)
    (ms, mst), (ns, nst) = D_ATOMS[dp.layout](n)
    for row in range(dp.rows):
        for col in range(0, n, 7):
            v = cute_offset(ms, mst, row) + cute_offset(ns, nst, col)
            assert dp.d_cell(row, col, n) == (v % 128, v // 128), (row, col)
            lane, column = v % 128, v // 128
            assert dp.lane_d_role(lane, n) == (row, col - column)


@pytest.mark.parametrize("kind, vec, rows, n, halves", [
    ("mxf8f6f4", "scale_vec::1X", 128, 64, 1), ("mxf4", "block32", 128, 96, 1),
    ("mxf4nvf4", "block16", 128, 256, 1), ("mxf8f6f4", "block32", 64, 128, 2)])
def test_scale_layout_matches_cutlass_tmem_sf_frg(kind, vec, rows, n, halves):
    """CUTLASS tmem_sf_frg: SFA / SFB (4x1) ((32, MN/32), 4):((1, 512), 32), SFB of the 2x2 data path
    ((32, MN/64), 2, 2):((1, 512), 64, 32); factor f of an MMA at +128 (the next byte). Byte-column
    address -> lane v % 128, 32-bit column (v // 128) // 4, byte (v // 128) % 4."""
    from compiler.isa.tmem import scale_layouts

    dp = data_path(rows * (2 if halves == 2 else 1), 2 if halves == 2 else 1)
    sfa, sfb = scale_layouts(kind, vec, dp, n)
    for lay, extent, two_by_two in ((sfa, dp.rows, False), (sfb, n, halves == 2)):
        for index in range(extent):
            if two_by_two:
                h, rest = divmod(index, extent // 2)
                r1, r0 = divmod(rest, 32)
                vs = [r0 + 512 * r1 + 64 * h + 32 * rep for rep in range(2)]
            else:
                r1, r0 = divmod(index, 32)
                vs = [r0 + 512 * r1 + 32 * rep for rep in range(4)]
            for f in range(lay.nsf):
                want = sorted((v % 128, (v + 128 * f) // 128 // 4, (v + 128 * f) // 128 % 4) for v in vs)
                got = sorted((lane, col, f) for lane, col in lay.lanes_of(index, extent))
                assert got == want, (index, f)
            for lane, col in lay.lanes_of(index, extent):
                assert lay.lane_index(lane, col, extent) == index


# --------------------------------------------------------------------------------------------------
# The IR's static metadata table (issue 15 item 9: the IR once printed partial words)

def _ir_metadata_words(r) -> tuple[list[str], list[int]]:
    """The `words = [...]` tokens of the tile's printed tilec.metadata op, and its `period`."""
    import re

    line = next(ln for ln in r.ir().splitlines() if ln.strip().startswith("tilec.metadata "))
    words = re.search(r"words = \[([^\]]*)\]", line).group(1).split(", ")
    period = [int(p) for p in re.search(r"period = \[([^\]]*)\]", line).group(1).split(", ")]
    return words, period


@pytest.mark.parametrize("kind,a,k,sparsity,codes", [
    # rotate: row r, chunk c keeps ORDERED[(r + c) % 6]; 6 rows x lcm(6, 8) / 8 = 3 words (24 chunks)
    ("kind=i8", "i8", 64, "sparsity 2:4 pattern=rotate;", lambda r, c: ORDERED[(r + c) % 6]),
    # rows given: row 0 cycles (0:1) -> 0b0100 = 0x4, (2:3) -> 0b1110 = 0xe; row 1 is (1:3) -> 0b1101 = 0xd
    # (9.7.16.10.8.2: bits 1:0 = first kept index, bits 3:2 = second)
    ("kind=f16", "f16", 32, "sparsity 2:4 rows=[[0:1, 2:3], [1:3]];",
     lambda r, c: (0x4, 0xE)[c % 2] if r % 2 == 0 else 0xD),
])
def test_ir_prints_full_static_metadata_words(kind, a, k, sparsity, codes):
    """A static tcgen05 tile's IR prints every metadata word as a full 32-bit value (8 hex digits, chunk
    8w+i's 4-bit code in bits 4i+3..4i, PTX ISA 9.7.16.10.8.2), the table has period[0] x period[1] words
    in row-major order, and those words are the `<tile>_meta` table the kernel embeds and reads."""
    import re

    r = compile_tile(kind, a, 128, k, sparsity)
    tokens, (rows, words_per_row) = _ir_metadata_words(r)
    assert len(tokens) == rows * words_per_row
    assert all(re.fullmatch(r"0x[0-9a-f]{8}", t) for t in tokens), tokens
    printed = [int(t, 16) for t in tokens]
    expected = [sum(codes(row, 8 * w + i) << 4 * i for i in range(8))
                for row in range(rows) for w in range(words_per_row)]
    assert printed == expected
    # the kernel's table: `.global .align 4 .b32 t_meta[n] = {...}`, the same words in the same order
    m = re.search(r"\.global \.align 4 \.b32 t_meta\[(\d+)\] = \{([^}]*)\};", r.ptx)
    assert int(m.group(1)) == len(printed)
    assert [int(w, 16) for w in m.group(2).split(", ")] == printed
    # and the IR round-trips: reading the printed IR back gives the same table
    from compiler.driver import compile_ir

    again = compile_ir(r.ir(), "t.ir", passes=[])
    assert _ir_metadata_words(again)[0] == tokens
