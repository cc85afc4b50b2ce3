"""Reference model of a GEMM made of warp-level block-scaled `mma.sp::ordered_metadata` instructions
(PTX ISA 9.7.14.6.3 `.kind::mxf8f6f4 / mxf4 / mxf4nvf4 .block_scale`, block scaling 9.7.14.3).

The model starts from codes, never from host numbers: compressed A as element codes with one sparse
metadata code per (row, chunk), B as element codes, SFA / SFB as raw scale bytes. It decodes the elements
and scales through ml_dtypes (`numerics.decode`, not compiler/isa/mma_sp/block_scale.decode_scale, which
the emulator uses), expands A with its own `tcgen05.expand_sparse` (the metadata codes of 9.7.14.6.1 mean
the same for warp-level and tcgen05 sparsity: two 2-bit indices, of elements for 2:4, of aligned pairs
for 4:8), and walks K one instruction k-step at a time:

    D_0 = C,   D_{s+1} = f32(D_s + sum over the k-step of (a * scale_A[row, blk]) (b * scale_B[blk, col]))

with one scale per `k_step / vector` consecutive K of a row of A / a column of B (9.7.14.3, Table 35:
with `.scale_vec::NX` scale_A is M x N and scale_B N x N-columns, N in {1, 2, 4}). The k-step sum is
exact (float64 holds every product of two <= 8-bit floats times two scales); each instruction rounds D
to f32 once (its C/D operand is f32: 9.7.14.6.3 syntax, `.f32` only for the block-scaled kinds).
The hardware's internal summation precision is not specified; tests pick operands whose sums are exact.

Which K a scale covers is the one fact taken from compiler/isa (`SCALE_VECTOR`, Table 35), which is
its one home.
"""
from __future__ import annotations

import numpy as np

from ..diagnostics import SpecError
from ..isa.mma_sp.block_scale import SCALE_VECTOR
from .numerics import decode
from .tcgen05 import expand_sparse

# The block-scaled kinds' granularity by shape: m16n8k64 (8-bit containers) is 2:4, m16n8k128 (packed
# e2m1) is 4:8 (PTX 9.7.14.6.1: "4:8" for the 4-bit types of .kind::mxf4 / mxf4nvf4).
GRANULARITY_BY_K = {64: "2:4", 128: "4:8"}


def sparse_block_scaled_gemm(a_stored, a_meta, a_type: str, b, b_type: str, sfa, sfb, scale_type: str, *,
                             k_step: int, scale_vec: str, c=None) -> np.ndarray:
    """D (M x N float32) of the GEMM: a_stored M x K/2 element codes (the kept values of each chunk in K
    order), a_meta M x K/chunk metadata codes, b K x N element codes, sfa M x K/blk and sfb N x K/blk scale
    bytes (blk = k_step / vector), c M x N (None: zeros)."""
    gran = GRANULARITY_BY_K.get(k_step)
    if gran is None:
        raise SpecError(f"block-scaled mma.sp has k-steps of 64 or 128, not {k_step}")
    a = expand_sparse(decode(a_stored, a_type), a_meta, gran)                  # M x K numbers
    bv = decode(b, b_type)                                                     # K x N
    m, k = a.shape
    n = bv.shape[1]
    if bv.shape[0] != k or k % k_step:
        raise SpecError(f"A is {m} x {k} and B {bv.shape[0]} x {n}: K must agree and be a multiple of {k_step}")
    blk = k_step // SCALE_VECTOR[scale_vec]
    sa, sb = decode(sfa, scale_type), decode(sfb, scale_type)
    if sa.shape != (m, k // blk) or sb.shape != (n, k // blk):
        raise SpecError(f"scale factors must be {m} x {k // blk} (SFA) and {n} x {k // blk} (SFB), "
                        f"got {sa.shape} and {sb.shape}")
    a = a * np.repeat(sa, blk, axis=1)
    bv = bv * np.repeat(sb.T, blk, axis=0)
    d = np.zeros((m, n), np.float32) if c is None else np.asarray(c, np.float32).copy()
    for k0 in range(0, k, k_step):
        d = (d.astype(np.float64) + a[:, k0:k0 + k_step] @ bv[k0:k0 + k_step]).astype(np.float32)
    return d
