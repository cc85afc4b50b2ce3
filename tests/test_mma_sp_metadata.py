"""Fragment maps (compiler/isa/mma_sp/fragments.py) and metadata rules (compiler/isa/mma_sp/metadata.py).

References: PTX ISA 9.7.14.6.2 (A fragments, closed forms per shape; B, C/D; the metadata
register: supplying threads and nibble -> row/chunk table), PTX ISA 9.7.14.5.8 (dense m16n8k16 B/C layout), 9.7.14.6.1 (the six
increasing 2:4 codes); seed 9.7.14.6.1 (invalid values, ordered values, tf32 values, 4:8 pairs).
The closed forms below are typed from the PTX ISA fragment figures, independently of the implementation.
"""
from __future__ import annotations

import itertools
import random

import pytest

from compiler.diagnostics import SpecError
from compiler.isa.mma_sp.forms import FORM_ROWS, GRANULARITIES, SparseLayout, layout_for
from compiler.isa.mma_sp.fragments import (
    a_element, a_register_word, b_element, cd_element, metadata_slot, metadata_suppliers,
)
from compiler.isa.mma_sp.metadata import (
    INVALID_NIBBLES, ORDERED_NIBBLES, PATTERNS, TF32_NIBBLES, encode_kept, expand_pattern, kept_elements,
    legal_nibbles, nibble_problem, pack_metadata, static_metadata, tile_words, unpack_metadata,
    validate_nibbles,
)

LAYOUTS: list[SparseLayout] = sorted({r.layout for r in FORM_ROWS}, key=lambda l: (l.storage_bits, l.k))
LAYOUT_IDS = [f"{l.shape}-{l.storage_bits}bit" for l in LAYOUTS]

# PTX ISA 9.7.14.6.2 (A fragments) "Closed form": (row, chunk, kept) of A element i in lane (g, t), keyed by (k, storage bits)
A_CLOSED_FORM = {
    (16, 16): lambda g, t, i: (g + 8 * (i >> 1), t, i & 1),
    (32, 16): lambda g, t, i: (g + 8 * ((i >> 1) & 1), t + 4 * (i >> 2), i & 1),
    (8, 32): lambda g, t, i: (g + 8 * i, t, 0),
    (16, 32): lambda g, t, i: (g + 8 * (i & 1), t + 4 * (i >> 1), 0),
    (32, 8): lambda g, t, i: (g + 8 * (i >> 2), 2 * t + ((i >> 1) & 1), i & 1),
    (64, 8): lambda g, t, i: (g + 8 * ((i >> 2) & 1), 2 * t + ((i >> 1) & 1) + 8 * (i >> 3), i & 1),
    (64, 4): lambda g, t, i: (g + 8 * (i >> 3), 2 * t + ((i >> 2) & 1), i & 3),
    (128, 4): lambda g, t, i: (g + 8 * ((i >> 3) & 1), 2 * t + ((i >> 2) & 1) + 8 * (i >> 4), i & 3),
}


def lanes():
    return [(lane, lane >> 2, lane & 3) for lane in range(32)]


@pytest.mark.parametrize("lay", LAYOUTS, ids=LAYOUT_IDS)
def test_a_fragment_matches_digest_closed_form(lay):
    closed = A_CLOSED_FORM[(lay.k, lay.storage_bits)]
    seen = set()
    for lane, g, t in lanes():
        for i in range(lay.a_regs * lay.elems_per_reg):
            got = a_element(lay, lane, i)
            assert got == closed(g, t, i), (lane, i)
            seen.add(got)
    # every kept element of the 16-row tile is held by exactly one lane
    assert len(seen) == 16 * lay.chunks_per_row * lay.granularity.kept_elements


def test_a_fragment_rows_of_digest_table():
    # PTX ISA 9.7.14.6.2 (A fragments) table, m16n8k16 f16: reg 0 = row g, chunk t (low half = 1st kept), reg 1 = row g+8
    lay = layout_for("f16", "m16n8k16")
    assert [a_element(lay, 4 * 3 + 2, i) for i in range(4)] == [(3, 2, 0), (3, 2, 1), (11, 2, 0), (11, 2, 1)]
    # s8 m16n8k32 reg 0 of lane (g=1, t=3): bytes = chunks 6, 7 (dense cols 24..31) of row 1
    lay = layout_for("s8", "m16n8k32")
    assert [a_element(lay, 7, i) for i in range(4)] == [(1, 6, 0), (1, 6, 1), (1, 7, 0), (1, 7, 1)]
    # register view: A register j = word t + 4*(j>>1) of compressed row g + 8*(j&1)
    assert [a_register_word(7, j) for j in range(4)] == [(1, 3), (9, 3), (1, 7), (9, 7)]


@pytest.mark.parametrize("lay", LAYOUTS, ids=LAYOUT_IDS)
def test_b_fragment(lay):
    epr = lay.elems_per_reg
    seen = set()
    for lane, g, t in lanes():
        for i in range(lay.b_regs * epr):
            # PTX ISA 9.7.14.6.2 (B, C/D fragments): k = t*epr + (i % epr) + (i / epr)*4*epr, n = g
            assert b_element(lay, lane, i) == (t * epr + i % epr + (i // epr) * 4 * epr, g)
            seen.add(b_element(lay, lane, i))
    assert seen == {(k, n) for k in range(lay.k) for n in range(8)}


def test_b_fragment_equals_dense_m16n8k16():
    # PTX ISA 9.7.14.5.8 (mma.m16n8k16) dense m16n8k16 B: element i -> k = 2t + (i&1) + 8*(i>>1), n = g
    lay = layout_for("f16", "m16n8k16")
    for lane, g, t in lanes():
        assert [b_element(lay, lane, i) for i in range(4)] == \
            [(2 * t + (i & 1) + 8 * (i >> 1), g) for i in range(4)]


def test_cd_fragment():
    # PTX ISA 9.7.14.6.2 (B, C/D fragments); PTX ISA 9.7.14.5.8 (mma.m16n8k16): c_i at row g + 8*(i>>1), col 2t + (i&1); covers the 16 x 8 tile once
    cells = [cd_element(lane, i) for lane in range(32) for i in range(4)]
    assert sorted(cells) == [(r, c) for r in range(16) for c in range(8)]
    assert cd_element(4 * 5 + 3, 3) == (13, 7)


# PTX ISA 9.7.14.6.2 (metadata fragments) table: for a layout, selector -> {(lane, nibble): (row, chunk)} over the supplying lanes.
def digest_metadata_map(lay: SparseLayout, sel: int) -> dict[tuple[int, int], tuple[int, int]]:
    out = {}
    for lane, g, t in lanes():
        for n in range(8):
            if lay.storage_bits >= 16 and lay.chunks_per_row == 4:        # f16 k16, tf32 k8
                if t == sel:
                    out[lane, n] = (g + 8 * (n >> 2), n & 3)
            elif lay.storage_bits >= 16:                                   # f16 k32, tf32 k16
                if t in (2 * sel, 2 * sel + 1):
                    p = t & 1
                    out[lane, n] = (g + 8 * (n >> 2), 4 * p + (n & 3))
            elif lay.chunks_per_row == 8:                                  # s8 k32, s4 k64
                if t in (2 * sel, 2 * sel + 1):
                    p = t & 1
                    out[lane, n] = (g + 8 * p, n)
            else:                                                          # 16 chunks: all four
                out[lane, n] = (g + 8 * (t & 1), 8 * (t >> 1) + n)
    return out


@pytest.mark.parametrize("lay", LAYOUTS, ids=LAYOUT_IDS)
def test_metadata_slots_match_digest_for_every_selector(lay):
    rng = random.Random(lay.k * 100 + lay.storage_bits)
    codes = legal_nibbles(lay)
    nib = [[rng.choice(codes) for _ in range(lay.chunks_per_row)] for _ in range(16)]
    words = pack_metadata(lay, nib)
    for sel in lay.selectors:
        table = digest_metadata_map(lay, sel)
        # the supplying lanes describe every (row, chunk) of the tile exactly once
        assert sorted(table.values()) == [(r, c) for r in range(16) for c in range(lay.chunks_per_row)]
        assert {lane & 3 for lane, _ in table} == set(metadata_suppliers(lay, sel))
        for (lane, n), (r, c) in table.items():
            assert metadata_slot(lay, lane, n) == (r, c)
            assert (words[lane] >> (4 * n)) & 0xF == nib[r][c]


@pytest.mark.parametrize("lay", LAYOUTS, ids=LAYOUT_IDS)
def test_metadata_word_is_selector_independent(lay):
    # PTX ISA 9.7.14.6.2 (metadata fragments): one-thread forms carry the same word in all four threads, pair forms in t and t^2
    rng = random.Random(7)
    nib = [[rng.choice(legal_nibbles(lay)) for _ in range(lay.chunks_per_row)] for _ in range(16)]
    words = pack_metadata(lay, nib)
    partner = {1: lambda t: [0, 1, 2, 3], 2: lambda t: [t, t ^ 2], 4: lambda t: [t]}[lay.metadata_suppliers]
    for lane, g, t in lanes():
        assert {words[4 * g + u] for u in partner(t)} == {words[lane]}
    assert unpack_metadata(lay, words) == nib


def test_unpack_detects_disagreeing_copies():
    lay = layout_for("f16", "m16n8k16")
    words = pack_metadata(lay, [[0b0100] * 4] * 16)
    words[1] ^= 0b1100      # lane 1 is a copy of lane 0 for the one-thread form
    with pytest.raises(SpecError, match="disagree"):
        unpack_metadata(lay, words)


# ---------------------------------------------------------------------------------------------------
# nibble values (seed 9.7.14.6.1)

@pytest.mark.parametrize("lay", LAYOUTS, ids=LAYOUT_IDS)
def test_invalid_nibbles_rejected_everywhere(lay):
    for code in INVALID_NIBBLES:          # 0b0000, 0b0101, 0b1010, 0b1111
        for ordered in (True, False):
            assert nibble_problem(lay, code, ordered) is not None


def test_ordered_codes_are_the_six_increasing_pairs():
    lay = layout_for("s8", "m16n8k32")
    # PTX ISA 9.7.16.10.8.1: 0b0100 (0,1), 0b1000 (0,2), 0b1100 (0,3), 0b1001 (1,2), 0b1101 (1,3), 0b1110 (2,3)
    assert sorted(legal_nibbles(lay, ordered=True)) == sorted([0b0100, 0b1000, 0b1100, 0b1001, 0b1101, 0b1110])
    assert sorted(ORDERED_NIBBLES) == sorted(legal_nibbles(lay))
    # plain .sp: any two distinct indices (16 codes minus the four invalid ones)
    assert sorted(legal_nibbles(lay, ordered=False)) == sorted(set(range(16)) - INVALID_NIBBLES)
    for code in set(range(16)) - INVALID_NIBBLES - set(ORDERED_NIBBLES):
        assert "decreasing" in nibble_problem(lay, code, ordered=True)
        assert nibble_problem(lay, code, ordered=False) is None


def test_tf32_codes():
    lay = layout_for("tf32", "m16n8k8")
    for ordered in (True, False):
        assert sorted(legal_nibbles(lay, ordered)) == sorted(TF32_NIBBLES)       # 0b0100, 0b1110 only
        for code in set(range(16)) - set(TF32_NIBBLES):
            assert nibble_problem(lay, code, ordered) is not None


def test_validate_names_row_and_chunk():
    lay = layout_for("f16", "m16n8k32")
    nib = [[0b0100] * 8 for _ in range(16)]
    nib[3][5] = 0b0101
    with pytest.raises(SpecError) as e:
        validate_nibbles(lay, nib)
    assert "row 3, chunk 5 (columns 20..23)" in e.value.message and e.value.field == "sparsity.metadata"
    nib[3][5] = 0b0001                     # (1, 0): decreasing, fine for plain .sp only
    validate_nibbles(lay, nib, ordered=False)
    with pytest.raises(SpecError, match="row 3, chunk 5"):
        validate_nibbles(lay, nib, ordered=True)


@pytest.mark.parametrize("gran,kept,code", [
    # 2:4: two element indices (PTX ISA 9.7.16.10.8.1 list)
    ("2:4", (0, 1), 0b0100), ("2:4", (0, 2), 0b1000), ("2:4", (3, 0), 0b1100), ("2:4", (1, 2), 0b1001),
    ("2:4", (1, 3), 0b1101), ("2:4", (2, 3), 0b1110),
    # 1:2: 0b0100 = element 0, 0b1110 = element 1 (seed tf32 paragraph)
    ("1:2", (0,), 0b0100), ("1:2", (1,), 0b1110),
    # 4:8: indices of the two kept pairs (seed u4/s4 paragraph): pairs (0, 1) and (1, 3)
    ("4:8", (0, 1, 2, 3), 0b0100), ("4:8", (2, 3, 6, 7), 0b1101), ("4:8", (0, 1, 6, 7), 0b1100),
])
def test_encode_kept(gran, kept, code):
    lay = next(l for l in LAYOUTS if l.granularity.name == gran)
    assert encode_kept(lay, kept) == code
    assert kept_elements(lay, code) == tuple(sorted(kept))


@pytest.mark.parametrize("gran,kept,message", [
    ("4:8", (1, 2, 4, 5), "aligned pairs"), ("4:8", (0, 2, 4, 6), "aligned pairs"),
    ("2:4", (0, 0), "distinct"), ("2:4", (0, 4), "0..3"), ("2:4", (1,), "keeps 2"),
    ("1:2", (0, 1), "keeps 1"),
])
def test_encode_kept_errors(gran, kept, message):
    lay = next(l for l in LAYOUTS if l.granularity.name == gran)
    with pytest.raises(SpecError, match=message):
        encode_kept(lay, kept)


@pytest.mark.parametrize("lay", LAYOUTS, ids=LAYOUT_IDS)
def test_kept_elements_round_trip(lay):
    for code in legal_nibbles(lay):
        kept = kept_elements(lay, code)
        assert len(kept) == lay.granularity.kept_elements
        assert encode_kept(lay, kept) == code


# ---------------------------------------------------------------------------------------------------
# patterns

@pytest.mark.parametrize("lay", LAYOUTS, ids=LAYOUT_IDS)
def test_named_patterns(lay):
    m, k = 32, 2 * lay.k
    nch = k // lay.granularity.chunk
    assert expand_pattern(lay, "first_two", m, k) == [[0b0100] * nch] * m
    assert expand_pattern(lay, "last_two", m, k) == [[0b1110] * nch] * m
    alt = expand_pattern(lay, "alternate", m, k)
    if lay.granularity.name == "1:2":       # no (0, 2) code for tf32: element 0 / element 1 along K
        assert alt[5][:4] == [0b0100, 0b1110, 0b0100, 0b1110]
    else:
        assert alt == [[0b1000] * nch] * m
    rot = expand_pattern(lay, "rotate", m, k)
    codes = legal_nibbles(lay)
    assert {c for row in rot for c in row} == set(codes)
    assert rot[2][3] == codes[5 % len(codes)]
    for p in PATTERNS:
        validate_nibbles(lay, expand_pattern(lay, p, m, k))


def test_explicit_pattern_cycles():
    lay = layout_for("f16", "m16n8k16")
    nib = expand_pattern(lay, [[(0, 1), (1, 3)], [(2, 3)]], 4, 16)
    assert nib == [[0b0100, 0b1101, 0b0100, 0b1101], [0b1110] * 4,
                   [0b0100, 0b1101, 0b0100, 0b1101], [0b1110] * 4]
    with pytest.raises(SpecError, match="pattern row 1, entry 0"):
        expand_pattern(lay, [[(0, 1)], [(1, 1)]], 4, 16)
    with pytest.raises(SpecError, match="unknown sparsity pattern"):
        expand_pattern(lay, "zigzag", 16, 16)
    with pytest.raises(SpecError) as e:
        expand_pattern(lay, "first_two", 16, 18)
    assert e.value.field == "shape.K"


@pytest.mark.parametrize("lay", LAYOUTS, ids=LAYOUT_IDS)
@pytest.mark.parametrize("pattern", ["rotate", "alternate", "explicit"])
def test_static_metadata_tiles_the_pattern(lay, pattern):
    if pattern == "explicit":
        kept = [kept_elements(lay, c) for c in legal_nibbles(lay)]
        pattern = [kept[:3], kept[1:2], kept[::-1]]        # rows cycle with period 3
    table = static_metadata(lay, pattern)
    pm, pk = len(table), len(table[0])
    m, k = 16 * pm * 2, lay.k * pk * 3
    full = tile_words(lay, expand_pattern(lay, pattern, m, k))
    for mt, ks in itertools.product(range(m // 16), range(k // lay.k)):
        assert list(table[mt % pm][ks % pk]) == full[mt][ks]


def test_granularity_table():
    # seed 9.7.14.6.1: chunk widths 4 (2:4), 2 (1:2), 8 (4:8 in pairs); half of each chunk kept
    assert {(g.name, g.chunk, g.kept_elements, g.pairwise) for g in GRANULARITIES.values()} == \
        {("2:4", 4, 2, False), ("1:2", 2, 1, False), ("4:8", 8, 4, True)}
