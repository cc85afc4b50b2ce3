"""Structured-sparsity granularities of a sparse A operand: how a chunk of a row is thinned out and how a
metadata nibble names what is kept. One table for both engines: warp-level `mma.sp` (PTX ISA 9.7.14.6.1
"Sparse matrix storage", seed ../shared/seeds/ptx-mma-sp-sparse-storage.txt) and `tcgen05.mma.sp` (PTX ISA
9.7.16.10.8, whose per-kind granularity isa/tcgen05_kinds.py's `sparsity` column names). The DSL's
`sparsity` ratios are these names.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Granularity:
    """How one chunk of a row of A is thinned out and how a metadata nibble names what is kept.

    A chunk of `chunk` dense elements is cut into atomic *groups* of `group` elements, of which `keep`
    groups survive. A metadata nibble holds two 2-bit *slot* indices (bits 1:0 = first, bits 3:2 =
    second, 9.7.14.6.1); the four slots split the chunk evenly, so one group covers
    `slots_per_group = 4 * group / chunk` slots:
      2:4   chunk 4, group 1 (an element),      keep 2, 1 slot per group  -> nibble = two element indices
      4:8   chunk 8, group 2 (an aligned pair), keep 2, 1 slot per group  -> nibble = two pair indices
      1:2   chunk 2, group 1 (a 32-bit element),keep 1, 2 slots per group -> 0b0100 = element 0,
                                                                              0b1110 = element 1
    """
    name: str
    chunk: int
    group: int
    keep: int
    seed_text: str             # the seed sentence this row restates

    @property
    def groups(self) -> int:
        return self.chunk // self.group

    @property
    def slots_per_group(self) -> int:
        return 4 // self.groups

    @property
    def kept_elements(self) -> int:
        return self.keep * self.group

    @property
    def pairwise(self) -> bool:
        return self.group == 2


GRANULARITIES: dict[str, Granularity] = {g.name: g for g in (
    # 9.7.14.6.1, f16/bf16, u8/s8 and f8f6f4 paragraphs: "each chunk of four adjacent elements ... has two zeros"
    Granularity("2:4", chunk=4, group=1, keep=2, seed_text="2:4: two non-zeros per 4-wide chunk"),
    # 9.7.14.6.1, tf32 paragraph: "each chunk of two adjacent elements ... has one zero and one non-zero"
    Granularity("1:2", chunk=2, group=1, keep=1, seed_text="1:2: one non-zero per 2-wide chunk"),
    # 9.7.14.6.1, u4/s4 and mxf4 paragraphs: "pair-wise structured sparse at a granularity of 4:8"
    Granularity("4:8", chunk=8, group=2, keep=2,
                seed_text="4:8 pairwise: two non-zero aligned pairs per 8-wide chunk"),
)}
