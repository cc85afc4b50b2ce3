"""Warp-level sparse MMA (`mma.sp`, `mma.sp::ordered_metadata`; PTX ISA 9.7.14.6).

- `forms`: the form table (`FORM_ROWS`), `find_form`, `layout_for`, `all_forms`, `Form`, `SparseLayout`.
- `fragments`: per-lane fragment maps of compressed A, B, C/D and the metadata register.
- `metadata`: nibble validation, per-lane metadata packing, static sparsity patterns.

Host data (numpy) lives in `compiler.sparse`; the kernel emitter in `compiler.ptx.mma_sp_kernel`.
"""
from .forms import (FORM_ROWS, GRANULARITIES, Form, FormRow, Granularity, SparseLayout, all_forms,
                    find_form, layout_for)
from .metadata import PATTERNS, expand_pattern, pack_metadata, static_metadata, validate_nibbles

__all__ = ["FORM_ROWS", "GRANULARITIES", "Form", "FormRow", "Granularity", "SparseLayout", "all_forms",
           "find_form", "layout_for", "PATTERNS", "expand_pattern", "pack_metadata", "static_metadata",
           "validate_nibbles"]
