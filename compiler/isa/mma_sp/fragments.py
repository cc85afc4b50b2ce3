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
