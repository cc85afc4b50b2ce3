"""The 64-bit tcgen05 shared-memory matrix descriptor (PTX ISA 9.7.16.4.1, "Shared memory descriptor").

Byte quantities go in; `encode()` packs them. Every bit position below is PTX 9.7.16.4.1 (Table 40 in
PTX ISA 9.0/9.1); cross-checked in ../shared/reference/ptx-digest.md section 1 against CUTLASS
`UMMA::SmemDescriptor` and the LLVM `nvvm.tcgen05.mma_smem_desc` lowering.

`BitField` is the small table row shared by this descriptor and the instruction descriptor
(`instr.py`): one row per field drives encode, decode and `explain`.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..diagnostics import SpecError


@dataclass(frozen=True)
class BitField:
    """One field of a packed descriptor: bits lo .. lo+width-1."""
    name: str
    lo: int
    width: int

    @property
    def mask(self) -> int:
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
            BitField("fixed_zero", 53, 8))         # bits 53-60: fixed 0 (Table 40 prints "0xb00000000": means 0, digest §9.5)
FIXED_VALUE = 0b001

FIELDS = (START, LBO, SBO, FIXED, BASE_OFFSET, LBO_MODE, SWIZZLE)

# Swizzle mode codes, bits 61-63 (PTX 9.7.16.4.1; CUTLASS UMMA::LayoutType agrees). 3, 5, 7 are invalid.
SWIZZLE_CODES: dict[str, int] = {
    "none": 0,            # no swizzle ("interleave")
    "128B_base32B": 1,    # 128-byte swizzle with 32-byte atomicity
    "128B": 2,            # 128-byte swizzle (16-byte atomicity)
    "64B": 4,
    "32B": 6,
}
SWIZZLE_NAMES: dict[int, str] = {code: name for name, code in SWIZZLE_CODES.items()}

LBO_MODES: dict[str, int] = {"relative": 0, "absolute": 1}     # bit 52 (PTX 9.7.16.3.1)
LBO_MODE_NAMES: dict[int, str] = {v: k for k, v in LBO_MODES.items()}


def encode_bytes(value: int, what: str, field: str | None = None) -> int:
    """enc(x) = (x & 0x3FFFF) >> 4 (PTX 9.7.16.4.1), refusing values the mask would corrupt."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise SpecError(f"{what} must be an integer number of bytes, got {value!r}", field=field)
    if value < 0:
        raise SpecError(f"{what} = {value} is negative", field=field)
    if value % ADDRESS_ALIGN:
        raise SpecError(f"{what} = {value} B is not a multiple of 16 bytes (PTX 9.7.16.4.1)",
                        field=field, hint="shared-memory descriptors address 16-byte units")
    if value >= ADDRESS_LIMIT:
        raise SpecError(f"{what} = {value} B does not fit the descriptor: only address bits 4..17 are "
                        f"kept ((x & 0x3FFFF) >> 4, PTX 9.7.16.4.1), so it must be below {ADDRESS_LIMIT}",
                        field=field)
    return (value & 0x3FFFF) >> 4


@dataclass(frozen=True)
class SmemDesc:
    """A tcgen05 shared-memory matrix descriptor. All quantities in bytes.

    `lbo` is a relative byte offset when `lbo_mode == "relative"` and the absolute shared-memory
    byte address of the second data chunk when `lbo_mode == "absolute"` (sm_103a, PTX 9.7.16.3.1.2).
    """
    start_address: int
    lbo: int
    sbo: int
    swizzle: str = "none"
    base_offset: int = 0
    lbo_mode: str = "relative"

    def __post_init__(self) -> None:
        if self.swizzle not in SWIZZLE_CODES:
            raise SpecError(f"unknown swizzle mode {self.swizzle!r}; valid: {', '.join(SWIZZLE_CODES)}",
                            field="swizzle")
        if self.lbo_mode not in LBO_MODES:
            raise SpecError(f"unknown LBO mode {self.lbo_mode!r}; valid: relative, absolute", field="lbo_mode")
        if not isinstance(self.base_offset, int) or not 0 <= self.base_offset <= 7:
            raise SpecError(f"base offset {self.base_offset!r} outside 0..7 (3-bit field, bits 49-51)",
                            field="base_offset")
        for what in ("start_address", "lbo", "sbo"):
            encode_bytes(getattr(self, what), what, field=what)
        if self.lbo_mode == "absolute":
            # PTX 9.7.16.3.1.2.1: absolute LBO only with 128B swizzle (16 B atomicity) and base offset 0
            # (the third restriction, K-major only, lives in the instruction descriptor).
            if self.swizzle != "128B":
                raise SpecError(f"absolute LBO mode requires 128B swizzle, not {self.swizzle}",
                                field="swizzle", hint="PTX 9.7.16.3.1.2.1")
            if self.base_offset != 0:
                raise SpecError("absolute LBO mode requires matrix base offset 0", field="base_offset",
                                hint="PTX 9.7.16.3.1.2.1")

    def encode(self) -> int:
        value = START.insert(encode_bytes(self.start_address, "start_address"))
        value |= LBO.insert(encode_bytes(self.lbo, "lbo"))
        value |= SBO.insert(encode_bytes(self.sbo, "sbo"))
        value |= FIXED.insert(FIXED_VALUE)
        value |= BASE_OFFSET.insert(self.base_offset)
        value |= LBO_MODE.insert(LBO_MODES[self.lbo_mode])
        value |= SWIZZLE.insert(SWIZZLE_CODES[self.swizzle])
        return value

    @classmethod
    def decode(cls, value: int) -> "SmemDesc":
        """Inverse of `encode`; rejects reserved bits, a wrong fixed constant and invalid swizzle codes."""
        problems = check_bits(value)
        if problems:
            raise SpecError(f"invalid shared-memory descriptor {value:#018x}: " + "; ".join(problems))
        return cls(start_address=START.extract(value) << 4,
                   lbo=LBO.extract(value) << 4,
                   sbo=SBO.extract(value) << 4,
                   swizzle=SWIZZLE_NAMES[SWIZZLE.extract(value)],
                   base_offset=BASE_OFFSET.extract(value),
                   lbo_mode=LBO_MODE_NAMES[LBO_MODE.extract(value)])

    def __str__(self) -> str:
        return (f"SmemDesc(start={self.start_address:#x}, lbo={self.lbo}, sbo={self.sbo}, "
                f"swizzle={self.swizzle}, base_offset={self.base_offset}, lbo_mode={self.lbo_mode})")


def check_bits(value: int) -> list[str]:
    """Every way a 64-bit value breaks PTX 9.7.16.4.1, as messages naming the bits. Never raises."""
    if not isinstance(value, int) or not 0 <= value < (1 << 64):
        return [f"value {value!r} is not a 64-bit unsigned integer"]
    problems = []
    for field in RESERVED:
        raw = field.extract(value)
        if raw:
            problems.append(f"reserved bits {field.bits} must be 0, found {raw:#x}")
    fixed = FIXED.extract(value)
    if fixed != FIXED_VALUE:
        problems.append(f"bits 46-48 must hold the fixed constant 0b001 (bit 46 set), found {fixed:#05b}")
    code = SWIZZLE.extract(value)
    if code not in SWIZZLE_NAMES:
        problems.append(f"bits 61-63: swizzle code {code} is invalid (valid 0, 1, 2, 4, 6)")
    if LBO_MODE.extract(value) == 1:
        if code in SWIZZLE_NAMES and SWIZZLE_NAMES[code] != "128B":
            problems.append("bit 52: absolute LBO mode requires 128B swizzle (code 2) (PTX 9.7.16.3.1.2.1)")
        if BASE_OFFSET.extract(value):
            problems.append("bit 52: absolute LBO mode requires base offset 0 (PTX 9.7.16.3.1.2.1)")
    return problems
