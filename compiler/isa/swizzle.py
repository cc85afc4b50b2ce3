"""Swizzle modes of a shared-memory matrix: the layout types of the tcgen05 shared memory descriptor.

- The descriptor's swizzle field, bits 61-63, and its codes: PTX ISA 9.7.16.4.1 "Shared memory descriptor"
  (Table 40 in PTX ISA 9.0/9.1); 3, 5 and 7 are invalid. CUTLASS `UMMA::LayoutType` agrees.
- Each mode's atom and Swizzle<B,M,S> functor: PTX ISA 9.7.16.3.3 "Canonical Layouts" (Swizzle<0,4,3> ..
  Swizzle<3,4,3> for none/32B/64B/128B, atoms of 8 lines x 1/2/4/8 16-byte chunks).
- Alignment, the repeat of the swizzle pattern a tile base must sit on: the base-offset rule of PTX ISA
  9.7.16.4.1 (1024 B for 128B, 512 B for 64B, 256 B for 32B); "none" has no pattern, its 128 B is one core
  matrix (the descriptor itself needs only 16 B there).
- Majors: the two major-nesses of PTX ISA 9.7.16.3 "Major-ness supported by Strides".

128B_base32B (code 1, "128-byte swizzle with 32-byte atomicity") is not in the canonical-layout table. CUTLASS
(mma_sm100_desc.hpp, `Layout_MN_SW128_32B_Atom_Bits` = Swizzle<2,5,2> o (1024 bits x 4 lines), make_umma_desc:
"SWIZZLE_128B_BASE32B is invalid for Major-K", SwizzleAtomKSize = 4) gives 4 lines x 128 B atoms, 32-byte
granules XORed with line bits 0-1; MN-major only (PTX ISA 9.7.16.10.1, Table 49: only MN-major kind::tf32).
Single source; its repeat is 512 B but tilec demands 1024 B (the PTX ISA does not give the boundary).

compiler/layout.py builds canonical layouts from these rows, compiler/isa/descriptors.py encodes the codes,
and the front end's `swizzle=` words are these names (plus tilec's own "auto").
"""
from __future__ import annotations

from dataclasses import dataclass

MAJORS = ("K", "MN")


@dataclass(frozen=True)
class SwizzleMode:
    """One swizzle mode: its descriptor code, the atom it tiles with and its Swizzle<B,M,S> functor on byte
    offsets."""
    name: str
    code: int            # shared memory descriptor bits 61-63
    width: int           # bytes of one atom line along the contiguous dimension
    atom_rows: int       # lines per atom
    xor_bits: int        # B of Swizzle<B,M,S>
    xor_base: int        # M
    xor_shift: int       # S
    alignment: int       # bytes; the swizzle pattern repeat the tile base must sit on
    majors: tuple[str, ...]

    @property
    def atom_bytes(self) -> int:
        return self.width * self.atom_rows


# Narrowest first (the order the DSL lists them in).
SWIZZLE_MODES: dict[str, SwizzleMode] = {m.name: m for m in (
    #           name            code width rows  B  M  S  alignment majors
    SwizzleMode("none",           0,  16,   8,   0, 4, 3,  128,     MAJORS),     # "no swizzle (interleave)"
    SwizzleMode("32B",            6,  32,   8,   1, 4, 3,  256,     MAJORS),
    SwizzleMode("64B",            4,  64,   8,   2, 4, 3,  512,     MAJORS),
    SwizzleMode("128B",           2, 128,   8,   3, 4, 3, 1024,     MAJORS),     # 16-byte atomicity
    SwizzleMode("128B_base32B",   1, 128,   4,   2, 5, 2, 1024,     ("MN",)),    # 32-byte atomicity
)}
