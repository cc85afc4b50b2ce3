"""Per-lane fragment maps of the warp-level sparse MMA (PTX ISA 9.7.14.6.2).

Notation (9.7.14.6.2): `lane` = %laneid, `g = lane >> 2` (groupID), `t = lane & 3` (threadID_in_group).
Elements inside a 32-bit register are numbered from the least-significant end. "chunk" = the
granularity's chunk of dense K elements. All functions take a `SparseLayout` (or anything with a
`.layout`, such as a `Form`) and are used by both the host packer (compiler/sparse.py) and the kernel
emitter (compiler/ptx/mma_sp_kernel.py), so the two cannot drift apart.

Register-level view (what the kernel loads). Compressed A is stored row-major as M x K/2 elements and
B as N x K ("B transposed", K contiguous); every A/B register is then one aligned 32-bit word:
  A register j  = word `t + 4*(j >> 1)` of compressed row `g + 8*(j & 1)`   (within one 16 x k/2 tile)
  B register j  = word `t + 4*j` of B^T row `g`                              (within one k x 8 tile)
This is the element-level table of PTX 9.7.14.6.2 grouped into registers: e.g. f16 m16n8k32 puts
(row g, chunk t) in reg 0, (row g+8, chunk t) in reg 1, (row g, chunk t+4) in reg 2, (row g+8, chunk t+4)
in reg 3, and each chunk's two kept f16 values are one word of the compressed row. The same holds for
every type because a register always carries 32 contiguous bits of compressed K.
"""
from __future__ import annotations

from functools import cache

from .forms import SHAPE_M, SparseLayout


def _layout(x) -> SparseLayout:
    return x if isinstance(x, SparseLayout) else x.layout


def lane_coords(lane: int) -> tuple[int, int]:
    """(groupID, threadID_in_group) of a lane (9.7.14.6.2)."""
    return lane >> 2, lane & 3


# --------------------------------------------------------------------------------------------------
# A (compressed) — 9.7.14.6.2.x "fragment for matrix A"
# --------------------------------------------------------------------------------------------------

def a_register_word(lane: int, reg: int) -> tuple[int, int]:
    """(row within the 16-row tile, 32-bit word index within the compressed row of the k-step)."""
    g, t = lane_coords(lane)
    return g + 8 * (reg & 1), t + 4 * (reg >> 1)


def a_element(layout, lane: int, i: int) -> tuple[int, int, int]:
    """Element i of a lane's A fragment -> (row, chunk, kept index within the chunk).

    `kept` counts the kept elements of the chunk in increasing K order (0..kept_elements-1); the
    compressed column is `chunk * kept_elements + kept`."""
    lay = _layout(layout)
    epr = lay.elems_per_reg
    row, word = a_register_word(lane, i // epr)
    ccol = word * epr + i % epr
    return (row, *divmod(ccol, lay.granularity.kept_elements))


# --------------------------------------------------------------------------------------------------
# B — same as the dense shape of equal K (PTX 9.7.14.6.2)
# --------------------------------------------------------------------------------------------------

def b_register_word(lane: int, reg: int) -> tuple[int, int]:
    """(column n of B within the 8-wide tile, 32-bit word index along K of the k-step)."""
    g, t = lane_coords(lane)
    return g, t + 4 * reg


def b_element(layout, lane: int, i: int) -> tuple[int, int]:
    """Element i of a lane's B fragment -> (k, n)."""
    epr = _layout(layout).elems_per_reg
    n, word = b_register_word(lane, i // epr)
    return word * epr + i % epr, n


# --------------------------------------------------------------------------------------------------
# C / D — 9.7.14.6.2 accumulator fragments: c_i at row g + 8*(i>>1), col 2t + (i&1)
# --------------------------------------------------------------------------------------------------

def cd_element(lane: int, i: int) -> tuple[int, int]:
    g, t = lane_coords(lane)
    return g + 8 * (i >> 1), 2 * t + (i & 1)


# --------------------------------------------------------------------------------------------------
# Metadata — PTX 9.7.14.6.2
# --------------------------------------------------------------------------------------------------

def metadata_slot(layout, lane: int, nibble: int) -> tuple[int, int]:
    """Which (row, chunk) of the 16-row tile nibble `nibble` (bits 4n+3..4n) of `e` describes in `lane`,
    ignoring the sparsity selector (PTX 9.7.14.6.2 "host-side packer").

    16/32-bit types (two rows per word): nibbles 0-3 = row g, 4-7 = row g+8, chunks 4p..4p+3 where
    p = t & (suppliers-1) (one supplier: p = 0; a pair: p = t&1).
    8/4-bit types (one row per word): row g + 8*(t&1), chunks 8*((t>>1) & (suppliers/2 - 1)) + n, i.e.
    pair forms give chunks 0-7 of row g+8p, all-four forms chunks 8*(t>>1)+0..7.
    """
    lay = _layout(layout)
    g, t = lane_coords(lane)
    sup = lay.metadata_suppliers
    if lay.rows_per_metadata_word == 2:
        return g + 8 * (nibble >> 2), 4 * (t & (sup - 1)) + (nibble & 3)
    return g + 8 * (t & 1), 8 * ((t >> 1) & (sup // 2 - 1)) + nibble


def metadata_suppliers(layout, selector: int) -> tuple[int, ...]:
    """The threads (t within each group of four) whose `e` the hardware reads for `selector`
    (9.7.14.6.1: one thread = selector; a pair = 2*selector, 2*selector+1; all four for selector 0)."""
    sup = _layout(layout).metadata_suppliers
    return tuple(range(sup * selector, sup * selector + sup))


def tile_nibble_count(layout) -> int:
    return SHAPE_M * _layout(layout).chunks_per_row


# --------------------------------------------------------------------------------------------------
# Which lanes' metadata words are copies of each other (derived from metadata_slot)
# --------------------------------------------------------------------------------------------------

def metadata_slots(layout, lane: int) -> tuple[tuple[int, int], ...]:
    """The (row, chunk) of each of the 8 nibbles of `lane`'s `e` word (metadata_slot, n = 0..7). Two lanes
    with equal tuples always carry the same word, whatever the sparsity pattern."""
    return tuple(metadata_slot(layout, lane, n) for n in range(8))


def metadata_twin(lane: int) -> int:
    """The lane of the other thread pair of `lane`'s quad (t XOR 2): the candidate copy of its word."""
    return lane ^ 2


def compact_metadata_exact(layout) -> bool:
    """Whether every lane's metadata word equals its twin's (lane ^ 2), so that 16 of the 32 words carry
    all of a (16-row tile, k-step)'s metadata. True where one or two threads of a quad supply the metadata
    (16- and 32-bit A, 8-bit A at k32, 4-bit at k64: a word's (row, chunk)s depend on t & 1 at most; PTX
    9.7.14.6.2 metadata fragments); false where all four do (8-bit A at k64, 4-bit at k128: the chunk
    block is t >> 1, so t and t ^ 2 describe different chunks)."""
    return _compact_metadata_exact(_layout(layout))


@cache
def _compact_metadata_exact(layout: SparseLayout) -> bool:
    # a fact of the layout alone, asked once per candidate by `tilec tune`'s enumeration (tens of thousands)
    return all(metadata_slots(layout, lane) == metadata_slots(layout, metadata_twin(lane)) for lane in range(32))


# The compact layout's words: word j is lane 4*(j//2) + j%2's (threads 0 and 1 of each quad).
COMPACT_METADATA_LANES = tuple(4 * (j // 2) + j % 2 for j in range(16))


def compact_metadata_word(lane: int) -> int:
    """The word of the compact layout that `lane` reads: 2*(lane//4) + lane%2 (its own word, or its twin's
    for threads 2 and 3 of a quad)."""
    return 2 * (lane >> 2) + (lane & 1)


def metadata_lanes(layout, compact: bool) -> tuple[int, ...]:
    """The lanes whose words a metadata buffer stores per (16-row tile, k-step), in order: all 32, or the
    compact 16 (ValueError unless compact_metadata_exact: the kernel emitter asks only where it holds)."""
    if compact and not compact_metadata_exact(layout):
        raise ValueError("the compact metadata layout drops words this layout needs")
    return COMPACT_METADATA_LANES if compact else tuple(range(32))
