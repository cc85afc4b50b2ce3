"""Sparse-A metadata: nibble codes, their validation, per-lane packing and static patterns.

A nibble describes one chunk of one row of A (PTX ISA 9.7.14.6.1): bits 1:0 = first slot index,
bits 3:2 = second slot index, the four slots splitting the chunk evenly (see forms.Granularity).

Which nibbles are meaningful (9.7.14.6.1):
- 0b0000, 0b0101, 0b1010, 0b1111 (both indices equal) are invalid for every form ("undefined behavior").
- `.sp::ordered_metadata` (and every `.kind::` form): only 0b0100, 0b1000, 0b1001, 0b1100, 0b1101,
  0b1110, i.e. the six pairs with first index < second.
- tf32 (1:2): only 0b0100 (keep element 0) and 0b1110 (keep element 1), with either `.sp` flavour.
- 4:8 (s4/u4, mxf4*): the indices name two-wide sub-chunks, so kept elements must form aligned pairs.
Plain `.sp` also allows the six decreasing pairs (e.g. 0b0001) for 2:4 and 4:8.

Static patterns (`expand_pattern`). A pattern is either a name or explicit kept positions:
- "first_two": every chunk keeps its first two slots  -> nibble 0b0100 (2:4 elements 0,1; 4:8 elements
  0-3; tf32 element 0).
- "last_two":  every chunk keeps its last two slots   -> nibble 0b1110 (2:4 elements 2,3; 4:8 elements
  4-7; tf32 element 1).
- "alternate": 2:4 and 4:8 keep slots 0 and 2 in every chunk -> 0b1000 (2:4 elements 0,2; 4:8 elements
  0,1,4,5); tf32 has no such code and alternates element 0 / element 1 along K instead.
- "rotate": every legal ordered code in turn: row r, chunk c uses code number (r + c) mod (number of
  codes) of the list above (six codes; two for tf32). Exercises every code in every tile.
- explicit: a list per row (cycled over rows) of lists of per-chunk kept element offsets (cycled along K),
  offsets counted in dense elements within the chunk, e.g. for 2:4 `[[(0, 1), (1, 3)], [(2, 3)]]`;
  for 4:8 `[[(0, 1, 6, 7)]]`; for tf32 `[[(0,), (1,)]]`.
"""
from __future__ import annotations

from collections.abc import Sequence
from math import lcm

from ...diagnostics import SpecError
from .forms import SHAPE_M, Granularity, SparseLayout
from .fragments import _layout, metadata_slot

INVALID_NIBBLES = frozenset({0b0000, 0b0101, 0b1010, 0b1111})   # 9.7.14.6.1, all forms
# 9.7.14.6.1: "0b0100, 0b1000, 0b1001, 0b1100, 0b1101, 0b1110 are the meaningful values" (ordered)
ORDERED_NIBBLES = (0b0100, 0b1000, 0b1100, 0b1001, 0b1101, 0b1110)
# 9.7.14.6.1 tf32: "0b1110 and 0b0100 are the only meaningful index values"
TF32_NIBBLES = (0b0100, 0b1110)


def _slots(code: int) -> tuple[int, int]:
    return code & 3, (code >> 2) & 3


def _encode_slots(first: int, second: int) -> int:
    return first | (second << 2)


def legal_nibbles(layout, ordered: bool = True) -> tuple[int, ...]:
    """All meaningful nibbles for the layout's granularity, ordered codes first (table order)."""
    gran = _layout(layout).granularity
    codes = [c for c in ORDERED_NIBBLES if _whole_groups(gran, c)]
    if not ordered:
        codes += [_encode_slots(b, a) for a, b in map(_slots, codes) if gran.slots_per_group == 1]
    return tuple(codes)


def _whole_groups(gran: Granularity, code: int) -> bool:
    """Do the two slots cover whole kept groups? (tf32: a slot is half an element.)"""
    lo, hi = sorted(_slots(code))
    if gran.slots_per_group == 1:
        return True
    return lo % 2 == 0 and hi == lo + 1


def nibble_problem(layout, code: int, ordered: bool = True) -> str | None:
    """Why `code` is not a meaningful nibble for this layout, or None."""
    gran = _layout(layout).granularity
    if not 0 <= code <= 0xF:
        return f"value {code} does not fit in a 4-bit nibble"
    first, second = _slots(code)
    if code in INVALID_NIBBLES:
        return f"0b{code:04b} repeats index {first} (0b0000/0b0101/0b1010/0b1111 are undefined)"
    if gran.slots_per_group != 1 and code not in TF32_NIBBLES:
        return f"0b{code:04b} is not meaningful for 1:2 (tf32) sparsity: use 0b0100 or 0b1110"
    if ordered and first > second:
        return (f"0b{code:04b} has decreasing indices ({first}, {second}); .sp::ordered_metadata needs "
                f"the first index smaller")
    return None


def validate_nibbles(layout, nibbles: Sequence[Sequence[int]], ordered: bool = True,
                     row0: int = 0) -> None:
    """Raise SpecError(field="sparsity.metadata") naming the first bad (row, chunk)."""
    lay = _layout(layout)
    for r, row in enumerate(nibbles):
        for c, code in enumerate(row):
            why = nibble_problem(lay, code, ordered)
            if why:
                raise SpecError(f"metadata of row {row0 + r}, chunk {c} "
                                f"(columns {c * lay.granularity.chunk}..{(c + 1) * lay.granularity.chunk - 1}): {why}",
                                field="sparsity.metadata",
                                hint="legal values: " + ", ".join(f"0b{x:04b}" for x in legal_nibbles(lay, ordered)))


# --------------------------------------------------------------------------------------------------
# kept positions <-> nibbles
# --------------------------------------------------------------------------------------------------

def kept_elements(layout, code: int) -> tuple[int, ...]:
    """Dense element offsets within the chunk kept by a valid nibble, increasing."""
    gran = _layout(layout).granularity
    slots = sorted(_slots(code))
    groups = sorted({s // gran.slots_per_group for s in slots})
    return tuple(gr * gran.group + e for gr in groups for e in range(gran.group))


def encode_kept(layout, kept: Sequence[int], where: str = "") -> int:
    """Nibble for a chunk whose kept dense element offsets are `kept` (any order), validated."""
    gran = _layout(layout).granularity
    pos = sorted(kept)
    at = f" ({where})" if where else ""
    if len(pos) != gran.kept_elements or len(set(pos)) != len(pos) or \
            not all(isinstance(p, int) and 0 <= p < gran.chunk for p in pos):
        raise SpecError(f"{gran.name} sparsity keeps {gran.kept_elements} distinct element(s) in "
                        f"0..{gran.chunk - 1} of each chunk, not {tuple(kept)}{at}",
                        field="sparsity.pattern")
    groups = pos[::gran.group]
    if any(pos[i] != groups[i // gran.group] + i % gran.group for i in range(len(pos))) or \
            any(gr % gran.group for gr in groups):
        raise SpecError(f"{gran.name} sparsity keeps aligned pairs (0,1), (2,3), (4,5), (6,7); "
                        f"{tuple(kept)} is not two aligned pairs{at}", field="sparsity.pattern")
    slots = [gr // gran.group * gran.slots_per_group + s for gr in groups
             for s in range(gran.slots_per_group)]
    return _encode_slots(slots[0], slots[1])


# --------------------------------------------------------------------------------------------------
# Packing one 16 x k tile into per-lane words (PTX 9.7.14.6.2 "host-side packer")
# --------------------------------------------------------------------------------------------------

def pack_metadata(layout, nibbles: Sequence[Sequence[int]], ordered: bool = True) -> list[int]:
    """Per-lane 32-bit `e` words for one 16-row x k tile; nibbles[row][chunk] for 16 rows and k/chunk
    chunks. The word ignores the selector, so it is right for every legal selector (PTX 9.7.14.6.2: the
    metadata of threads the selector does not name is ignored)."""
    lay = _layout(layout)
    if len(nibbles) != SHAPE_M or any(len(r) != lay.chunks_per_row for r in nibbles):
        raise SpecError(f"metadata of one {lay.shape} tile is {SHAPE_M} rows x {lay.chunks_per_row} "
                        f"chunks", field="sparsity.metadata")
    validate_nibbles(lay, nibbles, ordered)
    words = []
    for lane in range(32):
        e = 0
        for n in range(8):
            r, c = metadata_slot(lay, lane, n)
            e |= nibbles[r][c] << (4 * n)
        words.append(e)
    return words


def unpack_metadata(layout, words: Sequence[int]) -> list[list[int]]:
    """Inverse of pack_metadata (reads every copy; raises if two copies of a nibble disagree)."""
    lay = _layout(layout)
    out: list[list[int | None]] = [[None] * lay.chunks_per_row for _ in range(SHAPE_M)]
    for lane in range(32):
        for n in range(8):
            r, c = metadata_slot(lay, lane, n)
            v = (words[lane] >> (4 * n)) & 0xF
            if out[r][c] is not None and out[r][c] != v:
                raise SpecError(f"metadata words disagree about row {r}, chunk {c}",
                                field="sparsity.metadata")
            out[r][c] = v
    return out   # type: ignore[return-value]


# --------------------------------------------------------------------------------------------------
# Static patterns
# --------------------------------------------------------------------------------------------------

def _named_pattern(lay: SparseLayout, name: str, r: int, c: int) -> int:
    codes = legal_nibbles(lay, ordered=True)
    if name == "first_two":
        return 0b0100
    if name == "last_two":
        return 0b1110
    if name == "alternate":
        return 0b1000 if 0b1000 in codes else codes[c % len(codes)]
    if name == "rotate":
        return codes[(r + c) % len(codes)]
    raise AssertionError(name)


PATTERNS = ("first_two", "last_two", "alternate", "rotate")


def expand_pattern(layout, pattern, m: int, k: int) -> list[list[int]]:
    """Nibble matrix (m rows x k/chunk chunks) of a named or explicit pattern (module docstring)."""
    lay = _layout(layout)
    chunk = lay.granularity.chunk
    if k % chunk:
        raise SpecError(f"K = {k} is not a multiple of the {lay.granularity.name} chunk ({chunk})",
                        field="shape.K")
    nch = k // chunk
    if isinstance(pattern, str):
        if pattern not in PATTERNS:
            raise SpecError(f"unknown sparsity pattern '{pattern}'", field="sparsity.pattern",
                            hint="named patterns: " + ", ".join(PATTERNS) + ", or explicit kept positions")
        return [[_named_pattern(lay, pattern, r, c) for c in range(nch)] for r in range(m)]
    rows = list(pattern)
    if not rows or any(not list(rp) for rp in rows):
        raise SpecError("an explicit sparsity pattern needs at least one row with one chunk",
                        field="sparsity.pattern")
    # encode each distinct (row pattern, chunk pattern) once, then cycle
    coded = [[encode_kept(lay, kept, f"pattern row {i}, entry {j}") for j, kept in enumerate(rp)]
             for i, rp in enumerate(rows)]
    return [[coded[r % len(coded)][c % len(coded[r % len(coded)])] for c in range(nch)] for r in range(m)]


def tile_words(layout, nibbles: Sequence[Sequence[int]], ordered: bool = True) -> list[list[list[int]]]:
    """Per-lane words for a whole m x k nibble matrix: [m/16][k/shape_k][32] (the global metadata
    layout of compiler/sparse.py)."""
    lay = _layout(layout)
    m = len(nibbles)
    cpk = lay.chunks_per_row
    nk = len(nibbles[0]) // cpk if m else 0
    return [[pack_metadata(lay, [row[ks * cpk:(ks + 1) * cpk] for row in nibbles[mt * 16:(mt + 1) * 16]],
                           ordered)
             for ks in range(nk)] for mt in range(m // SHAPE_M)]


def static_metadata(layout, pattern, ordered: bool = True) -> tuple[tuple[tuple[int, ...], ...], ...]:
    """The smallest periodic word table [pm][pk][32] of a pattern, for kernels that embed metadata:
    16-row tile mt and k-step ks use entry [mt % pm][ks % pk]."""
    lay = _layout(layout)
    if isinstance(pattern, str):
        rows_period = 1 if pattern != "rotate" else len(legal_nibbles(lay))
        chunks_period = {"rotate": len(legal_nibbles(lay)),
                         "alternate": 1 if 0b1000 in legal_nibbles(lay) else 2}.get(pattern, 1)
    else:
        rows_period = len(pattern)
        chunks_period = 1
        for rp in pattern:
            chunks_period = lcm(chunks_period, len(rp))
    pm = lcm(rows_period, SHAPE_M) // SHAPE_M
    pk = lcm(chunks_period, lay.chunks_per_row) // lay.chunks_per_row
    nib = expand_pattern(lay, pattern, pm * SHAPE_M, pk * lay.k)
    words = tile_words(lay, nib, ordered)
    return tuple(tuple(tuple(w) for w in row) for row in words)
