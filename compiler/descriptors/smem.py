"""The 64-bit tcgen05 shared-memory matrix descriptor (PTX ISA 9.7.16.4.1, "Shared memory descriptor").

Byte quantities go in; `encode()` packs them. Every bit position below is PTX 9.7.16.4.1 (Table 40 in
PTX ISA 9.0/9.1); cross-checked against CUTLASS
`UMMA::SmemDescriptor` and the LLVM `nvvm.tcgen05.mma_smem_desc` lowering.

The field table (and `BitField`, the row shared with the instruction descriptor) is an ISA fact and lives in
compiler/isa/descriptors.py; this module encodes, decodes and checks values with it.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..diagnostics import SpecError
from ..isa.descriptors import (BitField, ADDRESS_LIMIT, ADDRESS_ALIGN, START, LBO, SBO, FIXED, BASE_OFFSET,
                               LBO_MODE, SWIZZLE, RESERVED, FIXED_VALUE, SWIZZLE_CODES, SWIZZLE_NAMES,
                               LBO_MODES, LBO_MODE_NAMES)


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
