"""The tcgen05 reference model (compiler/sim) against the PTX ISA's own examples and rules.

Every expected value is derived in the test from the table / figure / example it cites; the helpers
`cute_offset` and `swizzle_bytes` below are written from the CuTe notation the seeds print, not from
the model's code.
"""
from __future__ import annotations

import numpy as np
import pytest

from compiler.diagnostics import SpecError
from compiler.sim import numerics
from compiler.sim.smem import (chunk_addresses, decode_smem_desc, element_addresses, encode_smem_desc,
                               read_operand, read_operand_bits, write_operand_bits)
from compiler.sim.tcgen05 import (ashift_rows, compress_sparse, decode_instr_desc, decode_sparse_metadata,
                                  encode_instr_desc, encode_sparse_metadata, expand_sparse, mma,
                                  zero_column_mask_bits)

RNG_SEED = 20261122


# ------------------------------------------------------------------------------------------------
# Independent helpers: CuTe layouts and Swizzle<B,M,S> as the seed (9.7.16.3.3) writes them.
# ------------------------------------------------------------------------------------------------
def cute_offset(shape, stride, index: int) -> int:
    """Offset of a 1-D index in a (possibly nested) CuTe mode: colexicographic decomposition."""
    if isinstance(shape, int):
        return index * stride
    offset = 0
    for sub_shape, sub_stride in zip(shape, stride):
        size = int(np.prod(_flatten(sub_shape)))
        offset += cute_offset(sub_shape, sub_stride, index % size)
        index //= size
    return offset


def _flatten(shape):
    return [shape] if isinstance(shape, int) else [x for s in shape for x in _flatten(s)]


def swizzle_bytes(address: int, b: int, m: int = 4, s: int = 3) -> int:
    """CuTe Swizzle<B,M,S>: bits [M, M+B) ^= bits [M+S, M+S+B)."""
    return address ^ ((address >> s) & (((1 << b) - 1) << m))


def smem_desc_by_hand(start: int, lbo_enc: int, sbo_enc: int, swizzle_code: int,
                      base_offset: int = 0, lbo_mode: int = 0) -> int:
    """Table 40 bit positions written out: start 0-13, LBO 16-29, SBO 32-45, bit 46 = 1, base offset
    49-51, LBO mode 52, swizzle 61-63."""
    return ((start >> 4) | lbo_enc << 16 | sbo_enc << 32 | 1 << 46 | base_offset << 49 | lbo_mode << 52
            | swizzle_code << 61)


# ------------------------------------------------------------------------------------------------
# 9.7.16.3.3 worked examples, Figures 188-192: the exact CuTe layout printed in the seed,
# element value = its logical index, the descriptor from the figure's parameter table.
# ------------------------------------------------------------------------------------------------
# (figure, type, bytes, major, (rows, k), CuTe shape, CuTe stride, Swizzle B, swizzle code, LBO enc, SBO enc)
FIGURES = [
    # Fig 188: Swizzle<0,4,3> o ((8,2),(4,4)):((4,32),(1,64)); LBO = 64*4 B -> 16, SBO = 32*4 B -> 8.
    (188, "tf32", 4, "K", (16, 16), ((8, 2), (4, 4)), ((4, 32), (1, 64)), 0, 0, 16, 8),
    # Fig 189: Swizzle<1,4,3> o ((8,2),(4,4)):((8,64),(1,4)); LBO "1 (assumed)", SBO = 64*4 B -> 16.
    (189, "tf32", 4, "K", (16, 16), ((8, 2), (4, 4)), ((8, 64), (1, 4)), 1, 6, 1, 16),
    # Fig 190: Swizzle<0,4,3> o ((8,1,2),(8,2)):((1,8,64),(8,128)); LBO = 128*2 B -> 16, SBO = 64*2 B -> 8.
    (190, "bf16", 2, "MN", (16, 16), ((8, 1, 2), (8, 2)), ((1, 8, 64), (8, 128)), 0, 0, 16, 8),
    # Fig 191: Swizzle<1,4,3> o ((8,2,2),(8,2)):((1,8,128),(16,256)); LBO = 128*2 B -> 16, SBO = 256*2 B -> 32.
    (191, "bf16", 2, "MN", (32, 16), ((8, 2, 2), (8, 2)), ((1, 8, 128), (16, 256)), 1, 6, 16, 32),
    # Fig 192: Swizzle<2,4,3> o ((8,4,2),(8,2)):((1,8,256),(32,512)); LBO = 256*2 B -> 32, SBO = 512*2 B -> 64.
    (192, "bf16", 2, "MN", (64, 16), ((8, 4, 2), (8, 2)), ((1, 8, 256), (32, 512)), 2, 4, 32, 64),
]


def _figure_byte_address(fig, row, col):
    _, _, nbytes, _, _, shape, stride, b, *_ = fig
    elem_offset = cute_offset(shape[0], stride[0], row) + cute_offset(shape[1], stride[1], col)
    return swizzle_bytes(elem_offset * nbytes, b)


@pytest.mark.parametrize("fig", FIGURES, ids=[f"figure{f[0]}" for f in FIGURES])
def test_canonical_layout_figures_addresses(fig):
    """The model's address of every element equals the figure's exact layout (swizzle on bytes)."""
    number, dtype, nbytes, major, (rows, k), *_, code, lbo, sbo = fig
    desc = smem_desc_by_hand(0, lbo, sbo, code)
    chunk, slot = element_addresses(desc, dtype, major, rows, k, kind="tf32" if dtype == "tf32" else "f16")
    model = chunk + slot * nbytes
    expected = np.array([[_figure_byte_address(fig, r, c) for c in range(k)] for r in range(rows)])
    np.testing.assert_array_equal(model, expected)


@pytest.mark.parametrize("fig", FIGURES, ids=[f"figure{f[0]}" for f in FIGURES])
def test_canonical_layout_figures_roundtrip(fig):
    """Image built from the figure layout with value = logical index; read_operand gives it back."""
    number, dtype, nbytes, major, (rows, k), *_, code, lbo, sbo = fig
    if number == 189:
        # Seed erratum: ((8,2),(4,4)):((8,64),(1,4)) is not one-to-one past the 32-byte swizzle row:
        # (row 1, col 0) and (row 0, col 8) both sit at element offset 8 = 1*8 = 8*1.
        assert _figure_byte_address(fig, 1, 0) == _figure_byte_address(fig, 0, 8)
        k = 8      # the first 8 tf32 columns (one 32-byte row) are one-to-one
    image = np.zeros(4096, dtype=np.uint8)
    logical = np.arange(rows * k, dtype=np.uint64).reshape(rows, k) + 1
    for r in range(rows):
        for c in range(k):
            address = _figure_byte_address(fig, r, c)
            image[address:address + nbytes] = np.frombuffer(int(logical[r, c]).to_bytes(nbytes, "little"),
                                                            dtype=np.uint8)
    desc = smem_desc_by_hand(0, lbo, sbo, code)
    got = read_operand_bits(image, desc, dtype, major, rows, k, kind="tf32" if dtype == "tf32" else "f16")
    np.testing.assert_array_equal(got, logical)


def test_figure190_values_decode_as_bf16():
    """Same image read as numbers: bf16 code i+1 decodes through ml_dtypes bfloat16."""
    fig = FIGURES[2]
    image = np.zeros(1024, dtype=np.uint8)
    for r in range(16):
        for c in range(16):
            a = _figure_byte_address(fig, r, c)
            image[a:a + 2] = np.array([0x3F80 + r], dtype="<u2").view(np.uint8)   # 1.0 + r * 2**-7
    got = read_operand(image, smem_desc_by_hand(0, 16, 8, 0), "bf16", "MN", 16, 16)
    np.testing.assert_array_equal(got, np.repeat((1.0 + np.arange(16) / 128.0)[:, None], 16, axis=1))


# ------------------------------------------------------------------------------------------------
# Descriptor decoding (9.7.16.4.1 Table 40)
# ------------------------------------------------------------------------------------------------
def test_smem_desc_digest_worked_value():
    """PTX ISA 9.7.16.4.1, Table 40: K-major f16 no swizzle, LBO 128 B / SBO 256 B -> enc(addr) | 0x0000401000080000."""
    desc = (0x400 >> 4) | 0x0000401000080000
    f = decode_smem_desc(desc)
    assert (f.start_address, f.lbo, f.sbo, f.base_offset, f.lbo_mode, f.swizzle.name) == \
        (0x400, 128, 256, 0, 0, "none")
    # 128B swizzle K-major, 128-byte rows: enc(addr) | 64<<32 | 1<<46 | 2<<61 -> SBO 1024 B.
    f = decode_smem_desc((0x800 >> 4) | 64 << 32 | 1 << 46 | 2 << 61)
    assert (f.sbo, f.swizzle.name, f.swizzle.xor_bits) == (1024, "128B", 3)


@pytest.mark.parametrize("code,name,b", [(0, "none", 0), (1, "128B_base32B", 2), (2, "128B", 3),
                                         (4, "64B", 2), (6, "32B", 1)])
def test_smem_desc_swizzle_codes(code, name, b):
    """Table 40 swizzle codes 0/1/2/4/6 (PTX ISA 9.7.16.4.1, Table 40 table) and their Swizzle<B,.,.> widths."""
    f = decode_smem_desc(smem_desc_by_hand(0, 1, 1, code))
    assert (f.swizzle.name, f.swizzle.xor_bits) == (name, b)
    assert encode_smem_desc(0, 16, 16, name) == smem_desc_by_hand(0, 1, 1, code)


@pytest.mark.parametrize("desc,words", [
    (smem_desc_by_hand(0, 1, 1, 0) & ~(1 << 46), "fixed constant"),    # Hopper-style: no bit 46
    (smem_desc_by_hand(0, 1, 1, 3), "swizzle code 3"),                 # codes 3, 5, 7 invalid
    (smem_desc_by_hand(0, 1, 1, 0) | 1 << 14, "reserved"),             # bits 14-15 reserved
    (smem_desc_by_hand(0, 1, 1, 0) | 1 << 55, "reserved"),             # bits 53-60 fixed 0
])
def test_smem_desc_rejects_undefined_bits(desc, words):
    with pytest.raises(SpecError, match=words):
        decode_smem_desc(desc)


def test_base_offset_names_the_row_where_the_pattern_starts():
    """9.7.16.4.1 base offset, read as the H100 reads it (docs/verification.md, wgmma read-side check):
    the swizzle acts on absolute address bits with phase (row - base offset). A 128B pattern starting at
    1024*k + 128*j with base offset j is the canonical layout swizzled relative to its own start; with
    base offset 0 it is the layout swizzled on absolute addresses (bits [4,7) ^= [7,10)), as TMA writes."""
    start, j = 2048 + 3 * 128, 3
    rows = np.arange(16)[:, None]
    offset = 128 * (rows % 8) + 1024 * (rows // 8) + 16 * np.arange(8)[None, :]    # SBO 1024 B
    chunks = chunk_addresses(smem_desc_by_hand(start, 1, 64, 2, base_offset=j), "K", 16, 8)
    np.testing.assert_array_equal(chunks, start + swizzle_bytes(offset, 3))
    absolute = chunk_addresses(smem_desc_by_hand(start, 1, 64, 2), "K", 16, 8)
    np.testing.assert_array_equal(absolute, swizzle_bytes(start + offset, 3))
    assert not np.array_equal(absolute, chunks)


def test_k_step_inside_128b_row_keeps_base_offset_zero():
    """CUTLASS practice (PTX ISA 9.7.16.4.1, Table 40): K steps advance the start address by 32 B inside a 128-byte row
    with base offset 0; element (r, chunk c) of step s is chunk 2s + c of the absolutely swizzled row."""
    full = chunk_addresses(smem_desc_by_hand(0, 1, 64, 2), "K", 8, 8)
    for step in range(4):
        part = chunk_addresses(smem_desc_by_hand(32 * step, 1, 64, 2), "K", 8, 2)
        np.testing.assert_array_equal(part, full[:, 2 * step:2 * step + 2])


def test_absolute_lbo_mode_second_piece():
    """9.7.16.3.1.2: a 48-byte K step starting 96 B into a 128-byte row continues at the LBO address."""
    desc = smem_desc_by_hand(96, 2048 >> 4, 64, 2, lbo_mode=1)
    chunks = chunk_addresses(desc, "K", 8, 3)
    row = 128 * np.arange(8)
    np.testing.assert_array_equal(chunks[:, :2], swizzle_bytes(96 + row[:, None] + 16 * np.arange(2), 3))
    np.testing.assert_array_equal(chunks[:, 2], swizzle_bytes(2048 + row, 3))
    with pytest.raises(SpecError, match="128B swizzling"):                # 9.7.16.3.1.2.1
        chunk_addresses(smem_desc_by_hand(96, 2048 >> 4, 64, 4, lbo_mode=1), "K", 8, 3)


# ------------------------------------------------------------------------------------------------
# Sub-byte storage (PTX 9.7.16.10.4.4 / .6)
# ------------------------------------------------------------------------------------------------
def test_fp4_padded_under_f8f6f4_packed_under_mxf4():
    """f8f6f4: 16 e2m1 in the low 8 bytes of each 16-byte chunk (.b4x16_p64), the rest padding;
    mxf4: 32 e2m1 per chunk, two per byte, low nibble first."""
    codes = np.arange(32, dtype=np.uint64) % 16                       # e2m1 codes 0..15, twice
    nibbles = (codes[0::2] | codes[1::2] << 4).astype(np.uint8)      # element 2i low, 2i+1 high
    image = np.full(512, 0xFF, dtype=np.uint8)                        # garbage in the padding
    # K-major, no swizzle: row 0's chunk 0 at byte 0, its chunk 1 at LBO = 256 B (SBO 128 B).
    desc = smem_desc_by_hand(0, 256 >> 4, 128 >> 4, 0)
    image[0:8] = nibbles[:8]                                          # elements 0..15
    image[256:264] = nibbles[8:]                                      # elements 16..31
    got = read_operand_bits(image, desc, "e2m1", "K", 8, 32, kind="f8f6f4")[0]
    np.testing.assert_array_equal(got, codes)
    packed = np.zeros(512, dtype=np.uint8)
    packed[0:16] = nibbles
    packed[256:272] = nibbles
    got = read_operand_bits(packed, desc, "e2m1", "K", 8, 64, kind="mxf4")[0]
    np.testing.assert_array_equal(got, np.concatenate([codes, codes]))
    np.testing.assert_array_equal(numerics.decode(got[:8], "e2m1"), [0, 0.5, 1, 1.5, 2, 3, 4, 6])


def test_fp6_padded_sixteen_per_chunk():
    """f8f6f4 e3m2: 16 six-bit values in the low 12 bytes (96 bits) of a chunk, element t at bit 6t."""
    codes = np.array([(7 * t + 3) % 64 for t in range(16)], dtype=np.uint64)
    word = sum(int(c) << (6 * t) for t, c in enumerate(codes))
    image = np.full(128, 0xAB, dtype=np.uint8)
    image[0:12] = np.frombuffer(word.to_bytes(12, "little"), dtype=np.uint8)
    got = read_operand_bits(image, smem_desc_by_hand(0, 1, 8, 0), "e3m2", "K", 8, 16, kind="f8f6f4")[0]
    np.testing.assert_array_equal(got, codes)


# ------------------------------------------------------------------------------------------------
# Zero-column mask (9.7.16.4.3): the seed's four examples.
# ------------------------------------------------------------------------------------------------
def zcm_by_hand(sc=(0, 0, 0, 0), fs=(0, 0, 0, 0), nzm=1, skip=0, use=0, shift=0) -> int:
    """Table 45: sc_i at bits 8i..8i+7, fs_i at bit 32+i, non-zero mask bit 39, skip span 40-47,
    use span 48-55, column shift 56-61."""
    value = sum(c << (8 * i) for i, c in enumerate(sc)) | sum(f << (32 + i) for i, f in enumerate(fs))
    return value | nzm << 39 | skip << 40 | use << 48 | shift << 56


def _low_bits(mask: np.ndarray, printed: str) -> None:
    """Compare a boolean sub-mask (bit i = column i) with the seed's MSB-first printout of its low bits."""
    digits = printed.replace(" ", "")
    expected = [int(ch) for ch in reversed(digits)]
    np.testing.assert_array_equal(mask[:len(expected)].astype(int), expected)


def test_zero_column_mask_example1():
    """Example 1, M=128: non-zero-mask 0 -> mask 0x0 whatever the spans."""
    mask, shift = zero_column_mask_bits(zcm_by_hand(nzm=0, skip=4, use=3), 128, 64)
    assert not mask.any() and shift == 0


def test_zero_column_mask_example2():
    """Example 2, M=128: sc0=0, fs0=0, skip 2, use 3 -> mask0 0b...111 0000 111 0000."""
    mask, _ = zero_column_mask_bits(zcm_by_hand(skip=2, use=3), 128, 64)
    _low_bits(mask, "111 0000 111 0000")
    # Period 7 (3 zeroed + 4 used, PTX ISA Table 45 and its examples) over the whole N.
    np.testing.assert_array_equal(mask, (np.arange(64) % 7) >= 4)


def test_zero_column_mask_example3():
    """Example 3, M=64: two N/2-bit sub-masks; fs = {fs1=0, fs0=1}."""
    mask, _ = zero_column_mask_bits(zcm_by_hand(fs=(1, 0, 0, 0), skip=2, use=3), 64, 128)
    _low_bits(mask[:64], "111 0000 111 0000 111")
    _low_bits(mask[64:], "0000 111 0000 111 0000")


def test_zero_column_mask_example4():
    """Example 4, M=32: sc = {sc3=1, sc2=2, sc1=1, sc0=0}, fs = {fs3=0, fs2=0, fs1=1, fs0=1}, shift 2."""
    desc = zcm_by_hand(sc=(0, 1, 2, 1), fs=(1, 1, 0, 0), skip=2, use=3, shift=2)
    mask, shift = zero_column_mask_bits(desc, 32, 128)
    assert shift == 2
    _low_bits(mask[0:32], "0000 111 0000 111")
    _low_bits(mask[32:64], "0000 111 0000 11")
    _low_bits(mask[64:96], "111 0000 111 00")
    _low_bits(mask[96:128], "111 0000 111 000")


def test_zero_column_mask_and_shift_in_mma():
    """.ws M=32 N=128 with Example 4's descriptor: B columns 2..129 are used ("due to the shift of 2")
    and the masked columns contribute zeros."""
    rng = np.random.default_rng(RNG_SEED)
    m, n, k = 32, 128, 16
    a = numerics.representable("f16", rng, (m, k))
    b = numerics.representable("f16", rng, (n + 8, k))               # 8 extra B rows in smem
    image = np.zeros(1 << 16, dtype=np.uint8)
    a_desc = smem_desc_by_hand(0, 128 >> 4, 256 >> 4, 0)
    b_desc = smem_desc_by_hand(8192, 128 >> 4, 256 >> 4, 0)
    write_operand_bits(image, a_desc, "f16", "K", numerics.encode(a, "f16"), kind="f16")
    write_operand_bits(image, b_desc, "f16", "K", numerics.encode(b, "f16"), kind="f16")
    zcm = zcm_by_hand(sc=(0, 1, 2, 1), fs=(1, 1, 0, 0), skip=2, use=3, shift=2)
    idesc = encode_instr_desc("f16", a_type="f16", b_type="f16", m=m, n=n)
    got = mma(image, a_desc, b_desc, idesc, "f16", zero_column_mask=zcm, ws=True)
    mask, _ = zero_column_mask_bits(zcm, m, n)
    used_b = np.where(mask[:, None], 0.0, b[2:2 + n])
    np.testing.assert_array_equal(got, (a @ used_b.T).astype(np.float32))
    with pytest.raises(SpecError, match=r"\.ws"):
        mma(image, a_desc, b_desc, encode_instr_desc("f16", a_type="f16", b_type="f16", m=128, n=n),
            "f16", zero_column_mask=zcm)


# ------------------------------------------------------------------------------------------------
# Instruction descriptor (Tables 42-44)
# ------------------------------------------------------------------------------------------------
def test_idesc_digest_worked_value():
    """a worked Table 42 value: 0x08100010 = D F32 (bits 4-5 = 1), A/B F16, K-major, N>>3 = 8, M>>4 = 8."""
    f = decode_instr_desc(0x08100010, "f16")
    assert (f.d_type, f.a_type, f.b_type, f.n, f.m, f.k, f.a_major, f.b_major, f.sparse) == \
        ("f32", "f16", "f16", 64, 128, 16, "K", "K", False)
    assert encode_instr_desc("f16", a_type="f16", b_type="f16", m=128, n=64) == 0x08100010


def test_idesc_mx_tables():
    """Table 43: M>>7 at bits 27-28, scale type bit 23, SF IDs at 29-30 / 4-5; Table 44: bit 31 K=96."""
    value = 1 << 27 | 16 << 17 | 1 << 23 | 3 << 29 | 1 << 4 | 5 << 7 | 0 << 10     # e2m1 x e4m3
    f = decode_instr_desc(value, "mxf8f6f4")
    assert (f.m, f.n, f.scale_type, f.a_sf_id, f.b_sf_id, f.a_type, f.b_type, f.k) == \
        (128, 128, "ue8m0", 3, 1, "e2m1", "e4m3", 32)
    f = decode_instr_desc(2 << 27 | 32 << 17 | 1 << 7 | 1 << 10 | 1 << 31, "mxf4nvf4")
    assert (f.m, f.n, f.k, f.scale_type, f.k96) == (256, 256, 96, "ue4m3", True)
    with pytest.raises(SpecError, match="scale factor IDs"):            # Table 44: 0 or 2 only
        decode_instr_desc(1 << 27 | 1 << 17 | 1 << 7 | 1 << 10 | 1 << 23 | 1 << 29, "mxf4")


@pytest.mark.parametrize("kind,value,words", [
    ("f16", 0x08100010 | 1 << 6, "reserved"),                           # Table 42 bit 6
    ("f16", 0x08100010 | 1 << 3, "saturate"),                           # saturate: i8 only
    ("i8", 2 << 4 | 1 << 7 | 1 << 10 | 8 << 17 | 8 << 24 | 1 << 13, "negate"),   # 9.7.16.10.1
    ("f16", 0x08100010 & ~(3 << 4) | 1 << 7 | 1 << 10, "bf16 inputs need an f32 D"),
    ("f16", 0x08100010 | 1 << 7, "one type"),                           # f16 x bf16
    ("mxf4", 1 << 27 | 1 << 17 | 1 << 7 | 1 << 10 | 1 << 15 | 1 << 23, "transposed"),
    ("tf32", 1 << 4 | 2 << 7 | 2 << 10 | 8 << 17 | 8 << 24 | 3 << 7, "not defined"),
])
def test_idesc_rejects(kind, value, words):
    with pytest.raises(SpecError, match=words):
        decode_instr_desc(value, kind)


# ------------------------------------------------------------------------------------------------
# Every idesc field acts on the result as PTX says.
# ------------------------------------------------------------------------------------------------
class Problem:
    """A, B (values) placed K-major, no swizzle, in one image: A at 0, B at 32 KiB."""

    def __init__(self, dtype="f16", kind="f16", m=128, n=64, k=16, a_major="K", b_major="K", seed=RNG_SEED):
        rng = np.random.default_rng(seed)
        self.a = numerics.representable(dtype, rng, (m, k))
        self.b = numerics.representable(dtype, rng, (n, k))
        self.image = np.zeros(1 << 16, dtype=np.uint8)
        self.a_desc = self._place(dtype, kind, a_major, self.a, 0)
        self.b_desc = self._place(dtype, kind, b_major, self.b, 32768)

    def _place(self, dtype, kind, major, values, base):
        # No swizzle. K-major: core matrices 8 rows x 16 B; K-chunk groups LBO apart, 8-row groups SBO
        # apart. MN-major: LBO between 8-K-row groups, SBO between 16-byte MN columns.
        rows, k = values.shape
        _, per_chunk = numerics.smem_element_slots(dtype, kind)
        if major == "K":
            desc = smem_desc_by_hand(base, (rows * 16) >> 4, 128 >> 4, 0)
        else:
            desc = smem_desc_by_hand(base, ((rows // per_chunk) * 128) >> 4, 128 >> 4, 0)
        write_operand_bits(self.image, desc, dtype, major, numerics.encode(values, dtype), kind=kind)
        return desc


def test_negate_bits_flip_signs():
    """Table 42 bits 13/14: negate A / negate B."""
    p = Problem()
    base = dict(a_type="f16", b_type="f16", m=128, n=64)
    plain = mma(p.image, p.a_desc, p.b_desc, encode_instr_desc("f16", **base), "f16")
    neg_a = mma(p.image, p.a_desc, p.b_desc, encode_instr_desc("f16", negate_a=True, **base), "f16")
    neg_b = mma(p.image, p.a_desc, p.b_desc, encode_instr_desc("f16", negate_b=True, **base), "f16")
    both = mma(p.image, p.a_desc, p.b_desc, encode_instr_desc("f16", negate_a=True, negate_b=True, **base), "f16")
    assert np.any(plain != 0)
    np.testing.assert_array_equal(neg_a, -plain)
    np.testing.assert_array_equal(neg_b, -plain)
    np.testing.assert_array_equal(both, plain)


@pytest.mark.parametrize("operand", ["A", "B"])
def test_transpose_bit_selects_major(operand):
    """Table 42 bits 15/16: the same operand stored MN-major is read right only with its transpose bit."""
    k_major = Problem()
    mn_major = Problem(a_major="MN" if operand == "A" else "K", b_major="MN" if operand == "B" else "K")
    base = dict(a_type="f16", b_type="f16", m=128, n=64)
    flag = {"a_major": "MN"} if operand == "A" else {"b_major": "MN"}
    want = mma(k_major.image, k_major.a_desc, k_major.b_desc, encode_instr_desc("f16", **base), "f16")
    got = mma(mn_major.image, mn_major.a_desc, mn_major.b_desc, encode_instr_desc("f16", **base, **flag), "f16")
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(want, (k_major.a @ k_major.b.T).astype(np.float32))
    wrong = mma(mn_major.image, mn_major.a_desc, mn_major.b_desc, encode_instr_desc("f16", **base), "f16")
    assert not np.array_equal(wrong, want)


def test_m_and_n_come_from_idesc():
    """Table 42 bits 17-22 (N>>3) and 24-28 (M>>4) decide the shape read and written."""
    p = Problem()
    full = mma(p.image, p.a_desc, p.b_desc, encode_instr_desc("f16", a_type="f16", b_type="f16", m=128, n=64), "f16")
    half_n = mma(p.image, p.a_desc, p.b_desc, encode_instr_desc("f16", a_type="f16", b_type="f16", m=128, n=32), "f16")
    m64 = mma(p.image, p.a_desc, p.b_desc, encode_instr_desc("f16", a_type="f16", b_type="f16", m=64, n=64), "f16")
    assert full.shape == (128, 64) and half_n.shape == (128, 32) and m64.shape == (64, 64)
    np.testing.assert_array_equal(half_n, full[:, :32])
    np.testing.assert_array_equal(m64, full[:64])
    # Table 39: N is a multiple of 16 with cta_group::2; kind::i8 skips N = 40 (8..32, then 48 step 16).
    pair = [p.image, p.image]
    with pytest.raises(SpecError, match="N=24"):
        mma(pair, p.a_desc, p.b_desc, encode_instr_desc("f16", a_type="f16", b_type="f16", m=256, n=24),
            "f16", cta_group=2)
    with pytest.raises(SpecError, match="N=40"):
        mma(p.image, p.a_desc, p.b_desc,
            encode_instr_desc("i8", a_type="s8", b_type="s8", m=128, n=40, d_type="s32"), "i8")
    with pytest.raises(SpecError, match="M=256"):                      # M=256 needs cta_group::2
        mma(p.image, p.a_desc, p.b_desc, encode_instr_desc("f16", a_type="f16", b_type="f16", m=256, n=64), "f16")


def test_type_and_dtype_fields():
    """Bits 7-9/10-12 pick how the same bytes decode (f16 vs bf16); bits 4-5 pick D's type."""
    p = Problem()
    as_f16 = mma(p.image, p.a_desc, p.b_desc,
                 encode_instr_desc("f16", a_type="f16", b_type="f16", m=128, n=64, d_type="f16"), "f16")
    assert as_f16.dtype == np.float16
    np.testing.assert_array_equal(as_f16, (p.a @ p.b.T).astype(np.float16))
    as_bf16 = mma(p.image, p.a_desc, p.b_desc, encode_instr_desc("f16", a_type="bf16", b_type="bf16", m=128, n=64),
                  "f16")
    a_bits = numerics.encode(p.a, "f16")
    b_bits = numerics.encode(p.b, "f16")
    want = numerics.decode(a_bits, "bf16") @ numerics.decode(b_bits, "bf16").T
    np.testing.assert_array_equal(as_bf16, want.astype(np.float32))


def test_enable_and_scale_input_d():
    """enable-input-d adds D; scale-input-d s scales the old D by 2**-s (PTX ISA 9.7.16.10.9 operands, f16/tf32 only)."""
    p = Problem()
    idesc = encode_instr_desc("f16", a_type="f16", b_type="f16", m=128, n=64)
    prior = np.full((128, 64), 8.0, dtype=np.float32)
    product = (p.a @ p.b.T)
    np.testing.assert_array_equal(mma(p.image, p.a_desc, p.b_desc, idesc, "f16", d=prior),
                                  product.astype(np.float32))
    np.testing.assert_array_equal(mma(p.image, p.a_desc, p.b_desc, idesc, "f16", d=prior, enable_input_d=True),
                                  (product + 8).astype(np.float32))
    np.testing.assert_array_equal(mma(p.image, p.a_desc, p.b_desc, idesc, "f16", d=prior, enable_input_d=True,
                                      scale_input_d=3), (product + 1).astype(np.float32))
    with pytest.raises(SpecError, match=r"\[0, 15\]"):
        mma(p.image, p.a_desc, p.b_desc, idesc, "f16", d=prior, enable_input_d=True, scale_input_d=16)


def test_i8_saturate_bit():
    """Table 42 bit 3 (i8): without saturate the s32 sum wraps modulo 2**32, with it it clamps."""
    p = Problem("s8", "i8", m=128, n=64, k=32)
    base = dict(a_type="s8", b_type="s8", m=128, n=64, d_type="s32")
    big = np.full((128, 64), 2**31 - 100, dtype=np.int32)
    exact = p.a.astype(np.int64) @ p.b.T.astype(np.int64) + (2**31 - 100)
    wrap = mma(p.image, p.a_desc, p.b_desc, encode_instr_desc("i8", **base), "i8", d=big, enable_input_d=True)
    sat = mma(p.image, p.a_desc, p.b_desc, encode_instr_desc("i8", saturate=True, **base), "i8", d=big,
              enable_input_d=True)
    assert np.any(exact > 2**31 - 1)
    np.testing.assert_array_equal(wrap, ((exact + 2**31) % 2**32 - 2**31).astype(np.int32))
    np.testing.assert_array_equal(sat, np.minimum(exact, 2**31 - 1).astype(np.int32))


def test_u8_s8_mixed_types():
    """i8 atype/btype: unsigned 8b = 0, signed 8b = 1; the same bytes read as u8 are +256 where negative."""
    p = Problem("s8", "i8", m=128, n=64, k=32)
    got = mma(p.image, p.a_desc, p.b_desc,
              encode_instr_desc("i8", a_type="u8", b_type="s8", m=128, n=64, d_type="s32"), "i8")
    a_u8 = np.where(p.a < 0, p.a + 256, p.a)
    np.testing.assert_array_equal(got, (a_u8 @ p.b.T).astype(np.int32))


def test_max_shift_has_no_numeric_effect():
    """Table 42 bits 30-31 (B reuse shift of .ws) change scheduling, not the result."""
    p = Problem()
    base = dict(a_type="f16", b_type="f16", m=128, n=64)
    np.testing.assert_array_equal(
        mma(p.image, p.a_desc, p.b_desc, encode_instr_desc("f16", **base), "f16"),
        mma(p.image, p.a_desc, p.b_desc, encode_instr_desc("f16", max_shift=3, **base), "f16"))


def test_disable_output_lane():
    """PTX ISA 9.7.16.10.9 operands: bit i of disable-output-lane = TMEM lane i of D not written; M=128 lane = row,
    M=64 lane = 32*(row>>4) + (row&15) + L0 (PTX ISA 9.7.16.10.5 data-path layouts layout F)."""
    p = Problem()
    idesc = encode_instr_desc("f16", a_type="f16", b_type="f16", m=128, n=64)
    prior = np.full((128, 64), -1.0, dtype=np.float32)
    words = [1 << 3, 1 << (40 - 32), 0, 1 << 31]                        # lanes 3, 40, 127
    got = mma(p.image, p.a_desc, p.b_desc, idesc, "f16", d=prior, disable_output_lane=words)
    full = (p.a @ p.b.T).astype(np.float32)
    kept = np.zeros(128, dtype=bool)
    kept[[3, 40, 127]] = True
    np.testing.assert_array_equal(got[kept], prior[kept])
    np.testing.assert_array_equal(got[~kept], full[~kept])
    # M=64, L0=16: lane 16 is row 0, lane 48 is row 16; lanes 0..15 hold no row.
    idesc64 = encode_instr_desc("f16", a_type="f16", b_type="f16", m=64, n=64)
    got = mma(p.image, p.a_desc, p.b_desc, idesc64, "f16", d=prior[:64], lane_base=16,
              disable_output_lane=(1 << 16) | (1 << 48) | 0xFFFF)
    np.testing.assert_array_equal(got[[0, 16]], prior[[0, 16]])
    np.testing.assert_array_equal(np.delete(got, [0, 16], axis=0), np.delete(full[:64], [0, 16], axis=0))


def test_cta_group_2_splits_a_rows_and_b_columns():
    """cta_group::2, M=256: each CTA holds 128 rows of A and N/2 columns of B at the same addresses."""
    halves = [Problem(m=128, n=32, seed=RNG_SEED + i) for i in range(2)]
    idesc = encode_instr_desc("f16", a_type="f16", b_type="f16", m=256, n=64)
    got = mma([h.image for h in halves], halves[0].a_desc, halves[0].b_desc, idesc, "f16", cta_group=2)
    a = np.concatenate([h.a for h in halves])
    b = np.concatenate([h.b for h in halves])
    np.testing.assert_array_equal(got, (a @ b.T).astype(np.float32))


def test_a_from_tensor_memory():
    """A in TMEM: row m at lane m (M=128), f16 packed two per 32-bit column, element 2c in bits 15:0."""
    p = Problem()
    codes = numerics.encode(p.a, "f16").astype(np.uint32)
    tmem = (codes[:, 0::2] | codes[:, 1::2] << 16).astype(np.uint32)   # 128 lanes x 8 columns
    idesc = encode_instr_desc("f16", a_type="f16", b_type="f16", m=128, n=64)
    np.testing.assert_array_equal(mma(p.image, None, p.b_desc, idesc, "f16", a_tmem=tmem),
                                  mma(p.image, p.a_desc, p.b_desc, idesc, "f16"))


def test_ashift_moves_a_rows_down_after_the_product():
    """PTX ISA 9.7.16.10.9.1, .ashift: A's rows in Tensor Memory move down by one row, all but the last;
    only with A in TMEM and M = 128 / 256. The model (compiler.sim.tcgen05.ashift_rows) applies the shift
    after the MMA has read A, so the first MMA computes A B and the second (A now shifted) computes
    row i from old row i - 1 (row 0 kept); columns past this MMA's A are untouched."""
    p = Problem()
    codes = numerics.encode(p.a, "f16").astype(np.uint32)
    tmem = np.zeros((128, 12), np.uint32)
    tmem[:, :8] = codes[:, 0::2] | codes[:, 1::2] << 16                 # K = 16 f16: 8 columns
    tmem[:, 8:] = np.arange(128 * 4, dtype=np.uint32).reshape(128, 4)    # another MMA's columns
    original = tmem.copy()
    idesc = encode_instr_desc("f16", a_type="f16", b_type="f16", m=128, n=64)
    first = mma(p.image, None, p.b_desc, idesc, "f16", a_tmem=tmem, ashift=True)
    np.testing.assert_array_equal(first, (p.a @ p.b.T).astype(np.float32))
    # row i + 1 <- row i for i = 0..126 (the old row 127 is gone), row 0 kept
    np.testing.assert_array_equal(tmem[1:, :8], original[:-1, :8])
    np.testing.assert_array_equal(tmem[0, :8], original[0, :8])
    np.testing.assert_array_equal(tmem[:, 8:], original[:, 8:])
    second = mma(p.image, None, p.b_desc, idesc, "f16", a_tmem=tmem, ashift=True)
    shifted = np.concatenate([p.a[:1], p.a[:-1]])
    np.testing.assert_array_equal(second, (shifted @ p.b.T).astype(np.float32))
    np.testing.assert_array_equal(tmem[2:, :8], original[:-2, :8])


def test_ashift_rules():
    """9.7.16.10.9.1: .ashift only with A in TMEM and M = 128 or 256; M = 256 (cta_group::2) shifts each
    CTA's 128 rows (the last row of each Tensor Memory stays behind)."""
    p = Problem()
    idesc = encode_instr_desc("f16", a_type="f16", b_type="f16", m=128, n=64)
    with pytest.raises(SpecError, match="tensor memory"):
        mma(p.image, p.a_desc, p.b_desc, idesc, "f16", ashift=True)
    idesc64 = encode_instr_desc("f16", a_type="f16", b_type="f16", m=64, n=64)
    with pytest.raises(SpecError, match="M = 128 or 256"):
        mma(p.image, None, p.b_desc, idesc64, "f16", a_tmem=np.zeros((128, 8), np.uint32), ashift=True)
    with pytest.raises(SpecError, match="numpy"):
        mma(p.image, None, p.b_desc, idesc, "f16", a_tmem=np.zeros((128, 8), np.uint32).tolist(), ashift=True)
    images = [np.arange(128 * 8, dtype=np.uint32).reshape(128, 8) + 10_000 * c for c in range(2)]
    for c, image in enumerate(images):
        after = ashift_rows(image, 256, 2, "f16", "f16", 16)
        np.testing.assert_array_equal(after[1:], image[:-1])
        np.testing.assert_array_equal(after[0], image[0])


def test_tf32_transpose_needs_128b_base32b():
    """9.7.16.10.1: a transposed tf32 operand needs 128B swizzle with 32-byte atoms."""
    p = Problem("tf32", "tf32", k=8)
    idesc = encode_instr_desc("tf32", a_type="tf32", b_type="tf32", m=128, n=64, b_major="MN")
    with pytest.raises(SpecError, match="32-byte"):
        mma(p.image, p.a_desc, p.b_desc, idesc, "tf32")


# ------------------------------------------------------------------------------------------------
# Sparse A: metadata in TMEM (PTX ISA 9.7.16.10.8.4), selector = column parity (Table 44 sparsity selector).
# ------------------------------------------------------------------------------------------------
def test_sparse_f16_metadata_hand_built():
    """f16, M=128: code of (row m, chunk c=4j+n) at lane 16*(m>>4) + (m&7) + 8j, bits
    16*((m>>3)&1) + 4n, column = selector. Hand check: row 8, chunk 5 (j=1, n=1) -> lane 8, bits 23:20."""
    m, n_cols = 128, 8
    base_code = 0b0100                                                # keep elements 0 and 1 of a chunk
    image = np.zeros((128, 2), dtype=np.uint64)
    image[:, 1] = sum(base_code << (4 * i) for i in range(8))          # selector 1 -> column 1
    image[8, 1] = (image[8, 1] & ~np.uint64(0xF << 20)) | np.uint64(0b1110 << 20)
    codes = decode_sparse_metadata(image.astype(np.uint32), "f16", m, selector=1)
    assert codes[8, 5] == 0b1110
    assert np.count_nonzero(codes != base_code) == 1
    # The MMA with these codes: row 8's chunk 5 places its two stored values at K = 22 and 23.
    rng = np.random.default_rng(RNG_SEED)
    stored = numerics.representable("f16", rng, (m, 16))
    dense = np.zeros((m, 32))
    for row in range(m):
        for c in range(8):
            positions = (2, 3) if (row, c) == (8, 5) else (0, 1)
            dense[row, 4 * c + positions[0]] = stored[row, 2 * c]
            dense[row, 4 * c + positions[1]] = stored[row, 2 * c + 1]
    b = numerics.representable("f16", rng, (n_cols, 32))
    img = np.zeros(1 << 15, dtype=np.uint8)
    a_desc = smem_desc_by_hand(0, (m * 16) >> 4, 128 >> 4, 0)         # stored A: 16 f16 = 2 chunks
    b_desc = smem_desc_by_hand(16384, (n_cols * 16) >> 4, 128 >> 4, 0)
    write_operand_bits(img, a_desc, "f16", "K", numerics.encode(stored, "f16"), kind="f16")
    write_operand_bits(img, b_desc, "f16", "K", numerics.encode(b, "f16"), kind="f16")
    idesc = encode_instr_desc("f16", a_type="f16", b_type="f16", m=m, n=n_cols, sparse=True, selector=1)
    got = mma(img, a_desc, b_desc, idesc, "f16", tmem_meta=image.astype(np.uint32))
    np.testing.assert_array_equal(got, (dense @ b.T).astype(np.float32))
    # Selector 0 reads column 0, which holds no valid codes here (0b0000 is undefined).
    with pytest.raises(SpecError, match="undefined"):
        mma(img, a_desc, b_desc, idesc & ~3, "f16", tmem_meta=image.astype(np.uint32))


def test_sparse_i8_metadata_hand_built():
    """i8, M=128: lane = row, chunk c in column c>>3 at bits 4*(c&7). Hand check: row 5, chunk 11 ->
    lane 5, column 1, bits 15:12."""
    m, n_cols = 128, 16
    image = np.zeros((128, 2), dtype=np.uint64)
    image[:, :] = sum(0b1000 << (4 * i) for i in range(8))            # keep elements 0 and 2
    image[5, 1] = (image[5, 1] & ~np.uint64(0xF << 12)) | np.uint64(0b1101 << 12)   # keep 1 and 3
    codes = decode_sparse_metadata(image.astype(np.uint32), "i8", m)
    assert codes[5, 11] == 0b1101 and np.count_nonzero(codes != 0b1000) == 1
    rng = np.random.default_rng(RNG_SEED)
    stored = rng.integers(-128, 128, size=(m, 32))
    dense = np.zeros((m, 64), dtype=np.int64)
    for row in range(m):
        for c in range(16):
            positions = (1, 3) if (row, c) == (5, 11) else (0, 2)
            dense[row, 4 * c + positions[0]] = stored[row, 2 * c]
            dense[row, 4 * c + positions[1]] = stored[row, 2 * c + 1]
    b = rng.integers(-128, 128, size=(n_cols, 64))
    img = np.zeros(1 << 15, dtype=np.uint8)
    a_desc = smem_desc_by_hand(0, (m * 16) >> 4, 128 >> 4, 0)
    b_desc = smem_desc_by_hand(16384, (n_cols * 16) >> 4, 128 >> 4, 0)
    write_operand_bits(img, a_desc, "s8", "K", numerics.encode(stored, "s8"), kind="i8")
    write_operand_bits(img, b_desc, "s8", "K", numerics.encode(b, "s8"), kind="i8")
    idesc = encode_instr_desc("i8", a_type="s8", b_type="s8", m=m, n=n_cols, d_type="s32", sparse=True)
    got = mma(img, a_desc, b_desc, idesc, "i8", tmem_meta=image.astype(np.uint32))
    np.testing.assert_array_equal(got, (dense @ b.T).astype(np.int32))
    with pytest.raises(SpecError, match="selector must be 0"):         # PTX ISA 9.7.16.10.8.4: 8-bit kinds
        mma(img, a_desc, b_desc, idesc | 1, "i8", tmem_meta=image.astype(np.uint32))


@pytest.mark.parametrize("granularity,codes", [("1:2", [0b0100, 0b1110]),
                                               ("2:4", [0b0100, 0b1000, 0b1100, 0b1001, 0b1101, 0b1110]),
                                               ("4:8", [0b0100, 0b1110])])
def test_sparse_codes_expand(granularity, codes):
    """9.7.16.10.8.1 index codes: bits[1:0] first kept index, bits[3:2] second (4:8: pair indices);
    tf32 0b0100 keeps element 0, 0b1110 element 1. compress_sparse inverts expand_sparse."""
    width = {"1:2": 2, "2:4": 4, "4:8": 8}[granularity]
    kept = width // 2
    for code in codes:
        stored = np.arange(1, kept + 1, dtype=np.float64)[None, :]
        dense = expand_sparse(stored, np.array([[code]]), granularity)[0]
        if granularity == "1:2":
            expected_pos = [{0b0100: 0, 0b1110: 1}[code]]
        elif granularity == "2:4":
            expected_pos = [code & 3, code >> 2]
        else:
            expected_pos = [2 * (code & 3), 2 * (code & 3) + 1, 2 * (code >> 2), 2 * (code >> 2) + 1]
        want = np.zeros(width)
        want[expected_pos] = stored[0]
        np.testing.assert_array_equal(dense, want)
        again, again_codes = compress_sparse(dense[None, :], granularity)
        np.testing.assert_array_equal(again, stored)
        assert int(again_codes[0, 0]) == code


def test_encode_sparse_metadata_inverts_decode():
    rng = np.random.default_rng(RNG_SEED)
    for kind, chunks in (("f16", 8), ("tf32", 8), ("i8", 16), ("mxf4", 16)):
        valid = [0b0100, 0b1110] if kind == "tf32" else [0b0100, 0b1000, 0b1100, 0b1001, 0b1101, 0b1110]
        codes = rng.choice(valid, size=(128, chunks)).astype(np.uint64)
        sel = 1 if kind in ("f16", "tf32") else 0
        image = encode_sparse_metadata(codes, kind, 128, selector=sel)
        np.testing.assert_array_equal(decode_sparse_metadata(image, kind, 128, selector=sel), codes)


# ------------------------------------------------------------------------------------------------
# Block scaling (9.7.16.10.7, Tables 54/55)
# ------------------------------------------------------------------------------------------------
def test_block_scaled_mxf8f6f4_ue8m0():
    """(A * scale_A) * (B * scale_B): one UE8M0 scale per row of A / column of B (1X, K=32);
    UE8M0 code e = 2**(e-127)."""
    p = Problem("e4m3", "mxf8f6f4", m=128, n=64, k=32)
    rng = np.random.default_rng(RNG_SEED)
    sa = rng.integers(120, 135, size=(128, 1))
    sb = rng.integers(120, 135, size=(1, 64))
    idesc = encode_instr_desc("mxf8f6f4", a_type="e4m3", b_type="e4m3", m=128, n=64)
    got = mma(p.image, p.a_desc, p.b_desc, idesc, "mxf8f6f4", scale_a=sa, scale_b=sb)
    want = (p.a * 2.0 ** (sa - 127)) @ (p.b * 2.0 ** (sb.T - 127)).T
    np.testing.assert_array_equal(got, want.astype(np.float32))


def test_block_scaled_mxf4nvf4_ue4m3_block16():
    """mxf4nvf4 with UE4M3 scales needs block16 (Table 55): 4 scales per row for K=64."""
    p = Problem("e2m1", "mxf4nvf4", m=128, n=64, k=64)
    rng = np.random.default_rng(RNG_SEED)
    sa = rng.integers(0x30, 0x40, size=(128, 4))                      # ue4m3 codes 0x30..0x3F
    sb = rng.integers(0x30, 0x40, size=(4, 64))
    idesc = encode_instr_desc("mxf4nvf4", a_type="e2m1", b_type="e2m1", m=128, n=64, scale_type="ue4m3")
    got = mma(p.image, p.a_desc, p.b_desc, idesc, "mxf4nvf4", scale_a=sa, scale_b=sb, scale_vec="block16")
    dec = numerics.decode(np.arange(256), "e4m3")
    want = (p.a * np.repeat(dec[sa], 16, axis=1)) @ (p.b * np.repeat(dec[sb.T], 16, axis=1)).T
    np.testing.assert_array_equal(got, want.astype(np.float32))
    with pytest.raises(SpecError, match="UE4M3"):
        mma(p.image, p.a_desc, p.b_desc, idesc, "mxf4nvf4", scale_a=sa[:, :2], scale_b=sb[:2],
            scale_vec="block32")


def test_f8f6f4_mixed_fp6_fp4_operands():
    """kind::f8f6f4 takes A and B of different types (Table 42 atype/btype), both padded in smem."""
    rng = np.random.default_rng(RNG_SEED)
    a = numerics.representable("e3m2", rng, (128, 32))
    b = numerics.representable("e2m1", rng, (64, 32))
    image = np.zeros(1 << 16, dtype=np.uint8)
    a_desc = smem_desc_by_hand(0, (128 * 16) >> 4, 128 >> 4, 0)
    b_desc = smem_desc_by_hand(32768, (64 * 16) >> 4, 128 >> 4, 0)
    write_operand_bits(image, a_desc, "e3m2", "K", numerics.encode(a, "e3m2"), kind="f8f6f4")
    write_operand_bits(image, b_desc, "e2m1", "K", numerics.encode(b, "e2m1"), kind="f8f6f4")
    idesc = encode_instr_desc("f8f6f4", a_type="e3m2", b_type="e2m1", m=128, n=64)
    got = mma(image, a_desc, b_desc, idesc, "f8f6f4")
    np.testing.assert_array_equal(got, (a @ b.T).astype(np.float32))
