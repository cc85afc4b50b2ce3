"""Plans the passes make for a kernel: the TMEM column plan of a tcgen05 kernel, the source of its sparse
metadata words, and whether it primes the collector buffer. The IR prints them (tilec.tmem_plan,
tilec.metadata); compiler/passes/derive.py rebuilds these objects from the printed attributes.

The facts these plans follow (TMEM geometry, data-path layouts, metadata and scale-factor layouts) live in
compiler/isa/tmem.py; this module only places one kernel's regions.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..diagnostics import SpecError
from ..isa.tmem import COLUMNS


# --------------------------------------------------------------------------------------------------
# The column plan of a kernel

def _align(x: int, a: int) -> int:
    return -(-x // a) * a


@dataclass(frozen=True)
class TmemPlan:
    """Column offsets (from the allocation's base) of every TMEM region of one CTA."""
    d: int
    d_columns: int
    meta: int | None = None
    meta_columns: int = 0
    sfa: int | None = None
    sfa_columns: int = 0
    sfb: int | None = None
    sfb_columns: int = 0
    a: int | None = None
    a_columns: int = 0
    scratch: int | None = None        # D-shaped region the collector-priming MMAs write (tcgen05_kernel)

    @property
    def used(self) -> int:
        ends = [self.d + self.d_columns]
        if self.scratch is not None:
            ends.append(self.scratch + self.d_columns)
        for base, cols in ((self.meta, self.meta_columns), (self.sfa, self.sfa_columns),
                           (self.sfb, self.sfb_columns), (self.a, self.a_columns)):
            if base is not None:
                ends.append(base + cols)
        return max(ends)

    @property
    def allocated(self) -> int:
        """9.7.16.7.1: a power of two in [32, 512]."""
        cols = 32
        while cols < self.used:
            cols *= 2
        return cols


def plan_tmem(d_columns: int, meta_columns: int = 0, sfa_columns: int = 0, sfb_columns: int = 0,
              a_columns: int = 0, scratch: bool = False) -> TmemPlan:
    """D at column 0, then (with `scratch`) a second D-sized region, then metadata, SFA, SFB and A, each
    8-column aligned (CUTLASS assumes metadata 4-column aligned; the f16/tf32 metadata needs even
    columns, PTX ISA Table 44 sparsity selector, 9.7.16.10.8.4)."""
    at = _align(d_columns, 8)
    regions = {}
    if scratch:
        regions["scratch"] = at
        at = _align(at + d_columns, 8)
    for name, cols in (("meta", meta_columns), ("sfa", sfa_columns), ("sfb", sfb_columns), ("a", a_columns)):
        if cols:
            regions[name] = at
            regions[f"{name}_columns"] = cols
            at = _align(at + cols, 8)
    plan = TmemPlan(0, d_columns, **regions)
    if plan.used > COLUMNS:
        raise SpecError(f"this tile needs {plan.used} TMEM columns per K stage, more than the {COLUMNS} "
                        f"a CTA has (PTX 9.7.16.1)", "shape.N", "use a smaller N or loop K")
    return plan


# --------------------------------------------------------------------------------------------------
# Sparse metadata source of a kernel (made by the sparse-metadata-packing pass)

@dataclass(frozen=True)
class Tcgen05Metadata:
    """Where a kernel's metadata words come from.

    source "runtime": the META parameter, `words_per_row` natural words per row of A.
    source "static": `table[row % period_rows][word % period_words]` (natural words of the pattern),
    embedded in the kernel as a .global array; global row r, word w.
    """
    source: str
    kind: str
    chunk: int                        # dense elements per 4-bit code
    words_per_row: int                # natural words of one row over the whole loop K
    table: tuple[tuple[int, ...], ...] = ()

    @property
    def period_rows(self) -> int:
        return len(self.table)

    @property
    def period_words(self) -> int:
        return len(self.table[0]) if self.table else 0

    def word(self, row: int, w: int) -> int:
        return self.table[row % self.period_rows][w % self.period_words]


# --------------------------------------------------------------------------------------------------
# Collector reuse

def collector_priming(spec) -> bool:
    """`::use` / `::lastuse` read the collector buffer an earlier MMA filled with the same operand
    (9.7.16.10.9.1 .collector_usage: buffer ::a holds A, .ws buffers ::b0-::b3 hold B). Every K step of
    this kernel reads a new A and B, so for such a tile each K step first issues a *priming* MMA with
    the same operands and `::fill` that writes its product to a scratch D region of TMEM (enable-input-d
    false, no other effect), then the tile's MMA, which reads the filled buffer. The priming MMA never
    carries .ashift ("illegal ... .collector::a::fill along with .ashift"): a plain MMA fills, the
    .ashift MMA reads with ::lastuse - the pairing the rule leaves."""
    return spec.collector is not None and spec.collector.split("::")[-1] in ("use", "lastuse")
