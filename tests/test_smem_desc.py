"""SmemDesc: the 64-bit shared-memory descriptor of PTX ISA 9.7.16.4.1 (Table 40; PTX ISA 9.7.16.4.1, Table 40)."""
import pytest
from hypothesis import given, strategies as st

from compiler.descriptors import SmemDesc
from compiler.descriptors.smem import check_bits
from compiler.isa.descriptors import SWIZZLE_CODES
from compiler.diagnostics import SpecError

FIXED_BIT46 = 1 << 46      # bits 46-48 = 0b001 (PTX 9.7.16.4.1)


def test_minimal_descriptor_is_only_the_fixed_constant():
    # every field zero: only bit 46 of the fixed 0b001 constant at bits 46-48 is set
    assert SmemDesc(0, 0, 0).encode() == FIXED_BIT46 == 0x0000_4000_0000_0000


@pytest.mark.parametrize("field, lo", [("start_address", 0), ("lbo", 16), ("sbo", 32)])
def test_byte_fields_are_14_bit_16_byte_units(field, lo):
    # Table 40: start 0-13, LBO 16-29, SBO 32-45, each holding (x & 0x3FFFF) >> 4
    kwargs = {"start_address": 0, "lbo": 0, "sbo": 0}
    kwargs[field] = 0x3FFF0                   # largest value: (0x3FFF0 & 0x3FFFF) >> 4 = 0x3FFF (14 ones)
    assert SmemDesc(**kwargs).encode() == FIXED_BIT46 | (0x3FFF << lo)
    kwargs[field] = 16                        # 16 B -> 1
    assert SmemDesc(**kwargs).encode() == FIXED_BIT46 | (1 << lo)


def test_digest_worked_value_no_swizzle_lbo128_sbo256():
    # PTX ISA 9.7.16.4.1, Table 40; a worked Table 42 value: LBO = 128 B -> 8 at bit 16 (0x80000); SBO = 256 B -> 16 at bit 32 (0x10_0000_0000);
    # plus 1 << 46: the constant part is 0x0000401000080000, OR enc(addr) (addr 0x400 -> 0x40)
    assert SmemDesc(0x400, 128, 256).encode() == 0x0000_4010_0008_0000 | 0x40


def test_digest_worked_value_128b_k_major():
    # PTX ISA 9.7.16.4.1, Table 40: 128B swizzle K-major, 128-byte rows: SBO = 8 rows x 128 B = 1024 B -> 64 at bit 32,
    # LBO field 1 (unused, "assumed 1"), swizzle code 2 at bits 61-63
    value = SmemDesc(0, 16, 1024, "128B").encode()
    assert value == (64 << 32) | (1 << 16) | FIXED_BIT46 | (2 << 61)


@pytest.mark.parametrize("name, code", [("none", 0), ("128B_base32B", 1), ("128B", 2), ("64B", 4), ("32B", 6)])
def test_swizzle_codes(name, code):
    # PTX 9.7.16.4.1 swizzle table, bits 61-63
    assert SWIZZLE_CODES[name] == code
    assert SmemDesc(0, 0, 0, name).encode() == FIXED_BIT46 | (code << 61)


@pytest.mark.parametrize("base_offset", range(8))
def test_base_offset_bits_49_51(base_offset):
    assert SmemDesc(0, 0, 0, "128B", base_offset).encode() == FIXED_BIT46 | (2 << 61) | (base_offset << 49)


def test_lbo_mode_bit_52():
    # bit 52 = 1: LBO holds an absolute address (sm_103a); only with 128B swizzle, base offset 0
    value = SmemDesc(0x1000, 0x1400, 1024, "128B", 0, "absolute").encode()
    assert value == (0x100) | (0x140 << 16) | (64 << 32) | FIXED_BIT46 | (1 << 52) | (2 << 61)


@pytest.mark.parametrize("kwargs, needle", [
    (dict(start_address=8, lbo=0, sbo=0), "multiple of 16"),
    (dict(start_address=0, lbo=24, sbo=0), "multiple of 16"),
    (dict(start_address=0, lbo=0, sbo=1 << 18), "does not fit"),
    (dict(start_address=-16, lbo=0, sbo=0), "negative"),
    (dict(start_address=0, lbo=0, sbo=0, swizzle="16B"), "unknown swizzle"),
    (dict(start_address=0, lbo=0, sbo=0, base_offset=8), "outside 0..7"),
    (dict(start_address=0, lbo=0, sbo=0, lbo_mode="weird"), "LBO mode"),
    (dict(start_address=0, lbo=0, sbo=0, swizzle="64B", lbo_mode="absolute"), "128B"),
    (dict(start_address=0, lbo=0, sbo=0, swizzle="128B", base_offset=1, lbo_mode="absolute"), "base offset 0"),
])
def test_illegal_values_raise(kwargs, needle):
    with pytest.raises(SpecError, match=needle):
        SmemDesc(**kwargs)


@pytest.mark.parametrize("bit", [14, 15, 30, 31] + list(range(53, 61)))
def test_decode_rejects_reserved_bits(bit):
    with pytest.raises(SpecError, match="reserved bits"):
        SmemDesc.decode(FIXED_BIT46 | (1 << bit))


@pytest.mark.parametrize("value", [0, FIXED_BIT46 | (1 << 47), FIXED_BIT46 | (1 << 48)])
def test_decode_rejects_wrong_fixed_constant(value):
    with pytest.raises(SpecError, match="bits 46-48"):
        SmemDesc.decode(value)


@pytest.mark.parametrize("code", [3, 5, 7])
def test_decode_rejects_invalid_swizzle_codes(code):
    with pytest.raises(SpecError, match="swizzle code"):
        SmemDesc.decode(FIXED_BIT46 | (code << 61))


def test_check_bits_never_raises():
    assert check_bits(-1) and check_bits(1 << 64) and check_bits("x")
    assert check_bits(FIXED_BIT46) == []
    assert len(check_bits((1 << 64) - 1)) >= 3      # reserved, fixed constant, swizzle 7


aligned = st.integers(0, (1 << 14) - 1).map(lambda v: v << 4)


@given(aligned, aligned, aligned, st.sampled_from(sorted(SWIZZLE_CODES)), st.integers(0, 7))
def test_round_trip_relative(start, lbo, sbo, swizzle, base_offset):
    desc = SmemDesc(start, lbo, sbo, swizzle, base_offset)
    value = desc.encode()
    assert 0 <= value < 1 << 64
    assert SmemDesc.decode(value) == desc


@given(aligned, aligned, aligned)
def test_round_trip_absolute(start, lbo, sbo):
    desc = SmemDesc(start, lbo, sbo, "128B", 0, "absolute")
    assert SmemDesc.decode(desc.encode()) == desc
