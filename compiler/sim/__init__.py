"""Reference model of `tcgen05.mma` that reads the same bytes the hardware reads.

An independent derivation from the PTX ISA text (it never imports compiler.descriptors or
compiler.layout): tests compare the compiler's layouts and descriptors against it.

- `smem`: shared-memory descriptor decoding and canonical-layout address generation
  (`decode_smem_desc`, `chunk_addresses`, `read_operand`, `read_operand_bits`, `write_operand_bits`).
- `tcgen05`: instruction-descriptor decoding and the MMA itself (`decode_instr_desc`, `mma`,
  `zero_column_mask_bits`, sparse-metadata helpers).
- `numerics`: element codes <-> numbers through ml_dtypes / numpy.
- `mma_sp`: a GEMM of block-scaled warp-level `mma.sp` instructions from element, metadata and scale
  codes (`sparse_block_scaled_gemm`).

Loaded lazily: importing `compiler.sim` costs nothing until a name is used.
"""
from __future__ import annotations

from ..lazy import lazy_getattr

_WHERE = {
    "decode_smem_desc": ".smem",
    "encode_smem_desc": ".smem",
    "chunk_addresses": ".smem",
    "element_addresses": ".smem",
    "read_operand": ".smem",
    "read_operand_bits": ".smem",
    "write_operand_bits": ".smem",
    "SWIZZLE_MODES": ".smem",
    "SWIZZLE_BY_NAME": ".smem",
    "decode_instr_desc": ".tcgen05",
    "encode_instr_desc": ".tcgen05",
    "mma": ".tcgen05",
    "KINDS": ".tcgen05",
    "zero_column_mask_bits": ".tcgen05",
    "decode_sparse_metadata": ".tcgen05",
    "encode_sparse_metadata": ".tcgen05",
    "compress_sparse": ".tcgen05",
    "expand_sparse": ".tcgen05",
    "d_row_lanes": ".tcgen05",
    "ashift_rows": ".tcgen05",
    "sparse_block_scaled_gemm": ".mma_sp",
    "decode": ".numerics",
    "encode": ".numerics",
}

__all__ = sorted(_WHERE)


__getattr__ = lazy_getattr(__name__, _WHERE)
