"""Block scaling of warp-level `mma.sp::ordered_metadata` (`.kind::mxf8f6f4 / mxf4 / mxf4nvf4`).

Sources:
- PTX ISA 9.7.14.3 "Block Scaling for mma.sync" (which 9.7.14.6.3 `mma.sp` refers to for its
  `.block_scale` forms): D = (A * scale_A) (B * scale_B) + C; "each row of matrix A is divided into SFA_N
  chunks and each chunk of a row is multiplied with the corresponding element SF_A from the same row of
  scale_A" (B: each column into SFB_M chunks); Table 35 "Shapes for scale matrices depending upon
  .scale_vec_size" (1X: scale_A M x 1, scale_B 1 x N; 2X: M x 2 / 2 x N; 4X: M x 4 / 4 x N); Table 36
  "Valid combinations of .scale_vec_size and .kind" (mxf8f6f4: ue8m0 1X; mxf4: ue8m0 2X; mxf4nvf4:
  ue8m0 2X or 4X, ue4m3 4X only) -- restated row by row in forms.BLOCK_SCALES.
- The same section: `scale-a-data` / `scale-b-data` are 32-bit registers of every lane; the tuple
  {byte-id, thread-id} selects which lane of each group of four and which byte of its register holds
  SF_A / SF_B. The selector ranges below are the ISA's table of selector values, and ptxas 13.0 enforces
  exactly them ("value '2' out of range, expected to be in range [0..1]" for thread-id-a; byte-id "expected
  to be 0 or 2" for 2X, "expected to be 0" for 4X; tests/test_mma_sp_block_scale.py).
- Which lane supplies which row / column (the scale-factor layout figures of 9.7.14.3): within the group
  of four lanes 4g..4g+3, thread-id-a picks the pair (4g, 4g+1) or (4g+2, 4g+3); the first lane of the
  pair supplies row g, the second row g + 8. thread-id-b picks the one lane 4g + thread-id-b, which
  supplies column g. (CUTLASS's SM120 block-scaled SFALayout ((2,2,8):(8,0,1)) and SFBLayout
  ((4,8):(0,1)) say the same for thread-id 0.)
- With 2X the two scales of a row sit in bytes byte-id and byte-id + 1; with 4X the four scales sit in
  bytes 0..3 (byte-id 0); with 1X the one scale sits in byte byte-id.

For the sparse shapes the chunks are chunks of the logical (uncompressed) K: m16n8k64 1X -> one scale per
row / column for all 64 K; m16n8k128 2X -> two scales, 64 K each; m16n8k128 4X -> four scales, 32 K each.

Nothing here imports numpy.
"""
from __future__ import annotations

import math

from ...diagnostics import SpecError

# Table 35: columns of scale_A (= rows of scale_B) per .scale_vec_size.
SCALE_VECTOR: dict[str, int] = {"1X": 1, "2X": 2, "4X": 4}

# The selector table of 9.7.14.3 (ptxas 13.0 checks the same ranges).
THREAD_ID_A: tuple[int, ...] = (0, 1)              # a lane pair of each group of four
THREAD_ID_B: tuple[int, ...] = (0, 1, 2, 3)        # one lane of each group of four
BYTE_ID: dict[str, tuple[int, ...]] = {"1X": (0, 1, 2, 3), "2X": (0, 2), "4X": (0,)}


def block_elements(k: int, scale_vec: str) -> int:
    """Elements of K that share one scale factor: K / (Table 35 columns of scale_A)."""
    return k // SCALE_VECTOR[scale_vec]


def scale_a_lane(row: int, thread_id: int) -> int:
    """The lane whose scale-a-data supplies row `row` (0..15) of scale_A."""
    return 4 * (row % 8) + 2 * thread_id + row // 8


def scale_b_lane(col: int, thread_id: int) -> int:
    """The lane whose scale-b-data supplies column `col` (0..7) of scale_B."""
    return 4 * col + thread_id


def scale_byte(byte_id: int, block: int) -> int:
    """The byte of the 32-bit scale register that holds scale block `block` (0 .. vector - 1)."""
    return byte_id + block


def check_selectors(scale_vec: str, byte_a: int, thread_a: int, byte_b: int, thread_b: int) -> None:
    """Reject a selector tuple outside the ISA's table (SpecError naming the field and the legal values)."""
    for field, value, legal in (("byte_id_a", byte_a, BYTE_ID[scale_vec]), ("thread_id_a", thread_a, THREAD_ID_A),
                                ("byte_id_b", byte_b, BYTE_ID[scale_vec]), ("thread_id_b", thread_b, THREAD_ID_B)):
        if value not in legal:
            raise SpecError(f"{field.replace('_', '-')} {value} is not a legal selector with scale_vec::{scale_vec} "
                            f"(PTX 9.7.14.3 allows {', '.join(map(str, legal))})", field,
                            f"use {' or '.join(map(str, legal))}")


def decode_scale(byte: int, scale_type: str) -> float:
    """The value of one scale byte: ue8m0 = 2^(e - 127), 0xFF is NaN; ue4m3 = e4m3 without its sign bit
    (bias 7, 0x7F is NaN) (PTX ISA 5.2.5.x alternate floating-point formats: .ue8m0 / .ue4m3)."""
    byte &= 0xFF
    if scale_type == "ue8m0":
        return math.nan if byte == 0xFF else math.ldexp(1.0, byte - 127)
    if scale_type == "ue4m3":
        byte &= 0x7F
        if byte == 0x7F:
            return math.nan
        e, m = byte >> 3, byte & 7
        return math.ldexp(m / 8, -6) if e == 0 else math.ldexp(1 + m / 8, e - 7)
    raise ValueError(f"not a scale type: {scale_type}")
