"""Hopper sparse `wgmma.mma_async.sp` (PTX ISA 9.7.15.6): the type families tilec emits, their shapes,
selectors, PTX versions and target, and the shared-memory matrix descriptor (9.7.15.5.1.2.2).

The kernel that issues them is compiler/ptx/sparse_wgmma_kernel.py; `passes/verify.py` reads
`wgmma_form_problem` and `required_ptx` to reject a tile before emission.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..diagnostics import SpecError
from .bulk_copy import MIN_PTX as BULK_COPY_PTX
from .griddepcontrol import GRIDDEPCONTROL_PTX
from .mma_sp.forms import Form
from .targets import Version


@dataclass(frozen=True)
class WgmmaSpForm:
    """One `wgmma.mma_async.sp` type family (PTX 9.7.15.6.3 syntax blocks)."""
    k: int                       # dense K of one instruction (.m64nNk{k})
    tail: str                    # immediates after scale-d: "scale_trans" | "scale" | "" (integer)
    selectors: tuple[int, ...]   # legal sp-sel (9.7.15.6.3 table "Valid values of sp-sel")
    n_values: tuple[int, ...]    # legal N (the .shape lists)
    acc_type: str                # 32-bit accumulator type this kernel uses
    min_ptx: Version

    def describe_n(self) -> str:
        return "N = 8..256 in steps of 8" if self.n_values == _N_FLOAT else "N = 8, 16, 24, 32..256 step 16"


_N_FLOAT = tuple(range(8, 257, 8))                       # .m64n8..n256 step 8 (f16/bf16/tf32/fp8 shapes)
_N_INT = (8, 16, 24) + tuple(range(32, 257, 16))         # integer shapes: 8, 16, 24, then 32..256 step 16
# PTX 9.7.15.6.3: "Introduced in PTX ISA version 8.2"; ".u8.s8 and .s8.u8 ... introduced in 8.4"; sm_90a.
# Immediates: .f16/.bf16 take imm-scale-a, imm-scale-b, imm-trans-a, imm-trans-b; .tf32 and fp8 take
# imm-scale-a, imm-scale-b; integer forms none.
WGMMA_SP_FORMS: dict[str, WgmmaSpForm] = {
    "f16": WgmmaSpForm(32, "scale_trans", (0, 1), _N_FLOAT, "f32", (8, 2)),
    "bf16": WgmmaSpForm(32, "scale_trans", (0, 1), _N_FLOAT, "f32", (8, 2)),
    "tf32": WgmmaSpForm(16, "scale", (0, 1), _N_FLOAT, "f32", (8, 2)),
    "e4m3": WgmmaSpForm(64, "scale", (0,), _N_FLOAT, "f32", (8, 2)),
    "e5m2": WgmmaSpForm(64, "scale", (0,), _N_FLOAT, "f32", (8, 2)),
    "s8": WgmmaSpForm(64, "", (0,), _N_INT, "s32", (8, 2)),
    "u8": WgmmaSpForm(64, "", (0,), _N_INT, "s32", (8, 2)),
}
MIXED_INT_PTX: Version = (8, 4)          # .s8.u8 / .u8.s8 (9.7.15.6.3 PTX ISA notes)
# fence.proxy.tensormap::generic (unidirectional proxy fence): PTX ISA 8.3 (ptxas 13.0: "Feature
# 'fence.proxy with unidirection proxy fence' requires PTX ISA .version 8.3 or later").
TENSORMAP_FENCE_PTX: Version = (8, 3)
WGMMA_TARGET = "sm_90a"                  # 9.7.15.6.3 Target ISA notes: "Requires sm_90a"

# Matrix descriptor (PTX 9.7.15.5.1.2.2 "Matrix Descriptor Format"): (field, lowest bit, width).
# Byte quantities are stored as matrix-descriptor-encode(x) = (x & 0x3FFFF) >> 4. No other bit is used
# (unlike tcgen05's Table 40 there is no fixed bit 46).
DESCRIPTOR_FIELDS = (
    ("start_address", 0, 14),            # bits 13-0
    ("leading_byte_offset", 16, 14),     # bits 29-16
    ("stride_byte_offset", 32, 14),      # bits 45-32
    ("base_offset", 49, 3),              # bits 51-49 (0: every region sits on its swizzle repeat)
    ("swizzle", 62, 2),                  # bits 63-62
)
# bits 63-62 (9.7.15.5.1.2.2): 0 no swizzle, 1 128-byte, 2 64-byte, 3 32-byte swizzle.
DESCRIPTOR_SWIZZLE = {"none": 0, "128B": 1, "64B": 2, "32B": 3}

# K-major swizzle for a row of this many bytes (the widest atom the row fills; 9.7.15.5.1.2 Table 38
# atoms are 8 rows x 32/64/128 B). Longer rows are cut into 128-byte K atoms.
SWIZZLE_FOR_ROW = {32: "32B", 64: "64B", 128: "128B"}
MAX_ATOM_BYTES = 128
WG_THREADS = 128               # a warpgroup (9.7.15.1)

# fp8 (e4m3 / e5m2) wgmma sums keep fewer bits than the f32 accumulator registers they land in. PTX does not
# say so; the DeepSeek-V3 technical report (arXiv 2412.19437, section 3.3.2) finds about 14 bits retained
# on Hopper, and CUTLASS's sm90 fp8 GEMMs without fast accumulation add the wgmma accumulators into a second
# set of f32 registers every few K blocks (its "promotion" interval, 4 by default). The A types whose sparse
# wgmma tiles take `schedule promote=N` (compiler/ptx/sparse_wgmma_kernel.py):
PROMOTED_A_TYPES = ("e4m3", "e5m2")
FP8_ACCUMULATOR_BITS = 14      # the report's retained bits: the emulator's model of the fp8 sums
WGMMA_M = 64                   # every wgmma shape is .m64 (9.7.15.5 Matrix Shape)


def wgmma_descriptor(start: int, lbo: int, sbo: int, swizzle: str, base_offset: int = 0) -> int:
    """The 64-bit matrix descriptor (9.7.15.5.1.2.2) of a shared-memory operand: byte quantities in
    16-byte units, only address bits 4..17 survive (matrix-descriptor-encode)."""
    raw = {"start_address": (start & 0x3FFFF) >> 4, "leading_byte_offset": (lbo & 0x3FFFF) >> 4,
           "stride_byte_offset": (sbo & 0x3FFFF) >> 4, "base_offset": base_offset,
           "swizzle": DESCRIPTOR_SWIZZLE[swizzle]}
    value = 0
    for name, lo, width in DESCRIPTOR_FIELDS:
        if not 0 <= raw[name] < 1 << width:
            raise SpecError(f"descriptor field {name} = {raw[name]} does not fit {width} bits")
        value |= raw[name] << lo
    return value


def wgmma_form_problem(form: Form) -> SpecError | None:
    """Why `form` (the tile's mma.sp form, one wgmma k-step) has no wgmma.mma_async.sp counterpart
    this kernel runs, or None (9.7.15.6.3 syntax: f16/bf16 k32, tf32 k16, e4m3/e5m2/s8/u8 k64; 32-bit
    accumulators here)."""
    wf = WGMMA_SP_FORMS.get(form.a_type)
    if wf is None or form.kind is not None or form.block_scale is not None:
        return SpecError(f"wgmma.mma_async.sp has no form for {form.name} (A f16, bf16, tf32, e4m3, e5m2, s8 "
                         f"or u8 without .kind; PTX 9.7.15.6.3)", field="schedule.mma", hint="use mma=sync")
    if form.k != wf.k:
        return SpecError(f"one wgmma.mma_async.sp k-step with {form.a_type} is .m64nNk{wf.k}; the tile's shape "
                         f"{form.shape} has K={form.k}", field="schedule.mma",
                         hint=f"write 'shape M=16 N=8 K={wf.k};' (the mma.sp shape of one wgmma k-step)")
    if form.c_type != wf.acc_type:
        return SpecError(f"the wgmma kernel accumulates in {wf.acc_type}; C/D {form.c_type} is not supported",
                         field="C.dtype", hint=f"use {wf.acc_type} C and D")
    return None


def required_ptx(form: Form) -> Version:
    """The lowest PTX ISA version the kernel needs for `form` (wgmma.mma_async.sp, the tensor-map fence, the
    persistent CTAs' bulk copy-out of D, griddepcontrol)."""
    need = max(WGMMA_SP_FORMS[form.a_type].min_ptx, TENSORMAP_FENCE_PTX, BULK_COPY_PTX, GRIDDEPCONTROL_PTX)
    return max(need, MIXED_INT_PTX) if form.a_type != form.b_type else need
