"""Descriptor formats of the tcgen05 family, as data: one row per field drives encode, decode and `explain`
(compiler/descriptors/ holds the encoders; the wgmma matrix descriptor is in isa/wgmma.py).

- The 64-bit shared-memory matrix descriptor: PTX ISA 9.7.16.4.1 "Shared memory descriptor" (Table 40 in PTX
  ISA 9.0/9.1), cross-checked against CUTLASS `UMMA::SmemDescriptor` and the LLVM
  `nvvm.tcgen05.mma_smem_desc` lowering.
- The 32-bit instruction descriptor: PTX ISA 9.7.16.4.2, Table 42 (.kind::tf32, f16, f8f6f4, i8), Table 43
  (.kind::mxf8f6f4), Table 44 (.kind::mxf4, mxf4nvf4). Each row is (bit range, attribute of `InstrDesc`, how
  the value is stored); `CODES` holds the per-kind value codes of the tables' "Values" columns.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from .swizzle import SWIZZLE_MODES


@dataclass(frozen=True)
class BitField:
    """One field of a packed descriptor: bits lo .. lo+width-1."""
    name: str
    lo: int
    width: int

    @cached_property
    def mask(self) -> int:           # cached: every descriptor encode reads each field's mask
        return (1 << self.width) - 1

    @property
    def bits(self) -> str:
        """Bit range as PTX tables print it: "17-22", or "46" for a single bit."""
        hi = self.lo + self.width - 1
        return str(self.lo) if hi == self.lo else f"{self.lo}-{hi}"

    def extract(self, value: int) -> int:
        return (value >> self.lo) & self.mask

    def insert(self, raw: int) -> int:
        assert 0 <= raw <= self.mask, (self.name, raw)
        return raw << self.lo


# PTX 9.7.16.4.1: byte quantities are stored as (x & 0x3FFFF) >> 4, i.e. address bits 4..17.
ADDRESS_LIMIT = 1 << 18          # bytes; anything at or above does not survive the 0x3FFFF mask
ADDRESS_ALIGN = 16               # PTX 9.7.16.4.1: start address, LBO and SBO are multiples of 16 B

# Field table, PTX 9.7.16.4.1 (Table 40). Reserved/fixed fields carry their required value.
START = BitField("start_address", 0, 14)           # bits 0-13: enc(matrix start address)
LBO = BitField("leading_byte_offset", 16, 14)      # bits 16-29: enc(LBO) or enc(absolute LBO address)
SBO = BitField("stride_byte_offset", 32, 14)       # bits 32-45: enc(SBO)
FIXED = BitField("fixed_0b001", 46, 3)             # bits 46-48: fixed constant 0b001 (bit 46 = 1)
BASE_OFFSET = BitField("base_offset", 49, 3)       # bits 49-51: matrix base offset
LBO_MODE = BitField("lbo_mode", 52, 1)             # bit 52: 0 relative offset, 1 absolute address
SWIZZLE = BitField("swizzle", 61, 3)               # bits 61-63: swizzling mode
RESERVED = (BitField("reserved", 14, 2),           # bits 14-15
            BitField("reserved", 30, 2),           # bits 30-31
            BitField("fixed_zero", 53, 8))         # bits 53-60: fixed 0 (Table 40 prints "0xb00000000": means 0)
FIXED_VALUE = 0b001

FIELDS = (START, LBO, SBO, FIXED, BASE_OFFSET, LBO_MODE, SWIZZLE)

# Swizzle mode codes, bits 61-63 (PTX 9.7.16.4.1, Table 40): the `code` column of isa/swizzle.py, in code order.
SWIZZLE_CODES: dict[str, int] = {m.name: m.code for m in sorted(SWIZZLE_MODES.values(), key=lambda m: m.code)}
SWIZZLE_NAMES: dict[int, str] = {code: name for name, code in SWIZZLE_CODES.items()}

LBO_MODES: dict[str, int] = {"relative": 0, "absolute": 1}     # bit 52 (PTX 9.7.16.3.1)
LBO_MODE_NAMES: dict[int, str] = {v: k for k, v in LBO_MODES.items()}


# ---- instruction descriptor (PTX ISA 9.7.16.4.2, Tables 42-44) ------------------------------------

@dataclass(frozen=True)
class IField:
    bits: BitField
    attr: str | None          # InstrDesc attribute; None = reserved, must be 0
    shift: int | None = None  # dimension fields: raw = value >> shift; None = look the value up in CODES
    meaning: str = ""


def _f(name: str, lo: int, width: int, attr: str | None, meaning: str, shift: int | None = None) -> IField:
    return IField(BitField(name, lo, width), attr, shift, meaning)


def _reserved(lo: int, width: int) -> IField:
    return _f("reserved", lo, width, None, "reserved, must be 0")


# Bits 13-22 are identical in all three tables.
_COMMON = (
    _f("negate_a", 13, 1, "negate_a", "negate A"),
    _f("negate_b", 14, 1, "negate_b", "negate B"),
    _f("transpose_a", 15, 1, "a_major", "transpose A (1 = MN-major)"),
    _f("transpose_b", 16, 1, "b_major", "transpose B (1 = MN-major)"),
    _f("n", 17, 6, "n", "N >> 3", shift=3),
)

TABLE_42 = (
    _f("sparsity_selector", 0, 2, "sparsity_selector", "sparsity selector"),
    _f("sparse", 2, 1, "sparse", "sparse"),
    _f("saturate", 3, 1, "saturate", "saturate"),
    _f("d_type", 4, 2, "d_type", "D type"),
    _reserved(6, 1),
    _f("a_type", 7, 3, "a_type", "A type"),
    _f("b_type", 10, 3, "b_type", "B type"),
    *_COMMON,
    _reserved(23, 1),
    _f("m", 24, 5, "m", "M >> 4", shift=4),
    _reserved(29, 1),
    _f("max_shift", 30, 2, "max_shift", "maximum shift for B reuse in .ws"),
)

# The two block-scaled tables (43, 44) agree on bits 0-9 and 23-30; they differ in B's type width and bit 31.
_BLOCK_SCALED_LOW = (
    _reserved(0, 2),
    _f("sparse", 2, 1, "sparse", "sparse"),
    _reserved(3, 1),
    _f("b_scale_id", 4, 2, "b_scale_id", "B scale factor data ID"),
    _reserved(6, 1),
    _f("a_type", 7, 3, "a_type", "A type"),
)
_BLOCK_SCALED_HIGH = (
    _f("scale_type", 23, 1, "scale_type", "scale matrix type (scale_A and scale_B)"),
    _reserved(24, 3),
    _f("m", 27, 2, "m", "M >> 7", shift=7),
    _f("a_scale_id", 29, 2, "a_scale_id", "A scale factor data ID"),
)

TABLE_43 = (
    *_BLOCK_SCALED_LOW,
    _f("b_type", 10, 3, "b_type", "B type"),
    *_COMMON,
    *_BLOCK_SCALED_HIGH,
    _reserved(31, 1),
)

TABLE_44 = (
    *_BLOCK_SCALED_LOW,
    _f("b_type", 10, 2, "b_type", "B type"),          # 2 bits in Table 44
    _reserved(12, 1),
    *_COMMON,
    *_BLOCK_SCALED_HIGH,
    _f("k96", 31, 1, "k96", "dense K = 96 (0: dense K 64 / sparse K 128)"),
)

LAYOUTS: dict[str, tuple[IField, ...]] = {
    "tf32": TABLE_42, "f16": TABLE_42, "f8f6f4": TABLE_42, "i8": TABLE_42,
    "mxf8f6f4": TABLE_43, "mxf4": TABLE_44, "mxf4nvf4": TABLE_44,
}
TABLE_NAME = {TABLE_42: "Table 42", TABLE_43: "Table 43", TABLE_44: "Table 44"}

_BOOL = {False: 0, True: 1}
_FALSE_ONLY = {False: 0}
_MAJOR = {"K": 0, "MN": 1}                 # transpose bit: "No Transpose = 0; Transpose = 1"
_K_ONLY = {"K": 0}
_SELECTOR = {v: v for v in range(4)}       # Table 42 bits 0-1: 0-3
_SCALE_ID_ANY = {v: v for v in range(4)}   # Table 43 bits 4-5 / 29-30: 0-3
_SCALE_ID_0_2 = {0: 0, 2: 2}               # Table 44 bits 4-5 / 29-30: 0 or 2
_MAX_SHIFT = {0: 0, 8: 1, 16: 2, 32: 3}    # Table 42 bits 30-31: no shift 0, 8 -> 1, 16 -> 2, 32 -> 3
# Table 42/43 "E4M3 = 0; E5M2 = 1; E2M3 = 3; E3M2 = 4; E2M1 = 5"
_F8F6F4 = {"e4m3": 0, "e5m2": 1, "e2m3": 3, "e3m2": 4, "e2m1": 5}

# Per-kind value codes ("Values" columns of Tables 42-44).
CODES: dict[str, dict[str, dict]] = {
    "tf32": {"sparsity_selector": _SELECTOR, "sparse": _BOOL, "saturate": _FALSE_ONLY,
             "d_type": {"f32": 1}, "a_type": {"tf32": 2}, "b_type": {"tf32": 2},
             "negate_a": _BOOL, "negate_b": _BOOL, "a_major": _MAJOR, "b_major": _MAJOR,
             "max_shift": _MAX_SHIFT},
    "f16": {"sparsity_selector": _SELECTOR, "sparse": _BOOL, "saturate": _FALSE_ONLY,
            "d_type": {"f16": 0, "f32": 1}, "a_type": {"f16": 0, "bf16": 1}, "b_type": {"f16": 0, "bf16": 1},
            "negate_a": _BOOL, "negate_b": _BOOL, "a_major": _MAJOR, "b_major": _MAJOR,
            "max_shift": _MAX_SHIFT},
    # Table 42 lists only "F32 = 1" as f8f6f4 dtype, but the kind table (PTX 9.7.16.2.1 Table 39) allows an
    # f16 accumulator; F16 = 0 is the code kind::f16 uses for it.
    "f8f6f4": {"sparsity_selector": _SELECTOR, "sparse": _BOOL, "saturate": _FALSE_ONLY,
               "d_type": {"f16": 0, "f32": 1}, "a_type": _F8F6F4, "b_type": _F8F6F4,
               "negate_a": _BOOL, "negate_b": _BOOL, "a_major": _MAJOR, "b_major": _MAJOR,
               "max_shift": _MAX_SHIFT},
    "i8": {"sparsity_selector": _SELECTOR, "sparse": _BOOL, "saturate": _BOOL,
           "d_type": {"s32": 2}, "a_type": {"u8": 0, "s8": 1}, "b_type": {"u8": 0, "s8": 1},
           "negate_a": _FALSE_ONLY, "negate_b": _FALSE_ONLY, "a_major": _MAJOR, "b_major": _MAJOR,
           "max_shift": _MAX_SHIFT},
    "mxf8f6f4": {"sparse": _BOOL, "b_scale_id": _SCALE_ID_ANY, "a_type": _F8F6F4, "b_type": _F8F6F4,
                 "negate_a": _BOOL, "negate_b": _BOOL, "a_major": _MAJOR, "b_major": _MAJOR,
                 "scale_type": {"ue8m0": 1}, "a_scale_id": _SCALE_ID_ANY},
    "mxf4": {"sparse": _BOOL, "b_scale_id": _SCALE_ID_0_2, "a_type": {"e2m1": 1}, "b_type": {"e2m1": 1},
             "negate_a": _BOOL, "negate_b": _BOOL, "a_major": _K_ONLY, "b_major": _K_ONLY,
             "scale_type": {"ue8m0": 1}, "a_scale_id": _SCALE_ID_0_2, "k96": _BOOL},
    "mxf4nvf4": {"sparse": _BOOL, "b_scale_id": _SCALE_ID_0_2, "a_type": {"e2m1": 1}, "b_type": {"e2m1": 1},
                 "negate_a": _BOOL, "negate_b": _BOOL, "a_major": _K_ONLY, "b_major": _K_ONLY,
                 "scale_type": {"ue4m3": 0, "ue8m0": 1}, "a_scale_id": _SCALE_ID_0_2, "k96": _BOOL},
}

# Attributes a format does not store take these values (mx kinds: D is always f32 and the selector
# is "assumed 0"; Table 42 kinds have no scale fields).
IMPLICIT = {"sparsity_selector": 0, "saturate": False, "max_shift": 0, "d_type": "f32",
            "scale_type": None, "a_scale_id": 0, "b_scale_id": 0, "k96": False}
